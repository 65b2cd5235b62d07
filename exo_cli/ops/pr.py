"""Pull requests: file, merge, list and show, on the repository's forge (local or GitHub).

A PR merges an agent's branch into its parent branch (``branches.base_branch``: the recorded
base branch, else the branch name with its last ``.segment`` stripped, else the
main branch). There is one open PR per head branch; filing again updates it. After a merge
the author and its siblings get a ``pr-merged`` message so their next stop hook rebases
them (``rebase.rebase_onto_base``, local refs only).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from exo_cli import fault
from exo_cli.adapters.git import Git
from exo_cli.errors import InvalidInput, NotFound, StateError
from exo_cli.ops.branches import base_branch, base_ref
from exo_cli.ops.diff import DiffResult
from exo_cli.records import DONE, ROOT, PullRequest
from exo_cli.registry import Choice, Range, Tool, op

if TYPE_CHECKING:
    from exo_cli.adapters.forge import Forge, GhRunner
    from exo_cli.env import Env

STRATEGIES = ("squash", "merge")
RESTART_EVERY = 3.0  # seconds: how often `pr merge --wait` may start a merge queue runner that is gone
STATES = ("open", "merged", "closed", "all")


@dataclass(frozen=True)
class PrView:
    """A pull request as ``exo pr show`` / ``list_prs`` report it."""

    number: int
    forge: str
    title: str
    body: str
    head: str
    base: str
    author: str
    state: str
    draft: bool
    url: str | None
    remote_number: int | None
    strategy: str | None
    merge_commit: str | None
    review: str | None
    checks: str | None
    created_at: float
    updated_at: float
    merged_at: float | None


@dataclass(frozen=True)
class FileResult:
    """What ``exo pr file`` did."""

    pr: PrView
    created: bool  # False: an open PR of this branch was updated
    pushed: bool
    commits: int  # commits of head not in base
    base_pushed: bool = False  # the base branch was missing on the remote and was pushed first (GitHub)


@dataclass(frozen=True)
class MergeResult:
    """What ``exo pr merge`` did (with merge gates for the base: where the PR stands in the merge queue)."""

    pr: PrView
    strategy: str
    merge_commit: str | None  # None: queued, not merged yet
    base_worktree: str | None
    local_updated: bool
    notified: list[str]
    warnings: list[str] = field(default_factory=list)
    state: str = "merged"  # queued | testing | tested | merged | bounced
    position: int | None = None  # in the merge queue of the base (1: next), None when not in it
    queue: dict[str, Any] | None = None  # the queue entry: why it bounced, its log (None: merged without the queue)


@dataclass(frozen=True)
class PrList:
    prs: list[PrView]
    count: int


def view(pr: PullRequest) -> PrView:
    return PrView(
        number=pr.number, forge=pr.forge, title=pr.title, body=pr.body, head=pr.head, base=pr.base,
        author=pr.author, state=pr.state, draft=pr.draft, url=pr.url, remote_number=pr.remote_number,
        strategy=pr.strategy, merge_commit=pr.merge_commit, review=pr.review_state, checks=pr.checks_state,
        created_at=pr.created_at, updated_at=pr.updated_at, merged_at=pr.merged_at,
    )


def gh_runner(env: Env) -> GhRunner | None:
    """The ``gh`` runner to use: one a test or an embedding program set on ``env``, else the real gh."""
    return getattr(env, "gh_runner", None)


def forge_for(env: Env, kind: str | None = None, *, runner: GhRunner | None = None) -> Forge:
    """The forge ``kind`` names (default: config ``forge.kind``, ``auto`` resolved) for ``env``'s repository."""
    from exo_cli.adapters.forge import get_forge

    return get_forge(kind or env.config.get("forge.kind"), git=Git(env.repo.root),
                     remote=env.config.get("forge.remote"), runner=runner, environ=env.environ)


def _get(env: Env, number: int) -> PullRequest:
    # A number SQLite cannot hold names no pull request (and must not reach the driver).
    pr = env.store.pr(number) if env.has_state() and 0 < number < 2**63 else None
    if pr is None:
        raise NotFound(f"No pull request #{number}", hint="List them with `exo pr list`.", pr=number)
    return pr


