"""``exo status`` and ``exo agents`` (alias ``exo ls``)."""

from __future__ import annotations

import copy
from typing import Any

import click

import exo_cli.ops.status  # noqa: F401 - declares the status and agents operations
from exo_cli.commands._complete import completer
from exo_cli.commands._options import json_option, op_help, op_option, watch_option
from exo_cli.ops import completion as kinds
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.status import render_agents, render_status


@click.command(help=op_help("status") + "\n\n\b\nExamples:\n  exo status\n  exo status w1 --json")
@click.argument("agent", required=False, shell_complete=completer(kinds.AGENT))
@json_option
@click.pass_obj
def status(env: Any, agent: str | None, as_json: bool) -> None:
    emit(invoke("status", env, agent=agent), as_json=as_json, human=render_status)


@click.command(help=op_help("agents") + "\n\n\b\nExamples:\n  exo agents\n  exo ls --json\n  exo agents --all\n"
               "  exo agents --watch")
@op_option("agents", "show_all", "--all", is_flag=True)
@watch_option
@json_option
@click.pass_obj
def agents(env: Any, show_all: bool, watch: bool, as_json: bool) -> None:
    if watch:
        if as_json:
            raise click.UsageError("--watch and --json do not go together (use `exo board --json` for a snapshot)")
        from exo_cli.render import teamboard

        try:
            teamboard.watch(env)
        except KeyboardInterrupt:
            pass
        return
    emit(invoke("agents", env, show_all=show_all), as_json=as_json, human=render_agents)


agents_alias = copy.copy(agents)
agents_alias.hidden = True
agents_alias.help = "Alias of `exo agents`.\n\n\b\nExamples:\n  exo ls\n  exo ls --json"
