"""``exo doctor``'s checks of agents' own clones (``layout = "clone"``): orphan clones and the refs kept for them.

- ``orphan_clones``: a clone in exo's worktree root that no agent record names. Removed when exo
  made it, no process works in it and nothing in it would be lost (read as hostile, as
  ``complete`` reads a clone: its work fetched into ``refs/exo/clones/<name>/`` first, then
  surveyed through exo's own git folder); otherwise reported and left alone.
- ``stale_clone_refs``: ``refs/exo/clones/<id>/`` of an agent whose clone is gone (no record, or
  its folder removed): deleted, so gc can take what nothing else keeps.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from exo_cli.adapters import clones, keep
from exo_cli.errors import ExoError, StateError
from exo_cli.records import DONE, Agent

if TYPE_CHECKING:
    from pathlib import Path

    from exo_cli.env import Env

# (kind, subject, detail, action, repair): ``doctor.Finding``'s fields (doctor makes them into one)
Row = tuple[str, str, str, str, "Callable[[], bool] | None"]


def _finding(kind: str, subject: str, detail: str, action: str, repair: Callable[[], bool] | None = None) -> Row:
    return kind, subject, detail, action, repair


def clone_folders(env: Env, claimed: set[str]) -> list[Path]:
    """The clones in exo's worktree root that no agent record names (``claimed``: the real paths records name)."""
    root = env.worktree_root
    if not root.is_dir():
        return []
    return [p for p in sorted(root.iterdir()) if os.path.realpath(p) not in claimed and clones.is_clone(p)]


def clone_checkouts(env: Env, claimed: set[str]) -> dict[str, dict[str, str]]:
    """The unclaimed clones as ``git worktree list`` shows a worktree: path -> {branch, layout} (their HEAD read
    as a file; for rebuilding the record of an agent that runs in one)."""
    out: dict[str, dict[str, str]] = {}
    for path in clone_folders(env, claimed):
        head = clones.read_refs(path).head or ""
        out[str(path)] = {"branch": head if head.startswith("refs/heads/") else "", "layout": "clone"}
    return out


def _stub(path: Path) -> Agent:
    """A stand-in record to read an orphan clone through exo's reader (never stored)."""
    now = time.time()
    return Agent(id=f"orphan-{path.name}", name=path.name, role="dev", parent=None, status=DONE, backend="custom",
                 mux="headless", worktree=str(path), created_at=now, updated_at=now, status_at=now,
                 spec={"layout": "clone"})


def losses(env: Env, path: Path, copies: list[str] | None = None) -> list[str]:
    """Why removing orphan clone ``path`` would lose or disturb something (empty: safe to remove); ``copies``:
    the files exo copied in for its agent (``worktree.copy``), which are no work of the agent's."""
    from exo_cli.adapters.proc import processes_inside
    from exo_cli.ops import checkout
    from exo_cli.ops.keeprules import cleanup_policy

    stub = _stub(path)
    regenerable, limit = cleanup_policy(env)
    try:
        with checkout.reading(env, stub, fetch=True) as (here, synced):
            inv = keep.survey(str(path), main=env.git, regenerable=regenerable, limit=limit,
                              owned=keep.exo_files(str(path), copies=copies or [], source_root=str(env.repo.root)),
                              # every clone's refs/exo/clones/ go with its clone (and are dropped once it
                              # is gone): none keeps its commits, whichever agent's id they carry
                              clone=checkout.clone_state(env, stub, synced, here)._replace(refs=clones.CLONE_REFS))
    finally:
        checkout.forget(env, stub)
    reasons = [f"{kind.replace('_', ' ')}: {len(items)}" for kind, items in inv.losses().items()]
    base = env.git.rev(f"refs/heads/{inv.head_branch}") if inv.head_branch else None
    if inv.head and inv.head != base and env.git.unreachable_from_refs([inv.head], but=clones.CLONE_REFS):
        reasons.append("commits only its branch has")
    procs = processes_inside(str(path), exclude={os.getpid()})
    if procs:
        reasons.append(f"processes inside: {', '.join(str(p['pid']) for p in procs[:5])}")
    if reasons:
        clones.drop_refs(env.git, stub.id)  # what it reaches stays in the clone itself, which is left alone
    return reasons