@op(
    "pr_file",
    cli="pr file",
    tools=["file_pr"],
    roles=("tl", "dev"),
    idempotent=True,
    help={
        "title": "Title of the pull request (default: the last commit's subject).",
        "body": "Description of the pull request (default: the list of commits).",
        "draft": "File it as a draft.",
    },
)
def file_pr(env: Env, *, title: str | None = None, body: str | None = None, draft: bool = False) -> FileResult:
    """File a pull request of your branch against its parent branch.

    The base is the recorded parent branch, else the branch name minus its last
    `.segment`. On the local forge the PR is recorded in exo's state; on GitHub the branch
    is pushed (`git push -u`), and so is the base branch when the remote lacks it (a team
    lead's branch: `base_pushed`), and `gh pr create` opens it. Filing again while the PR
    is open updates it (title, body, and the pushed commits).
    """
    from exo_cli.limits import clip
    from exo_cli.validate import check_text

    if title is not None and title.strip():  # before anything is fetched or pushed
        check_text(title, "title", kind="title")
    if body:
        check_text(body, "body", kind="body")
    agent = env.caller_agent()
    head: str | None
    if agent is not None and agent.branch:
        head, worktree = agent.branch, agent.worktree
    else:
        head, worktree = Git(env.cwd).current_branch(), str(env.repo.toplevel)
        if head is None:
            raise StateError("You are not on a branch (detached HEAD)", hint="Check out your branch first.")
    from exo_cli.ops import checkout

    checkout.sync_own(env, agent)  # an agent's clone: its commits into the repository, its branch fast-forwarded
    base = base_branch(env, agent, head)
    if base == head:
        raise StateError(f"{head} is the base branch itself: a pull request goes from a task branch into it",
                         hint="Work on a task branch (spawn an agent, or git switch -c NAME) and file from there.",
                         branch=head)
    git = Git(env.repo.root)
    across = agent is not None and bool(agent.spec.get("base_ref"))  # its parent works on another host
    if across and agent is not None:
        from exo_cli.ops.hostgit import fetch_base

        fetch_base(env, agent)  # when it cannot, the base as last fetched still tells the commits apart
    bref = base_ref(agent, base)
    if not git.ref_exists(bref):
        raise NotFound(f"Base branch {base} does not exist", branch=base)
    commits = git.count(f"{bref}..refs/heads/{head}")
    if commits == 0:
        raise StateError(f"{head} has no commits that {base} lacks", hint="Commit your work, then file the PR.",
                         head=head, base=base)
    if title is None or not title.strip():  # what exo derives is cut to the limits, what it was given checked
        title = clip(git.subject(f"refs/heads/{head}"), "title", "title")[0]
    if body is None:
        body = clip("\n".join(git.log(f"{bref}..refs/heads/{head}", "- %s", reverse=True, check=True)),
                    "body", "body")[0]
    title = check_text(title, "title", kind="title")
    body = check_text(body, "body", kind="body") if body else ""
    author = agent.id if agent is not None else ROOT
    existing = next((p for p in env.store.prs(head=head, state="open")), None)
    forge = forge_for(env, existing.forge if existing else None, runner=gh_runner(env))
    if agent is not None and checkout.is_clone(agent):
        worktree = None  # pushed from the repository (its branch as just fetched), never from inside the clone
    filed = forge.file(head=head, base=base, title=title, body=body, draft=draft, existing=existing,
                       worktree=worktree)
    if across and forge.kind == "local":  # the parent's host fetches it from the shared remote to merge it
        from exo_cli.ops.hostgit import push_head

        push_head(env, head)
        filed = dataclasses.replace(filed, pushed=True)
    if existing is not None:
        env.store.update_pr(existing.number, title=title, body=body, draft=int(draft), base=base,
                            url=filed.url or existing.url, remote_number=filed.remote_number or existing.remote_number)
        number, created = existing.number, False
    else:
        number = env.store.insert_pr(forge=forge.kind, title=title, body=body, head=head, base=base, author=author,
                                     state="open", draft=int(draft), url=filed.url, remote_number=filed.remote_number)
        created = True
    pr = _get(env, number)
    data = {"pr": number, "head": head, "base": base, "title": title, "url": pr.url, "created": created}
    env.store.event("pr-filed" if created else "pr-updated", author, data)
    parent = agent.parent if agent is not None else None
    if parent:
        verb = "filed" if created else "updated"
        env.store.post("pr-filed", author, parent, f"PR #{number} {verb}: {title} ({head} -> {base})", data=data)
        if parent == ROOT and created and agent is not None:
            from exo_cli.ops import attention

            attention.signal(env, "pr-filed", agent, f"PR #{number}: {title} ({head} -> {base})", pr=number,
                             url=pr.url)
    return FileResult(pr=view(pr), created=created, pushed=filed.pushed, commits=commits, base_pushed=filed.base_pushed)


