"""``exo checkpoints AGENT``, ``exo checkpoint AGENT`` and ``exo undo AGENT``: an agent's turns, kept and undone."""

from __future__ import annotations

import time
from typing import Any

import click

from exo_cli.commands._complete import completer
from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.ops import completion as kinds
from exo_cli.ops.checkpoints import Checkpoint, CheckpointsResult, TakeResult
from exo_cli.ops.undo import UndoResult
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def _row(c: Checkpoint) -> list[str]:
    lines = f"+{c.added} -{c.deleted}"
    head = (c.head or "-")[:9] + (f" ({c.branch})" if c.branch else " (detached)" if c.head else "")
    extra = []
    if c.ignored:
        extra.append(f"{len(c.ignored)} ignored kept")
    if c.not_kept:
        extra.append(f"{len(c.not_kept)} not kept")
    if c.archived:
        extra.append("archived")
    return [str(c.id), _when(c.time), "-" if c.turn is None else str(c.turn), c.reason, str(c.files), lines, head,
            ", ".join(extra)]


def render_checkpoints(out: Out, result: CheckpointsResult) -> None:
    out.table(["ID", "TIME", "TURN", "REASON", "FILES", "LINES", "HEAD", "NOTES"],
              [_row(c) for c in result.checkpoints], empty=f"No checkpoints of {result.agent} yet.")
    for c in result.checkpoints[:1]:
        for nk in c.not_kept:
            out.line(f"not kept in {c.id}: {nk.path} ({nk.why})")
    if result.checkpoints:
        out.line(f"Restore one: exo undo {result.agent} --to ID (exo diff {result.agent} --checkpoint ID shows it)")


def render_take(out: Out, result: TakeResult) -> None:
    c = result.checkpoint
    if c is None:
        out.line(f"No checkpoint of {result.agent}: {result.skipped}")
        return
    verb = "took checkpoint" if result.taken else "nothing changed since checkpoint"
    out.line(f"{result.agent}: {verb} {c.id} ({c.files} file(s), +{c.added} -{c.deleted})")
    for nk in c.not_kept:
        out.line(f"not kept: {nk.path} ({nk.why})")


def render_undo(out: Out, result: UndoResult) -> None:
    out.line(f"{result.agent}: restored checkpoint {result.restored}: {len(result.files)} file(s) written, "
             f"{len(result.deleted)} deleted" + (f", {len(result.ignored)} ignored file(s) restored" if result.ignored
                                                 else ""))
    if result.worktree_recreated:
        out.line("its checkout was gone: made again at the same path")
    if result.moved_to:
        out.line(f"{result.branch or 'HEAD'} moved back to {result.moved_to[:12]}"
                 + (f" (from {result.moved_from[:12]})" if result.moved_from else ""))
    for item in result.not_restored:
        out.line(f"not restored: {item}")
    if result.saved is not None:
        out.line(f"The state before is checkpoint {result.saved}: exo undo {result.agent} --to {result.saved} "
                 "puts it back.")
    if result.told:
        out.line(f"{result.agent} is told at its next turn.")


@click.command(help=op_help("checkpoints") + "\n\n\b\nExamples:\n  exo checkpoints w1\n  exo checkpoints w1 --json")
@click.argument("agent", required=False, shell_complete=completer(kinds.AGENT))
@json_option
@click.pass_obj
def checkpoints(env: Any, agent: str | None, as_json: bool) -> None:
    emit(invoke("checkpoints", env, agent=agent), as_json=as_json, human=render_checkpoints)


@click.command(help=op_help("checkpoint") + "\n\n\b\nExamples:\n  exo checkpoint w1\n  exo checkpoint w1 --json")
@click.argument("agent", shell_complete=completer(kinds.AGENT))
@op_option("checkpoint", "due", "--due", is_flag=True, hidden=True)
@json_option
@click.pass_obj
def checkpoint(env: Any, agent: str, due: bool, as_json: bool) -> None:
    emit(invoke("checkpoint", env, agent=agent, due=due), as_json=as_json, human=render_take)


class FilesCommand(click.Command):
    """``--files A B C`` as the issue writes it: each word after ``--files`` up to the next option is one path
    (after ``--files --``, every word is)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, spread_files(args))


def spread_files(args: list[str]) -> list[str]:
    """``--files A B`` as ``--files A --files B``; a ``--files`` with no path stays, for Click to refuse."""
    out: list[str] = []
    taking = fresh = False
    for i, word in enumerate(args):
        if word == "--":
            rest = args[i + 1:]
            out += [x for r in rest for x in ("--files", r)] if taking else ["--", *rest]
            fresh = fresh and not rest
            break
        if word == "--files":
            out += ["--files"] if fresh else []
            taking = fresh = True
        elif taking and not (word.startswith("-") and word != "-"):
            out += ["--files", word]
            fresh = False
        else:
            out += ["--files"] if fresh else []
            taking = fresh = False
            out.append(word)
    return out + (["--files"] if fresh else [])


@click.command(cls=FilesCommand, help=op_help("undo") + "\n\n\b\nExamples:\n  exo undo w1\n  exo undo w1 --turns 3\n"
               "  exo undo w1 --to 12\n  exo undo w1 --files src/app.py docs/\n  exo undo w1 --json")
@click.argument("agent", shell_complete=completer(kinds.AGENT))
@op_option("undo", "to", "--to", type=click.IntRange(min=1), metavar="ID")
@op_option("undo", "turns", "--turns", type=click.IntRange(min=1), metavar="N")
@op_option("undo", "files", "--files", multiple=True, metavar="PATH...")
@op_option("undo", "force", "--force", is_flag=True)
@json_option
@click.pass_obj
def undo(env: Any, agent: str, to: int | None, turns: int | None, files: tuple[str, ...], force: bool,
         as_json: bool) -> None:
    result = invoke("undo", env, agent=agent, to=to, turns=turns, files=list(files) or None, force=force)
    emit(result, as_json=as_json, human=render_undo)
