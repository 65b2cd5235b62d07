"""``exo ui``: the board in a browser (``exo_cli/web``; Starlette and uvicorn load only here)."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._options import ExoOption


@click.command()
@click.option("--port", cls=ExoOption, type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port on 127.0.0.1 to serve on, 0 to 65535 (0: any free port).")
@click.option("--no-open", "no_open", is_flag=True, help="Print the link without opening a browser.")
@click.pass_obj
def ui(env: Any, port: int, no_open: bool) -> None:
    """Serve the board in a browser, on 127.0.0.1 behind a one-time link.

    The page shows the team (those that need you first), each agent's live pane, messages,
    diff and checkpoints, your inbox (answer, send), the pull requests and the merge queue
    (diff, gate logs, merge) and the conflicts foreseen, pushed live as the team changes. Every action is the same operation
    as the command, with your role; destructive ones ask first. The printed link works
    once: it signs one browser in with a cookie. Reach it from another machine with
    `ssh -L PORT:127.0.0.1:PORT`. Ctrl-C stops the server.

    \b
    Examples:
      exo ui
      exo ui --port 8765 --no-open
    """
    env.repo  # noqa: B018 - fail early outside a repository
    from exo_cli.registry import invoke

    invoke("board", env)  # fail early, as the page would: the board is the human's (a dev agent is refused)
    from exo_cli.web.server import run

    run(env, port=port, open_browser=not no_open, say=click.echo)
