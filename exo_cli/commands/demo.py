"""``exo demo``: the live status board while the demo runs, and its summary."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.ops.demo import MUXES, DemoResult
from exo_cli.registry import invoke
from exo_cli.render import emit, warn
from exo_cli.render.board import new_board, short
from exo_cli.render.text import Out


def render_demo(out: Out, r: DemoResult) -> None:
    out.heading(f"exo demo finished in {r.seconds:.1f} s ({r.mux})")
    waited = [a for a in r.agents if a.waited_for]
    out.line(f"Agents spawned: {len(r.agents)} ({', '.join(a.id for a in r.agents)})"
             + (f"; {', '.join(a.id for a in waited)} only after {', '.join(a.waited_for or '' for a in waited)}"
                " closed" if waited else "")
             + ("" if not r.agents else ", sandboxed" if all(a.sandboxed for a in r.agents) else ", unsandboxed"
                if not any(a.sandboxed for a in r.agents) else ""))
    out.line(f"Notes received: {len(r.notes)}")
    for n in r.notes:
        out.line(f"  {n.agent}: {short(n.message, 100)}")
    for q in r.questions:
        out.line(f"Question from {q.agent}: {q.question}")
        out.line(f"  answered: {q.answer}")
    out.line(f"PRs merged: {len(r.prs)}")
    for p in r.prs:
        out.line(f"  #{p.number} {p.head} -> {p.base} ({p.strategy}) as {p.merge_commit[:9]}: {p.title}")
    out.line(f"Beads closed: {', '.join(r.beads_closed) or '(none)'}")
    if r.kept:
        out.line(f"Scratch repository: {r.repo}")
        out.line(f"  see the merged work: git -C {r.repo} log --oneline")
    else:
        out.line(f"Scratch repository {r.repo} was removed (--no-keep)")


@click.command(help=op_help("demo") + "\n\n\b\nExamples:\n  exo demo\n  exo demo --mux headless --no-keep --json\n"
               "  exo demo --dir /tmp/exo-demo")
@op_option("demo", "mux", "--mux", type=click.Choice(MUXES), default=None)
@op_option("demo", "path", "--dir", default=None, metavar="DIRECTORY")  # checked by the op (a NUL must not reach os.stat)
@op_option("demo", "keep", "--keep/--no-keep", default=True, show_default=True)
@op_option("demo", "timeout", "--timeout", type=float, default=120.0,
           show_default=True)
@json_option
@click.pass_obj
def demo(env: Any, mux: str | None, path: str | None, keep: bool, timeout: float, as_json: bool) -> None:
    from exo_cli.env import Env
    from exo_cli.registry import check_role, get

    # An agent found by its process ancestry or its recorded identity is refused like any
    # human-only operation; a human whose shell merely sits in an agent's worktree is not.
    if env.caller.via in ("ancestry", "env", "socket"):
        check_role(get("demo"), env)
    # The demo never works on the caller's repository: run it as the human from outside any
    # repository (so a shell inside an agent's worktree is no obstacle), paths made absolute here.
    if path is not None:
        path = str((env.cwd / Path(os.path.expanduser(path))).absolute())
    outer = Env(cwd=tempfile.gettempdir(), environ=env.environ)
    board: Any = new_board()
    outer.demo_observer = board  # type: ignore[attr-defined]
    started = time.monotonic()
    try:
        result = invoke("demo", outer, mux=mux, path=path, keep=keep, timeout=timeout)
    except KeyboardInterrupt:
        board.close()
        board = None
        warn(f"demo: interrupted after {time.monotonic() - started:.1f} s; every demo agent was stopped")
        raise
    finally:
        if board is not None:
            board.close()
    emit(result, as_json=as_json, human=render_demo)