def _merge_pr_tool(*, pr_number: Annotated[int, Range(1)],
                   strategy: Annotated[str, Choice(STRATEGIES)] | None = None,
                   priority: Annotated[int, Range(0, 4)] | None = None) -> dict[str, Any]:
    """Map ``merge_pr``'s ``pr_number``, ``strategy`` and ``priority`` onto the operation."""
    return {"number": pr_number, "strategy": strategy, "priority": priority}


def merge_message(pr: PullRequest, strategy: str) -> str:
    """The message of the commit that merges ``pr`` with ``strategy`` (squash: the PR's title and body)."""
    if strategy == "squash":
        return f"{pr.title} (#{pr.number})\n\n{pr.body}".rstrip() + "\n"
    return f"Merge PR #{pr.number} from {pr.head}\n\n{pr.title}\n\n{pr.body}".rstrip() + "\n"


@op(
    "pr_merge",
    cli="pr merge",
    tools=[Tool("merge_pr", adapt=_merge_pr_tool,
                help={"pr_number": "Number of the pull request to merge.",
                      "priority": "With merge gates: its place in the merge queue, 0 (first) to 4 (default 2)."})],
    roles=("tl",),
    destructive=False,
    help={
        "number": "Number of the pull request to merge.",
        "strategy": "How to merge (default: squash for a worker's PR, merge for a subtree's).",
        "priority": "With merge gates: its place in the merge queue, 0 (first) to 4 (default 2).",
        "wait": "With merge gates: wait until it is merged or bounced.",
        "now": "Merge at once, bypassing the merge queue and its gates (the human only; recorded).",
        "force": "Enqueue even though the author's descendants have open PRs into its branch.",
    },
    cli_only={"wait": "waiting for the gates can take far longer than a tool call should",
              "now": "only the human bypasses the merge queue",
              "force": "only the human overrides the refusal that names the author's descendants"},
)
def merge_pr(env: Env, *, number: Annotated[int, Range(1)],
             strategy: Annotated[str, Choice(STRATEGIES)] | None = None,
             priority: Annotated[int, Range(0, 4)] | None = None, wait: bool = False, now: bool = False,
             force: bool = False) -> MergeResult:
    """Merge a child's pull request into its base branch and tell the siblings.

    Merges into one base branch run one at a time, and are refused while any checkout of
    the base has a rebase, merge, cherry-pick, revert or bisect in progress. Local forge:
    real git into the worktree that has the base checked out, refusing (the PR stays open,
    nothing half-merged, that worktree untouched) when it has modified or staged tracked
    files, when the merge would overwrite an untracked or ignored file, or on a conflict.
    GitHub: `gh pr merge --squash|--merge`, then the local base is fast-forwarded. The
    author and its siblings get a `pr-merged` message; their next stop hook rebases them.

    With `[[merge.gates]]` for the base, the PR joins the merge queue instead and this
    returns at once with its `state` and `position` (`--wait`: once it is merged or
    bounced); the base moves only to a commit that passed the gates (docs/commands.md: The merge queue),
    on GitHub by a fast-forward push of it.
    """
    pr = _get(env, number)
    if pr.state != "open":
        raise StateError(f"PR #{number} is {pr.state}", pr=number, state=pr.state)
    if pr.draft:
        raise StateError(f"PR #{number} is a draft", hint="The author files it again without --draft.", pr=number)
    caller = env.caller_agent()
    if caller is not None and caller.branch and caller.branch != pr.base:
        raise StateError(f"PR #{number} merges into {pr.base}, not into your branch {caller.branch}",
                         hint="Only the parent of the PR's branch merges it.", pr=number)
    author = env.store.agent(pr.author) if pr.author != ROOT else None
    head_ref, across = f"refs/heads/{pr.head}", author is not None and not env.runs_here(author)
    if strategy is None:
        strategy = "merge" if author is not None and author.role == "tl" else "squash"
    if strategy not in STRATEGIES:
        raise InvalidInput(f"Unknown merge strategy {strategy!r}", hint="Use squash or merge.", strategy=strategy)
    message = merge_message(pr, strategy)
    from exo_cli.ops import mergequeue

    if now and caller is not None:
        raise StateError("Only the human bypasses the merge queue (--now)", hint="Merge without --now: the "
                         "PR joins the queue and lands once the gates pass.", pr=number)
    if force and caller is not None:
        raise StateError("Only the human enqueues a PR past its author's descendants' open PRs (--force)",
                         hint="Merge those PRs into the author's branch first, or ask the human.", pr=number)
    forge = forge_for(env, pr.forge, runner=gh_runner(env))
    gated = not now and bool(mergequeue.gates(env, pr.base))
    queued = gated and forge.kind in ("local", "github")
    if not queued and (priority is not None or wait):
        raise InvalidInput(f"--priority and --wait apply to the merge queue, and none serves {pr.base}",
                           hint="Configure [[merge.gates]] (docs/commands.md: The merge queue), or leave them out.", pr=number)
    if across and forge.kind == "local":  # the author works on another host: its branch comes from the shared remote
        from exo_cli.ops.hostgit import fetch_head

        head_ref = fetch_head(env, pr.head)
    from exo_cli.ops import checkout

    synced = checkout.sync_owners(env, [pr.head, pr.base])  # agents' clones: their branches as they have them
    if queued:  # the queue pins the head as just fetched from its clone
        return _enqueue(env, pr, strategy=strategy, priority=priority, wait=wait, force=force, head_ref=head_ref)
    with merge_lock(env, pr.base):
        # under the lock: another merge may have merged (or closed) this PR, or moved the base, meanwhile
        pr = _get(env, number)
        if pr.state != "open":
            raise StateError(f"PR #{number} is {pr.state}", pr=number, state=pr.state)
        refuse_paused(env, pr.base, number)
        head_sha = Git(env.repo.root).rev(head_ref)
        fault.point("merge.locked", env.environ)
        from exo_cli.ops.checkpoints import before_branch_moves

        unsaved = before_branch_moves(env, pr.base, "merge")  # an agent's checkout of the base: checkpointed first
        outcome = forge.merge(pr, strategy=strategy, message=message, head_ref=head_ref)
        fault.point("merge.moved", env.environ)
        data = {**pr.data, "head_sha": head_sha}
        if now:  # the human's bypass of the queue is recorded on the PR and as an event
            data["queue_bypassed"] = {"by": env.caller.agent_id, "at": time.time()}
            env.store.event("pr-queue-bypassed", pr.author, {"pr": number, "base": pr.base})
        if mergequeue.entry(pr).get("state") in mergequeue.WAITING:  # merged around the queue: it leaves it
            data["queue"] = {**mergequeue.entry(pr), "state": "merged", "at": time.time()}
            Git(env.repo.root).delete_ref(mergequeue.PIN.format(number=number), str(data["queue"].get("pinned")))
        env.store.update_pr(number, state="merged", strategy=strategy, merge_commit=outcome.merge_commit,
                            merged_at=time.time(), data=data)
    warnings = [*synced, *unsaved, *outcome.warnings]
    if gated:  # said, never silent: the gates configured for this base did not run
        warnings.append(f"merge.gates are not applied on the {forge.kind} forge yet: PR #{number} was merged "
                        "without them")
    notified = notify_merged(env, _get(env, number), sender=env.caller.agent_id)
    if forge.kind == "local":
        elsewhere = [a for a in (env.store.agent(t) for t in notified) if a is not None and not env.runs_here(a)]
        if across or elsewhere:  # agents on other hosts see the merge through the shared remote
            from exo_cli.ops.hostgit import push_base
            from exo_cli.ops.remote import fetch_bases_there

            pushed = push_base(env, pr.base)
            warnings += pushed
            if head_sha and across:  # the copy fetched for the merge: the branch itself lives on its author's host
                Git(env.repo.root).delete_ref(head_ref, head_sha)
            if not pushed:  # so their next stop rebases onto it
                warnings += fetch_bases_there(env, [a for a in elsewhere if a.id != pr.author])
    return MergeResult(pr=view(_get(env, number)), strategy=strategy, merge_commit=outcome.merge_commit,
                       base_worktree=outcome.base_worktree, local_updated=outcome.local_updated,
                       notified=notified, warnings=warnings)


