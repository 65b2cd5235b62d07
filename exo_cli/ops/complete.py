"""``exo complete``: close the task, stop the agent, and clean up without ever losing work.

The worktree is removed and the branch deleted only when nothing would be lost
(``adapters.keep.survey``: uncommitted, untracked and non-regenerable ignored files, nested
repositories, operations in progress, commits only the worktree's own state reaches; plus
the branch's commits whose content is missing from the base: a squash-merged branch counts
as merged, and so does a forge merge of the very commit while its result is still in the
base), no other process works inside the worktree, and the branch is not checked out
elsewhere.

The order keeps a refusal harmless: check (the agent still running), stop the agent, check
again. A refusal at the first check changes nothing; at the second, the agent is stopped but
stays resumable (``dead``, never ``done``: bead open, backend files, worktree, branch and
session kept). ``--force`` first archives everything (``adapters.keep.keep``) and says how
to restore it. exo never retries a refused ``git worktree remove`` with ``--force``. Every
step can be repeated: a complete killed midway is finished by the next one, and the restore
commands of an archive it made are kept in the agent's record until then.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from exo_cli import fault
from exo_cli.adapters import keep
from exo_cli.adapters.git import Finished, Git
from exo_cli.errors import EnvironmentError_, ExoError, NotFound, StateError, UsageError
from exo_cli.ops import remote as _remote  # noqa: F401 - routes on_host operations to their agent's host
from exo_cli.ops.keeprules import cleanup_policy, exo_owned
from exo_cli.records import DEAD, DONE, REMOVAL_DEFERRED, ROOT, Agent, in_subtree, pick_agent
from exo_cli.registry import op

if TYPE_CHECKING:
    from pathlib import Path

    from exo_cli.env import Env

ARCHIVE = keep.ARCHIVE_REFS


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
    archive_folder: str | None = None  # exo's private folder holding the kept files (mode 0700)
    kept_ignored: list[str] = field(default_factory=list)  # ignored files and folders copied there
    kept_nested: list[str] = field(default_factory=list)  # nested repositories copied (and bundled) there

    def outcome(self) -> str:
        """What happened, in words (the human view and the parent's message): never an internal value."""
        parts: list[str] = []
        if self.bead:
            parts.append(f"bead {self.bead} closed" if self.bead_closed else f"bead {self.bead} left open")
        if self.agent is None:
            parts.append("no agent worked on it")
        elif self.removal == "deferred":
            parts.append("marked done; its parent removes its worktree and branch once its session has ended")
        else:
            parts.append("agent stopped" if self.stopped else "agent was not running")
            if self.worktree:
                parts.append("worktree removed" if self.worktree_removed else "worktree kept")
            if self.branch:
                parts.append("branch deleted" if self.branch_deleted else "branch kept")
        return ", ".join(parts)


# -- finding the target ------------------------------------------------------------------------
def _resolve(env: Env, target: str | None) -> tuple[Agent | None, str | None]:
    """The agent (and bead) ``target`` names: agent id, agent name, or bead id."""
    if target is None:
        agent = env.caller_agent()
        if agent is None:
            # the human at the root has no task of its own: a missing argument, not a state
            raise UsageError("Name the bead or agent to complete", hint="exo complete AGENT (see `exo agents`).")
        return agent, agent.bead
    _check_target(target)
    agents = [a for a in env.store.agents() if a.id != ROOT and not a.retired] if env.has_state() else []
    agent = pick_agent(agents, target)  # an agent id first, then a name, then a bead
    if agent is not None:
        return agent, agent.bead
    if _beads(env) is not None:
        return None, target
    raise NotFound(f"No agent or bead named {target!r}", hint="List agents with `exo agents`.", target=target)


def _check_target(target: str) -> None:
    """InvalidInput (-32002) for a target that can name neither an agent nor a bead."""
    from exo_cli.errors import InvalidInput
    from exo_cli.validate import check_name

    try:
        check_name(target, "agent name")
    except InvalidInput:
        from exo_cli.adapters.beads import check_bead_id

        check_bead_id(target)


def _beads(env: Env) -> Any:
    from exo_cli.adapters import beads

    try:
        return beads.open_beads(env.repo.root, env=env.environ)
    except Exception:  # no beads in this repository
        return None


def _close_bead(env: Env, bead: str, agent: Agent | None) -> tuple[bool, str | None]:
    try:
        from exo_cli.ops import tasks

        source = tasks.open_repo_beads(env)
        tasks.close(env, bead, reason="completed", session=agent.session_id if agent else None, source=source)
        return True, "; ".join(tasks.uncommitted_notes(source)) or None
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
    if env.role == "tl" and in_subtree(env.store.agents(), caller.agent_id, agent.id):
        return  # a TL may complete its descendants
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
    """Commits of ``branch`` whose content is in neither its base nor the remote's base ('sha subject').

    A PR the forge merged counts only while its merge result is still in the base: a merge
    undone afterwards (a ``git rebase --abort`` of a checkout of the base, a reset) leaves the
    branch's commits unmerged again.
    """
    git = Git(env.repo.root)
    sha = git.rev(f"refs/heads/{branch}")
    if not sha:
        return []
    bases = []
    if base:
        bases.append(f"refs/heads/{base}")
        remote = env.config.get("forge.remote")
        bases.append(f"refs/remotes/{remote}/{base}")
    bases = [b for b in bases if git.ref_exists(b)]
    if not bases:
        return [f"{sha[:12]} (no base branch {base!r} to compare with)"]
    for pr in env.store.prs(head=branch, state="merged") if env.has_state() else []:
        if pr.data.get("head_sha") == sha and pr.merge_commit and any(git.is_ancestor(pr.merge_commit, b)
                                                                      for b in bases):
            return []  # the forge merged exactly this commit, and its result is still in the base
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


def _own_pids(env: Env) -> set[int]:
    """This process and its ancestors, and the caller's (in the broker: the agent's relay and its own)."""
    from exo_cli.adapters.proc import ancestors

    return set(ancestors(os.getpid())) | set(ancestors(env.pid))


def _locations(agent: Agent) -> list[dict[str, Any]]:
    """Where the agent runs, and its services (a window, or Zellij side panes)."""
    return [agent.location or {}, agent.spec.get("services_location") or {},
            *(d for d in agent.spec.get("services_locations") or [] if isinstance(d, dict))]


def _agent_groups(agent: Agent) -> set[int]:
    """The process groups exo started for the agent: its own and its services'."""
    out: set[int] = set()
    for loc in _locations(agent):
        out |= {v for v in (loc.get("pid"), loc.get("pgid")) if isinstance(v, int) and v > 1}
    return out


def _processes(env: Env, agent: Agent, worktree: str, *, settle: float) -> list[dict[str, Any]]:
    """Processes inside the worktree but exo (its git, e.g. the broker's checkpoint, gets 10 s to end); the agent's
    own are not counted with ``settle`` 0 (it may run), else they get ``settle`` seconds to exit, then count."""
    from exo_cli.adapters.proc import ancestors, exo_git, processes_inside

    groups = _agent_groups(agent)
    deadline, passing = time.monotonic() + settle, time.monotonic() + 10.0
    while True:
        found = processes_inside(worktree, exclude=_own_pids(env))
        agents_own = [p for p in found if {p["pgid"], p["sid"], *ancestors(p["pid"])} & groups]  # or below (a sandbox)
        others = [p for p in found if p not in agents_own]
        if others and all(exo_git(p) for p in others) and time.monotonic() < passing:
            pass  # exo's own git: it ends by itself
        elif not settle:
            return others
        elif not agents_own or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def survey(env: Env, agent: Agent) -> keep.Inventory | None:
    """What removing the agent's worktree would lose (None: exo did not create it, or it is gone)."""
    wt = agent.worktree
    if not (made_worktree(agent) and wt and os.path.isdir(wt)):
        return None
    regenerable, limit = cleanup_policy(env)
    from exo_cli.ops import checkout

    with checkout.reading(env, agent, fetch=True) as (here, fetched):  # a clone: its work fetched first
        clone = checkout.clone_state(env, agent, fetched, here) if checkout.is_clone(agent) else None
        inv = keep.survey(wt, main=Git(env.repo.root), regenerable=regenerable, owned=exo_owned(env, agent),
                          limit=limit, clone=clone)
    from exo_cli.ops import tasks

    synced = set(tasks.synced_tracker_files(env, agent.id, wt))  # exo reconstitute's copy: not the agent's work
    inv.uncommitted = [u for u in inv.uncommitted if u[3:] not in synced]
    return inv


def assess(env: Env, agent: Agent, inventory: keep.Inventory | None = None) -> dict[str, list[Any]]:
    """What removing the agent's worktree and branch would lose, by kind (``would_lose``)."""
    losses: dict[str, list[Any]] = {}
    inv = inventory if inventory is not None else survey(env, agent)
    if inv is not None:
        losses.update(inv.losses())
    if agent.branch and made_branch(agent):
        commits = unmerged_commits(env, agent.branch, _base_of(env, agent))
        if commits:
            losses["unmerged_commits"] = commits
            unpushed = unpushed_commits(env, agent.branch)
            if unpushed:
                losses["unpushed_commits"] = unpushed
    return losses


def blockers(env: Env, agent: Agent, *, settle: float = 3.0) -> dict[str, list[Any]]:
    """What stops removal even with --force: other processes inside, the branch checked out elsewhere."""
    out: dict[str, list[Any]] = {}
    wt = agent.worktree
    if wt and os.path.isdir(wt) and made_worktree(agent):
        procs = _processes(env, agent, wt, settle=settle)
        if procs:
            out["processes"] = procs
    if agent.branch and made_branch(agent):
        mine = os.path.realpath(wt) if wt else None
        elsewhere = [w.path for w in Git(env.repo.root).worktrees()
                     if w.branch == f"refs/heads/{agent.branch}" and os.path.realpath(w.path) != mine]
        if elsewhere:
            out["checked_out_elsewhere"] = elsewhere
    return out


def remove_checkout(env: Env, agent: Agent, *, force: bool) -> tuple[bool, str]:
    """Remove the agent's worktree (``git worktree remove``) or its own clone (with exo's refs and folder for it)."""
    from exo_cli.ops import checkout

    if checkout.is_clone(agent):
        ok, why = env.worktrees.remove_clone(str(agent.worktree), agent.id)
        if ok:
            checkout.forget(env, agent)
        return ok, why
    return env.worktrees.remove(str(agent.worktree), force=force)


def made_worktree(agent: Agent) -> bool:
    """Whether exo made the agent's worktree (not ``--no-worktree``, not someone else's folder)."""
    return bool(agent.worktree) and bool(agent.spec.get("worktree_created", True))


def made_branch(agent: Agent) -> bool:
    """Whether exo made the agent's branch."""
    return bool(agent.branch) and bool(agent.spec.get("branch_created", agent.spec.get("worktree_created", True)))


class Check(NamedTuple):
    """One look at what removal would lose or disturb."""

    inventory: keep.Inventory | None
    losses: dict[str, list[Any]]
    block: dict[str, list[Any]]


def _check(env: Env, agent: Agent, *, settle: float) -> Check:
    inv = survey(env, agent)
    return Check(inv, assess(env, agent, inv), blockers(env, agent, settle=settle))


def _refusal(agent: Agent, check: Check, *, force: bool, stopped: bool, running: bool,
             base: dict[str, Any]) -> StateError | None:
    """The StateError a check calls for (None: go ahead)."""
    status = agent.status
    if stopped and agent.status == DONE:  # it completed its own task earlier: done it stays
        after = (f" exo stopped {agent.name} to check again; it stays done (it completed its own task), and its "
                 "worktree and branch are kept.")
    elif stopped:
        status = DEAD
        after = (f" exo stopped {agent.name} to check again: it is stopped (dead), not done, and stays resumable; "
                 "its bead, worktree, branch and session are kept.")
    else:
        after = " Nothing was changed" + (f" ({agent.name} is still running)." if running else ".")
    data = dict(would_lose=check.losses, stopped=stopped, status=status, **base)
    if check.block:
        return StateError(f"Not removing {agent.name}'s worktree: {_describe(check.block)}.{after}",
                          hint="Stop those processes (or leave that folder) and run `exo complete` again.",
                          would_block=check.block, **data)
    if check.losses and not force:
        return StateError(
            f"Completing {agent.name} would lose work: {_describe(check.losses)}.{after}",
            hint="Commit and file a PR (exo pr file) and merge it, or run `exo complete --force` to archive "
            "everything first (refs under refs/exo/archive/, files in exo's private state folder).",
            **data,
        )
    inv = check.inventory
    if force and inv is not None and inv.too_big:
        err = keep.too_big_error(inv)
        err.message += after
        err.data.update(data)
        return err
    return None


# -- archiving -----------------------------------------------------------------------------------
def archive(env: Env, agent: Agent, inventory: keep.Inventory | None = None, *, root: Path | None = None,
            command: str = "exo complete --force") -> keep.Kept:
    """Keep the branch and everything ``inventory`` lists (``keep.keep``, its files under ``root``: by default
    exo's state folder); the refs, folder and restore commands."""
    inv = inventory if inventory is not None else survey(env, agent)
    if inv is None:
        inv = keep.Inventory(worktree=agent.worktree or "")
    branch = agent.branch if made_branch(agent) else None
    from exo_cli.ops import checkout

    try:
        with checkout.reading(env, agent) as (here, _synced):
            kept = keep.keep(inv, main=Git(env.repo.root), archive_root=root or env.state_dir / "archive",
                             label=agent.branch or agent.name, branch=branch, reason=command, here=here)
            checkout.keep_objects(env, agent, kept.refs.values())  # a clone's staged files: in the repository
            return kept
    except OSError as exc:  # an unreadable file, a full disk: nothing is removed without its copy
        raise StateError(f"Could not archive {agent.name}'s work, so nothing was removed: {exc}",
                         hint=f"Fix what stopped the copy (permissions, disk space), then run `{command}` "
                         "again.", agent=agent.id, worktree=agent.worktree, reason="archive-failed") from exc


def _restore_of(agent: Agent, kept: keep.Kept | None, worktree_kept: bool) -> tuple[dict[str, str], list[str], str | None]:
    """The archive to report: this run's, or (after a complete killed midway) the earlier one's plus this one's."""
    earlier = agent.spec.get("archive") or {}
    if kept is not None and (worktree_kept or not earlier):
        return kept.refs, kept.restore, kept.folder
    refs = dict(earlier.get("refs") or {})
    restore = list(earlier.get("restore") or [])
    if kept is not None:
        refs.update(kept.refs)
        restore += [c for c in kept.restore if c not in restore]
    return refs, restore, earlier.get("folder") or (kept.folder if kept else None)


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


def _running(env: Env, agent: Agent) -> bool:
    """Whether the agent's process (or its services') still runs."""
    from exo_cli.adapters.mux import Location
    from exo_cli.ops import agentctl

    for loc_dict in _locations(agent):
        if loc_dict.get("mux"):
            with contextlib.suppress(ExoError, OSError):
                loc = Location.from_dict(loc_dict)
                if agentctl.mux_for(env, loc.mux).alive(loc):
                    return True
    return False


def _stop(env: Env, agent: Agent) -> bool:
    """Stop the agent and its services (status ``dead`` unless it is ``done``); whether it was running."""
    from exo_cli.adapters.mux import Location
    from exo_cli.ops import agentctl

    svc = agent.spec.get("services_location") or {}
    if svc.get("mux"):
        with contextlib.suppress(ExoError, OSError):
            loc = Location.from_dict(svc)
            agentctl.mux_for(env, loc.mux).kill(loc, grace=2.0)
    return agentctl.stop_agent(env, agent, reason="completing", status=DEAD)


@contextlib.contextmanager
def _complete_lock(env: Env, agent_id: str) -> Iterator[None]:
    """One ``exo complete`` of an agent at a time (a second waits, then finds the work done)."""
    from exo_cli.adapters.files import state_lock

    with state_lock(env.state_dir, f"complete-{agent_id}"):
        yield


@op(
    "complete",
    cli="complete",
    tools=["exo_complete"],
    roles=("tl", "dev"),
    destructive=True,
    on_host="target",
    help={
        "target": "Bead id, agent id or agent name (default: your own task).",
        "force": "Remove even with unsaved or unmerged work, after archiving it (refs under refs/exo/archive/, "
        "files in exo's private state folder).",
    },
)
def complete(env: Env, *, target: str | None = None, force: bool = False) -> CompleteResult:
    """Close the bead, stop the agent, and remove its worktree and branch if nothing would be lost.

    Refuses, listing what would be lost, on uncommitted, untracked or ignored files
    (bar regenerable ones), nested repositories, an operation in progress, commits off the
    branch, or branch commits whose content is not in the base (a squash merge counts as
    merged); and always when another process works inside the worktree or the branch is
    checked out elsewhere. It checks before stopping the agent and again after: a refusal
    leaves the agent running, or stopped but resumable (dead, not done). {--force} first
    archives everything and prints how to restore it. An agent completing its own task is
    marked done; its worktree is removed later by its parent.
    """
    agent, bead = _resolve(env, target)
    if agent is None:  # a bead with no agent
        closed, warn = _close_bead(env, bead or "", None)
        return CompleteResult(agent=None, bead=bead, bead_closed=closed, stopped=False, status=None, worktree=None,
                              branch=None, removal="none", worktree_removed=False, branch_deleted=False,
                              warnings=[warn] if warn else [])
    _check_permission(env, agent)
    base: dict[str, Any] = dict(agent=agent.id, bead=bead, worktree=agent.worktree, branch=agent.branch)
    self_complete = env.caller.agent_id == agent.id and env.caller.via in ("ancestry", "env", "socket")
    if self_complete:
        closed, warn = _close_bead(env, bead, agent) if bead else (False, None)
        env.store.update_agent(agent.id, status=DONE, status_reason=REMOVAL_DEFERRED,
                               completed_at=time.time())
        env.store.event("completed", agent.id, {"removal": "deferred"})
        if agent.parent:
            env.store.post("completed", agent.id, agent.parent, f"{agent.name} completed its task.",
                           data={"agent": agent.id, "bead": bead, "removal": "deferred"})
        return CompleteResult(**base, bead_closed=closed, stopped=False, status=DONE, removal="deferred",
                              worktree_removed=False, branch_deleted=False, warnings=[warn] if warn else [])
    with _complete_lock(env, agent.id):
        agent = env.store.agent(agent.id) or agent  # another complete may have finished meanwhile
        if agent.spec.get("base_ref"):  # its parent works on another host: see its merges as the remote has them
            from exo_cli.ops.hostgit import fetch_base

            fetch_base(env, agent)
        return _complete(env, agent, bead, force=force, base=base)


def _go_on(env: Env, agent: Agent, *, stopped: bool) -> None:
    """Stop here, before anything is removed, when the caller went away (``cancel``: another host's exo
    whose connection was cut); the agent stays resumable (stopped: dead, never done)."""
    from exo_cli import cancel

    if not cancel.cancelled():
        return
    why = "the call was cancelled (its caller went away) before anything was removed"
    if stopped:
        env.store.update_agent(agent.id, status_reason=f"stopped by exo complete; {why}; resumable")
    raise EnvironmentError_(f"Not completing {agent.name}: {why}", hint="Run `exo complete` again.",
                            agent=agent.id, reason="cancelled", stopped=stopped)


def _complete(env: Env, agent: Agent, bead: str | None, *, force: bool, base: dict[str, Any]) -> CompleteResult:
    warnings: list[str] = []
    from exo_cli.ops.mergequeue import author_queued

    queued = [] if force else author_queued(env, agent.id)
    if queued:  # its branch is what the queue tests and lands: removing it now loses the answer to a bounce
        raise StateError(f"Not completing {agent.name}: its PR(s) {', '.join(f'#{n}' for n in queued)} wait in the "
                         "merge queue", hint="Wait until they land or bounce (exo pr queue), or use --force.",
                         agent=agent.id, prs=queued, reason="queued")
    running = _running(env, agent)
    # 1. Check while the agent may still run: a refusal here changes nothing.
    check = _check(env, agent, settle=0 if running else 3.0)
    refusal = _refusal(agent, check, force=force, stopped=False, running=running, base=base)
    if refusal is not None:
        raise refusal
    fault.point("complete.checked", env.environ)
    _go_on(env, agent, stopped=False)
    # 2. Stop it (its services too), then 3. check again: it may have written something on its way out.
    stopped = False
    if running:
        stopped = _stop(env, agent)
        agent = env.store.agent(agent.id) or agent
        fault.point("complete.stopped", env.environ)
        check = _check(env, agent, settle=3.0)
        refusal = _refusal(agent, check, force=force, stopped=True, running=False, base=base)
        if refusal is not None:
            reason = "stopped by exo complete, which refused: " + refusal.message[:300]
            env.store.update_agent(agent.id, status_reason=reason)
            if agent.status == DEAD:  # stopped, not done: it needs someone now, as any agent that died
                from exo_cli.ops import agentctl

                agentctl.died(env, agent, reason)
            raise refusal
        _go_on(env, agent, stopped=True)
    # 4. Checkpoint the checkout one last time, and archive what would be lost.
    from exo_cli.ops import checkpoints

    if check.inventory is not None:
        warnings += [w for w in [checkpoints.before_change(env, agent, "complete")] if w]
    kept: keep.Kept | None = None
    if check.losses:
        kept = archive(env, agent, check.inventory)
        env.store.update_agent(agent.id, spec={**agent.spec, "archive": keep.describe_kept(kept)})
        warnings += kept.notes
        fault.point("complete.archived", env.environ)
    _go_on(env, agent, stopped=stopped)  # the last look: from here on it finishes (each step repeatable)
    refs, restore, folder = _restore_of(agent, kept, check.inventory is not None)
    if force:  # its checkpoints go with the archive, where retention never reaches
        try:
            moved = checkpoints.archive_with(env, agent)
        except (ExoError, OSError) as exc:
            moved = []
            warnings.append(f"its checkpoints stay under refs/exo/checkpoints/ (not archived: {exc})")
        if moved:
            warnings.append(f"its {len(moved)} checkpoint(s) are kept under refs/exo/archive/checkpoints/ "
                            f"(exo checkpoints {agent.id})")
    # 5. Undo what the backend wrote, remove the worktree, delete the branch (each step repeatable).
    undone, warn = _undo(env, agent)
    if warn:
        warnings.append(warn)
    git = Git(env.repo.root)
    wt_removed = branch_deleted = False
    if check.inventory is not None:
        from exo_cli.ops import tasks

        tasks.restore_synced_tracker(env, agent.id, str(agent.worktree))  # exo's own copy goes back first
        # forced only once its content is archived (git refuses nested repositories and dirty files otherwise)
        ok, why = remove_checkout(env, agent, force=bool(check.inventory.losses()))
        if not ok:
            from exo_cli.errors import external

            raise external("git worktree remove", Finished(["git", "worktree", "remove"], 1, "", why),
                           hint="git refused to remove the worktree; exo does not retry with --force. "
                           "Look at it, then remove it yourself.", archived=refs, restore=restore)
        wt_removed = True
        fault.point("complete.removed", env.environ)
    if agent.branch and made_branch(agent):
        sha = git.rev(f"refs/heads/{agent.branch}")
        if sha:
            # delete only the commit we checked (or archived): a compare-and-delete
            proc = git.delete_ref(f"refs/heads/{agent.branch}", sha)
            branch_deleted = proc.returncode == 0
            if not branch_deleted:
                warnings.append(f"branch {agent.branch} not deleted: {proc.stderr.strip()}")
            elif agent.spec.get("base_ref"):  # it went to the shared remote for a parent on another host
                from exo_cli.ops.hostgit import unpush

                warnings += unpush(env, agent, sha)
    # 6. Close the bead and mark the agent done.
    closed, warn = _close_bead(env, bead, agent) if bead else (False, None)
    if warn:
        warnings.append(warn)
    env.store.update_agent(agent.id, status=DONE, status_reason="completed",
                           completed_at=agent.completed_at or time.time())
    removal = "removed" if (wt_removed or branch_deleted) else "kept"
    from exo_cli.ops import agentctl

    agentctl.close_windows(env, agent)  # nothing of it is left running or on screen
    from exo_cli.ops.lifecycle import release_runtime

    release_runtime(env)  # the last agent gone: its runtime folder too
    env.store.event("completed", agent.id, {"removal": removal, "archived": refs})
    result = CompleteResult(**base, bead_closed=closed, stopped=stopped, status=DONE, removal=removal,
                            worktree_removed=wt_removed, branch_deleted=branch_deleted, archived=refs,
                            restore=restore, undone=undone, warnings=warnings, archive_folder=folder,
                            kept_ignored=list(kept.ignored) if kept else [],
                            kept_nested=list(kept.nested) if kept else [])
    if agent.parent and env.caller.agent_id != agent.parent:
        # from the agent it is about (as when it completes itself), not the caller: the caller's row
        # on the board must not show "w1 was completed" as its own last message
        env.store.post("completed", agent.id, agent.parent,
                       f"{agent.name} was completed by {env.caller.agent_id}: {result.outcome()}.",
                       data={"agent": agent.id, "bead": bead, "removal": removal})
    return result


__all__ = ["CompleteResult", "archive", "assess", "blockers", "complete", "exo_owned", "made_branch", "made_worktree",
           "remove_checkout", "survey", "unmerged_commits"]
