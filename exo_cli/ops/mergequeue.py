"""The merge queue: with ``[[merge.gates]]`` for a base, ``pr merge`` enqueues, and a runner lands only what passed.

An entry lives in its pull request's record (``data["queue"]``: state, priority, the pinned
head, the order it was enqueued in, why it bounced) and its pinned head under
``refs/exo/queue/pr/<N>`` (later commits need a new ``pr merge``). States: ``queued`` (waiting),
``testing`` (in the batch under test), ``tested`` (passed; landing waits for a clean checkout
of the base), then ``merged`` (the PR's state too) or ``bounced`` (the PR stays open, out of
the queue). The order is priority (0 first), then the order of enqueuing.

The runner (``queuerun.advance``) holds the base's runner lock (a file lock, and the store's lock
``queue-run:<base>`` for the other hosts); enqueuing starts one, detached
and outside every agent, when none holds it (``start_runner``), and it exits when the queue is
empty. Landing takes the same per-base merge lock as a plain ``pr merge`` (``pr.merge_lock``: the
store's ``merge:<base>``, held across hosts).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from exo_cli.errors import InvalidInput, StateError
from exo_cli.records import ROOT, PullRequest

if TYPE_CHECKING:
    from exo_cli.env import Env

WAITING = ("queued", "testing", "tested")
QUEUE_STATES = (*WAITING, "merged", "bounced")
PIN = "refs/exo/queue/pr/{number}"
PRIORITIES = (0, 4)
DEFAULT_PRIORITY = 2
DEFAULT_TIMEOUT = 600


def gates(env: Env, base: str) -> list[dict[str, Any]]:
    """The gates that apply to merges into ``base`` (none: ``pr merge`` merges at once).

    ``merge.bases`` lists the bases the queue serves: empty means the repository's main
    branch, ``"*"`` every base (a worker's PR into its lead's branch included).
    """
    configured = env.config.get("merge.gates") or []
    if not configured:
        return []
    bases = env.config.get("merge.bases")
    if bases == "*":
        return list(configured)
    if not bases:
        from exo_cli.ops.branches import base_branch

        bases = [base_branch(env)]
    return list(configured) if base in bases else []


def key(base: str) -> str:
    """A file-name-safe key for a base branch (its lock files and clone folder)."""
    return hashlib.sha1(base.encode()).hexdigest()[:16]


def folder(env: Env, base: str) -> str:
    """Where the runner of ``base`` keeps its clones and gate logs."""
    import os

    return os.path.join(str(env.state_dir), "queue", key(base))


@contextlib.contextmanager
def entries_lock(env: Env, base: str) -> Iterator[None]:
    """Serialize changes to the entries of ``base`` (enqueue, pick a batch, land, bounce): held briefly."""
    from exo_cli.adapters.files import state_lock

    with state_lock(env.state_dir, f"mq-{key(base)}"):
        yield


def entry(pr: PullRequest) -> dict[str, Any]:
    q = pr.data.get("queue") if isinstance(pr.data, dict) else None
    return dict(q) if isinstance(q, dict) else {}


def waiting(env: Env, base: str) -> list[PullRequest]:
    """The open PRs of ``base`` in the queue, in queue order (priority, then order of enqueuing)."""
    prs = [p for p in env.store.prs(state="open") if p.base == base and entry(p).get("state") in WAITING]
    return sorted(prs, key=lambda p: (int(entry(p).get("priority", DEFAULT_PRIORITY)),
                                      float(entry(p).get("seq", 0.0)), p.number))


def set_entry(env: Env, pr: PullRequest, **changes: Any) -> dict[str, Any]:
    """Change the queue entry of ``pr`` (read fresh: the record may have changed since ``pr`` was read)."""
    fresh = env.store.pr(pr.number) or pr
    q = {**entry(fresh), **changes, "at": time.time()}
    env.store.update_pr(pr.number, data={**fresh.data, "queue": q})
    return q


@dataclass(frozen=True)
class Enqueued:
    state: str
    position: int | None


def enqueue(env: Env, pr: PullRequest, *, strategy: str, priority: int, head_ref: str) -> Enqueued:
    """Pin the PR's head and put it in the queue of its base (behind the entries of its priority before it)."""
    from exo_cli.adapters.git import Git

    if not PRIORITIES[0] <= priority <= PRIORITIES[1]:
        raise InvalidInput(f"Priority {priority} is out of range", hint="Use 0 (first) to 4 (last).",
                           priority=priority)
    git = Git(env.repo.root)
    head = git.rev(head_ref)
    if head is None:
        from exo_cli.errors import NotFound

        raise NotFound(f"Branch {pr.head} of PR #{pr.number} does not exist", branch=pr.head, pr=pr.number)
    with entries_lock(env, pr.base):
        fresh = env.store.pr(pr.number) or pr
        q = entry(fresh)
        if fresh.state != "open":
            raise StateError(f"PR #{pr.number} is {fresh.state}", pr=pr.number, state=fresh.state)
        if q.get("state") in ("testing", "tested"):
            if q.get("pinned") == head:  # enqueued again as it is: where it stands
                return Enqueued(str(q["state"]), position(env, pr.base, pr.number))
            raise StateError(f"PR #{pr.number} is {q['state']} at {str(q.get('pinned'))[:12]}; its newer commits "
                             "cannot join the batch under test",
                             hint="Wait for it to land or bounce, then `exo pr merge` again.", pr=pr.number)
        again = q.get("state") == "queued"
        git.update_ref(PIN.format(number=pr.number), head, reason=f"exo: queue PR #{pr.number}")
        set_entry(env, fresh, state="queued", priority=priority, strategy=strategy, pinned=head,
                  seq=q["seq"] if again and q.get("priority") == priority else time.time(),
                  by=env.caller.agent_id, reason=None, log=None, tail=None, files=None, candidate=None,
                  base_sha=None, solo=None)
    if not again:
        env.store.event("pr-queued", pr.author, {"pr": pr.number, "head": pr.head, "base": pr.base,
                                                  "pinned": head, "priority": priority})
        signal(env, "pr-queued", pr, f"PR #{pr.number}: {pr.title} ({pr.head} -> {pr.base}) joined the merge queue")
    return Enqueued("queued", position(env, pr.base, pr.number))


