"""The forge poller: review, check and merge changes of tracked GitHub PRs, delivered as events.

``poll_once`` asks the forge (``gh pr view --json``) about every open GitHub PR exo tracks,
updates the records, and posts what changed to the owning agent (a message plus an event):
review posted, review decision changed, checks changed, merged or closed outside exo. After a
merge on GitHub it fetches the base branch and fast-forwards the local one (``base-updated``),
so ``exo complete`` sees the branch merged without a manual ``git fetch``. ``exo watch``
repeats it (every 30 s while a review or check is pending, 5 min otherwise) and hands each
change to the caller's observer as it happens; the root TL's ``exo mcp`` runs the same loop in
a background thread through ``start_poller``. A lock file in the state dir keeps it to one
poller per repository.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

from exo_cli.adapters.files import FileLock
from exo_cli.errors import ExoError, StateError
from exo_cli.records import ROOT, PullRequest
from exo_cli.registry import Range, op

if TYPE_CHECKING:
    from exo_cli.adapters.forge import GhRunner, RemoteState
    from exo_cli.env import Env

LOCK_NAME = "poller.lock"


class Change(NamedTuple):
    """One change the poller saw, as ``exo watch`` prints it (one JSON line each with ``--json``)."""

    kind: str  # pr-review, pr-checks, pr-merged, pr-closed, base-updated; error (a problem, in no result)
    pr: int | None  # exo's PR number (None for an error that concerns no PR)
    author: str | None  # the agent the change was sent to
    text: str


@dataclass(frozen=True)
class PollResult:
    """One round of polling: the PRs looked at, what changed, and whether anything is pending."""

    polled: int
    changes: list[Change]
    pending: bool
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class WatchResult:
    rounds: int
    changes: list[Change]
    stopped_by: str  # once | interrupt | cancel | nothing-to-poll


class PollerLock:
    """The poller's lock: ``<state dir>/poller.lock``, taken without waiting and held while it polls.

    The holder's pid is written into the file (for the error another poller shows); the lock
    goes with ``release`` or the process's exit.
    """

    def __init__(self, env: Env) -> None:
        self.path = env.state_dir / LOCK_NAME
        self._lock = FileLock(self.path)

    def acquire(self) -> bool:
        if not self._lock.acquire(blocking=False):
            return False
        self._lock.write(f"{os.getpid()}\n")
        return True

    def holder(self) -> str | None:
        with contextlib.suppress(OSError):
            return self.path.read_text().strip() or None
        return None

    def release(self) -> None:
        self._lock.release()


def _changes(pr: PullRequest, now: RemoteState) -> list[tuple[str, str]]:
    """(kind, text) of what differs between the record and the forge's view."""
    out: list[tuple[str, str]] = []
    seen_reviews = int(pr.data.get("reviews", 0))
    if now.reviews > seen_reviews:
        out.append(("pr-review", f"PR #{pr.number}: a review was posted"
                    + (f" (decision: {now.review})" if now.review else "")))
    elif now.review != pr.review_state and now.review:
        out.append(("pr-review", f"PR #{pr.number}: review decision is now {now.review}"))
    if now.checks != pr.checks_state and now.checks:
        out.append(("pr-checks", f"PR #{pr.number}: checks {now.checks}"))
    if now.state == "merged" and pr.state != "merged":
        out.append(("pr-merged", f"PR #{pr.number} ({pr.head} -> {pr.base}) was merged on GitHub"))
    elif now.state == "closed" and pr.state != "closed":
        out.append(("pr-closed", f"PR #{pr.number} ({pr.head}) was closed on GitHub without merging"))
    return out


