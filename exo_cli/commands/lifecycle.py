"""``exo kill``, ``exo reap``, ``exo attach``, ``exo read``, ``exo doctor``."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from exo_cli.commands._complete import completer
from exo_cli.commands._options import Seconds, json_option, op_help, op_option
from exo_cli.errors import EnvironmentError_
from exo_cli.ops import completion as kinds
from exo_cli.ops.doctor import DoctorResult
from exo_cli.ops.lifecycle import KillResult, ReadManyResult, ReadResult, ReapResult
from exo_cli.ops.sandbox import INSTALL_HINT
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def render_kill(out: Out, result: KillResult) -> None:
    out.line(f"killed: {', '.join(result.killed) or '-'}")
    if result.already_dead:
        out.line(f"already stopped: {', '.join(result.already_dead)}")
    for agent, path in result.worktrees_kept:
        out.line(f"kept worktree of {agent}: {path}")
    for warning in result.warnings:
        out.line(f"warning: {warning}")


def render_reap(out: Out, result: ReapResult) -> None:
    out.line(f"reaped: {', '.join(result.reaped) or '-'}")
    if result.kept:
        out.line(f"interrupted spawns left for `exo doctor`: {', '.join(result.kept)}")
    if result.unreached:
        out.line(f"on hosts that cannot be reached now (reaped once they are back): {', '.join(result.unreached)}")


def render_read(out: Out, result: ReadResult | ReadManyResult) -> None:
    if isinstance(result, ReadManyResult):
        for r in result.results:
            out.line(f"== {r.agent} ({r.status}) ==")
            render_read(out, r)
        return
    out.text(result.text)
    if result.matched is False:
        out.line(f"(pattern {result.pattern!r} not seen)")


def render_doctor(out: Out, result: DoctorResult) -> None:
    if result.consistent:
        out.line("Everything is consistent.")
    else:
        rows = [[p.kind, p.subject, p.detail, p.action, "yes" if p.repaired else "no"] for p in result.problems]
        out.table(["PROBLEM", "SUBJECT", "DETAIL", "ACTION", "REPAIRED"], rows)
        out.line(f"{result.repaired} repaired, {result.remaining} remaining")
    b = result.broker
    if b is not None and (b.running or b.sockets):
        state = f"running (pid {b.pid}, exo {b.exo})" if b.running else "not running"
        out.line(f"broker: {state}; {sum(1 for s in b.sockets if s.present)} agent socket(s)")
    if result.sandbox is not None:
        sb = result.sandbox
        out.line(f"sandbox: bubblewrap works ({sb.detail})" if sb.available else
                 f"sandbox: unavailable ({sb.detail}): agents cannot be sandboxed here ({INSTALL_HINT})")


@click.command(help=op_help("kill") + "\n\n\b\nExamples:\n  exo kill auth\n  exo kill w1 --json")
@click.argument("agent", shell_complete=completer(kinds.LIVE_AGENT))
@json_option
@click.pass_obj
def kill(env: Any, agent: str, as_json: bool) -> None:
    emit(invoke("kill", env, agent=agent), as_json=as_json, human=render_kill)


@click.command(help=op_help("reap") + "\n\n\b\nExamples:\n  exo reap\n  exo reap --json")
@json_option
@click.pass_obj
def reap(env: Any, as_json: bool) -> None:
    emit(invoke("reap", env), as_json=as_json, human=render_reap)


@click.command(help=op_help("attach") + "\n\n\b\nExamples:\n  exo attach w1")
@click.argument("agent", shell_complete=completer(kinds.AGENT))
@json_option
@click.pass_obj
def attach(env: Any, agent: str, as_json: bool) -> None:
    result = invoke("attach", env, agent=agent)
    if as_json:
        emit(result, as_json=True)
        return
    needs_terminal = result.mode not in ("popup", "window")  # those show on the user's tmux client
    if needs_terminal and (not sys.stdin.isatty() or not sys.stdout.isatty()):
        raise EnvironmentError_("exo attach needs a terminal", hint=f"Run it in a terminal, or: {result.command}")
    if result.hint:
        from exo_cli.render import warn

        warn(result.hint)
    sys.stdout.flush()
    os.execvp(result.argv[0], result.argv)


@click.command(help=op_help("read") + "\n\n\b\nExamples:\n  exo read w1 --lines 20\n  exo read w1 --since-last\n"
               "  exo read w1 --wait-for 'PR filed' --timeout 120\n  exo read w1 w2 w3 --clean --json")
@click.argument("agent", nargs=-1, required=True, shell_complete=completer(kinds.AGENT))
@op_option("read", "lines", "--lines", "-n", type=click.IntRange(min=1), default=50, show_default=True)
@op_option("read", "since_last", "--since-last", is_flag=True)
@op_option("read", "wait_for", "--wait-for", metavar="PATTERN")
@op_option("read", "timeout", "--timeout", type=Seconds(), default=30.0, show_default=True)
@op_option("read", "clean", "--clean", is_flag=True)
@json_option
@click.pass_obj
@click.pass_context
def read(ctx: click.Context, env: Any, agent: tuple[str, ...], lines: int, since_last: bool, wait_for: str | None,
         timeout: float, clean: bool, as_json: bool) -> None:
    result = invoke("read", env, agent=agent[0] if len(agent) == 1 else list(agent), lines=lines,
                    since_last=since_last, wait_for=wait_for, timeout=timeout, clean=clean)
    emit(result, as_json=as_json, human=render_read)
    if result.exit_code:
        ctx.exit(result.exit_code)


@click.command(help=op_help("doctor") + "\n\n\b\nExamples:\n  exo doctor --dry-run\n  exo doctor\n  exo doctor --hosts")
@op_option("doctor", "dry_run", "--dry-run", is_flag=True)
@op_option("doctor", "hosts", "--hosts", is_flag=True)
@json_option
@click.pass_obj
@click.pass_context
def doctor(ctx: click.Context, env: Any, dry_run: bool, hosts: bool, as_json: bool) -> None:
    result = invoke("doctor", env, dry_run=dry_run, hosts=hosts)
    emit(result, as_json=as_json, human=render_doctor)
    if result.exit_code:
        ctx.exit(result.exit_code)
