"""Crash safety of spawn: the per-agent spawn lock, stale records, cleanup and finishing.

Every spawn of agent ``X`` holds the flock ``<state>/locks/spawn-X.lock`` for its whole
duration. A record whose phase is not ``spawned`` (or ``pending``) and whose lock is free
belongs to an interrupted spawn (``is_stale``): a retry of the same spawn or ``exo doctor``
(``repair_interrupted``) finishes it when its agent already runs, else cleans exactly what
the record says exo created (``cleanup_partial``) and forgets it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exo_cli.adapters.files import locked
from exo_cli.adapters.git import Finished, Git
from exo_cli.adapters.rmtree import remove_tree
from exo_cli.errors import ExoError, StateError
from exo_cli.ops.spawn.call import PENDING, Call, finish
from exo_cli.ops.spawn.plan import common_from_spec, request_from_spec
from exo_cli.records import Agent

if TYPE_CHECKING:
    from exo_cli.env import Env
    from exo_cli.ops.spawn.plan import Request


@contextlib.contextmanager
def spawn_lock(env: Env, agent_id: str, *, blocking: bool = True) -> Iterator[bool]:
    """Hold the per-agent spawn lock; yields False (without holding it) when not blocking and busy."""
    folder = env.state_dir / "locks"
    folder.mkdir(mode=0o700, exist_ok=True)
    with locked(folder / f"spawn-{agent_id}.lock", blocking=blocking) as lock:
        yield lock.held


def spawn_in_progress(env: Env, agent_id: str) -> bool:
    """Whether some process is spawning ``agent_id`` right now (its spawn lock is held)."""
    with spawn_lock(env, agent_id, blocking=False) as got:
        return not got


def is_stale(env: Env, agent: Agent) -> bool:
    """Whether ``agent`` is the record of an interrupted spawn (incomplete and nobody spawning it)."""
    phase = agent.spec.get("phase")
    if phase in (None, "spawned", PENDING):
        return False
    return not spawn_in_progress(env, agent.id)


def cleanup_partial(env: Env, agent: Agent) -> list[str]:
    """Undo what an interrupted or failed spawn of ``agent`` created, as its record says; return notes.

    Stops and closes its window(s), replays the backend's undo records, removes the files exo
    copied, removes the worktree exo created (forced only when no agent ever ran in it and its
    branch is still at the recorded base commit: then every file in it is exo's), deletes the
    branch while it still points at that commit, and removes exo's agent folder. Raises
    StateError when the worktree cannot be removed safely (it is then left as it is).
    """
    notes = _close_windows(env, agent)
    notes += _undo_backend_files(agent)
    _remove_copied_files(agent.spec.get("created_files") or [], agent.worktree)
    if agent.spec.get("creates_worktree") and agent.worktree:
        notes += _remove_worktree_and_branch(env, agent)
    agent_dir = agent.spec.get("agent_dir")
    if agent_dir and Path(agent_dir).is_dir() and Path(agent_dir).parent == env.state_dir / "agents":
        with contextlib.suppress(OSError):
            remove_tree(agent_dir)
    return notes


def _close_windows(env: Env, agent: Agent) -> list[str]:
    """Stop and close the agent's window and its services' window (zellij closes its own)."""
    from exo_cli.adapters.mux import Location
    from exo_cli.ops import panes

    notes: list[str] = []
    for loc_dict in (agent.location, agent.spec.get("services_location") or {}):
        if loc_dict and loc_dict.get("mux"):
            loc = Location.from_dict(loc_dict)
            with contextlib.suppress(ExoError, OSError):
                mux = panes.mux_for(env, loc.mux) if loc.mux != "zellij" else None
                if mux is not None:
                    mux.kill(loc, grace=1.0)
                    mux.close(loc, force=True)
                    notes.append(f"closed {loc.name or loc.key}")
    return notes


def _undo_backend_files(agent: Agent) -> list[str]:
    """Replay the backend's undo records (files it wrote or changed outside exo's state)."""
    if not agent.undo:
        return []
    from exo_cli.adapters import agents as backends

    try:
        backends.cleanup(list(agent.undo))
        return ["backend files removed"]
    except Exception as exc:  # noqa: BLE001 - keep cleaning the rest
        return [f"backend cleanup: {exc}"]


def _remove_copied_files(paths: list[str], worktree: str | None) -> None:
    """Remove the files, links and folders exo copied into the worktree (never through a link the agent put
    among its folders: one outside the worktree is left alone)."""
    if not worktree:
        return
    for path in paths:
        with contextlib.suppress(OSError, ValueError):
            remove_tree(path, within=worktree)


def _remove_worktree_and_branch(env: Env, agent: Agent) -> list[str]:
    """Remove the worktree exo created and its branch while still at the base commit (see ``cleanup_partial``)."""
    notes: list[str] = []
    spec = agent.spec
    ran = spec.get("phase") in ("started", "spawned") or bool(agent.location)
    path = agent.worktree or ""
    branch = agent.branch
    base_commit = spec.get("base_commit")
    if spec.get("layout") == "clone":
        return notes + _remove_clone(env, agent, ran=ran)
    registered = env.worktrees.listing()
    entry = next((v for k, v in registered.items() if os.path.realpath(k) == os.path.realpath(path)), None)
    ours = entry is not None and entry.get("branch") == f"refs/heads/{branch}"
    if ours:
        head = Git(path).rev("HEAD") if os.path.isdir(path) else None
        force = not ran and head is not None and head == base_commit
        ok, why = env.worktrees.remove(path, force=force)
        if not ok:
            raise StateError(
                f"Could not remove the partial worktree {path}: {why}",
                hint=f"Look at it, then remove it yourself: git worktree remove {path}",
                path=path,
            )
        notes.append(f"removed worktree {path}")
    elif entry is None and os.path.isdir(path):
        with contextlib.suppress(OSError):
            os.rmdir(path)  # an empty folder left by a crash before git wrote anything
    env.worktrees.prune()
    if branch and base_commit and env.worktrees.delete_branch_if_at(branch, base_commit):
        notes.append(f"deleted branch {branch}")
    return notes


def _remove_clone(env: Env, agent: Agent, *, ran: bool) -> list[str]:
    """An interrupted spawn's own clone: removed (with ``refs/exo/clones/<id>/``) while no agent ever ran in it,
    else left for ``exo complete``; its branch deleted while it still points at the base commit."""
    from exo_cli.adapters import clones

    path, notes = agent.worktree or "", []
    if os.path.lexists(path):
        if ran:
            raise StateError(f"Could not remove the partial clone {path}: its agent already ran in it",
                             hint=f"Look at it, then `exo complete {agent.id}` (it keeps any work).", path=path)
        ok, why = env.worktrees.remove_clone(path, agent.id)
        if not ok:
            raise StateError(f"Could not remove the partial clone {path}: {why}", path=path,
                             hint="Look at it, then remove it yourself.")
        notes.append(f"removed clone {path}")
    else:
        env.worktrees.locked(lambda: _dropped(env, agent.id, clones))
    base_commit = agent.spec.get("base_commit")
    if agent.branch and base_commit and env.worktrees.delete_branch_if_at(agent.branch, base_commit):
        notes.append(f"deleted branch {agent.branch}")
    return notes


def _dropped(env: Env, agent_id: str, clones: Any) -> Finished:
    clones.drop_refs(env.git, agent_id)
    return Finished([], 0, "", "")


def resume_started(call: Call, req: Request, existing: Agent) -> Agent | None:
    """Finish a spawn that was interrupted after its agent started, if the agent still runs."""
    from exo_cli.ops import panes

    loc = panes.location(existing)
    if existing.spec.get("phase") != "started" or loc is None:
        return None
    try:
        alive = panes.mux_for(call.env, loc.mux).alive(loc)
    except (ExoError, OSError):
        return None
    if not alive:
        return None
    call.warn(f"{existing.id}: finished an interrupted earlier spawn (its agent was already running)")
    return finish(call.env, req, existing, dict(existing.spec))


def finish_interrupted(env: Env, agent: Agent) -> bool:
    """Complete an interrupted spawn whose agent already runs; False when it does not."""
    return resume_started(Call(env, common_from_spec(agent.spec)), request_from_spec(agent.spec), agent) is not None


def repair_interrupted(env: Env, agent: Agent) -> bool:
    """Finish an interrupted spawn if its agent runs, else clean it up and forget it; False if busy.

    False when another process holds the agent's spawn lock (it is spawning it right now).
    Raises StateError (from ``cleanup_partial``) when its worktree cannot be removed safely.
    """
    with spawn_lock(env, agent.id, blocking=False) as got:
        if not got:
            return False
        if finish_interrupted(env, agent):
            return True  # its agent already runs: finish the spawn rather than undo it
        cleanup_partial(env, agent)
        env.store.delete_agent(agent.id)
        return True