def signal(env: Env, kind: str, pr: PullRequest, text: str, **data: Any) -> None:
    """Raise the attention event ``kind`` when ``pr``'s author is a child of the root (as ``pr-filed`` is)."""
    author = env.store.agent(pr.author) if pr.author != ROOT else None
    if author is not None and (author.parent or ROOT) == ROOT:
        from exo_cli.ops import attention

        attention.signal(env, kind, author, text, pr=pr.number, **data)


def position(env: Env, base: str, number: int) -> int | None:
    """1 for the head of the queue of ``base``; None when ``number`` is not in it."""
    for i, p in enumerate(waiting(env, base), 1):
        if p.number == number:
            return i
    return None


def start_runner(env: Env, base: str) -> bool:
    """Start a detached runner of ``base``'s queue when none holds it; True when one was started.

    The runner is nobody's child, without any agent's identity (``MARKER_VARS`` removed): the
    gates run code agents wrote, and the landing is the human's act. A test or an embedding
    program can set ``env.queue_runner`` (a callable taking the env and the base) instead.
    """
    custom = getattr(env, "queue_runner", None)
    if custom is not None:
        return bool(custom(env, base))
    if runner_alive(env, base):
        return False
    from exo_cli.adapters.notify import start_detached
    from exo_cli.env import MARKER_VARS
    from exo_cli.selfcmd import exo_command

    environ = {k: v for k, v in env.environ.items() if k not in MARKER_VARS}
    argv = [*exo_command(), "-C", str(env.repo.root), "pr", "queue", "--run", "--base", base]
    return start_detached(argv, environ=environ, cwd=str(env.repo.root))


def runner_alive(env: Env, base: str) -> bool:
    """Whether a runner (on any host sharing the store) holds the queue of ``base`` now."""
    from exo_cli.adapters.files import state_lock

    with state_lock(env.state_dir, f"mq-run-{key(base)}", blocking=False) as lock:
        if not lock.held:
            return True
        with env.store.named_lock(f"queue-run:{base}", host=env.host_name, wait=0) as held:
            return not held


def summary_lines(env: Env) -> list[str]:
    """One line per base whose queue has entries waiting: how many, the batch under test, what waits to land."""
    by_base: dict[str, list[PullRequest]] = {}
    for p in env.store.prs(state="open"):
        if entry(p).get("state") in WAITING:
            by_base.setdefault(p.base, []).append(p)
    out = []
    for base in sorted(by_base):
        prs = by_base[base]
        testing = [f"#{p.number}" for p in prs if entry(p).get("state") == "testing"]
        tested = [f"#{p.number}" for p in prs if entry(p).get("state") == "tested"]
        out.append(f"merge queue {base}: {len(prs)} waiting" + (f", testing {' '.join(testing)}" if testing else "")
                   + (f", {' '.join(tested)} passed, waiting to land" if tested else ""))
    return out


def author_queued(env: Env, agent_id: str) -> list[int]:
    """The numbers of the PRs ``agent_id`` filed that wait in a merge queue (``complete`` refuses meanwhile)."""
    if agent_id == ROOT:
        return []
    return [p.number for p in env.store.prs(state="open") if p.author == agent_id and entry(p).get("state") in WAITING]
