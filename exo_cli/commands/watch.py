"""``exo watch``."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.ops.watch import WatchResult
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def render_watch(out: Out, r: WatchResult) -> None:
    for c in r.changes:
        out.line(f"{c['kind']}: {c['text']} (to {c['author']})")
    out.line(f"{r.rounds} round(s), {len(r.changes)} change(s); stopped by {r.stopped_by}")


@click.command(help=op_help("watch") + "\n\n\b\nExamples:\n  exo watch\n  exo watch --once --json")
@op_option("watch", "once", "--once", is_flag=True)
@op_option("watch", "interval_pending", "--interval-pending", type=click.IntRange(1), default=30, show_default=True)
@op_option("watch", "interval_idle", "--interval-idle", type=click.IntRange(1), default=300, show_default=True)
@json_option
@click.pass_obj
def watch(env: Any, once: bool, interval_pending: int, interval_idle: int, as_json: bool) -> None:
    emit(invoke("watch", env, once=once, interval_pending=interval_pending, interval_idle=interval_idle),
         as_json=as_json, human=render_watch)
