"""``exo complete``: close the task, stop the agent, and clean up without ever losing work.

The worktree is removed and the branch deleted only when nothing would be lost: no
uncommitted or untracked files, no commit whose content is missing from the base (a
squash-merged branch counts as merged: tree and patch-id comparison, or the forge's
merged state for the very commit that was merged), no other process working inside the
worktree, and the branch not checked out elsewhere. ``--force`` first keeps a copy of
everything (``refs/exo/archive/<branch>`` and a stash-shaped commit of the uncommitted
work, untracked files included, at ``refs/exo/archive/<branch>-wip``) and says how to
restore it. exo never retries a refused ``git worktree remove`` with ``--force``.
"""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from exo_cli.adapters.git import Git
from exo_cli.errors import NotFound, StateError
from exo_cli.records import DONE, ROOT, Agent
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.env import Env

ARCHIVE = "refs/exo/archive/"


@dataclass(frozen=True)
class CompleteResult:
    """What ``exo complete`` closed, stopped, removed and archived."""

    agent: str | None
    bead: str | None
    bead_closed: bool
    stopped: bool  # the agent's process was alive and was stopped
    status: str | None
    worktree: str | None
    branch: str | None
    removal: str  # removed | deferred | kept | none
    worktree_removed: bool
    branch_deleted: bool
    archived: dict[str, str] = field(default_factory=dict)  # ref -> sha
    restore: list[str] = field(default_factory=list)
    undone: int = 0
    warnings: list[str] = field(default_factory=list)


# -- finding the target ------------------------------------------------------------------------
def _resolve(env: Env, target: str | None) -> tuple[Agent | None, str | None]:
    """The agent (and bead) ``target`` names: agent id, agent name, or bead id."""
    if target is None:
        agent = env.caller_agent()
        if agent is None:
            raise StateError("Name the bead or agent to complete", hint="exo complete AGENT (see `exo agents`).")
        return agent, agent.bead
    agents = [a for a in env.store.agents() if a.id != ROOT] if env.has_state() else []
    for attr in ("id", "name", "bead"):  # an agent id first, then a name, then a bead
        hits = [a for a in agents if getattr(a, attr) == target]
        if hits:
            live = [a for a in hits if a.live] or hits
            agent = max(live, key=lambda a: a.created_at)
            return agent, agent.bead
    if _beads(env) is not None:
        return None, target
    raise NotFound(f"No agent or bead named {target!r}", hint="List agents with `exo agents`.", target=target)


def _beads(env: Env) -> Any:
    from exo_cli.adapters import beads

    try:
        return beads.open_beads(env.repo.root, env=env.environ)
    except Exception:  # no beads in this repository
        return None


def _close_bead(env: Env, bead: str, agent: Agent | None) -> tuple[bool, str | None]:
    try:
        from exo_cli.ops import tasks

        tasks.close(env, bead, reason="completed", session=agent.session_id if agent else None)
        return True, None
    except ImportError:
        pass
    except Exception as exc:
        return False, f"bead {bead} not closed: {exc}"
    source = _beads(env)
    if source is None:
        return False, f"bead {bead} not closed: no beads tracker in this repository"
    try:
        source.close(bead, "completed", agent.session_id if agent else None)
    except Exception as exc:
        return False, f"bead {bead} not closed: {exc}"
    return True, None


def _check_permission(env: Env, agent: Agent) -> None:
    caller = env.caller
    if caller.is_human or caller.agent_id == agent.id:
        return
    # a TL may complete its descendants
    seen: set[str] = set()
    cur: Agent | None = agent
    while cur is not None and cur.parent and cur.id not in seen:
        seen.add(cur.id)
        if cur.parent == caller.agent_id and env.role == "tl":
            return
        cur = env.store.agent(cur.parent)
    raise StateError(f"{caller.agent_id} cannot complete {agent.name}: it is not one of its children",
                     hint="Complete your own task, or ask its parent.", agent=agent.id, caller=caller.agent_id)