def poll_once(env: Env, *, runner: GhRunner | None = None) -> PollResult:
    """Poll every open GitHub PR once; record and deliver what changed."""
    from exo_cli.ops.pr import forge_for

    env.follow_store()  # a long-lived poller follows `exo store migrate`, as every command does
    if not env.has_state():
        return PollResult(0, [], False)
    _resume_queues(env)
    # a PR the merge queue is landing (tested, pushed, its record not yet merged) is exo's merge, never an outside one
    from exo_cli.ops.mergequeue import entry

    prs = [p for p in env.store.prs(state="open") if p.forge == "github" and p.remote_number
           and entry(p).get("state") != "tested"]
    forge = forge_for(env, "github", runner=runner)
    changes: list[Change] = []
    errors: list[str] = []
    synced: set[str] = set()  # base branches already fetched this round
    pending = False
    for pr in prs:
        try:
            now = forge.view(pr)
        except ExoError as exc:
            errors.append(f"PR #{pr.number}: {exc.message}")
            continue
        if now is None:
            continue
        found = _changes(pr, now)
        update: dict[str, Any] = {"review_state": now.review, "checks_state": now.checks,
                                  "data": {**pr.data, "reviews": now.reviews}}
        if now.url:
            update["url"] = now.url
        if now.state != pr.state:
            update["state"] = now.state
            if now.state == "merged":
                update.update(merge_commit=now.merge_commit, merged_at=time.time(), strategy=pr.strategy)
        env.store.update_pr(pr.number, **update)
        if now.state == "open" and (now.checks == "pending" or now.review == "review_required"):
            pending = True
        for kind, text in found:
            data = {"pr": pr.number, "remote_number": pr.remote_number, "state": now.state, "review": now.review,
                    "checks": now.checks, "url": now.url}
            env.store.event(kind, pr.author, data)
            if pr.author != ROOT:
                env.store.post(kind, "forge", pr.author, text, data=data)
            changes.append(Change(kind, pr.number, pr.author, text))
        if now.state == "merged" and pr.state != "merged":
            from exo_cli.ops.pr import notify_merged

            merged = env.store.pr(pr.number)
            if merged is not None:
                notify_merged(env, merged, sender="forge")
            if pr.base not in synced:
                synced.add(pr.base)
                changes += _sync_base(forge, pr, errors)
    return PollResult(polled=len(prs), changes=changes, pending=pending, errors=errors)


def _resume_queues(env: Env) -> None:
    """Start a runner for each merge queue no runner advances (the human's poller only: never an agent's)."""
    if env.caller.is_human:
        from exo_cli.ops.queuerun import resume_idle

        resume_idle(env)


def _sync_base(forge: Any, pr: PullRequest, errors: list[str]) -> list[Change]:
    """After a merge on GitHub: fetch the base and fast-forward the local branch, so ``complete`` sees it merged."""
    try:
        sync = forge.sync_base(pr.base, reason=f"exo: PR #{pr.number} merged on GitHub")
    except ExoError as exc:
        errors.append(f"PR #{pr.number}: {exc.message}")
        return []
    errors += [f"PR #{pr.number}: {w}" for w in sync.warnings]
    if not sync.moved:
        return []
    where = f" in {sync.worktree}" if sync.worktree else ""
    text = f"{pr.base} fast-forwarded to {(sync.head or '')[:12]}{where} (PR #{pr.number} merged on GitHub)"
    return [Change("base-updated", pr.number, pr.author, text)]


def run_loop(env: Env, stop: threading.Event, *, interval_pending: float = 30, interval_idle: float = 300,
             runner: GhRunner | None = None, on_round: Any = None) -> int:
    """Poll until ``stop`` is set: ``interval_pending`` while something is pending, else ``interval_idle``."""
    rounds = 0
    while not stop.is_set():
        try:
            result = poll_once(env, runner=runner)
        except Exception as exc:  # the poller must outlive a bad round (gh missing, state busy)
            result = PollResult(0, [], False, [str(exc)])
        rounds += 1
        if on_round is not None:
            on_round(result)
        stop.wait(interval_pending if result.pending else interval_idle)
    return rounds


