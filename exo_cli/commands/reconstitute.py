"""``exo reconstitute``."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.ops.beads import ReconstituteResult
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def render_reconstitute(out: Out, result: ReconstituteResult) -> None:
    for path in result.files_updated:
        out.line(f"Updated {path} from {result.main_branch}")
    if not result.files_updated:
        out.line(f"Beads already current (source: {result.source})")
    if result.bead is None:
        out.line(f"{result.agent} has no bead: no context to refresh")
        return
    verb = "Refreshed" if result.context_updated else "Unchanged:"
    out.line(f"{verb} {result.context_file}")
    c = result.changes
    if not c.get("changed"):
        out.line(f"No changes to {result.bead} since you last looked")
        return
    if c.get("new"):
        out.line(f"{result.bead}: first look (status {c['status']['to']})")
        return
    if c.get("status"):
        out.line(f"{result.bead}: status {c['status']['from']} -> {c['status']['to']}")
    for d in c.get("dependencies_added", []):
        out.line(f"{result.bead}: new dependency {d['depends_on_id']} [{d['type']}]")
    for d in c.get("dependencies_removed", []):
        out.line(f"{result.bead}: dependency removed {d['depends_on_id']} [{d['type']}]")
    for cm in c.get("comments_added", []):
        out.line(f"{result.bead}: new comment by {cm['author'] or '?'}: {cm['text']}")
    if c.get("fields_changed"):
        out.line(f"{result.bead}: changed {', '.join(c['fields_changed'])}")


@click.command(
    help=op_help("reconstitute") + "\n\n\b\nExamples:\n  exo reconstitute\n  exo reconstitute --json"
)
@op_option("reconstitute", "force", "--force", is_flag=True)
@json_option
@click.pass_obj
def reconstitute(env: Any, force: bool, as_json: bool) -> None:
    emit(invoke("reconstitute", env, force=force), as_json=as_json, human=render_reconstitute)
