"""Output: exactly the operation's result as JSON under --json, a human view otherwise.

Every human view is written through ``render.text.Out``, which makes all text safe for a
terminal; JSON keeps the exact text (JSON-escaped).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from exo_cli.errors import ExoError
from exo_cli.render.jsonout import dump_json

if TYPE_CHECKING:
    from exo_cli.render.text import Out

Renderer = Callable[["Out", Any], None]


def emit(result: Any, *, as_json: bool, human: Renderer | None = None) -> None:
    """Print ``result``: JSON (the MCP structured content) or the human view."""
    if as_json:
        sys.stdout.write(dump_json(result) + "\n")
        return
    from exo_cli.render.text import Out, generic

    out = Out.for_stdout()
    (human or generic)(out, result)
    out.flush()


def json_line(value: Any) -> None:
    """``value`` as one JSON object on one line (JSON lines, for output that streams), flushed."""
    import json

    from exo_cli.records import to_jsonable
    from exo_cli.render.jsonout import escape_raw

    sys.stdout.write(escape_raw(json.dumps(to_jsonable(value), ensure_ascii=False)) + "\n")
    sys.stdout.flush()


def say(text: str) -> None:
    """One line on stdout for a human, made safe like every view, flushed (output that streams)."""
    from exo_cli.render.text import Out

    out = Out(sys.stdout, False)
    out.line(text)
    out.flush()


def warn(text: str) -> None:
    """One line on stderr for a human (a warning, an error, progress), made safe like every view."""
    from exo_cli.render.text import Out

    out = Out(sys.stderr, False)
    out.line(text)
    out.flush()


def report(error: ExoError, *, as_json: bool) -> None:
    """Print an error: the error object on stdout under --json, Error:/Hint: on stderr otherwise."""
    if as_json:
        sys.stdout.write(dump_json(error.to_dict()) + "\n")
        sys.stdout.flush()
        return
    warn(f"Error: {error.message}")  # a message may quote what an agent wrote: ``warn`` makes it safe
    if error.hint:
        warn(f"Hint: {error.hint}")


def guarded(call: Callable[[], int | None], *, as_json: bool) -> int:
    """Run one command of the command line (``call``) to its exit status, each way it can fail said once.

    The one error handler of the command line, for Click's front end (``cli.run_cli``) and the
    ones that answer without Click (``readrun``): an ``ExoError`` is reported (``report``) with its
    exit code; a reader that went away is exit 1 (stdout then points to /dev/null, so the exit
    flush cannot fail again); Ctrl-C is 130; anything else is a bug: exit 70, a traceback only
    with ``EXO_DEBUG=1``. The output is flushed here, so a closed pipe is seen here too.
    """
    from exo_cli.errors import INTERNAL_EXIT

    try:
        code = call()
        sys.stdout.flush()
        return code or 0
    except ExoError as exc:
        report(exc, as_json=as_json)
        return exc.exit_code
    except BrokenPipeError:
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted.\n")
        return 130
    except Exception as exc:  # a bug: exit 70, traceback only when asked for
        import os

        if os.environ.get("EXO_DEBUG") == "1":
            import traceback

            traceback.print_exc()
        else:
            warn(f"Error: internal error: {type(exc).__name__}: {exc}")
            warn("Hint: this is a bug in exo; rerun with EXO_DEBUG=1 for a traceback and report it.")
        return INTERNAL_EXIT
