"""``exo board``: the live Textual board (``render/tui.py``); ``exo agents --watch`` is ``render.teamboard.watch``."""

from __future__ import annotations

import sys
from typing import Any

import click

from exo_cli.commands._options import json_option, op_help
from exo_cli.errors import EnvironmentError_
from exo_cli.registry import invoke
from exo_cli.render import emit


@click.command(help=op_help("board") + "\n\n\b\nKeys: enter/a attach, r read, d diff, s send, w answer, m merge,"
               " c complete, k kill, e events, q quit;\ntab moves to the inbox (enter: the message in full)."
               "\n\n\b\nExamples:\n  exo board\n"
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
