"""``exo init``."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.ops.init import InitResult
from exo_cli.records import AGENT_CLIS
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def render_init(out: Out, result: InitResult) -> None:
    out.line(f"{'Wrote' if result.config_written else 'Kept'} {result.config_file}")
    if result.excluded:
        out.line("Added /.exo/ to .git/info/exclude")
    out.line(f"State: {result.state_dir}")
    out.table(["TOOL", "PATH"], [[k, v or "not found"] for k, v in result.tools.items()])
    if result.default_agent:
        out.line(f"Default agent: {result.default_agent} (agent.default; another with exo spawn --agent)")
    if result.wiring is not None:
        w = result.wiring
        out.line(f"Wired {w.agent} as the team lead at the root (MCP server: {' '.join(w.mcp_command)})")
        for f in w.files:
            out.line(f"  {'updated' if f in w.changed else 'unchanged'}: {f}")
        for note in w.notes:
            out.line(f"note: {note}")
    for warning in result.warnings:
        out.line(f"warning: {warning}")


@click.command(help=op_help("init") + "\n\n\b\nExamples:\n  exo init\n  exo init --agent claude\n  exo init --force --json")
@op_option("init", "force", "--force", is_flag=True)
@op_option("init", "agent", "--agent", type=click.Choice(AGENT_CLIS), default=None)
@json_option
@click.pass_obj
def init(env: Any, force: bool, agent: str | None, as_json: bool) -> None:
    emit(invoke("init", env, force=force, agent=agent), as_json=as_json, human=render_init)
