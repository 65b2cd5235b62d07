"""How messages reach agents: the light helpers shared by the operations and the hooks.

Kept free of result dataclasses and heavy imports because the hooks (``ops/hooks.py``)
run on every turn of every agent. A message is always stored first (``post``: the row,
then the recipient's doorbell). ``claim_pending`` hands an agent its undelivered messages
at a hook; ``deliver`` is the path for an agent at rest (idle, or its turn failed) on any
multiplexer: the message is claimed (``delivered_at``) before it is handed over, so a hook
firing meanwhile never hands it over twice, and if that fails the claim is undone and the
message waits for the next hook. Handing over is the multiplexer's ``send_text``: typed
into a tmux pane or a Zellij tab (pasted, Enter after a pause, serialized, confirmed), or
given to a headless agent's runner, which continues the CLI's session with it
(``claude -p --resume``, ``codex exec resume``, ``gemini -p --resume``) or writes it to a
custom command's stdin. ``deliver_pending`` is the same for a message that was queued
while the agent was busy and is still there once it rests (the watchers in
``agentctl.refresh`` call it). ``ready_dependents`` names the agents spawned ``--after``
another one that may start now, with ``{{A.output}}`` substituted; starting them is
spawn's (``ops/spawn/pending.py``), a step of the operation that ends the turn, so this
module never imports spawn. ``fail_dependents`` ends the ones waiting for an agent that
died instead.
"""

from __future__ import annotations

import re

from exo_cli.errors import ExoError
from exo_cli.records import AT_REST, DEAD, DONE, IDLE, ROOT, STARTING, WORKING, Agent, Message

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
    """The text an agent sees: ``[NOTE from <name>] ...``."""
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


def post_notice(env: Env, kind: str, sender: str, recipient: str, body: str, **kw: Any) -> int:
    """Store exo's notice to ``recipient`` about itself (a foreseen conflict, a merged PR).

    ``sender`` is whoever noticed it; the notice is not their words, so it is marked
    (``data["notice"]``) and never shown as the sender's last message (``agents``, the board).
    """
    data = {**dict(kw.pop("data", None) or {}), "notice": True}
    return post(env, kind, sender, recipient, body, data=data, **kw)


def claim_pending(env: Env, agent_id: str) -> list[Message]:
    """Take the agent's undelivered, unconsumed messages (delivered + consumed now), oldest first."""
    return env.store.claim_pending(agent_id)


def render_all(msgs: list[Message]) -> str:
    return "\n\n".join(render(m) for m in msgs)


def notify_parent(env: Env, agent: Agent, event: str, body: str, **data: Any) -> None:
    """Record a lifecycle event and post it to the agent's parent as an ``event`` message.

    What the agent's CLI reported in it (a permission prompt's text, an error) is cut to exo's
    size limit of a message.
    """
    from exo_cli.limits import clip

    body = clip(body, "event", "message")[0]
    data = {k: clip(v, k, "message")[0] if isinstance(v, str) else v for k, v in data.items()}
    env.store.event(event, agent.id, data or None)
    parent = agent.parent or ROOT
    env.store.post(EVENT, agent.id, parent, body, data={"event": event, "from_name": agent.name, **data})


def deliver(env: Env, msg_id: int, recipient: Agent) -> str:
    """Hand message ``msg_id`` to ``recipient`` when it rests at its input; return "typed" or "queued".

    Any multiplexer: typed into its tmux pane or Zellij tab, or given to its headless
    runner (its next turn, or its stdin). Otherwise, or when that fails, the message stays
    queued for the agent's next hook (or ``deliver_pending``).
    """
    if recipient.id == ROOT or recipient.status not in AT_REST:
        return "queued"
    from exo_cli.ops import panes

    loc = panes.location(recipient)
    if loc is None:
        return "queued"
    msg = env.store.message(msg_id)
    if msg is None:
        return "queued"
    if not env.store.claim_delivery(msg_id):
        return "queued"
    from exo_cli.ops import turnend

    if turnend.is_due(env, recipient):  # the turn it rests after is checkpointed before it starts another
        from exo_cli.ops.checkpoints import take_due

        take_due(env, recipient)
    try:
        mux = panes.mux_for(env, loc.mux)
        mux.send_text(loc, render(msg))
    except (ExoError, OSError):
        env.store.mark_messages([msg_id], delivered_at=None)
        return "queued"
    # It is busy with the message now; its prompt hook confirms. Later messages wait for its hooks.
    env.store.update_agent(recipient.id, if_status=recipient.status, status=WORKING,
                           status_reason=f"message #{msg_id} typed")
    return "typed"


