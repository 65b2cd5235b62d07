"""Output: exactly the operation's result as JSON under --json, a human view otherwise.

Every human view is written through ``render.text.Out``, which makes all text safe for a
terminal; JSON keeps the exact text (JSON-escaped).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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
