"""``exo deinit``."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.commands.complete import render_restore
from exo_cli.ops.deinit import DeinitResult
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def _section(out: Out, title: str, items: list[str]) -> None:
    if items:
        out.line(title)
        for item in items:
            out.line(f"  {item}")


def render_deinit(out: Out, r: DeinitResult) -> None:
    if r.dry_run:
        for kind, items in {**r.blocked, **r.holds}.items():
            _section(out, f"{'In the way' if kind in r.blocked else 'Holds work'} ({kind.replace('_', ' ')}):", items)
    if not r.removed and not r.kept:
        out.line("Nothing of exo is left in this repository.")
        return
    _section(out, "Would remove:" if r.dry_run else "Removed:", r.removed)
    _section(out, "Would keep:" if r.dry_run else "Kept:", r.kept)
    render_restore(out, r.restore, r.warnings)


@click.command(help=op_help("deinit") + "\n\n\b\nExamples:\n  exo deinit --dry-run\n  exo deinit\n"
               "  exo deinit --force --config --json")
@op_option("deinit", "force", "--force", is_flag=True)
@op_option("deinit", "dry_run", "--dry-run", is_flag=True)
@op_option("deinit", "config", "--config", is_flag=True)
@json_option
@click.pass_obj
@click.pass_context
def deinit(ctx: click.Context, env: Any, force: bool, dry_run: bool, config: bool, as_json: bool) -> None:
    result = invoke("deinit", env, force=force, dry_run=dry_run, config=config)
    emit(result, as_json=as_json, human=render_deinit)
    if result.exit_code:
        ctx.exit(result.exit_code)  # a dry run: the real run would refuse
