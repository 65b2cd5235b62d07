"""``exo conflicts [AGENT] [--check]``: the conflicts foreseen between branches."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._complete import completer
from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.ops import completion as kinds
from exo_cli.ops.foresight import ConflictsResult
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def render_conflicts(out: Out, result: ConflictsResult) -> None:
    rows = [[c.agent, "its base " + c.other_branch if c.other == "base" else f"{c.other} ({c.other_branch})",
             ", ".join(c.paths)] for c in result.conflicts]
    out.table(["AGENT", "CONFLICTS WITH", "FILES"], rows, empty="No conflicts foreseen.")


@click.command(help=op_help("conflicts") + "\n\n\b\nExamples:\n  exo conflicts\n  exo conflicts w1 --check --json")
@click.argument("agent", required=False, shell_complete=completer(kinds.AGENT))
@op_option("conflicts", "check", "--check", is_flag=True)
@json_option
@click.pass_obj
def conflicts(env: Any, agent: str | None, check: bool, as_json: bool) -> None:
    emit(invoke("conflicts", env, agent=agent, check=check), as_json=as_json, human=render_conflicts)
