"""``exo hook EVENT --cli CLI [PAYLOAD]``: entry point of the agent CLIs' hooks (fails open)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.ops import hooks as _hooks  # registers the operation without loading the others
from exo_cli.records import to_jsonable
from exo_cli.registry import invoke


def _warn(text: str) -> None:
    from exo_cli.render import warn  # only when there is something to say: the hooks' hot path

    warn(text)


def _stdin() -> str:
    try:
        if sys.stdin is None or sys.stdin.isatty():
            return ""
        return sys.stdin.read()
    except (OSError, ValueError):
        return ""


@click.command(
    help=op_help("hook")
    + "\n\n\b\nExamples:\n  exo hook stop --cli claude < payload.json\n"
    "  exo hook notify --cli codex '{\"type\":\"agent-turn-complete\",...}'"
)
@click.argument("event")
@click.argument("payload", required=False)
@op_option("hook", "cli", "--cli", default="claude", show_default=True, metavar="claude|gemini|codex|exo")
@json_option
@click.pass_obj
def hook(env: Any, event: str, payload: str | None, cli: str, as_json: bool) -> None:
    output: Any = _hooks.neutral(event, cli)
    result: Any = None
    try:
        if payload is None:
            payload = _stdin()
        result = invoke("hook", env, event=event, cli=cli, payload=payload)
        output = result.output
        if result.warning:
            _warn(f"exo hook {event}: warning: {result.warning}")
    except Exception as exc:  # fail open: never brick the agent
        msg = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        _warn(f"exo hook {event}: warning: {' '.join(str(msg).split())} (exo ignored this hook)")
    if as_json:
        sys.stdout.write(json.dumps(to_jsonable(result) if result is not None else {"output": output}) + "\n")
    elif output is not None:
        sys.stdout.write(json.dumps(output, ensure_ascii=False) + "\n")
    sys.stdout.flush()