def _enqueue(env: Env, pr: PullRequest, *, strategy: str, priority: int | None, wait: bool, force: bool,
             head_ref: str) -> MergeResult:
    """Put ``pr`` in its base's merge queue, start the runner, and report (``wait``: once it landed or bounced)."""
    from exo_cli.ops import mergequeue as mq

    if not force:
        blocking = _open_below(env, pr)
        if blocking:
            raise StateError(f"PR #{pr.number}'s author has descendants with open PRs into {pr.head}: "
                             + ", ".join(blocking), hint="Merge or close theirs first, or enqueue with --force.",
                             pr=pr.number, agents=blocking, reason="open-descendants")
    got = mq.enqueue(env, pr, strategy=strategy, priority=mq.DEFAULT_PRIORITY if priority is None else priority,
                     head_ref=head_ref)
    from exo_cli.ops.queuegh import status

    status(env, pr, "pending", f"queued for {pr.base}")
    mq.start_runner(env, pr.base)
    if wait:
        deadline = time.monotonic() + float(env.config.get("timeouts.wait") or 600)
        started = time.monotonic()
        while time.monotonic() < deadline:
            q = mq.entry(_get(env, pr.number))
            if q.get("state") in ("merged", "bounced"):
                break
            # it died (or ended): start another, at most every few seconds (one that cannot start is no storm)
            if time.monotonic() - started > RESTART_EVERY and not mq.runner_alive(env, pr.base):
                mq.start_runner(env, pr.base)
                started = time.monotonic()
            time.sleep(0.1)
    fresh = _get(env, pr.number)
    q = mq.entry(fresh)
    state = str(q.get("state") or got.state)
    return MergeResult(pr=view(fresh), strategy=strategy, merge_commit=fresh.merge_commit, base_worktree=None,
                       local_updated=state == "merged", notified=[],
                       state=state, position=mq.position(env, pr.base, pr.number), queue=q)