# -- what would be lost --------------------------------------------------------------------------
def _base_of(env: Env, agent: Agent) -> str | None:
    """The branch the agent's work is compared with (``branches.base_branch``), or None."""
    from exo_cli.ops.branches import base_branch

    try:
        return base_branch(env, agent, agent.branch)
    except StateError:
        return None


def unmerged_commits(env: Env, branch: str, base: str | None) -> list[str]:
    """Commits of ``branch`` whose content is in neither its base nor the remote's base ('sha subject')."""
    git = Git(env.repo.root)
    sha = git.rev(f"refs/heads/{branch}")
    if not sha:
        return []
    for pr in env.store.prs(head=branch, state="merged") if env.has_state() else []:
        if pr.data.get("head_sha") == sha:
            return []  # the forge merged exactly this commit
    bases = []
    if base:
        bases.append(f"refs/heads/{base}")
        remote = env.config.get("forge.remote")
        bases.append(f"refs/remotes/{remote}/{base}")
    bases = [b for b in bases if git.ref_exists(b)]
    if not bases:
        return [f"{sha[:12]} (no base branch {base!r} to compare with)"]
    for b in bases:
        if git.merged_by_content(sha, b):
            return []
    return git.log(f"{bases[0]}..{sha}", "%h %s")


def unpushed_commits(env: Env, branch: str) -> list[str]:
    """Commits of ``branch`` its upstream lacks (empty without an upstream)."""
    git = Git(env.repo.root)
    up = git.upstream(branch)
    if up is None:
        return []
    return git.log(f"{up}..refs/heads/{branch}", "%h %s")


def _own_pids() -> set[int]:
    from exo_cli.adapters.proc import ancestors

    return set(ancestors(os.getpid()))


def _agent_groups(agent: Agent) -> set[int]:
    loc = agent.location or {}
    return {v for v in (loc.get("pid"), loc.get("pgid")) if isinstance(v, int) and v > 1}


def _foreign_processes(agent: Agent, worktree: str, *, settle: float = 3.0) -> list[dict[str, Any]]:
    """Processes inside the worktree other than exo itself; the stopped agent's own get time to exit."""
    from exo_cli.adapters.proc import processes_inside

    groups = _agent_groups(agent)
    deadline = time.monotonic() + settle
    while True:
        found = processes_inside(worktree, exclude=_own_pids())
        agents_own = [p for p in found if p["pgid"] in groups or p["sid"] in groups]
        if not agents_own or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def assess(env: Env, agent: Agent) -> dict[str, list[Any]]:
    """What removing the agent's worktree and branch would lose or disturb, by kind."""
    losses: dict[str, list[Any]] = {}
    wt = agent.worktree
    if wt and os.path.isdir(wt):
        changes = Git(wt).status_porcelain()
        untracked = [c[3:] for c in changes if c.startswith("??")]
        modified = [c for c in changes if not c.startswith("??")]
        if modified:
            losses["uncommitted"] = modified
        if untracked:
            losses["untracked"] = untracked
    if agent.branch and _branch_created(agent):
        commits = unmerged_commits(env, agent.branch, _base_of(env, agent))
        if commits:
            losses["unmerged_commits"] = commits
            unpushed = unpushed_commits(env, agent.branch)
            if unpushed:
                losses["unpushed_commits"] = unpushed
    return losses


def blockers(env: Env, agent: Agent) -> dict[str, list[Any]]:
    """What stops removal even with --force: other processes inside, the branch checked out elsewhere."""
    out: dict[str, list[Any]] = {}
    wt = agent.worktree
    if wt and os.path.isdir(wt):
        procs = _foreign_processes(agent, wt)
        if procs:
            out["processes"] = procs
    if agent.branch:
        mine = os.path.realpath(wt) if wt else None
        elsewhere = [w.path for w in Git(env.repo.root).worktrees()
                     if w.branch == f"refs/heads/{agent.branch}" and os.path.realpath(w.path) != mine]
        if elsewhere:
            out["checked_out_elsewhere"] = elsewhere
    return out


