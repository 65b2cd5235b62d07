"""Pull requests: file, merge, list and show, on the repository's forge (local or GitHub).

A PR merges an agent's branch into its parent branch: the recorded base branch, else the
branch name with its last ``.segment`` stripped (seed 001), else the configured base. There
is one open PR per head branch; filing again updates it. After a merge the author and its
siblings get a ``pr-merged`` message so their next stop hook rebases them
(``rebase_onto_base``, local refs only).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from exo_cli.adapters import git as gitutil
from exo_cli.errors import InvalidInput, NotFound, StateError
from exo_cli.records import DONE, ROOT, Agent, PullRequest
from exo_cli.registry import Tool, op

if TYPE_CHECKING:
    from exo_cli.adapters.forge import GhRunner
    from exo_cli.env import Env

STRATEGIES = ("squash", "merge")
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


@dataclass(frozen=True)
class MergeResult:
    """What ``exo pr merge`` did."""

    pr: PrView
    strategy: str
    merge_commit: str
    base_worktree: str | None
    local_updated: bool
    notified: list[str]
    warnings: list[str] = field(default_factory=list)


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


def base_branch(env: Env, agent: Agent | None, head: str) -> str:
    """The branch ``head`` merges into: the recorded base, else ``head`` minus its last ``.segment``.

    Without either, the configured ``worktree.base``, else the main checkout's branch.
    """
    if agent is not None and agent.base_branch:
        return agent.base_branch
    if "." in head:
        stem = head.rsplit(".", 1)[0]
        if stem and gitutil.ref_exists(env.repo.root, f"refs/heads/{stem}"):
            return stem
    configured = env.config.get("worktree.base")
    if configured:
        return str(configured)
    main = gitutil.current_branch(env.repo.root)
    if main and main != head:
        return main
    raise StateError(f"Cannot tell which branch {head} merges into",
                     hint="Set worktree.base in exo.toml.", branch=head)


def gh_runner(env: Env) -> GhRunner | None:
    """The ``gh`` runner to use: one a test or an embedding program set on ``env``, else the real gh."""
    return getattr(env, "gh_runner", None)


def _get(env: Env, number: int) -> PullRequest:
    # A number SQLite cannot hold names no pull request (and must not reach the driver).
    pr = env.store.pr(number) if env.has_state() and 0 < number < 2**63 else None
    if pr is None:
        raise NotFound(f"No pull request #{number}", hint="List them with `exo pr list`.", pr=number)
    return pr


def _rev_count(cwd: Any, rng: str) -> int:
    proc = gitutil.git(["rev-list", "--count", rng], cwd=cwd, check=False)
    return int(proc.stdout.strip() or 0) if proc.returncode == 0 else 0


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
    ``.segment``. On the local forge the PR is recorded in exo's state; on GitHub the branch
    is pushed (``git push -u``) and ``gh pr create`` opens it. Filing again while the PR is
    open updates it (title, body, and the pushed commits).
    """
    from exo_cli.adapters.forge import forge_named, get_forge
    from exo_cli.validate import check_text

    agent = env.caller_agent()
    if agent is not None and agent.branch:
        head, worktree = agent.branch, agent.worktree
    else:
        head, worktree = gitutil.current_branch(env.cwd), str(env.repo.toplevel)
        if head is None:
            raise StateError("You are not on a branch (detached HEAD)", hint="Check out your branch first.")
    base = base_branch(env, agent, head)
    if base == head:
        raise StateError(f"{head} is its own base branch", hint="File from a task branch.", branch=head)
    root = env.repo.root
    if not gitutil.ref_exists(root, f"refs/heads/{base}"):
        raise NotFound(f"Base branch {base} does not exist", branch=base)
    commits = _rev_count(root, f"refs/heads/{base}..refs/heads/{head}")
    if commits == 0:
        raise StateError(f"{head} has no commits that {base} lacks", hint="Commit your work, then file the PR.",
                         head=head, base=base)
    if title is None or not title.strip():
        title = gitutil.out(["log", "-1", "--format=%s", f"refs/heads/{head}"], cwd=root)
    if body is None:
        body = gitutil.out(["log", "--reverse", "--format=- %s", f"refs/heads/{base}..refs/heads/{head}"], cwd=root)
    title = check_text(title, "title")
    body = check_text(body, "body") if body else ""
    author = agent.id if agent is not None else ROOT
    existing = next((p for p in env.store.prs(head=head, state="open")), None)
    forge = forge_named(existing.forge, remote=env.config.get("forge.remote"), runner=gh_runner(env)) if existing \
        else get_forge(env, runner=gh_runner(env))
    filed = forge.file(env, head=head, base=base, title=title, body=body, draft=draft, existing=existing,
                       worktree=worktree)
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
    return FileResult(pr=view(pr), created=created, pushed=filed.pushed, commits=commits)


