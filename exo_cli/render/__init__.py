"""Output: exactly the operation's result as JSON under --json, a human view otherwise."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from exo_cli.render.jsonout import dump_json
from exo_cli.render.text import Out

Renderer = Callable[[Out, Any], None]


def emit(result: Any, *, as_json: bool, human: Renderer | None = None) -> None:
    """Print ``result``: JSON (the MCP structured content) or the human view."""
    if as_json:
        sys.stdout.write(dump_json(result) + "\n")
        return
    out = Out.for_stdout()
    if human is None:
        from exo_cli.render.text import generic

        generic(out, result)
    else:
        human(out, result)
    out.flush()