def _worktree_created(agent: Agent) -> bool:
    return bool(agent.worktree) and bool(agent.spec.get("worktree_created", True))


def _branch_created(agent: Agent) -> bool:
    return bool(agent.branch) and bool(agent.spec.get("branch_created", agent.spec.get("worktree_created", True)))


# -- archiving -----------------------------------------------------------------------------------
def archive(env: Env, agent: Agent) -> tuple[dict[str, str], list[str]]:
    """Keep the branch and the uncommitted work under refs/exo/archive/; return refs and restore commands."""
    git = Git(env.repo.root)
    refs: dict[str, str] = {}
    branch = agent.branch
    wt = agent.worktree if agent.worktree and os.path.isdir(agent.worktree) else None
    restore: list[str] = []
    label = branch or agent.name
    if branch:
        sha = git.rev(f"refs/heads/{branch}")
        if sha:
            ref = git.keep_ref(ARCHIVE + branch, sha, reason="exo complete --force")
            refs[ref] = sha
            restore.append(f"git branch {shlex.quote(branch)} {shlex.quote(ref)}")
    if wt:
        wip = Git(wt).wip_commit("WIP archived by exo complete --force", label="exo archive")
        if branch:
            restore.append(f"git worktree add {shlex.quote(wt)} {shlex.quote(branch)}")
        if wip:
            ref = git.keep_ref(ARCHIVE + label + "-wip", wip, reason="exo complete --force (uncommitted work)")
            refs[ref] = wip
            restore.append(f"git -C {shlex.quote(wt)} stash apply --index {shlex.quote(ref)}")
    return refs, restore


# -- the operation ---------------------------------------------------------------------------------
def _undo(env: Env, agent: Agent) -> tuple[int, str | None]:
    if not agent.undo:
        return 0, None
    try:
        from exo_cli.adapters.agents import cleanup
    except ImportError:
        return 0, "the backends module is missing; undo records kept"
    try:
        cleanup(list(agent.undo))
    except Exception as exc:
        return 0, f"undo failed: {exc}"
    env.store.update_agent(agent.id, undo=[])
    return len(agent.undo), None


def _describe(losses: dict[str, list[Any]]) -> str:
    parts = []
    for kind, items in losses.items():
        shown = [i["command"] or str(i["pid"]) if isinstance(i, dict) else str(i) for i in items[:5]]
        more = f" and {len(items) - 5} more" if len(items) > 5 else ""
        parts.append(f"{kind.replace('_', ' ')}: {', '.join(shown)}{more}")
    return "; ".join(parts)