TYPED_KINDS = (NOTE, QUESTION, ANSWER, SEND)  # what is handed to a resting agent; events never are


def deliver_pending(env: Env, agents: list[Agent]) -> list[int]:
    """Hand each resting agent the oldest message still queued for it; the ids handed over.

    Closes the gap between a message queued while the agent was busy and the agent coming
    to rest without a hook to take it (its stop hook gave up after keeping it going five
    times, or a custom agent without hooks went quiet). Only the kinds ``exo send`` and the
    other message operations hand over are (notes, questions, answers, messages); lifecycle
    events reach an agent at its hooks and its ``wait``. One query for all the agents.
    """
    resting = {a.id: a for a in agents if a.id != ROOT and a.status in AT_REST and a.location}
    if not resting:
        return []
    first: dict[str, Message] = {}
    for msg in env.store.messages(kinds=list(TYPED_KINDS), unconsumed=True, undelivered=True):
        if msg.recipient in resting:
            first.setdefault(msg.recipient, msg)
    return [m.id for r, m in first.items() if deliver(env, m.id, resting[r]) == "typed"]


def fail_dependents(env: Env, agent: Agent, why: str) -> list[str]:
    """End the agents waiting ``--after`` ``agent``, which will never be idle or done now.

    Each is marked ``dead`` with reason ``not started: <why>`` (once: a racing caller does
    nothing) and its parent gets an ``after-failed`` event. Returns their ids.
    """
    failed: list[str] = []
    for pending_id in env.store.pending_agent_ids():
        pending = env.store.agent(pending_id)
        if pending is None or pending.spec.get("phase") != "pending":
            continue
        if not ({agent.id, agent.name} & set(_deps(pending))):
            continue
        if fail_pending(env, pending, why):
            failed.append(pending.id)
    return failed


def fail_pending(env: Env, pending: Agent, why: str) -> bool:
    """Mark one agent waiting ``--after`` dead (``not started: <why>``) and tell its parent and the human; once."""
    if not env.store.update_agent(pending.id, if_status=STARTING, status=DEAD, status_reason=f"not started: {why}"):
        return False
    notify_parent(env, pending, "after-failed", f"{pending.name} will not start: {why}", reason=why)
    from exo_cli.ops import attention

    attention.signal(env, DEAD, pending, f"not started: {why}", reason=f"not started: {why}")
    return True


def pending_verdict(env: Env, pending: Agent) -> tuple[str, str]:
    """Where an agent waiting ``--after`` stands: ("ready", its prompt), ("dead", why) or ("waiting", "").

    Dead when one of the agents it waits for is dead or gone; ready when all are idle or done
    (the prompt with their outputs substituted, as ``ready_dependents`` gives it).
    """
    deps = _deps(pending)
    records = [(d, _lookup(env, d)) for d in deps]
    for ref, rec in records:
        if rec is None:
            return "dead", f"{ref} is gone"
        if rec.status == DEAD:
            return "dead", f"{rec.name} is dead ({rec.status_reason or 'stopped'})"
    if not deps or any(rec.status not in (IDLE, DONE) for _, rec in records if rec is not None):
        return "waiting", ""
    outputs: dict[str, str | None] = {}
    for _, rec in records:
        if rec is not None:
            outputs[rec.name] = rec.output
            outputs[rec.id] = rec.output
    return "ready", substitute_outputs(_template(pending), outputs)


def _lookup(env: Env, ref: str) -> Agent | None:
    """An agent by id, else the newest with that name."""
    found = env.store.agent(ref)
    if found is not None:
        return found
    named = [a for a in env.store.agents() if a.name == ref and not a.retired]
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
        if pending.status != STARTING:
            continue  # it failed already (a dependency died)
        outputs: dict[str, str | None] = {}
        for r in records:
            outputs[r.name] = r.output
            outputs[r.id] = r.output
        ready.append((pending.id, substitute_outputs(_template(pending), outputs)))
    return ready
