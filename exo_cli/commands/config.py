"""``exo config [KEY...]``."""

from __future__ import annotations

import json
from typing import Any

import click

from exo_cli.commands._complete import completer
from exo_cli.commands._options import json_option, op_help
from exo_cli.ops import completion as kinds
from exo_cli.ops.config import ConfigResult
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def render_config(out: Out, result: ConfigResult) -> None:
    out.table(["KEY", "VALUE", "FROM"],
              [[e.key, json.dumps(e.value, ensure_ascii=False), e.origin] for e in result.entries])
    out.line(f"Files read: {', '.join(result.files) or 'none (defaults and environment only)'}")


@click.command(help=op_help("config") + "\n\n\b\nExamples:\n  exo config\n  exo config agent.default mux.default\n"
               "  exo config worktree.base --json")
@click.argument("keys", nargs=-1, metavar="[KEY...]", shell_complete=completer(kinds.CONFIG_KEY))
@json_option
@click.pass_obj
def config(env: Any, keys: tuple[str, ...], as_json: bool) -> None:
    emit(invoke("config", env, keys=list(keys) or None), as_json=as_json, human=render_config)
