"""``exo complete``."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._complete import completer
from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.ops import completion as kinds
from exo_cli.ops.complete import CompleteResult
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def render_complete(out: Out, r: CompleteResult) -> None:
    out.line(f"Completed {r.agent or r.bead}: {r.outcome()}.")
    if r.worktree_removed:
        out.line(f"Removed worktree {r.worktree}")
    if r.branch_deleted:
        out.line(f"Deleted branch {r.branch}")
    for ref, sha in r.archived.items():
        out.line(f"Archived {ref} = {sha[:12]}")
    if r.archive_folder:
        out.line(f"Kept files in {r.archive_folder} (private to you, never in git)")
    if r.kept_ignored:
        out.line(f"Kept ignored files: {', '.join(r.kept_ignored)}")
    if r.kept_nested:
        out.line(f"Kept nested repositories (whole, plus a bundle of every ref): {', '.join(r.kept_nested)}")
    render_restore(out, r.restore, r.warnings)


def render_restore(out: Out, restore: list[str], warnings: list[str]) -> None:
    """The commands that restore what a --force archived, then the warnings (complete and deinit)."""
    if restore:
        out.line("Restore with:")
        for cmd in restore:
            out.line(f"  {cmd}")
    for w in warnings:
        out.line(f"warning: {w}")


@click.command(help=op_help("complete") + "\n\n\b\nExamples:\n  exo complete bd-4hj\n  exo complete w1 --force --json")
@click.argument("target", required=False, shell_complete=completer(kinds.AGENT_OR_BEAD))
@op_option("complete", "force", "--force", is_flag=True)
@json_option
@click.pass_obj
def complete(env: Any, target: str | None, force: bool, as_json: bool) -> None:
    emit(invoke("complete", env, target=target, force=force), as_json=as_json, human=render_complete)
