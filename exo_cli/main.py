"""The ``exo`` script's entry point, kept light: a hook goes straight to its handler.

Agent CLIs run ``exo hook ...`` after every tool call and turn of every agent, so that
path must cost little more than Python's own start: ``main`` hands it to
``hookrun.run`` (stdlib and the light exo modules only) before Click is imported; any
argv the hook runner does not recognise (``--help``, a bad option) falls through to the
Click command line (``cli.py``), which answers exactly as before.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``exo`` script (``argv``: run in-process, as tests do, and return by SystemExit)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["hook"]:
        from exo_cli.hookrun import run

        if argv is None:  # a process of its own: a short one, whose garbage the exit frees anyway
            import gc

            gc.disable()
        code = run(args[1:])
        if code is not None:
            if argv is None:
                _exit_now(code)
            sys.exit(code)
        if argv is None:
            import gc

            gc.enable()
    from exo_cli.cli import run_cli

    run_cli(args)


def _exit_now(code: int) -> None:
    """End a hook's process without the interpreter's teardown, when nothing needs it.

    Tearing the interpreter down (freeing every module, a last garbage collection, closing
    the database, which may checkpoint it) costs a hook about a tenth of Python's start.
    Everything the hook wrote is already committed, its answer is flushed here, and with no
    thread started and no exit handler registered there is nothing else to run; otherwise
    exit normally.
    """
    import atexit

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)
    if "threading" in sys.modules or atexit._ncallbacks():
        sys.exit(code)
    import os

    os._exit(code)


def __getattr__(name: str) -> Any:
    """``from exo_cli.main import cli`` (scripts, click-man, completion) still finds the Click group."""
    if name in ("cli", "ExoGroup", "report"):
        from exo_cli import cli

        return getattr(cli, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
