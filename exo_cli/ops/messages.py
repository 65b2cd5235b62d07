"""Messages between agents: note, question/answer, send, fan-in wait, output and done.

Every message is a durable row (``Store.post``) before anything else happens; posting rings the
recipient's doorbell, so a waiter blocked in ``wait`` or ``question`` wakes at once. An agent idle in a pane also gets the text typed into its input (``ops/delivery.py``); a busy
or headless one at its next hook (``ops/hooks.py``); one over its budget or the team's is held. The
sender is always the calling agent exo recorded (``env.caller``), never a name the caller supplies.

Kinds: ``note`` (child -> parent), ``question`` (child -> parent, ``state`` pending ->
answered -> closed: the ticket), ``answer`` (parent -> child, ``reply_to`` the ticket),
``send`` (any -> any), ``done`` (an agent's final output, to its parent) and ``event`` (lifecycle:
idle, dead, waiting-permission; never typed into panes).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from exo_cli import cancel, fault
from exo_cli.errors import InvalidInput, NotFound, StateError, UsageError
from exo_cli.ops import requestkeys
from exo_cli.ops.delivery import (
    ANSWER,
    ANSWERED,
    CLOSED,
    EVENT,
    NOTE,
    PENDING,
    QUESTION,
    SEND,
    agent_name,
    post,
)
from exo_cli.ops.teambudget import held_by, would_hold
from exo_cli.records import (
    ASKING,
    AT_REST,
    DEAD,
    DONE,
    FAILED_TURN,
    IDLE,
    OVER_BUDGET,
    ROOT,
    TEAM_BELL,
    WORKING,
    Agent,
    Message,
)
from exo_cli.registry import Range, Tool, op
from exo_cli.validate import check_name, check_text, check_timeout

if TYPE_CHECKING:
    from exo_cli.env import Env

# Wake-ups come from doorbells; this is only the slow fallback (and liveness re-check) period.
FALLBACK_POLL = 1.0
# How often a waiter re-checks pane/process liveness of the agents it waits on.
LIVENESS_EVERY = 2.0



# ---------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Posted:
    """One stored message and how it reached its recipient."""

    agent_id: str
    name: str
    message_id: int
    delivery: str  # "typed" (into an idle pane) | "queued" (next hook, or a waiter) | "held" (over budget)
    held_by: str | None = None  # when held: "agent" (its own budget) or "team" (the team's)


@dataclass(frozen=True)
class NoteResult:
    to: str
    to_name: str
    message_id: int
    delivery: str


@dataclass(frozen=True)
class QuestionResult:
    status: str  # answered | timeout | parent-dead | cancelled
    ticket: int
    question: str
    answer: str | None
    answered_by: str | None
    parent: str


@dataclass(frozen=True)
class AnswerResult:
    agent_id: str
    name: str
    ticket: int
    question: str
    message_id: int
    delivery: str


@dataclass(frozen=True)
class SendResult:
    sent: list[Posted]
    # one line per recipient that is dead or done: its message waits, but it may never read it
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class WaitEntry:
    """One agent's state in a wait: received | running | idle | failed | dead.

    ``failed``: its last turn ended with an error (status ``failed-turn``); the message is
    the error text.
    """

    agent_id: str
    name: str
    status: str
    message: str | None
    kind: str | None = None


@dataclass(frozen=True)
class WaitResult:
    """What ``wait`` returns.

    Without agents: ``results`` holds every message it took, oldest first (at most
    ``max_messages``; ``results[0]`` is the one message a wait used to return), and ``more``
    says whether further messages were already waiting beyond that bound. With agents: one
    entry per agent, in the order given (``more`` stays false).
    """

    results: list[WaitEntry]
    timed_out: bool
    cancelled: bool = False
    more: bool = False


# ---------------------------------------------------------------------------------- helpers


def caller_agent(env: Env, what: str) -> Agent:
    """The calling agent's record; StateError for the human at the root."""
    if env.caller.is_human:  # an agent whose state is gone is refused by identify, never the human
        raise StateError(
            f"Only an agent started by exo can {what}: you are the human at the root",
            hint="Run it from inside an agent's session (its pane, or its MCP server).",
        )
    agent = env.store.agent(env.caller.agent_id)
    if agent is None:
        raise NotFound(f"The calling agent {env.caller.agent_id!r} has no record", agent=env.caller.agent_id)
    return agent


