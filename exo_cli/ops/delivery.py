"""How messages reach agents: the light helpers shared by the operations and the hooks.

Kept free of result dataclasses and heavy imports because the hooks (``core/hooks.py``)
run on every turn of every agent. A message is always stored first (``post``: the row,
then the recipient's doorbell). ``claim_pending`` hands an agent its undelivered messages
at a hook; ``deliver`` is the fast path for an agent idle at its prompt in a tmux pane:
the message is claimed (``delivered_at``) before it is typed, so a hook firing meanwhile
never hands it over twice, and if typing fails the claim is undone and the message waits
for the next hook. Typing goes through ``Tmux.send_text`` (a named buffer, bracketed
paste, Enter after a pause, serialized per pane, confirmed). ``ready_dependents`` names
the agents spawned ``--after`` another one that may start now, with ``{{A.output}}``
substituted; starting them is spawn's (``ops/spawn/pending.py``), a step of the operation
that ends the turn, so this module never imports spawn.
"""

from __future__ import annotations

import re

from exo_cli.errors import ExoError
from exo_cli.records import DONE, IDLE, ROOT, WORKING, Agent, Message

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from exo_cli.env import Env

NOTE = "note"
QUESTION = "question"
ANSWER = "answer"
SEND = "send"
DONE_KIND = "done"
EVENT = "event"
KINDS = (NOTE, QUESTION, ANSWER, SEND, DONE_KIND, EVENT)
LABELS = {NOTE: "NOTE", QUESTION: "QUESTION", ANSWER: "ANSWER", SEND: "MESSAGE", DONE_KIND: "DONE"}


# Ticket states of a question.
PENDING = "pending"
ANSWERED = "answered"
CLOSED = "closed"

_OUTPUT_REF = r"\{\{\s*([A-Za-z0-9][A-Za-z0-9._-]*)\.output\s*\}\}"


def agent_name(env: Env, agent_id: str) -> str:
    if agent_id == ROOT:
        return ROOT
    a = env.store.agent(agent_id)
    return a.name if a else agent_id


def render(msg: Message, sender_name: str | None = None) -> str:
    """The text an agent sees: ``[NOTE from <name>] ...`` (seed 001's rendering)."""
    name = sender_name or msg.data.get("from_name") or msg.sender
    if msg.kind == EVENT:
        return f"[EVENT] {msg.body}"
    label = LABELS.get(msg.kind, msg.kind.upper())
    text = f"[{label} from {name}] {msg.body}"
    if msg.kind == QUESTION:
        text += f"\n(answer with `exo answer {name} \"...\"` or the answer_question tool)"
    return text


def post(env: Env, kind: str, sender: str, recipient: str, body: str, **kw: Any) -> int:
    """Store a message (sender's name kept in data) and ring the recipient."""
    data = dict(kw.pop("data", None) or {})
    data.setdefault("from_name", agent_name(env, sender))
    return env.store.post(kind, sender, recipient, body, data=data, **kw)


def claim_pending(env: Env, agent_id: str) -> list[Message]:
    """Take the agent's undelivered, unconsumed messages (delivered + consumed now), oldest first."""
    return env.store.claim_pending(agent_id)


def render_all(msgs: list[Message]) -> str:
    return "\n\n".join(render(m) for m in msgs)


def notify_parent(env: Env, agent: Agent, event: str, body: str, **data: Any) -> None:
    """Record a lifecycle event and post it to the agent's parent as an ``event`` message."""
    env.store.event(event, agent.id, data or None)
    parent = agent.parent or ROOT
    env.store.post(EVENT, agent.id, parent, body, data={"event": event, "from_name": agent.name, **data})


def deliver(env: Env, msg_id: int, recipient: Agent) -> str:
    """Type message ``msg_id`` into ``recipient``'s pane when it is idle in tmux; return "typed" or "queued"."""
    if recipient.id == ROOT or recipient.status != IDLE:
        return "queued"
    from exo_cli.ops import agentctl

    loc = agentctl.location(recipient)
    if loc is None or loc.mux != "tmux" or not loc.pane:
        return "queued"
    msg = env.store.message(msg_id)
    if msg is None:
        return "queued"
    if not env.store.claim_delivery(msg_id):
        return "queued"
    try:
        mux = agentctl.mux_for(env, "tmux")
        mux.send_text(loc, render(msg))
    except (ExoError, OSError):
        env.store.mark_messages([msg_id], delivered_at=None)
        return "queued"
    # It is busy with the message now; its prompt hook confirms. Later messages wait for its hooks.
    env.store.update_agent(recipient.id, if_status=IDLE, status=WORKING, status_reason=f"message #{msg_id} typed")
    return "typed"


def _lookup(env: Env, ref: str) -> Agent | None:
    """An agent by id, else the newest with that name."""
    found = env.store.agent(ref)
    if found is not None:
        return found
    named = [a for a in env.store.agents() if a.name == ref]
    return max(named, key=lambda a: a.created_at) if named else None


def substitute_outputs(template: str, outputs: dict[str, str | None]) -> str:
    """Replace ``{{A.output}}`` by A's output for every A in ``outputs`` (others stay as written)."""

    def repl(m: re.Match[str]) -> str:
        key = m.group(1)
        if key in outputs:
            return outputs[key] or ""
        return m.group(0)

    return re.sub(_OUTPUT_REF, repl, template)


def _deps(agent: Agent) -> list[str]:
    """Every agent a pending agent was spawned ``--after`` (the spawn request's full list)."""
    common = agent.spec.get("common")
    after = common.get("after") if isinstance(common, dict) and common.get("after") else agent.spec.get("after")
    if isinstance(after, str):
        return [after]
    return [str(x) for x in after] if isinstance(after, list) else []


def _template(agent: Agent) -> str:
    request = agent.spec.get("request")
    if isinstance(request, dict):
        text = request.get("task") if request.get("kind") == "subtree" else request.get("prompt")
        if text is None:
            text = request.get("prompt") or request.get("task")
        return str(text or "")
    return str(agent.spec.get("prompt") or agent.task or "")


def ready_dependents(env: Env, agent_id: str) -> list[tuple[str, str]]:
    """The agents spawned ``--after`` this one that may start now, each with its prompt: (id, prompt).

    A pending agent (``spawn``: status ``starting``, ``spec.phase == "pending"``) is ready
    once all its dependencies are idle or done. Its prompt gets each dependency's latest
    output (never a stale one: a later turn's output replaced it) substituted for
    ``{{A.output}}`` (A its name or id). Nothing is started here: the operation that ends
    the turn (the Stop hook, ``exo done``) hands the list to spawn's ``start_dependents``.
    """
    ids = env.store.pending_agent_ids()
    if not ids:
        return []
    me = env.store.agent(agent_id)
    ready: list[tuple[str, str]] = []
    for pending_id in ids:
        pending = env.store.agent(pending_id)
        if pending is None or pending.spec.get("phase") != "pending" or me is None:
            continue
        deps = _deps(pending)
        if not ({me.id, me.name} & set(deps)):
            continue
        records = [r for r in (_lookup(env, d) for d in deps) if r is not None]
        if len(records) != len(deps) or any(r.status not in (IDLE, DONE) for r in records):
            continue
        outputs: dict[str, str | None] = {}
        for r in records:
            outputs[r.name] = r.output
            outputs[r.id] = r.output
        ready.append((pending.id, substitute_outputs(_template(pending), outputs)))
    return ready
