"""``exo hook EVENT --cli CLI [PAYLOAD]``: entry point of the agent CLIs' hooks (fails open).

The agent CLIs' own calls never get here: ``main`` answers them through ``hookrun`` before
Click loads. This command serves the rest (``--help``, the man page, unusual argv) with the
same ``hookrun.answer``.
"""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.hookrun import answer
from exo_cli.ops import hooks as _hooks  # noqa: F401  registers the operation without loading the others


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
    answer(env, event, cli, payload, as_json)