def find_agent(env: Env, ref: str) -> Agent:
    """An agent by id, else by name (a live one first, then the newest)."""
    ref = check_name(check_text(ref, "agent", max_len=200).strip(), "agent name")  # InvalidInput, never NotFound
    if ref == ROOT:
        return Agent(id=ROOT, name=ROOT, role="tl", parent=None, status=WORKING, backend="human", mux="none")
    agent = env.store.agent(ref) if env.has_state() else None
    if agent is not None:
        return agent
    named = [a for a in (env.store.agents() if env.has_state() else []) if a.name == ref and not a.retired]
    if not named:
        raise NotFound(f"No agent named {ref!r}", hint="List agents with `exo agents`.", agent=ref)
    named.sort(key=lambda a: (a.live, a.created_at))
    return named[-1]


def _deliver(env: Env, msg_id: int, recipient: Agent) -> str:
    held = recipient.status == OVER_BUDGET or would_hold(env, recipient)  # over its budget or the team's
    if held or recipient.id == ROOT or recipient.status not in AT_REST or not recipient.location:
        return "held" if held else "queued"
    if not env.runs_here(recipient):  # typed into its pane by exo on its host
        from exo_cli.ops.remote import deliver_there

        return deliver_there(env, recipient, msg_id)
    from exo_cli.ops.delivery import deliver

    return deliver(env, msg_id, recipient)


def _still_here(env: Env) -> None:
    """A long wait on a store the state moved away from (`exo store migrate`) ends, naming where it went."""
    moved = env.store.moved_to()
    if moved is not None:
        from exo_cli.adapters.store.moving import moved_error

        raise moved_error(moved)


def _timeout(value: float | None, what: str = "timeout") -> float | None:
    return check_timeout(value, what)


# ---------------------------------------------------------------------------------- note


@op(
    "note",
    cli="note",
    tools=["note"],
    roles=("tl", "dev"),
    help={"message": "The note for your parent (fire and forget)."},
)
def note(env: Env, *, message: str) -> NoteResult:
    """Send a fire-and-forget note to your parent.

    The parent sees it as `[NOTE from <name>] ...`: at its next hook, typed into its pane
    when it is idle, or as the result of its `wait`. Stored durably first.
    """
    message = check_text(message, "message")
    me = caller_agent(env, "send a note")
    parent_id = me.parent or ROOT
    msg_id = post(env, NOTE, me.id, parent_id, message)
    parent = find_agent(env, parent_id) if parent_id != ROOT else None
    delivery = _deliver(env, msg_id, parent) if parent is not None else "queued"
    return NoteResult(to=parent_id, to_name=parent.name if parent else ROOT, message_id=msg_id, delivery=delivery)


# ---------------------------------------------------------------------------------- question


def _ticket(env: Env, me: Agent, message: str) -> Message | None:
    """The open ticket for this exact question: pending, or answered but not yet read."""
    for m in env.store.messages(sender=me.id, kinds=[QUESTION])[::-1]:
        if m.body == message and m.state in (PENDING, ANSWERED):
            return m
    return None


def _answer_to(env: Env, ticket: int) -> Message | None:
    found = env.store.messages(reply_to=ticket, kinds=[ANSWER], limit=1)
    return found[0] if found else None


