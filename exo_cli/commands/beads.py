"""``exo beads ready|show|list``: the beads tracker as exo sees it (read-only)."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._complete import completer
from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.ops import completion as kinds
from exo_cli.ops.beads import BeadShowResult, BeadsListResult
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def _cut(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def render_list(out: Out, result: BeadsListResult) -> None:
    rows = []
    for b in result.beads:
        title = _cut(b["title"])
        agent = result.owned.get(b["id"])
        rows.append(
            [
                b["id"],
                f"P{b['priority']}",
                b["status"],
                b["issue_type"],
                title + (f"  [{agent}]" if agent else ""),
            ]
        )
    out.table(["ID", "PRI", "STATUS", "TYPE", "TITLE"], rows, empty="No beads.")
    if result.count != result.total:
        out.line(f"{result.count} of {result.total} shown (source: {result.source})")
    else:
        out.line(f"{result.count} bead(s) (source: {result.source})")


def render_show(out: Out, result: BeadShowResult) -> None:
    b = result.bead
    state = "ready" if result.ready else f"not ready ({result.why_not_ready})"
    out.heading(f"{b['id']}: {b['title']}")
    out.kv(
        [
            ("status", b["status"]),
            ("priority", f"P{b['priority']}"),
            ("type", b["issue_type"]),
            ("assignee", b["assignee"]),
            ("labels", ", ".join(b["labels"])),
            ("ready", state),
            ("blocked by", ", ".join(result.blocked_by)),
            ("agent", result.agent),
            ("created", b["created_at"]),
            ("updated", b["updated_at"]),
        ]
    )
    for heading, key in (
        ("Description", "description"),
        ("Design", "design"),
        ("Acceptance criteria", "acceptance_criteria"),
        ("Notes", "notes"),
    ):
        if b[key].strip():
            out.line("")
            out.heading(heading)
            out.line(b[key].strip())
    if result.dependencies:
        out.line("")
        out.heading("Dependencies")
        for d in result.dependencies:
            what = f"{d['title']} ({d['status']})" if d["found"] else "(not found)"
            out.line(f"  {d['id']} [{d['type']}]: {what}")
    if b["comments"]:
        out.line("")
        out.heading("Comments")
        for c in b["comments"]:
            out.line(f"  {c['created_at']} {c['author']}: {c['text']}")


@click.group(
    help="Read the beads tracker: ready, show and list beads.\n\n"
    "Read-only views of what exo sees (through `bd` when installed, else .beads/*.jsonl)."
    "\n\n\b\nExamples:\n  exo beads ready\n  exo beads show 4hj\n  exo beads list --all --json"
)
def beads() -> None:
    pass


@beads.command(
    help=op_help("beads_ready") + "\n\n\b\nExamples:\n  exo beads ready\n  exo beads ready --limit 3 --json"
)
@op_option("beads_ready", "limit", "--limit", type=click.IntRange(min=0), default=None, metavar="N")
@json_option
@click.pass_obj
def ready(env: Any, limit: int | None, as_json: bool) -> None:
    emit(invoke("beads_ready", env, limit=limit), as_json=as_json, human=render_list)


@beads.command(
    help=op_help("beads_show") + "\n\n\b\nExamples:\n  exo beads show 4hj\n  exo beads show bd-4hj --json"
)
@click.argument("bead_id", metavar="ID", shell_complete=completer(kinds.BEAD))
@json_option
@click.pass_obj
def show(env: Any, bead_id: str, as_json: bool) -> None:
    emit(invoke("beads_show", env, bead_id=bead_id), as_json=as_json, human=render_show)


@beads.command(
    "list",
    help=op_help("beads_list")
    + "\n\n\b\nExamples:\n  exo beads list\n  exo beads list --status in_progress\n"
    "  exo beads list --all --json",
)
@op_option("beads_list", "status", "--status", default=None, metavar="S")
@op_option("beads_list", "show_all", "--all", is_flag=True)
@json_option
@click.pass_obj
def list_(env: Any, status: str | None, show_all: bool, as_json: bool) -> None:
    emit(invoke("beads_list", env, status=status, show_all=show_all), as_json=as_json, human=render_list)