def orphan_clones(env: Env, claimed: set[str], made_by_exo: Callable[[Any], bool], kept: list[str]) -> Iterator[Row]:
    """Clones in exo's worktree root with no agent record: removed only when exo made them and nothing would be lost.

    A reaped agent's clone is handled as its worktree would be: removed when nothing in it would
    be lost (``reaped-worktree``), else left for the human on purpose (in ``kept``, no problem).
    """
    from exo_cli.ops.lifecycle import reaped_worktrees

    reaped = reaped_worktrees(env) if env.has_state() else {}
    for path in clone_folders(env, claimed):
        real = os.path.realpath(path)
        if real in reaped and made_by_exo(path):  # (a folder put there since is the human's: below)
            try:
                lost = losses(env, path, list(reaped[real].get("created_files") or []))
            except (ExoError, OSError) as exc:
                lost = [f"unreadable: {getattr(exc, 'message', exc)}"]
            if lost:
                kept.append(str(path))  # a reaped agent's unfinished work, left for the human on purpose
            else:
                yield _finding("reaped-worktree", str(path), f"clean clone of reaped agent {reaped[real].get('agent')}",
                               "remove the folder (its branch is kept)", partial(_remove, env, path, forget=real))
            continue
        if not made_by_exo(path):
            yield _finding("orphan-clone", str(path), "a clone no agent record names, and exo did not record "
                           "creating it", "left alone: not exo's")
            continue
        try:
            reasons = losses(env, path)
        except (ExoError, OSError) as exc:
            reasons = [f"unreadable: {getattr(exc, 'message', exc)}"]
        if reasons:
            yield _finding("orphan-clone", str(path), f"an agent's clone with no agent record; {'; '.join(reasons)}",
                           "left alone: take its work (git fetch CLONE BRANCH), then remove the folder yourself")
        else:
            yield _finding("orphan-clone", str(path), "an agent's clone with no agent record; exo made it; nothing "
                           "in it would be lost", "remove the folder", partial(_remove, env, path))


def _remove(env: Env, path: Path, *, forget: str | None = None) -> bool:
    ok, why = env.worktrees.remove_clone(str(path), _stub(path).id)
    if not ok:
        raise StateError(why)
    if forget is not None:
        from exo_cli.ops.lifecycle import remember_reaped

        remember_reaped(env, forget, None)
    return True


def stale_clone_refs(env: Env, claimed: set[str]) -> Iterator[Row]:
    """``refs/exo/clones/<id>/`` whose agent is gone and whose clone is gone: deleted."""
    rows = env.git.run(["for-each-ref", "--format=%(refname)", clones.CLONE_REFS], check=False).stdout.split()
    ids = sorted({r[len(clones.CLONE_REFS):].split("/", 1)[0] for r in rows if r.startswith(clones.CLONE_REFS)})
    if not ids:
        return
    known = {a.id: a for a in env.store.agents()} if env.has_state() else {}
    orphans = bool(clone_folders(env, claimed))
    for agent_id in ids:
        agent = known.get(agent_id)
        if agent is not None and agent.worktree and os.path.isdir(agent.worktree):
            continue  # its clone is there: what it reaches is kept
        if agent is None and orphans:
            continue  # maybe an orphan clone's: left while one is there
        yield _finding("stale-clone-refs", f"{clones.CLONE_REFS}{agent_id}/",
                       "refs kept for an agent's clone that is gone", "delete them",
                       partial(_drop, env, agent_id))


def _drop(env: Env, agent_id: str) -> bool:
    clones.drop_refs(env.git, agent_id)
    return True