@op(
    "question",
    cli="question",
    tools=["question"],
    roles=("tl", "dev"),
    blocking=True,
    help={
        "message": "The question for your parent.",
        "timeout": "Give up waiting after this many seconds (default: wait until answered). "
        "Asking the same question again continues waiting on the same ticket.",
    },
)
def question(env: Env, *, message: str, timeout: Annotated[float, Range(0)] | None = None) -> QuestionResult:
    """Ask your parent a question and wait for the answer.

    Blocks until the parent answers (`exo answer` / `answer_question`), the timeout
    passes, or the parent dies, and says which in `status`. Asking the same text again
    while it is unanswered (say after an MCP client's own tool timeout) waits on the same
    ticket and never asks twice; an answer that arrived in between is returned at once.
    """
    message = check_text(message, "message")
    timeout = _timeout(timeout)
    me = caller_agent(env, "ask a question")
    parent_id = me.parent or ROOT
    store = env.store
    # a store that restarts meanwhile is reached again within the question's own timeout
    with store.patience(timeout), store.bell.listen([me.id]) as waiter:
        again = requestkeys.replayed(env, "question", me.id)  # the same request sent again: its ticket
        found = store.message(again) if isinstance(again, int) else _ticket(env, me, message)
        if found is None:
            ticket = post(env, QUESTION, me.id, parent_id, message, state=PENDING)
            requestkeys.note(env, "question", me.id, ticket)
            parent = find_agent(env, parent_id) if parent_id != ROOT else None
            if parent is not None:
                _deliver(env, ticket, parent)
            else:
                from exo_cli.ops import attention

                attention.signal(env, "question", me, message, ticket=ticket)
        else:
            ticket = found.id
        if me.status != DONE:
            store.update_agent(me.id, status=ASKING, status_reason=f"question #{ticket}")
        status = "timeout"
        answer: Message | None = None
        deadline = None if timeout is None else time.monotonic() + timeout
        next_live = time.monotonic() + LIVENESS_EVERY
        try:
            while True:
                answer = _answer_to(env, ticket)
                if answer is not None:
                    status = "answered"
                    break
                if parent_id != ROOT:
                    parent = store.agent(parent_id)
                    if parent is None or parent.status in (DEAD, DONE):
                        status = "parent-dead"
                        break
                if cancel.cancelled():
                    status = "cancelled"
                    break
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                if now >= next_live:
                    next_live = now + LIVENESS_EVERY
                    _still_here(env)
                    if parent_id != ROOT:
                        _refresh(env, [parent_id])
                slice_ = FALLBACK_POLL if deadline is None else min(FALLBACK_POLL, deadline - now)
                waiter.wait(max(slice_, 0.0))
        finally:
            current = store.agent(me.id)
            if current is not None and current.status == ASKING:
                store.update_agent(me.id, status=WORKING, status_reason=None)
    if answer is not None:
        now_ts = time.time()
        store.mark_messages([answer.id], delivered_at=answer.delivered_at or now_ts, consumed_at=now_ts)
        store.mark_messages([ticket], state=CLOSED)
        return QuestionResult(
            status=status, ticket=ticket, question=message, answer=answer.body,
            answered_by=answer.data.get("from_name") or answer.sender, parent=parent_id,
        )  # fmt: skip
    return QuestionResult(status=status, ticket=ticket, question=message, answer=None, answered_by=None,
                          parent=parent_id)


@op(
    "answer",
    cli="answer",
    tools=[Tool("answer_question")],
    roles=("tl",),
    help={"agent": "The child agent (name or id) whose pending question you answer.", "message": "The answer."},
)
def answer(env: Env, *, agent: str, message: str) -> AnswerResult:
    """Answer a child's pending question and wake it.

    The child blocked in `question` returns with the answer at once; a child that gave
    up waiting gets it as a message (typed into its pane when idle, else at its next hook)
    and, if it asks the same question again, the same answer.
    """
    message = check_text(message, "message")
    child = find_agent(env, agent)
    me = env.caller.agent_id
    pending = [
        m for m in env.store.messages(sender=child.id, kinds=[QUESTION])
        if m.state == PENDING and (env.caller.is_human or m.recipient == me)
    ]  # fmt: skip
    if not pending:
        raise StateError(f"{child.name} has no pending question for you", agent=child.id,
                         hint="See questions with `exo wait` (kind question), or message it with `exo send`.")
    q = pending[0]
    msg_id = post(env, ANSWER, me, child.id, message, reply_to=q.id)
    env.store.mark_messages([q.id], state=ANSWERED)
    if q.consumed_at is None:  # the question is handled: do not hand it to a later wait
        env.store.consume([q.id])
    fresh = env.store.agent(child.id) or child
    delivery = _deliver(env, msg_id, fresh)
    return AnswerResult(agent_id=child.id, name=child.name, ticket=q.id, question=q.body, message_id=msg_id,
                        delivery=delivery)


