"""``exo board``'s data: the agent tree with who needs the human first, the root's inbox, conflicts.

One snapshot is the ``agents`` listing (one multiplexer call) plus the root's unread messages
and pending questions and the recorded conflict foresight. The board and ``exo agents
--watch`` take a new snapshot when the team doorbell rings (``records.TEAM_BELL``: every
change of an agent or a message), not by polling every agent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from exo_cli.ops.attention import needs_human
from exo_cli.records import DEAD, DONE, ROOT
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.env import Env
    from exo_cli.ops.status import AgentView

# Why an agent needs the human, in the order the board lists them.
NEEDS = ("asking", "permission", "dialog", "failed", "budget", "pr-ready", "dead")
# The attention event (``attention.NEEDS_HUMAN``, the one rule) -> the board's name for the need.
_BY_EVENT = {"question": "asking", "waiting-permission": "permission", "blocked-on-dialog": "dialog",
             "failed-turn": "failed", "dead": "dead", "over-budget": "budget"}
INBOX_MAX = 50  # notes and the like, and as many lifecycle events, newest first (pending questions: all)
# Lifecycle events (spawned, idle, dead, killed, completed...): what happened rather than what an
# agent said; the board folds them into one line so that they never crowd out what needs you.
LIFECYCLE = ("event", "completed")


@dataclass(frozen=True)
class BoardRow:
    agent: AgentView
    needs: str | None  # asking, permission, dialog, failed, pr-ready, dead; None when it needs nobody
    conflicts: list[str]  # "w3: src/api.py", "base main: README.md"
    host: str = ""  # the host it runs on, when the team spans several ("" otherwise)


@dataclass(frozen=True)
class InboxItem:
    id: int
    kind: str  # question, note, pr-filed, done, event, ...
    sender: str
    name: str
    body: str
    created_at: float
    pending: bool  # a question still waiting for its answer
    # the lifecycle event it reports (spawned, idle, dead, killed, completed...), "" for what an agent
    # said (a note, a question, its output, a PR): the board folds the events into one line
    event: str = ""


@dataclass(frozen=True)
class BoardResult:
    rows: list[BoardRow]  # agents that need the human first, then the tree in order
    inbox: list[InboxItem]  # pending questions first (oldest first), then the rest newest first
    needs_you: int
    count: int
    queue: list[str] = field(default_factory=list)  # one line per base whose merge queue has entries waiting


def needs_of(a: AgentView) -> str | None:
    """Why agent ``a`` needs the human (one of NEEDS), or None: the statuses whose entry raised an attention
    event (``attention.needs_human``: a question only when it goes to the root), or a PR filed to the root
    (not one in the merge queue: that is the queue's, or its author's once bounced)."""
    kind = needs_human(a.status, a.parent)
    if kind is not None:
        return _BY_EVENT[kind]
    if a.pr and a.pr.get("state") == "open" and not a.pr.get("queue") and a.parent == ROOT and a.status != DONE:
        return "pr-ready"
    return None


@op("board", cli="board", roles=("human",), read_only=True, idempotent=True, help={})
def board(env: Env) -> BoardResult:
    """Show the team at a glance: a live board of the agents, those that need you first.

    One line per agent (status, task, turns/tools/tokens, PR, last message, age, foreseen
    conflicts); agents asking a question, waiting for a permission, blocked on a dialog,
    with a PR ready for you to merge, or dead come first. Under it, your inbox: the questions
    waiting for you first, the latest notes, the lifecycle events folded into one line. Keys
    attach, read, diff, send, answer, merge,
    complete and kill call the same operations as the commands. `--json` prints one snapshot.
    """
    from exo_cli.ops import foresight
    from exo_cli.ops.status import agents as list_agents

    listed = list_agents(env)
    views = listed.agents
    spans = any(v.host not in ("", listed.this_host) for v in views)
    live = {v.id for v in views if v.status not in (DEAD, DONE)}
    foreseen = foresight.foreseen(env, live) if env.has_state() else {}
    rows: list[BoardRow] = []
    for v in views:
        found = [f"{f'base {c.other_branch}' if c.other == 'base' else c.other}: {', '.join(c.paths)}"
                 for c in foreseen.get(v.id, [])]
        rows.append(BoardRow(agent=v, needs=needs_of(v), conflicts=found,
                             host=(v.host or listed.this_host) if spans else ""))
    order = {n: i for i, n in enumerate(NEEDS)}
    rows.sort(key=lambda r: order.get(r.needs or "", len(NEEDS)))  # stable: the tree order within each group
    items: list[InboxItem] = []
    if env.has_state():
        questions = [m for m in env.store.messages(recipient=ROOT, kinds=["question"]) if m.state == "pending"]
        asked = {m.id for m in questions}
        unread = sorted((m for m in env.store.messages(recipient=ROOT, unconsumed=True) if m.id not in asked),
                        key=lambda m: -m.id)
        said = [m for m in unread if m.kind not in LIFECYCLE][:INBOX_MAX]
        events = [m for m in unread if m.kind in LIFECYCLE][:INBOX_MAX]
        # the questions waiting for you first (in the order they were asked), then the rest newest first
        for m in [*questions, *sorted([*said, *events], key=lambda m: -m.id)]:
            items.append(InboxItem(id=m.id, kind=m.kind, sender=m.sender, name=str(m.data.get("from_name") or m.sender),
                                   body=m.body, created_at=m.created_at, pending=m.id in asked,
                                   event=str(m.data.get("event") or m.kind) if m.kind in LIFECYCLE else ""))
    from exo_cli.ops.mergequeue import summary_lines

    return BoardResult(rows=rows, inbox=items, needs_you=sum(1 for r in rows if r.needs), count=len(rows),
                       queue=summary_lines(env) if env.has_state() else [])
