"""The ``exo`` script's entry point, kept light: a hook goes straight to its handler.

Agent CLIs run ``exo hook ...`` after every tool call and turn of every agent, so that
path must cost little more than Python's own start: ``main`` hands it to
``hookrun.run`` (stdlib and the light exo modules only) before Click is imported; any
argv the hook runner does not recognise (``--help``, a bad option) falls through to the
Click command line (``cli.py``), which answers exactly as before. ``exo status`` and ``exo
agents`` (``exo ls``), run by people, scripts and team leads all the time, go the same way
through ``readrun``.
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
    if args[:1] == ["mcp"] and argv is None:
        import os

        if os.environ.get("EXO_SOCKET"):  # an agent's exo mcp: a relay to its broker, without Click
            from exo_cli import relay_mcp

            parsed = relay_mcp.parse(args[1:])
            if parsed is not None:
                sys.exit(relay_mcp.serve(os.environ, *parsed))
    quick = argv is None and (not args or args[0] in QUICK)
    if quick:  # a short read: nothing it allocates outlives it
        import gc

        gc.disable()
    if args[:1] in (["status"], ["agents"], ["ls"]):  # the team's most frequent reads, without Click
        from exo_cli.readrun import run as read

        code = read(args[0], args[1:])
        if code is not None:
            if argv is None:
                _exit_now(code)
            sys.exit(code)
    from exo_cli.cli import run_cli

    at_once = quick or (argv is None and bool(args) and args[0] in AT_ONCE)
    try:
        run_cli(args)
    except SystemExit as exc:
        if at_once and (exc.code is None or isinstance(exc.code, int)):
            _exit_now(exc.code or 0)
        raise


# Commands that only read (and at most mark a vanished agent dead) and end quickly: the ones
# run most often, by people and scripts (docs/performance.md).
QUICK = frozenset({"status", "agents", "ls", "--help", "-h", "--version", "-V"})
# Commands that end at once too (``_exit_now``) though they write: ``exo spawn``, once its agents run (its
# threads have ended, every record is committed), whose teardown (collecting all it allocated, and the
# database's closing checkpoint) cost a fifth of a 10-agent spawn (bench/spawn.py).
AT_ONCE = frozenset({"spawn"})


def _exit_now(code: int) -> None:
    """End the process without the interpreter's teardown, when nothing needs it.

    Tearing the interpreter down (freeing every module, a last garbage collection, closing
    the database, which may checkpoint it) costs a hook about a tenth of Python's start, and
    ``exo agents`` with hundreds of agents more, ``exo spawn`` a fifth of its time. Everything a
    hook or such a command wrote is already committed, its output is flushed here, and with no
    other thread running and no exit handler registered (a temporary folder's finalizer is one)
    there is nothing else to run; otherwise exit normally.
    """
    import atexit

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)
    threading = sys.modules.get("threading")
    if atexit._ncallbacks() or (threading is not None and threading.active_count() > 1):
        sys.exit(code)
    import os

    os._exit(code)


def __getattr__(name: str) -> Any:
    """``from exo_cli.main import cli`` (scripts, click-man, completion) still finds the Click group."""
    if name in ("cli", "ExoGroup", "report"):
        from exo_cli import cli

        return getattr(cli, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