# ---------------------------------------------------------------------------------- send


def _targets(refs: list[str]) -> list[str]:
    out: list[str] = []
    for r in refs:
        for part in str(r).split(","):
            part = part.strip()
            if part and part not in out:
                out.append(part)
    return out


@op(
    "send",
    cli="send",
    tools=["send"],
    roles=("tl", "dev"),
    help={
        "to": "Recipient agents (names or ids; several separated by commas). A dev agent may send to its "
        "parent and its siblings only.",
        "message": "The message text (any characters; delivered byte for byte).",
    },
)
def send(env: Env, *, to: list[str], message: str) -> SendResult:
    """Send a message to one or several agents.

    Stored durably first; an agent idle in a tmux pane gets it typed into its input, a
    busy one at its next hook, a headless one through its hooks only. A dev agent may send
    to its parent and its siblings only. A recipient that is dead or done still gets the
    message stored (it reads it if it starts again), and the result warns about it.
    """
    message = check_text(message, "message")
    refs = _targets(list(to) if not isinstance(to, str) else [to])
    if not refs:
        raise InvalidInput("No recipient given", hint="Name one or more agents: exo send w1,w2 MSG", field="to")
    sender = env.caller.agent_id
    me = None if env.caller.is_human else env.store.agent(sender)
    recipients = [find_agent(env, r) for r in refs]
    _refresh(env, [r.id for r in recipients if r.id != ROOT])  # a vanished pane counts as dead
    recipients = [env.store.agent(r.id) or r if r.id != ROOT else r for r in recipients]
    if env.role == "dev" and me is not None:
        for r in recipients:
            parent = me.parent or ROOT
            if r.id == parent or (r.id != me.id and (r.parent or ROOT) == parent):
                continue
            raise StateError(
                f"A dev agent may send to its parent and siblings only, not to {r.name}",
                hint="Ask your parent to pass it on (exo note).",
                agent=r.id,
            )
    sent: list[Posted] = []
    for r in recipients:
        msg_id = post(env, SEND, sender, r.id, message)
        how = _deliver(env, msg_id, r)
        sent.append(Posted(agent_id=r.id, name=r.name, message_id=msg_id, delivery=how, held_by=held_by(r, how)))
    return SendResult(sent=sent, warnings=[_gone(r) for r in recipients if r.status in (DEAD, DONE)])


def _gone(agent: Agent) -> str:
    what = "is dead" if agent.status == DEAD else "is done (its task is finished)"
    return (f"{agent.name} {what}: the message is kept and reaches it only if it starts again "
            "(see `exo agents`; `exo spawn` starts a new agent)")


# ---------------------------------------------------------------------------------- wait


def _refresh(env: Env, ids: list[str]) -> None:
    """Re-check pane/process liveness of these agents (one multiplexer call)."""
    try:
        from exo_cli.ops import agentctl

        agents = [a for a in (env.store.agent(i) for i in ids) if a is not None and a.live and a.location]
        if agents:
            agentctl.refresh(env, agents)
    except Exception:  # liveness is best effort while waiting
        pass


# How many messages one wait without agents returns at most, by default and at most.
WAIT_MAX = 50
WAIT_MAX_LIMIT = 1000


def _wait_tool(*, timeout: Annotated[float, Range(0)] | None = None, from_agents: list[str] | None = None,
               max: Annotated[int, Range(1, WAIT_MAX_LIMIT)] = WAIT_MAX, until_idle: bool = False) -> dict[str, Any]:
    """Map the ``wait`` tool's ``timeout``, ``from_agents``, ``max`` and ``until_idle`` onto the operation (the same
    default timeout)."""
    return {"timeout": timeout, "agents": from_agents, "max_messages": max, "until_idle": until_idle}