def pollable(env: Env) -> bool:
    """Whether the poller has anything to poll: the repository's forge keeps PRs remotely (GitHub), or an open
    GitHub PR is still tracked (filed before the forge changed). The local forge's PRs change only through exo,
    which tells their agents at once."""
    from exo_cli.ops.pr import forge_for

    if env.has_state() and any(p.forge == "github" and p.remote_number for p in env.store.prs(state="open")):
        return True
    return forge_for(env).kind == "github"


def start_poller(env: Env, *, interval_pending: float = 30, interval_idle: float = 300,
                 runner: GhRunner | None = None) -> threading.Event | None:
    """Run the poller in a daemon thread when no other runs for this repository.

    Returns the thread's stop event (set it to stop the poller and release the lock), or
    None when another process (``exo watch``, another root ``exo mcp``) holds the poller
    lock or the repository's forge is not GitHub. For ``exo_cli.mcp_server.BACKGROUND``.
    """
    try:
        if not pollable(env):
            return None
    except Exception:
        return None
    lock = PollerLock(env)
    if not lock.acquire():
        return None
    stop = threading.Event()

    def body() -> None:
        try:
            run_loop(env, stop, interval_pending=interval_pending, interval_idle=interval_idle, runner=runner)
        finally:
            lock.release()

    threading.Thread(target=body, name="exo-forge-poller", daemon=True).start()
    return stop


def background_poller(env: Env) -> None:
    """Entry for ``mcp_server.BACKGROUND``: start the poller for the root TL's server only."""
    if env.caller.is_human:
        start_poller(env)


@op(
    "watch",
    cli="watch",
    roles=("human",),
    blocking=True,
    help={
        "once": "Poll once and exit.",
        "interval_pending": "Seconds between polls while a review or check is pending.",
        "interval_idle": "Seconds between polls otherwise.",
    },
)
def watch(env: Env, *, once: bool = False, interval_pending: Annotated[int, Range(1)] = 30,
          interval_idle: Annotated[int, Range(1)] = 300) -> WatchResult:
    """Poll the forge for review, check and merge changes and deliver them as events.

    Watches every open GitHub PR exo tracks with `gh pr view --json`: every
    {--interval_pending} seconds while a review or check is pending, every
    {--interval_idle} seconds otherwise. Changes go to the owning agent as a message and an
    event, and are printed as they happen (`--json`: one JSON object per line). After a
    merge on GitHub the local base branch is fetched and fast-forwarded. Stops on Ctrl-C.
    Only one poller runs per repository. Each round also starts a runner for every merge queue
    that has entries and none advancing it. With the local forge and no GitHub PR tracked there
    is nothing to poll: it says so at once (stopped_by nothing-to-poll) and exits 0.
    """
    from exo_cli import cancel
    from exo_cli.ops.pr import gh_runner

    env.repo  # noqa: B018 - EnvironmentError_ outside a repository
    if not pollable(env):
        _resume_queues(env)  # a merge queue advances from here too, whatever the forge
        return WatchResult(0, [], "nothing-to-poll")
    observer = getattr(env, "watch_observer", None)  # set by the command: prints each change at once

    lock = PollerLock(env)
    if not lock.acquire():
        raise StateError("Another forge poller runs for this repository",
                         hint="It is `exo watch` or the root TL's `exo mcp` (pid in the lock file).",
                         lock=str(lock.path), holder=lock.holder())
    changes: list[Change] = []
    rounds = 0
    stopped_by = "once"
    try:
        runner = gh_runner(env)
        while True:
            result = poll_once(env, runner=runner)
            rounds += 1
            changes.extend(result.changes)
            if observer is not None:
                for change in result.changes:
                    observer(change)
                for error in result.errors:
                    observer(Change("error", None, None, error))
            if once:
                break
            wait = interval_pending if result.pending else interval_idle
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if cancel.cancelled():
                    return WatchResult(rounds, changes, "cancel")
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    except KeyboardInterrupt:
        stopped_by = "interrupt"
    finally:
        lock.release()
    return WatchResult(rounds, changes, stopped_by)