def _open_below(env: Env, pr: PullRequest) -> list[str]:
    """The names of the live descendants of ``pr``'s author with open PRs into its branch."""
    if pr.author == ROOT:
        return []
    agents = env.store.agents()
    below: set[str] = set()
    frontier = {pr.author}
    while frontier:
        frontier = {a.id for a in agents if a.parent in frontier and a.id not in below}
        below |= frontier
    live = {a.id: a.name for a in agents if a.id in below and a.status != DONE and not a.retired}
    return sorted({live[p.author] for p in env.store.prs(state="open") if p.author in live and p.base == pr.head})


@contextlib.contextmanager
def merge_lock(env: Env, base: str) -> Iterator[None]:
    """Serialize merges into ``base``, the merge queue's landings included: a file lock per base in exo's
    state folder (this host's processes, freed by the kernel at ``kill -9``), then the store's lock of the
    base (``merge:<base>``: every host sharing the store; see ``adapters/store/baselock.py``)."""
    import hashlib

    from exo_cli.adapters.files import state_lock

    with state_lock(env.state_dir, f"merge-{hashlib.sha1(base.encode()).hexdigest()[:16]}"), \
            env.store.named_lock(f"merge:{base}", host=env.host_name, wait=None):
        yield


def refuse_paused(env: Env, base: str, number: int) -> None:
    """StateError when a checkout of ``base`` has a rebase, merge, cherry-pick, revert, am or bisect in progress.

    During a rebase or a bisect that checkout's HEAD is detached, yet the operation will
    update (or return to) ``base``: moving ``base`` under it would be undone (and the PR's
    merge dropped) by its ``--abort``.
    """
    from exo_cli.adapters.gitdir import checkouts

    for co in checkouts(env.repo.common_dir):
        if base in co.branches and co.operations:
            ops = ", ".join(co.operations)
            raise StateError(
                f"Not merging PR #{number}: the checkout of {base} at {co.path or co.git_dir} has a {ops} in progress",
                hint="Finish it or abort it there (" + "; ".join(
                    "git bisect reset" if o == "bisect" else f"git {o} --continue or --abort" for o in co.operations)
                + "), then merge again.",
                pr=number, worktree=co.path, operations=co.operations, reason="operation-in-progress",
            )


