"""The stop hook's rebase: an agent's branch onto its parent branch when that moved (local refs only).

The one rebase exo does for an agent (``rebase_onto_base``), run by the stop hook after each
turn and by nothing else, so what the tests exercise is what the agents get. On the hooks' hot
path: the stdlib and light exo modules only; a parent tip already checked is recognised by
reading the ref files (``ref_sha``), without a git process.
"""

from __future__ import annotations

import os

from exo_cli.errors import StateError
from exo_cli.lite import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from exo_cli.env import Env
    from exo_cli.records import Agent


def ref_sha(worktree: str, ref: str) -> str | None:
    """Resolve a branch ref by reading the repository files (no git process; the agent's to write, so never a
    FIFO, a device or a link is opened); None when unsure."""
    from exo_cli.adapters import gitdir

    found = gitdir.git_dir_of(worktree)
    return gitdir.ref_commit(found, ref) if found is not None else None


class RebaseResult(NamedTuple):
    """What the stop hook's rebase did.

    ``status``: none (nothing to rebase: no worktree or no parent branch), up-to-date,
    skipped (the parent moved, but the worktree is not on the agent's branch or its PR is
    merged; ``detail`` says which), dirty (uncommitted tracked changes), in-the-way (not
    attempted: it would overwrite or delete the untracked or ignored files ``files`` lists),
    rebased, or conflict (aborted; ``files`` lists the conflicting files).
    """

    status: str
    base: str | None = None  # the parent branch
    sha: str | None = None  # its tip
    detail: str = ""
    files: list[str] = []  # noqa: RUF012 - never mutated


def rebase_onto_base(env: Env, agent: Agent, state: dict[str, Any] | None = None, *,
                     turn: int | None = None) -> RebaseResult:
    """Rebase the agent's branch onto its parent branch when that moved ahead (local refs only).

    Never touches the network. Skipped when the worktree is not on the agent's branch or
    the agent's own PR was already merged; not attempted with uncommitted tracked changes,
    nor when it would overwrite an untracked or ignored file (git overwrites ignored ones
    silently: a ``.env`` the parent now tracks would replace the agent's own).
    On a conflict the rebase is aborted (the branch and files are exactly as before) and the
    conflicting files are returned. With ``state`` (the hook's bookkeeping), a parent tip
    already checked is recognised by reading the ref files, without running git. The checkout is
    checkpointed (as the end of turn ``turn``) before the rebase starts.
    """
    wt = agent.worktree
    if not wt or not os.path.isdir(wt):
        return RebaseResult("none", detail="no worktree")
    try:
        base = agent.base_branch or (_base_branch(env, agent) if agent.branch else None)
    except StateError:
        base = None
    if not base:
        return RebaseResult("none", detail="no parent branch")
    from exo_cli.ops.branches import base_ref

    ref = base_ref(agent, base)  # a parent on another host: its branch as last fetched from the shared remote
    if agent.spec.get("layout") == "clone":
        return _clone_stop(env, agent, state, base, ref, turn=turn)
    known = ref_sha(wt, ref)
    if state is not None and known and state.get("base_ok") == known:
        return RebaseResult("up-to-date", base, known)
    from exo_cli.adapters.git import Git

    git = Git(wt)
    sha = git.rev(ref)
    if not sha:
        return RebaseResult("none", base, detail=f"{base} does not exist")
    if not git.has_commits_not_in(sha, "HEAD"):
        if state is not None:
            state["base_ok"] = sha
        return RebaseResult("up-to-date", base, sha)
    if agent.branch and git.current_branch() != agent.branch:
        return RebaseResult("skipped", base, sha, "the worktree is not on the agent's branch")
    if agent.branch and any(p.state == "merged" for p in env.store.prs(head=agent.branch)):
        return RebaseResult("skipped", base, sha, "its PR is merged")
    changed = git.tracked_changes(check=False)
    if changed and all(line[3:].startswith(".beads/") for line in changed):
        from exo_cli.ops.tasks import restore_synced_tracker

        restore_synced_tracker(env, agent.id, wt)  # exo's own tracker copy is not the agent's change
        changed = git.tracked_changes(check=False)
    if changed:
        return RebaseResult("dirty", base, sha, "uncommitted changes")
    in_the_way = git.in_the_way(sha)
    if in_the_way:  # git would overwrite an ignored file without a word (and refuse an untracked one midway)
        return RebaseResult("in-the-way", base, sha, "untracked or ignored files the rebase would overwrite",
                            in_the_way)
    from exo_cli.ops.checkpoints import before_change

    before_change(env, agent, "rebase", turn=turn)  # a warning at most: the rebase itself loses nothing
    proc = git.rebase(sha)
    if proc.returncode == 0:
        if state is not None:
            state["base_ok"] = sha
        return RebaseResult("rebased", base, sha)
    files = git.conflicted_files()
    git.rebase_abort()
    return RebaseResult("conflict", base, sha, (proc.stderr or proc.stdout).strip()[-500:], files)