def _bound(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= WAIT_MAX_LIMIT:
        raise InvalidInput(f"Invalid max {value!r}: it must be a whole number from 1 to {WAIT_MAX_LIMIT}",
                           field="max")
    return value


def _entry_status(agent: Agent | None) -> str:
    if agent is None or agent.status == DEAD:
        return "dead"
    if agent.status in (IDLE, DONE, OVER_BUDGET):
        return "idle"
    if agent.status == FAILED_TURN:
        return "failed"
    return "running"


def _watched(env: Env, me: str, targets: list[Agent], settled: dict[str, WaitEntry]) -> list[str]:
    """The agents a waiter keeps an eye on: the ones it waits for, or all of its live children."""
    if targets:
        return [t.id for t in targets if t.id not in settled]
    if not env.has_state():
        return []
    return [a.id for a in env.store.agents() if (a.parent or ROOT) == me and a.id != me and a.live]


@op(
    "wait",
    cli="wait",
    tools=[
        Tool(
            "wait",
            adapt=_wait_tool,
            names={"max_messages": "max", "agents": "from_agents"},
            help={
                "from_agents": "Agents (ids or names) to fan in on; omit to take every pending message from anyone.",
                "max": f"Without from_agents: the most messages one call returns (1-{WAIT_MAX_LIMIT}, default "
                f"{WAIT_MAX}); the rest wait for the next call.",
            },
        )
    ],
    roles=("tl",),
    blocking=True,
    flags={"max_messages": "--max"},
    help={
        "agents": "Agents to wait for (fan-in); none: every pending message from anyone.",
        "timeout": "Seconds to wait; 0 checks without blocking (default: timeouts.wait in exo.toml, 600).",
        "max_messages": f"Without agents: the most messages one call returns (1-{WAIT_MAX_LIMIT}, default {WAIT_MAX}); "
        "the rest wait for the next call.",
        "until_idle": "With agents: wait until each is idle or done (its output as its message), its "
        "turn failed, or it is dead, whatever it sends meanwhile; its messages stay for a later wait.",
    },
)
def wait(env: Env, *, agents: list[str] | None = None, timeout: Annotated[float, Range(0)] | None = None,
         max_messages: Annotated[int, Range(1, WAIT_MAX_LIMIT)] = WAIT_MAX, until_idle: bool = False) -> WaitResult:
    """Wait for messages: every pending one from anyone, or fan in on several agents.

    Without agents: return every unconsumed message to you from anyone, oldest first, at
    most {--max_messages} of them (default 50; `more` says others are waiting), blocking until at
    least one arrives ({--timeout} 0 checks without blocking). With agents: wait until each has
    a message for you (`received`), or is `idle`, `failed` (its turn ended with an error)
    or `dead`, or the timeout passes; return one entry per agent with its status
    (received, running, idle, failed, dead) and message. With {--until_idle}, a message
    from an agent does not end its wait: only idle, failed or dead do, and its messages
    stay for a later wait. Messages returned are consumed,
    each by exactly one wait. Without a timeout it waits `timeouts.wait` seconds (600 by
    default), on the command line and over MCP alike. While it waits, it watches the agents
    it waits for (or all of your live children) every few seconds: an agent that died,
    exited, went quiet (custom agents) or is stuck at a startup dialog is recorded, and you
    get its event.
    """
    timeout = _timeout(timeout)
    if timeout is None:
        timeout = float(env.config.get("timeouts.wait"))
    bound = _bound(max_messages)
    me = env.caller.agent_id
    refs = _targets(list(agents or []))
    if until_idle and not refs:
        raise UsageError("--until-idle waits for agents: name them", hint="exo wait w1 w2 --until-idle")
    targets = [find_agent(env, r) for r in refs]
    store = env.store
    settled: dict[str, WaitEntry] = {}
    again = _again(env, me, targets, settled)
    if again is not None:
        return again
    deadline = None if timeout is None else time.monotonic() + timeout
    next_live = time.monotonic() + LIVENESS_EVERY
    # until idle: any change of an agent wakes it (its status is the answer, not a message to me); a store
    # that restarts meanwhile is reached again (and listened to again) within the wait's own timeout
    with store.patience(timeout), store.bell.listen([me, TEAM_BELL] if until_idle else [me]) as waiter:
        if timeout != 0:  # watch once before the first look: a resting agent may still have a message queued
            _refresh(env, _watched(env, me, targets, settled))
        while True:
            if not targets:
                batch = _take_batch(env, me, bound)
                if batch is not None:
                    return batch
            else:
                for t in targets:
                    if t.id in settled and settled[t.id].status == "received":
                        continue
                    settled.pop(t.id, None)
                    if not until_idle and _received(env, me, t, settled):
                        continue
                    rec = store.agent(t.id)
                    status = _entry_status(rec)
                    if status != "running":
                        out = rec.output if (rec is not None and status in ("idle", "failed")) else None
                        settled[t.id] = WaitEntry(t.id, t.name, status, out, None)
                if all(t.id in settled for t in targets):
                    return WaitResult(results=[settled[t.id] for t in targets], timed_out=False)
            now = time.monotonic()
            stop = cancel.cancelled()
            if stop or (deadline is not None and now >= deadline):
                return WaitResult(results=_partial(env, targets, settled), timed_out=not stop, cancelled=stop)
            if now >= next_live:  # the watcher: see agentctl.refresh
                next_live = now + LIVENESS_EVERY
                if any(e.status == "received" for e in settled.values()):  # what it took is returned, never lost
                    if env.store.moved_to() is not None:
                        return WaitResult(results=_partial(env, targets, settled), timed_out=False, cancelled=True)
                else:
                    _still_here(env)
                _refresh(env, _watched(env, me, targets, settled))
            slice_ = FALLBACK_POLL if deadline is None else min(FALLBACK_POLL, deadline - now)
            waiter.wait(max(slice_, 0.0))


def _received(env: Env, me: str, target: Agent, settled: dict[str, WaitEntry]) -> bool:
    """Take ``target``'s first message to me (its lifecycle events before it consumed on the way) into ``settled``."""
    events: list[int] = []
    got: Message | None = None
    for m in env.store.messages(recipient=me, sender=target.id, unconsumed=True):
        if m.kind == EVENT:
            events.append(m.id)
            continue
        got = m
        break
    if got is not None:
        if got.id in requestkeys.take(env, me, [*events, got.id]):
            settled[target.id] = WaitEntry(target.id, target.name, "received", got.body, got.kind)
            return True
    elif events:
        requestkeys.take(env, me, events)
    return False


def _take_batch(env: Env, me: str, bound: int) -> WaitResult | None:
    """Take up to ``bound`` of my unconsumed messages in one write, oldest first; None when none is left.

    Exactly once: a message a racing waiter took first is skipped (``Store.consume``).
    """
    store = env.store
    while True:
        pending = store.messages(recipient=me, unconsumed=True, limit=bound + 1)
        if not pending:
            return None
        more = len(pending) > bound
        pending = pending[:bound]
        taken = set(requestkeys.take(env, me, [m.id for m in pending]))
        if not taken:
            continue  # all taken by another waiter meanwhile: look again
        fault.point("wait.taken", env.environ)
        return WaitResult(results=_entries(env, [m for m in pending if m.id in taken]), timed_out=False, more=more)


def _entries(env: Env, messages: list[Message]) -> list[WaitEntry]:
    names: dict[str, str] = {}
    entries = []
    for m in messages:
        name = m.data.get("from_name") or names.get(m.sender)
        if name is None:
            name = names[m.sender] = agent_name(env, m.sender)
        entries.append(WaitEntry(agent_id=m.sender, name=name, status="received", message=m.body, kind=m.kind))
    return entries


def _again(env: Env, me: str, targets: list[Agent], settled: dict[str, WaitEntry]) -> WaitResult | None:
    """A wait sent again under its key (``requestkeys.taken_before``): without agents, the messages its
    first attempt took are the answer; with agents they settle those they came from (None: wait on)."""
    found = requestkeys.taken_before(env, me)
    if found and not targets:
        return WaitResult(results=_entries(env, found), timed_out=False)
    for m in found:
        if m.kind != EVENT and m.sender in {t.id for t in targets} and m.sender not in settled:
            settled[m.sender] = WaitEntry(m.sender, agent_name(env, m.sender), "received", m.body, m.kind)
    return None


def _partial(env: Env, targets: list[Agent], settled: dict[str, WaitEntry]) -> list[WaitEntry]:
    out = []
    for t in targets:
        if t.id in settled:
            out.append(settled[t.id])
        else:
            out.append(WaitEntry(t.id, t.name, _entry_status(env.store.agent(t.id)), None, None))
    return out