def notify_merged(env: Env, pr: PullRequest, *, sender: str) -> list[str]:
    """Post ``pr-merged`` to the PR's author and every sibling of it; return who was told."""
    data = {"pr": pr.number, "head": pr.head, "base": pr.base, "merge_commit": pr.merge_commit,
            "strategy": pr.strategy}
    env.store.event("pr-merged", pr.author, data)
    author = env.store.agent(pr.author) if pr.author != ROOT else None
    targets: list[str] = []
    if author is not None:
        targets.append(author.id)
        targets += [a.id for a in env.store.agents()
                    if a.parent == author.parent and a.id != author.id and a.id != ROOT and a.status != DONE
                    and not a.retired]
    from exo_cli.ops.delivery import post_notice

    sha = (pr.merge_commit or "")[:12]
    for target in targets:
        mine = target == pr.author
        body = (f"Your PR #{pr.number} ({pr.head} -> {pr.base}) was merged ({pr.strategy}) as {sha}."
                if mine else
                f"PR #{pr.number} ({pr.head}) was merged into {pr.base} as {sha}; "
                f"your branch will be rebased onto {pr.base} at your next stop.")
        post_notice(env, "pr-merged", sender, target, body, data={**data, "yours": mine})
    return targets


@op(
    "pr_list",
    cli="pr list",
    tools=["list_prs"],
    read_only=True,
    idempotent=True,
    help={"state": "Only PRs in this state (default: all)."},
)
def list_prs(env: Env, *, state: Annotated[str, Choice(STATES)] = "all") -> PrList:
    """List the team's pull requests with review and check state.

    Review and check state come from the forge (GitHub, kept current by `exo watch` or by
    the MCP server of the team lead at the root); the local forge has neither, so both are
    null there.
    """
    if state not in STATES:
        raise InvalidInput(f"Unknown PR state {state!r}", hint="Use one of: " + ", ".join(STATES), state=state)
    env.repo  # noqa: B018 - fail early outside a repository
    prs = env.store.prs(state=None if state == "all" else state) if env.has_state() else []
    views = [view(p) for p in prs]
    return PrList(prs=views, count=len(views))


@dataclass(frozen=True)
class PrDiffView(PrView):
    """``exo pr show N --diff``: the PR and what it merges (or merged)."""

    diff: DiffResult | None = None


@op(
    "pr_show",
    cli="pr show",
    read_only=True,
    idempotent=True,
    help={"number": "Number of the pull request.",
          "diff": "Add the PR's diff: its branch against its base (three-dot), or its merge commit once merged."},
    no_tools="list_prs returns this same view of every pull request, and diff_agent the diff of an agent's branch",
)
def show_pr(env: Env, *, number: Annotated[int, Range(1)], diff: bool = False) -> PrView:
    """Show one pull request with its review and check state (with diff, what it merges)."""
    pr = _get(env, number)
    if not diff:
        return view(pr)
    from dataclasses import asdict

    from exo_cli.ops import checkout
    from exo_cli.ops.diff import branch_diff

    if pr.state == "open":
        checkout.sync_owners(env, [pr.head])
    git = Git(env.repo.root)
    head, base = f"refs/heads/{pr.head}", f"refs/heads/{pr.base}"
    if pr.state == "merged" and pr.merge_commit and git.rev(f"{pr.merge_commit}^1"):
        revs = [f"{pr.merge_commit}^1", pr.merge_commit]
        shown = branch_diff(git, head=pr.merge_commit, base=f"{pr.merge_commit}^1", revs=revs, agent=pr.author)
    elif git.ref_exists(head) and git.ref_exists(base):
        shown = branch_diff(git, head=head, base=base, revs=[f"{base}...{head}"], agent=pr.author)
    else:
        raise StateError(f"PR #{number}'s branches are gone ({pr.head} -> {pr.base})", pr=number)
    return PrDiffView(**asdict(view(pr)), diff=shown)