def _base_branch(env: Env, agent: Agent) -> str:
    from exo_cli.ops.branches import base_branch

    return base_branch(env, agent, agent.branch)


REBASE_HERE = "rebase-here:"  # the hook's action that asks the agent's side to rebase its clone onto a commit


def _clone_stop(env: Env, agent: Agent, state: dict[str, Any] | None, base: str, ref: str, *,
                turn: int | None) -> RebaseResult:
    """An agent's own clone at a stop: its work fetched into the repository and its branch fast-forwarded there
    (``checkout.sync``); when the parent branch moved ahead, the rebase is the agent side's (``agent-side``:
    the hook's answer carries ``rebase-here:<commit>``, and ``rebase_here`` runs it in the clone). exo never
    runs git in the clone. A tip the agent side was asked to rebase onto and still lacks is
    ``agent-side-failed``: the agent is told to do it itself."""
    from exo_cli.adapters.git import Git
    from exo_cli.ops import checkout

    synced = checkout.sync(env, agent)
    repo = Git(env.repo.root)
    sha = repo.rev(ref)
    head = synced.fetched.head if synced.fetched else None
    own = repo.rev(f"refs/heads/{agent.branch}") if agent.branch else None
    if own and head and synced.outcome in ("behind", "refused") and repo.has_commits_not_in(own, head):
        base, sha = str(agent.branch), own  # merged into in the repository: that reaches the clone first
    if not sha or not head:
        return RebaseResult("none", base, sha, detail=f"{base} does not exist" if not sha else "no HEAD")
    if not repo.has_commits_not_in(sha, head):
        if state is not None:
            state["base_ok"] = sha
        return RebaseResult("up-to-date", base, sha)
    if agent.branch and synced.fetched and synced.fetched.branches.get(agent.branch) != head:
        return RebaseResult("skipped", base, sha, "the clone is not on the agent's branch")
    if agent.branch and any(p.state == "merged" for p in env.store.prs(head=agent.branch)):
        return RebaseResult("skipped", base, sha, "its PR is merged")
    if state is not None and state.get("clone_rebase") == sha:
        return RebaseResult("agent-side-failed", base, sha, "the rebase in the clone did not happen")
    if state is not None:
        state["clone_rebase"] = sha
    from exo_cli.ops.checkpoints import before_change

    before_change(env, agent, "rebase", turn=turn)
    return RebaseResult("agent-side", base, sha)


def rebase_here(cwd: str, sha: str) -> str:
    """The agent's side of a clone's stop-hook rebase, in the agent's own process and clone: fetch from the
    repository (read-only to it), then rebase onto ``sha`` with the checks ``rebase_onto_base`` makes (never
    with uncommitted tracked changes or over an untracked or ignored file; a conflict is aborted). Its outcome."""
    from exo_cli.adapters.git import Git

    top = Git(cwd).toplevel()
    if not top or len(sha) not in (40, 64) or any(c not in "0123456789abcdef" for c in sha):
        return "none"
    git = Git(top)
    git.run(["fetch", "--quiet", "--no-tags", "origin"], check=False, timeout=120)
    if not git.rev(sha):
        return "none"
    if not git.has_commits_not_in(sha, "HEAD"):
        return "up-to-date"
    if git.tracked_changes(check=False):
        return "dirty"
    if git.in_the_way(sha):
        return "in-the-way"
    if git.rebase(sha).returncode == 0:
        return "rebased"
    git.rebase_abort()
    return "conflict"
