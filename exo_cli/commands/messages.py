"""``exo note``, ``question``, ``answer``, ``send``, ``wait``, ``output`` and ``done``."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._complete import completer
from exo_cli.commands._options import Seconds, json_option, op_help, op_option
from exo_cli.ops import completion as kinds
from exo_cli.ops import messages as _messages  # registers the operations
from exo_cli.ops import output as _output  # registers output and done
from exo_cli.ops.delivery import LABELS as _LABELS
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def _examples(*lines: str) -> str:
    return "\n\n\b\nExamples:\n" + "\n".join(f"  {x}" for x in lines)


# How a message reached its recipient, in words (the JSON keeps the values).
_DELIVERY = {"typed": "typed into its pane", "queued": "queued for its next turn or `exo wait`",
             "held": "held: over budget until `exo budget` raises it"}
_HELD_BY = {"team": "held: over budget (the team's) until `exo budget --team` raises it",
            "agent": "held: over budget (its own) until `exo budget` raises it"}


def _delivery(value: str, held_by: str | None = None) -> str:
    return _HELD_BY.get(held_by or "", "") or _DELIVERY.get(value, value)


def render_note(out: Out, r: _messages.NoteResult) -> None:
    out.line(f"Noted to {r.to_name} (message #{r.message_id}, {_delivery(r.delivery)}).")


def render_question(out: Out, r: _messages.QuestionResult) -> None:
    if r.status == "answered":
        out.line(r.answer or "")
    elif r.status == "timeout":
        out.line(f"No answer yet (question #{r.ticket}); ask again with the same text to keep waiting.")
    elif r.status == "parent-dead":
        out.line(f"Your parent {r.parent} is dead; question #{r.ticket} will not be answered.")
    else:
        out.line(f"Stopped waiting (question #{r.ticket}).")


def render_answer(out: Out, r: _messages.AnswerResult) -> None:
    out.line(f"Answered {r.name}'s question #{r.ticket} ({_delivery(r.delivery)}).")


def render_send(out: Out, r: _messages.SendResult) -> None:
    for p in r.sent:
        out.line(f"Sent to {p.name} (message #{p.message_id}, {_delivery(p.delivery, p.held_by)}).")
    for w in r.warnings:
        out.line(f"warning: {w}")


def render_wait(out: Out, r: _messages.WaitResult) -> None:
    if not r.results:
        out.line("No message." if r.timed_out else "Stopped waiting.")
        return
    for e in r.results:
        if e.status == "received":
            label = "EVENT" if e.kind == "event" else _LABELS.get(e.kind or "", (e.kind or "").upper())
            text = f"[EVENT] {e.message}" if e.kind == "event" else f"[{label} from {e.name}] {e.message}"
            out.line(text)
        else:
            out.line(f"{e.name}: {e.status}" + (f" — {e.message}" if e.message else ""))
    if r.more:
        out.line("(more messages are waiting: run exo wait again)")
    if r.timed_out:
        out.line("(timed out)")


def render_output(out: Out, r: _output.OutputResult) -> None:
    out.line(r.output if r.output is not None else f"({r.name} has no output yet; status {r.status})")


def render_done(out: Out, r: _output.DoneResult) -> None:
    out.line(f"{r.name} is done; told {r.parent}." + (f" Started: {', '.join(r.started)}" if r.started else ""))


@click.command(help=op_help("note") + _examples('exo note "tests pass, filing the PR"'))
@click.argument("message")
@json_option
@click.pass_obj
def note(env: Any, message: str, as_json: bool) -> None:
    emit(invoke("note", env, message=message), as_json=as_json, human=render_note)


@click.command(help=op_help("question") + _examples('exo question "Which port should the server use?"',
                                                    'exo question "Squash or merge?" --timeout 300'))
@click.argument("message")
@op_option("question", "timeout", "--timeout", type=Seconds(), default=None, metavar="S")
@json_option
@click.pass_obj
def question(env: Any, message: str, timeout: float | None, as_json: bool) -> None:
    emit(invoke("question", env, message=message, timeout=timeout), as_json=as_json, human=render_question)


@click.command(help=op_help("answer") + _examples('exo answer w1 "Use port 8080."'))
@click.argument("agent", shell_complete=completer(kinds.ASKING_AGENT))
@click.argument("message")
@json_option
@click.pass_obj
def answer(env: Any, agent: str, message: str, as_json: bool) -> None:
    emit(invoke("answer", env, agent=agent, message=message), as_json=as_json, human=render_answer)


@click.command(help=op_help("send") + _examples('exo send w1 "rebase onto main, then continue"',
                                                'exo send w1,w2 "stop and file your PRs"'))
@click.argument("to", metavar="AGENT[,AGENT...]", shell_complete=completer(kinds.LIVE_AGENTS))
@click.argument("message")
@json_option
@click.pass_obj
def send(env: Any, to: str, message: str, as_json: bool) -> None:
    recipients = [t.strip() for t in to.split(",") if t.strip()] or [to]
    emit(invoke("send", env, to=recipients, message=message), as_json=as_json, human=render_send)


@click.command(help=op_help("wait") + _examples("exo wait", "exo wait --timeout 0", "exo wait --max 10",
                                                "exo wait w1 w2 --timeout 600", "exo wait w1 --until-idle"))
@click.argument("agents", nargs=-1, metavar="[AGENT...]", shell_complete=completer(kinds.AGENT))
@op_option("wait", "timeout", "--timeout", type=Seconds(), default=None, metavar="S")
@op_option("wait", "max_messages", "--max", type=click.IntRange(1, _messages.WAIT_MAX_LIMIT),
           default=_messages.WAIT_MAX, metavar="N")
@op_option("wait", "until_idle", "--until-idle", is_flag=True)
@json_option
@click.pass_obj
def wait(env: Any, agents: tuple[str, ...], timeout: float | None, max_messages: int, until_idle: bool,
         as_json: bool) -> None:
    emit(invoke("wait", env, agents=list(agents), timeout=timeout, max_messages=max_messages, until_idle=until_idle),
         as_json=as_json, human=render_wait)


@click.command(help=op_help("output") + _examples("exo output w1", "exo output w1 --json"))
@click.argument("agent", shell_complete=completer(kinds.AGENT))
@json_option
@click.pass_obj
def output(env: Any, agent: str, as_json: bool) -> None:
    emit(invoke("output", env, agent=agent), as_json=as_json, human=render_output)


@click.command(help=op_help("done") + _examples("exo done", 'exo done --output "Implemented X; see PR #3"'))
@op_option("done", "output", "--output", default=None, metavar="TEXT")
@json_option
@click.pass_obj
def done(env: Any, output: str | None, as_json: bool) -> None:
    emit(invoke("done", env, output=output), as_json=as_json, human=render_done)