@op(
    "pr_merge",
    cli="pr merge",
    tools=[Tool("merge_pr", adapt=lambda *, pr_number, strategy=None: {"number": pr_number, "strategy": strategy},
                help={"pr_number": "Number of the pull request to merge.",
                      "strategy": "squash or merge (default: squash for a worker's PR, merge for a subtree's)."})],
    roles=("tl",),
    destructive=False,
    help={
        "number": "Number of the pull request to merge.",
        "strategy": "squash or merge (default: squash for a worker's PR, merge for a subtree's).",
    },
)
def merge_pr(env: Env, *, number: int, strategy: str | None = None) -> MergeResult:
    """Merge a child's pull request into its base branch and tell the siblings.

    Local forge: real git into the worktree that has the base checked out, refusing (the PR
    stays open, nothing half-merged, that worktree untouched) when it has modified or staged
    tracked files, when the merge would overwrite an untracked file, or on a conflict.
    GitHub: ``gh pr merge --squash|--merge``, then the local base is fast-forwarded. The
    author and its siblings get a ``pr-merged`` message; their next stop hook rebases them.
    """
    from exo_cli.adapters.forge import forge_named

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
    if strategy is None:
        strategy = "merge" if author is not None and author.role == "tl" else "squash"
    if strategy not in STRATEGIES:
        raise InvalidInput(f"Unknown merge strategy {strategy!r}", hint="Use squash or merge.", strategy=strategy)
    if strategy == "squash":
        message = f"{pr.title} (#{number})\n\n{pr.body}".rstrip() + "\n"
    else:
        message = f"Merge PR #{number} from {pr.head}\n\n{pr.title}\n\n{pr.body}".rstrip() + "\n"
    forge = forge_named(pr.forge, remote=env.config.get("forge.remote"), runner=gh_runner(env))
    head_sha = gitutil.out(["rev-parse", f"refs/heads/{pr.head}"], cwd=env.repo.root) \
        if gitutil.ref_exists(env.repo.root, f"refs/heads/{pr.head}") else None
    outcome = forge.merge(env, pr, strategy=strategy, message=message)
    env.store.update_pr(number, state="merged", strategy=strategy, merge_commit=outcome.merge_commit,
                        merged_at=time.time(), data={**pr.data, "head_sha": head_sha})
    notified = notify_merged(env, _get(env, number), sender=env.caller.agent_id)
    return MergeResult(pr=view(_get(env, number)), strategy=strategy, merge_commit=outcome.merge_commit,
                       base_worktree=outcome.base_worktree, local_updated=outcome.local_updated,
                       notified=notified, warnings=list(outcome.warnings))


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
                    if a.parent == author.parent and a.id != author.id and a.id != ROOT and a.status != DONE]
    sha = (pr.merge_commit or "")[:12]
    for target in targets:
        mine = target == pr.author
        body = (f"Your PR #{pr.number} ({pr.head} -> {pr.base}) was merged ({pr.strategy}) as {sha}."
                if mine else
                f"PR #{pr.number} ({pr.head}) was merged into {pr.base} as {sha}; "
                f"your branch will be rebased onto {pr.base} at your next stop.")
        env.store.post("pr-merged", sender, target, body, data={**data, "yours": mine})
    return targets


@op(
    "pr_list",
    cli="pr list",
    tools=["list_prs"],
    read_only=True,
    idempotent=True,
    help={"state": "Only PRs in this state: open, merged, closed or all (default: all)."},
)
def list_prs(env: Env, *, state: str = "all") -> PrList:
    """List the team's pull requests with review and check state.

    Review and check state come from the forge (GitHub, kept current by ``exo watch`` or the
    root TL's MCP server); the local forge has neither, so both are null there.
    """
    if state not in STATES:
        raise InvalidInput(f"Unknown PR state {state!r}", hint="Use one of: " + ", ".join(STATES), state=state)
    env.repo  # noqa: B018 - fail early outside a repository
    prs = env.store.prs(state=None if state == "all" else state) if env.has_state() else []
    views = [view(p) for p in prs]
    return PrList(prs=views, count=len(views))


@op(
    "pr_show",
    cli="pr show",
    read_only=True,
    idempotent=True,
    help={"number": "Number of the pull request."},
)
def show_pr(env: Env, *, number: int) -> PrView:
    """Show one pull request with its review and check state."""
    return view(_get(env, number))


# -- the stop hook's rebase ---------------------------------------------------------------------
@dataclass(frozen=True)
class RebaseResult:
    """What ``rebase_onto_base`` did: up-to-date, rebased, skipped (why) or conflict (files)."""

    status: str
    base: str | None
    detail: str = ""
    files: list[str] = field(default_factory=list)


def rebase_onto_base(env: Env, agent: Agent) -> RebaseResult:
    """Rebase the agent's branch onto its (local) base branch when the base moved ahead.

    Local refs only, never the network. Skipped when the worktree has uncommitted tracked
    changes or the agent's own PR was already merged; on a conflict the rebase is aborted
    (the branch is left as it was) and the conflicting files are returned.
    """
    if not agent.worktree or not agent.branch:
        return RebaseResult("skipped", None, "no worktree")
    try:
        base = base_branch(env, agent, agent.branch)
    except StateError:
        return RebaseResult("skipped", None, "no base branch")
    wt = agent.worktree
    if gitutil.current_branch(wt) != agent.branch:
        return RebaseResult("skipped", base, "the worktree is not on the agent's branch")
    if _rev_count(wt, f"HEAD..refs/heads/{base}") == 0:
        return RebaseResult("up-to-date", base)
    if any(p.state == "merged" for p in env.store.prs(head=agent.branch)):
        return RebaseResult("skipped", base, "its PR is merged")
    from exo_cli.adapters.forge.base import tracked_changes

    if tracked_changes(wt):
        return RebaseResult("skipped", base, "uncommitted changes")
    proc = gitutil.git(["rebase", "--no-autostash", f"refs/heads/{base}"], cwd=wt, check=False)
    if proc.returncode == 0:
        return RebaseResult("rebased", base)
    files = gitutil.git(["diff", "--name-only", "--diff-filter=U"], cwd=wt, check=False).stdout.split()
    gitutil.git(["rebase", "--abort"], cwd=wt, check=False)
    return RebaseResult("conflict", base, (proc.stderr or proc.stdout).strip()[-500:], files)
