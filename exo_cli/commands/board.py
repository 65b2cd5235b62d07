"""``exo board`` (the live Textual board) and ``exo agents --watch`` (its plain live cousin)."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from exo_cli.commands._options import json_option, op_help
from exo_cli.errors import EnvironmentError_
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out

FALLBACK = 5.0  # seconds between snapshots when nothing rings (liveness of panes and processes)


def render_board(out: Out, result: Any) -> None:
    import shutil

    from exo_cli.render import teamboard as fmt

    for line in fmt.plain(result, shutil.get_terminal_size((80, 24)).columns):
        out.stream.write(line + "\n")


def watch_plain(env: Any, *, fallback: float = FALLBACK, rounds: int | None = None) -> None:
    """Print the board, then again whenever the team doorbell rings (redrawn in place on a terminal)."""
    import contextlib
    import shutil

    from exo_cli.records import TEAM_BELL
    from exo_cli.render import teamboard as fmt

    tty = sys.stdout.isatty()
    last: list[str] | None = None
    listening = env.store.bell.listen([TEAM_BELL]) if env.has_state() else contextlib.nullcontext(None)
    with listening as waiter:
        n = 0
        while True:
            n += 1
            lines = fmt.plain(invoke("board", env), shutil.get_terminal_size((80, 24)).columns)
            if lines != last:
                sys.stdout.write(("\x1b[H\x1b[2J" if tty else "") + "\n".join(lines) + ("\n" if tty else "\n\n"))
                sys.stdout.flush()
                last = lines
            if rounds is not None and n >= rounds:
                return
            if waiter is None:
                time.sleep(fallback)
            elif waiter.wait(fallback):
                time.sleep(0.1)  # one snapshot for a burst of changes


@click.command(help=op_help("board") + "\n\n\b\nKeys: enter/a attach, r read, d diff, s send, w answer, m merge,"
               " c complete, k kill, q quit; tab moves to the inbox.\n\n\b\nExamples:\n  exo board\n"
               "  exo board --json\n  exo agents --watch")
@json_option
@click.pass_obj
def board(env: Any, as_json: bool) -> None:
    if as_json:
        emit(invoke("board", env), as_json=True)
        return
    if not sys.stdin.isatty() or not sys.stdout.isatty():
        raise EnvironmentError_("exo board needs a terminal", hint="Use `exo agents --watch` or `exo board --json`.")
    env.repo  # noqa: B018 - fail early outside a repository
    from exo_cli.render import tui

    tui.run(env)