@op(
    "complete",
    cli="complete",
    tools=["exo_complete"],
    roles=("tl", "dev"),
    destructive=True,
    help={
        "target": "Bead id, agent id or agent name (default: your own task).",
        "force": "Remove even with unsaved or unmerged work, after archiving it under refs/exo/archive/.",
    },
)
def complete(env: Env, *, target: str | None = None, force: bool = False) -> CompleteResult:
    """Close the bead, stop the agent, and remove its worktree and branch if nothing would be lost.

    Refuses (StateError listing what would be lost) on uncommitted or untracked files or
    commits whose content is not in the base branch (a squash merge counts as merged), and
    always when another process works inside the worktree or the branch is checked out
    elsewhere. ``--force`` first archives the branch and the uncommitted work under
    ``refs/exo/archive/`` and prints how to restore them. An agent completing its own task
    is marked done; its worktree is removed later by its parent.
    """
    agent, bead = _resolve(env, target)
    warnings: list[str] = []
    if agent is None:  # a bead with no agent
        closed, warn = _close_bead(env, bead or "", None)
        return CompleteResult(agent=None, bead=bead, bead_closed=closed, stopped=False, status=None, worktree=None,
                              branch=None, removal="none", worktree_removed=False, branch_deleted=False,
                              warnings=[warn] if warn else [])
    _check_permission(env, agent)
    base: dict[str, Any] = dict(agent=agent.id, bead=bead, worktree=agent.worktree, branch=agent.branch)
    self_complete = env.caller.agent_id == agent.id and env.caller.via in ("ancestry", "env")
    if self_complete:
        closed, warn = _close_bead(env, bead, agent) if bead else (False, None)
        env.store.update_agent(agent.id, status=DONE, status_reason="completed by itself; removal deferred",
                               completed_at=time.time())
        env.store.event("completed", agent.id, {"removal": "deferred"})
        if agent.parent:
            env.store.post("completed", agent.id, agent.parent, f"{agent.name} completed its task.",
                           data={"agent": agent.id, "bead": bead, "removal": "deferred"})
        return CompleteResult(**base, bead_closed=closed, stopped=False, status=DONE, removal="deferred",
                              worktree_removed=False, branch_deleted=False, warnings=[warn] if warn else [])

    from exo_cli.ops import agentctl

    stopped = False
    if agent.status != DONE or agentctl.location(agent) is not None:
        stopped = agentctl.stop_agent(env, agent, reason="completed", status=DONE)
    env.store.update_agent(agent.id, status=DONE, completed_at=agent.completed_at or time.time())
    agent = env.store.agent(agent.id) or agent
    undone, warn = _undo(env, agent)
    if warn:
        warnings.append(warn)
    agent = env.store.agent(agent.id) or agent

    removable = _worktree_created(agent) and agent.worktree and os.path.isdir(agent.worktree)
    block = blockers(env, agent) if (removable or _branch_created(agent)) else {}
    losses = assess(env, agent) if (removable or _branch_created(agent)) else {}
    if block:
        raise StateError(
            f"Not removing {agent.name}'s worktree: {_describe(block)}",
            hint="Stop those processes (or leave that folder) and run `exo complete` again.",
            would_block=block, would_lose=losses, stopped=stopped, **base,
        )
    if losses and not force:
        raise StateError(
            f"Completing {agent.name} would lose work: {_describe(losses)}",
            hint="Commit and file a PR (exo pr file) and merge it, or run `exo complete --force` to archive "
            "everything under refs/exo/archive/ first.",
            would_lose=losses, stopped=stopped, **base,
        )
    closed, warn = _close_bead(env, bead, agent) if bead else (False, None)
    if warn:
        warnings.append(warn)
    archived: dict[str, str] = {}
    restore: list[str] = []
    if losses:
        archived, restore = archive(env, agent)
    git = Git(env.repo.root)
    wt_removed = branch_deleted = False
    if removable:
        proc = git.worktree_remove(str(agent.worktree), force=bool(force and losses))
        if proc.returncode != 0:
            from exo_cli.errors import external

            raise external("git worktree remove", proc,
                           hint="git refused to remove the worktree; exo does not retry with --force. "
                           "Look at it, then remove it yourself.", archived=archived, restore=restore)
        wt_removed = True
    if agent.branch and _branch_created(agent):
        sha = git.rev(f"refs/heads/{agent.branch}")
        if sha:
            # delete only the commit we checked (or archived): a compare-and-delete
            proc = git.delete_ref(f"refs/heads/{agent.branch}", sha)
            branch_deleted = proc.returncode == 0
            if not branch_deleted:
                warnings.append(f"branch {agent.branch} not deleted: {proc.stderr.strip()}")
    removal = "removed" if (wt_removed or branch_deleted) else "kept"
    env.store.event("completed", agent.id, {"removal": removal, "archived": archived})
    if agent.parent and env.caller.agent_id != agent.parent:
        env.store.post("completed", env.caller.agent_id, agent.parent, f"{agent.name} was completed ({removal}).",
                       data={"agent": agent.id, "bead": bead, "removal": removal})
    return CompleteResult(**base, bead_closed=closed, stopped=stopped, status=DONE, removal=removal,
                          worktree_removed=wt_removed, branch_deleted=branch_deleted, archived=archived,
                          restore=restore, undone=undone, warnings=warnings)


__all__ = ["CompleteResult", "archive", "assess", "blockers", "complete"]
