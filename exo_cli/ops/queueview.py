"""``exo pr queue`` (tool ``merge_queue``): the merge queue's order, the batch under test, each entry's state and log.

See ``ops/mergequeue.py`` for the entries and ``ops/queuerun.py`` for the runner ``--run`` becomes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from exo_cli.errors import InvalidInput
from exo_cli.ops.mergequeue import DEFAULT_PRIORITY, entry, runner_alive, start_runner, waiting
from exo_cli.records import PullRequest
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.env import Env


@dataclass(frozen=True)
class QueueEntry:
    """One pull request in (or just out of) the merge queue."""

    pr: int
    title: str
    head: str
    base: str
    author: str
    state: str
    position: int | None
    priority: int
    pinned: str | None
    strategy: str | None
    enqueued_at: float | None
    reason: str | None
    files: list[str] | None
    log: str | None
    tail: str | None
    merge_commit: str | None


@dataclass(frozen=True)
class QueueView:
    """``exo pr queue``: the order, the batch under test, each entry's state and log."""

    bases: list[str]
    entries: list[QueueEntry]
    batch: list[int]
    runner: dict[str, bool] = field(default_factory=dict)
    count: int = 0


def view_entry(pr: PullRequest, pos: int | None) -> QueueEntry:
    q = entry(pr)
    state = "merged" if pr.state == "merged" and q else str(q.get("state"))
    return QueueEntry(pr=pr.number, title=pr.title, head=pr.head, base=pr.base, author=pr.author, state=state,
                      position=pos, priority=int(q.get("priority", DEFAULT_PRIORITY)), pinned=q.get("pinned"),
                      strategy=q.get("strategy"), enqueued_at=q.get("seq"), reason=q.get("reason"),
                      files=q.get("files"), log=q.get("log"), tail=q.get("tail"), merge_commit=pr.merge_commit)


@op(
    "pr_queue",
    cli="pr queue",
    tools=["merge_queue"],
    idempotent=True,
    help={"base": "Only the queue of this base branch (default: every base with entries).",
          "run": "Advance the queue here until it is empty (what the detached runner does)."},
    cli_only={"run": "the runner of a queue runs gates for as long as it takes; enqueuing starts it"},
)
def merge_queue(env: Env, *, base: str | None = None, run: bool = False) -> QueueView:
    """Show the merge queue: order, batch under test, each state.

    Entries waiting (queued, testing, tested) in queue order, then the ones that merged or
    bounced lately (with the conflicting paths or the failing gate's log). When entries wait
    and no runner holds a base's queue (say it was killed), one is started. `--run` advances
    the queue in this process instead, until it is empty.
    """
    env.repo  # noqa: B018 - fail early outside a repository
    env.config.get("merge.gates")  # a configuration error is named here, not by the runner
    if base is not None:
        from exo_cli.validate import check_text

        check_text(base, "base", kind="title")
    if run:
        if base is None:
            raise InvalidInput("--run needs --base", hint="exo pr queue --run --base main")
        from exo_cli.ops.queuerun import advance

        advance(env, base)
    prs = env.store.prs() if env.has_state() else []
    queued = [p for p in prs if entry(p) and (base is None or p.base == base)]
    bases = sorted({p.base for p in queued})
    out: list[QueueEntry] = []
    batch: list[int] = []
    runner: dict[str, bool] = {}
    for b in bases:
        ahead = waiting(env, b)
        alive = runner_alive(env, b)
        if ahead and not alive and not run:
            alive = start_runner(env, b)
        runner[b] = alive
        out += [view_entry(p, i) for i, p in enumerate(ahead, 1)]
        batch += [p.number for p in ahead if entry(p).get("state") == "testing"]
        done = [p for p in queued if p.base == b and p not in ahead and entry(p).get("state") in ("merged", "bounced")]
        done.sort(key=lambda p: float(entry(p).get("at", 0.0)), reverse=True)
        out += [view_entry(p, None) for p in done[:10]]
    return QueueView(bases=bases, entries=out, batch=batch, runner=runner, count=len(out))
