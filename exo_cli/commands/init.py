"""``exo init``."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.core.init import InitResult
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def render_init(out: Out, result: InitResult) -> None:
    out.line(f"{'Wrote' if result.config_written else 'Kept'} {result.config_file}")
    if result.excluded:
        out.line("Added /.exo/ to .git/info/exclude")
    out.line(f"State: {result.state_dir}")
    out.table(["TOOL", "PATH"], [[k, v or "not found"] for k, v in result.tools.items()])
    for w in result.warnings:
        out.line(f"warning: {w}")


@click.command(help=op_help("init") + "\n\n\b\nExamples:\n  exo init\n  exo init --force --json")
@op_option("init", "force", "--force", is_flag=True)
@json_option
@click.pass_obj
def init(env: Any, force: bool, as_json: bool) -> None:
    emit(invoke("init", env, force=force), as_json=as_json, human=render_init)
