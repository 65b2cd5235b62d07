"""``exo diff AGENT``: an agent's branch against its base."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._complete import completer
from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.ops import completion as kinds
from exo_cli.ops.diff import DiffResult
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def render_diff(out: Out, result: DiffResult, *, name_only: bool = False) -> None:
    if name_only:
        for f in result.files:
            out.line(f.path)
        return
    if result.patch is not None:
        out.text(result.patch)
        if result.truncated:
            out.line(f"(diff cut at {len(result.patch)} bytes; see `git diff {result.base}...{result.head}`)")
        if not result.files:
            out.line(f"No changes: {result.head} has nothing its base {result.base} lacks.")
        return
    width = min(max((len(f.path) for f in result.files), default=0), 50)
    for f in result.files:
        path = f.path if len(f.path) <= width else "..." + f.path[-(width - 3):]
        counts = "binary" if f.added is None else f"+{f.added} -{f.deleted}"
        out.line(f" {f.status} {path.ljust(width)}  {counts}")
    out.line(f" {len(result.files)} file(s) changed, +{result.added} -{result.deleted} ({result.head} vs {result.base})")


@click.command(help=op_help("diff") + "\n\n\b\nExamples:\n  exo diff w1\n  exo diff w1 --stat\n"
               "  exo diff w1 --name-only\n  exo diff w1 --checkpoint 12\n  exo diff w1 --json")
@click.argument("agent", shell_complete=completer(kinds.AGENT))
@op_option("diff", "stat", "--stat", is_flag=True)
@op_option("diff", "name_only", "--name-only", is_flag=True)
@op_option("diff", "checkpoint", "--checkpoint", type=click.IntRange(min=1), metavar="ID")
@json_option
@click.pass_obj
def diff(env: Any, agent: str, stat: bool, name_only: bool, checkpoint: int | None, as_json: bool) -> None:
    result = invoke("diff", env, agent=agent, stat=stat, name_only=name_only, checkpoint=checkpoint)
    emit(result, as_json=as_json, human=lambda out, r: render_diff(out, r, name_only=name_only))
