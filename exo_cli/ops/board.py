"""``exo board``'s data: the agent tree with who needs the human first, the root's inbox, conflicts.

One snapshot is the ``agents`` listing (one multiplexer call) plus the root's unread messages
and pending questions and the recorded conflict foresight. The board and ``exo agents
--watch`` take a new snapshot when the team doorbell rings (``records.TEAM_BELL``: every
change of an agent or a message), not by polling every agent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from exo_cli.ops.attention import needs_human
from exo_cli.records import DEAD, DONE, ROOT
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.env import Env
    from exo_cli.ops.status import AgentView

# Why an agent needs the human, in the order the board lists them.
NEEDS = ("asking", "permission", "dialog", "failed", "pr-ready", "dead")
# The attention event (``attention.NEEDS_HUMAN``, the one rule) -> the board's name for the need.
_BY_EVENT = {"question": "asking", "waiting-permission": "permission", "blocked-on-dialog": "dialog",
             "failed-turn": "failed", "dead": "dead"}
INBOX_MAX = 50


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


@dataclass(frozen=True)
class BoardResult:
    rows: list[BoardRow]  # agents that need the human first, then the tree in order
    inbox: list[InboxItem]  # newest first
    needs_you: int
    count: int


def needs_of(a: AgentView) -> str | None:
    """Why agent ``a`` needs the human (one of NEEDS), or None: the statuses whose entry raised an attention
    event (``attention.needs_human``: a question only when it goes to the root), or a PR filed to the root."""
    kind = needs_human(a.status, a.parent)
    if kind is not None:
        return _BY_EVENT[kind]
    if a.pr and a.pr.get("state") == "open" and a.parent == ROOT and a.status != DONE:
        return "pr-ready"
    return None


@op("board", cli="board", roles=("human",), read_only=True, idempotent=True, help={})
def board(env: Env) -> BoardResult:
    """Show the team at a glance: a live board of the agents, those that need you first.

    One line per agent (status, task, turns/tools/tokens, PR, last message, age, foreseen
    conflicts); agents asking a question, waiting for a permission, blocked on a dialog,
    with a PR ready for you to merge, or dead come first. Beside it, your inbox: pending
    questions and the latest notes and events. Keys attach, read, diff, send, answer, merge,
    complete and kill call the same operations as the commands. `--json` prints one snapshot.
    """
    from exo_cli.ops import foresight
    from exo_cli.ops.status import agents as list_agents

    listed = list_agents(env)
    views = listed.agents
    spans = any(v.host not in ("", listed.this_host) for v in views)
    live = {v.id for v in views if v.status not in (DEAD, DONE)}
    rows: list[BoardRow] = []
    for v in views:
        found = []
        if v.id in live:
            for other, c in foresight.recorded(env, v.id).items():
                if other == "base" or other in live:
                    where = f"base {c.get('other_branch')}" if other == "base" else other
                    found.append(f"{where}: {', '.join(c.get('paths') or [])}")
        rows.append(BoardRow(agent=v, needs=needs_of(v), conflicts=found,
                             host=(v.host or listed.this_host) if spans else ""))
    order = {n: i for i, n in enumerate(NEEDS)}
    rows.sort(key=lambda r: order.get(r.needs or "", len(NEEDS)))  # stable: the tree order within each group
    items: list[InboxItem] = []
    if env.has_state():
        seen: set[int] = set()
        questions = [m for m in env.store.messages(recipient=ROOT, kinds=["question"]) if m.state == "pending"]
        unread = env.store.messages(recipient=ROOT, unconsumed=True)
        for m in sorted([*questions, *unread], key=lambda m: -m.id):
            if m.id in seen:
                continue
            seen.add(m.id)
            items.append(InboxItem(id=m.id, kind=m.kind, sender=m.sender, name=str(m.data.get("from_name") or m.sender),
                                   body=m.body, created_at=m.created_at, pending=m.kind == "question"
                                   and m.state == "pending"))
        items = items[:INBOX_MAX]
    return BoardResult(rows=rows, inbox=items, needs_you=sum(1 for r in rows if r.needs), count=len(rows))
