"""``exo watch``."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.ops.watch import Change, WatchResult
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def change_line(c: Change) -> str:
    """One change as the human reads it."""
    return f"{c.kind}: {c.text}" + (f" (to {c.author})" if c.author else "")


def render_watch(out: Out, r: WatchResult) -> None:
    if r.stopped_by == "nothing-to-poll":
        out.line("Nothing to poll: this repository's forge is local (forge.kind), and exo tells each agent of its "
                 "PRs' changes itself; exo watch polls GitHub PRs.")
        return
    why = {"once": "polled once (--once)", "interrupt": "stopped by Ctrl-C", "cancel": "cancelled"}
    out.line(f"{r.rounds} round(s), {len(r.changes)} change(s); {why.get(r.stopped_by, r.stopped_by)}")


@click.command(help=op_help("watch") + "\n\n\b\nExamples:\n  exo watch\n  exo watch --once --json"
               "\n\n--json prints JSON lines: one object per change as it happens ({kind, pr, author, text};"
               " kind error for a problem, with pr and author null), then the result ({rounds, changes, stopped_by}).")
@op_option("watch", "once", "--once", is_flag=True)
@op_option("watch", "interval_pending", "--interval-pending", type=click.IntRange(1), default=30, show_default=True)
@op_option("watch", "interval_idle", "--interval-idle", type=click.IntRange(1), default=300, show_default=True)
@json_option
@click.pass_obj
def watch(env: Any, once: bool, interval_pending: int, interval_idle: int, as_json: bool) -> None:
    """Each change is printed the moment it is seen: a line, or with --json one JSON object per line."""
    from exo_cli.render import json_line, say

    def show(change: Change) -> None:
        if as_json:
            json_line(change)
        else:
            say(change_line(change))

    env.watch_observer = show
    result = invoke("watch", env, once=once, interval_pending=interval_pending, interval_idle=interval_idle)
    if as_json:  # the last line: the whole result, also one line
        json_line(result)
    else:
        emit(result, as_json=False, human=render_watch)
