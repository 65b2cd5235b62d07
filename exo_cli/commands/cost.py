"""``exo cost [AGENT] [--tree]``: tokens and dollars per agent, subtree and team."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._complete import completer
from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.ops import completion as kinds
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.cost import render_cost


@click.command(help=op_help("cost") + "\n\n\b\nExamples:\n  exo cost\n  exo cost w1\n  exo cost lead --tree\n"
               "  exo cost --json")
@click.argument("agent", required=False, shell_complete=completer(kinds.AGENT))
@op_option("cost", "tree", "--tree", is_flag=True)
@json_option
@click.pass_obj
def cost(env: Any, agent: str | None, tree: bool, as_json: bool) -> None:
    emit(invoke("cost", env, agent=agent, tree=tree), as_json=as_json, human=render_cost)
