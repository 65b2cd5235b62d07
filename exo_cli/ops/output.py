"""An agent's final output: `exo output` reads it, `exo done` reports it (agents whose CLI has no Stop hook)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from exo_cli.ops.delivery import DONE_KIND, post, ready_dependents
from exo_cli.ops.messages import caller_agent, find_agent
from exo_cli.records import DONE, ROOT
from exo_cli.registry import op
from exo_cli.validate import check_text

if TYPE_CHECKING:
    from exo_cli.env import Env


@dataclass(frozen=True)
class OutputResult:
    agent_id: str
    name: str
    status: str
    output: str | None
    turns: int
    updated_at: float


@dataclass(frozen=True)
class DoneResult:
    agent_id: str
    name: str
    status: str
    output: str | None
    parent: str
    started: list[str]


@op(
    "output",
    cli="output",
    tools=["get_artifact"],
    roles=("tl",),
    read_only=True,
    idempotent=True,
    help={"agent": "The agent (name or id) whose final output you want."},
)
def output(env: Env, *, agent: str) -> OutputResult:
    """Show an agent's final output.

    The last assistant message its Stop hook reported (a later turn replaces an earlier
    one), or what it passed to `exo done --output`; null when it has none yet.
    """
    a = find_agent(env, agent)
    return OutputResult(agent_id=a.id, name=a.name, status=a.status, output=a.output, turns=a.turns,
                        updated_at=a.updated_at)


@op(
    "done",
    cli="done",
    tools=["done"],
    roles=("tl", "dev"),
    help={"output": "Your final output (default: the last output exo recorded for you)."},
)
def done(env: Env, *, output: str | None = None) -> DoneResult:
    """Mark your own task done with its output.

    For agents whose CLI has no Stop hook: records the output, sets the status `done`,
    tells the parent (a `done` message, which its `wait` receives) and starts the agents
    spawned to start after you (`exo spawn --after`).
    """
    if output is not None:
        output = check_text(output, "output", kind="output", allow_empty=True)
    me = caller_agent(env, "mark its task done")
    text = output if output is not None else me.output
    env.store.update_agent(me.id, status=DONE, status_reason="done", output=text, completed_at=time.time())
    env.store.event("completed", me.id, {"output": (text or "")[:2000]})
    parent = me.parent or ROOT
    post(env, DONE_KIND, me.id, parent, text or "(done, no output)", data={"event": "done"})
    from exo_cli.ops import attention

    attention.signal(env, "done", me, text or "")
    ready = ready_dependents(env, me.id)
    started: list[str] = []
    if ready:  # spawn loads only when an agent waits for this one
        from exo_cli.ops.spawn.pending import start_dependents

        started = start_dependents(env, me.id, ready)
    return DoneResult(agent_id=me.id, name=me.name, status=DONE, output=text, parent=parent, started=started)
