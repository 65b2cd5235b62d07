"""``exo undo AGENT``: put an agent's checkout back as one of its checkpoints was.

The order keeps every step undoable: refuse while the agent is in the middle of a turn
(unless ``force``) or an operation (rebase, merge...) is in progress; checkpoint the present
(an undo is undone with ``--to`` that checkpoint); write back the files (tracked and
untracked ones from the checkpoint's commit, ignored ones from exo's copies) and delete those
the checkpoint lacks; then, when HEAD moved since (a reset, an amend, a checkout), put the
branch back where it was, the commit it moved from kept reachable by the checkpoint of the
present. A checkout removed by hand is made again first. The agent is told at its next turn.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from exo_cli import fault
from exo_cli.adapters import checkpoint as ck
from exo_cli.adapters import ckptfiles, clones, gitdir
from exo_cli.adapters import ckptrefs as refs
from exo_cli.errors import InvalidInput, NotFound, StateError
from exo_cli.ops import remote as _remote  # noqa: F401 - routes on_host operations to their agent's host
from exo_cli.ops.checkpoints import check_access, find_agent, not_checkpointed, shadow_of, take
from exo_cli.records import ASKING, DONE, STARTING, WAITING_PERMISSION, WORKING, Agent
from exo_cli.registry import Range, op

if TYPE_CHECKING:
    from exo_cli.env import Env

MID_TURN = (STARTING, WORKING, ASKING, WAITING_PERMISSION)


@dataclass(frozen=True)
class UndoResult:
    """What ``exo undo`` restored, and the checkpoint that undoes it."""

    agent: str
    restored: int  # the checkpoint put back
    saved: int | None  # the checkpoint of the checkout as it was before (`exo undo AGENT --to SAVED`)
    files: list[str]  # tracked and untracked files written back
    deleted: list[str]  # files the checkpoint did not have
    ignored: list[str]  # ignored files written back from exo's copies
    ignored_deleted: list[str]
    not_restored: list[str] = field(default_factory=list)  # "path (why)"
    branch: str | None = None  # the branch put back (None: none moved)
    moved_from: str | None = None  # the commit it was at (kept reachable by the saved checkpoint)
    moved_to: str | None = None
    worktree_recreated: bool = False
    told: bool = False  # the agent gets a message saying what was restored at its next turn


def _paths(files: list[str]) -> list[str]:
    """The ``--files`` paths, relative to the checkout and safe (InvalidInput otherwise)."""
    out: list[str] = []
    for raw in files:
        p = raw.strip().removeprefix("./").rstrip("/")
        parts = p.split("/")
        if (not p or raw.startswith("/") or ".." in parts or any(ord(c) < 32 or ord(c) == 127 for c in p)
                or ".git" in parts):
            raise InvalidInput(f"Not a path inside the checkout: {raw!r}",
                               hint="Give paths relative to the agent's checkout, without '..'.", field="files")
        out.append(p)
    return list(dict.fromkeys(out))


def _under(paths: list[str] | None) -> Callable[[str], bool]:
    def inside(rel: str) -> bool:
        return paths is None or any(rel == p or rel.startswith(p + "/") for p in paths)

    return inside


def _by_id(history: list[refs.Listed], agent: Agent, n: int) -> refs.Listed:
    hit = next((c for c in history if c.n == n), None)
    if hit is None:
        raise NotFound(f"{agent.id} has no checkpoint {n}", hint=f"List them with `exo checkpoints {agent.id}`.",
                       agent=agent.id, checkpoint=n)
    return hit


def _target(history: list[refs.Listed], agent: Agent, turns: int | None, changed_since: int | None) -> refs.Listed:
    """The checkpoint an undo without ``--to`` restores.

    ``changed_since``: the checkpoint of the present, when the checkout changed since the last
    one (then, without ``turns``, the last one before it: what changed since is undone);
    otherwise the newest checkpoint from ``turns`` (default 1) of the agent's turns ago.
    """
    kept = [c for c in history if c.meta.get("reason") != "undo"]
    if turns is None and changed_since is not None:
        older = [c for c in kept if c.n < changed_since]
        if older:
            return older[-1]
    back = turns or 1
    limit = agent.turns - back
    for c in reversed(kept):
        turn = c.meta.get("turn")
        if isinstance(turn, int) and turn <= limit:
            found: refs.Listed = c
            return found
    raise NotFound(f"{agent.id} has no checkpoint from {back} turn(s) ago (it has done {agent.turns})",
                   hint=f"List them with `exo checkpoints {agent.id}`, then `exo undo {agent.id} --to ID`.",
                   agent=agent.id, turns=back)


@op(
    "undo",
    cli="undo",
    tools=["undo"],
    roles=("tl",),
    destructive=True,
    on_host="agent",
    help={
        "agent": "The agent whose checkout to restore.",
        "to": "The checkpoint to restore (its ID in `exo checkpoints`).",
        "turns": "Undo this many of the agent's last turns (default 1).",
        "files": "Restore only these files or folders (relative to the agent's checkout); the branch stays.",
        "force": "Restore even while the agent is in the middle of a turn.",
    },
)
def undo(env: Env, *, agent: str, to: Annotated[int, Range(1)] | None = None,
         turns: Annotated[int, Range(1)] | None = None, files: list[str] | None = None,
         force: bool = False) -> UndoResult:
    """Restore an agent's checkout to one of its checkpoints.

    It checkpoints the present first (undo the undo with {--to} that checkpoint), writes back the
    files of the checkpoint and deletes those it lacks. By default: the last checkpoint when the
    checkout changed since it, else the one before the agent's last turn. When HEAD moved since
    (a reset, an amend), the branch goes back too, the commit it moved from kept reachable.
    With {--files}, only those paths. The agent is told at its next turn. Refused while the
    agent is in the middle of a turn (unless {--force}) or a rebase or merge is in progress.
    """
    rec = find_agent(env, agent)
    check_access(env, rec, "undo")
    if to is not None and turns is not None:
        raise InvalidInput("Give --to or --turns, not both", field="turns")
    paths = _paths(files) if files is not None else None
    if files is not None and not paths:
        raise InvalidInput("Name the files to restore", field="files")
    why = not_checkpointed(env, rec)
    if why is not None:
        raise StateError(f"{rec.id} has no checkpoints: {why}", agent=rec.id)
    if rec.status == DONE or rec.retired:
        raise StateError(f"{rec.id} is done: its checkout is not an agent's any more", agent=rec.id,
                         hint=f"Its checkpoints stay listed (`exo checkpoints {rec.id}`); restore one by hand with "
                         "git worktree add.")
    if rec.status in MID_TURN and not force:
        raise StateError(f"{rec.id} is in the middle of a turn ({rec.status})", agent=rec.id, status=rec.status,
                         hint="Wait until it is idle, or pass --force (its next edits may then mix with the restore).")
    shadow = shadow_of(env, rec)
    history = shadow.history()
    wanted = _by_id(history, rec, to) if to is not None else None
    if paths is not None:  # before anything is written: a typo restores nothing
        candidates = [wanted] if wanted else history[-1:] + _maybe_target(history, rec, turns)
        _check_paths(shadow, paths, candidates, here=str(rec.worktree))
    wt = str(rec.worktree)
    recreated = False
    clone = shadow.clone
    if clone and not os.path.isdir(wt):
        raise StateError(f"{rec.id}'s clone is gone", agent=rec.id, hint=f"Its checkpoints stay listed (`exo "
                         f"checkpoints {rec.id}`); restore one into a checkout of your own with git restore --source.")
    if not os.path.isdir(wt):  # removed by hand: made again on its branch, files written from the checkpoint
        elsewhere = shadow.main.worktree_of(rec.branch) if rec.branch else None
        if elsewhere and os.path.realpath(elsewhere) != os.path.realpath(wt):
            raise StateError(f"{rec.id}'s checkout is gone and its branch {rec.branch} is checked out in {elsewhere}",
                             agent=rec.id, hint="Free that branch first (switch that checkout to another branch).")
        known = shadow.history()
        if wanted is None and not known:
            raise NotFound(f"{rec.id} has no checkpoints", agent=rec.id)
        last = wanted or known[-1]
        refs.readd_worktree(shadow.main, wt, branch=rec.branch, commit=str(last.meta.get("head") or last.commit))
        recreated = True
    agent_git = shadow.agent_git_dir()
    busy = clones.operations_in_progress(wt) if clone else gitdir.operations(agent_git)
    if busy:
        raise StateError(f"A {', '.join(busy)} is in progress in {rec.id}'s checkout", agent=rec.id,
                         hint="Finish or abort it (git rebase --abort, git merge --abort), then undo.")
    present = take(env, rec, reason="undo", always=True)
    fault.point("undo.saved", env.environ)
    saved = present.checkpoint
    history = shadow.history()
    target = wanted or _target(history, rec, turns, saved.id if saved is not None and present.taken else None)
    present_meta = next((c.meta for c in history if saved is not None and c.n == saved.id), {})
    if paths is not None:
        _check_paths(shadow, paths, [target, *([c for c in history if saved and c.n == saved.id])])
    protected = [str(x.get("path")) for x in present_meta.get("not_kept") or [] if isinstance(x, dict)]

    def protect(rel: str) -> bool:
        return any(rel == p.rstrip("/") or rel.startswith(p.rstrip("/") + "/") for p in protected)

    present_tree = shadow.main.tree(saved.commit) if saved is not None else None
    target_tree = shadow.main.tree(target.commit)
    if target_tree is None:
        raise StateError(f"Checkpoint {target.n} of {rec.id} is unreadable", agent=rec.id, checkpoint=target.n)
    with shadow.lock():
        written, deleted, skipped = shadow.restore(target=target_tree, present=present_tree, paths=paths,
                                                   protect=protect)
        inside = _under(paths)
        ign_written, ign_deleted, ign_skipped = ckptfiles.restore(
            wt, shadow.folder / "blobs", shadow.manifest(target.n), shadow.manifest(saved.id) if saved else {},
            keep=lambda rel: inside(rel) and not protect(rel))
    fault.point("undo.files", env.environ)
    # an agent's clone: its files come back, its own refs are its own to move (exo never writes them)
    moved = _put_head_back(shadow, agent_git, target) if paths is None and not clone else None
    result = UndoResult(agent=rec.id, restored=target.n, saved=saved.id if saved else None, files=written,
                        deleted=deleted, ignored=ign_written, ignored_deleted=ign_deleted,
                        not_restored=skipped + ign_skipped, branch=moved[0] if moved else None,
                        moved_from=moved[1] if moved else None, moved_to=moved[2] if moved else None,
                        worktree_recreated=recreated)
    told = _tell(env, rec, target, result)
    env.store.event("undo", rec.id, {"restored": target.n, "saved": result.saved, "by": env.caller.agent_id})
    return replace(result, told=told)


def _maybe_target(history: list[refs.Listed], agent: Agent, turns: int | None) -> list[refs.Listed]:
    try:
        return [_target(history, agent, turns, None)]
    except NotFound:
        return []


def _check_paths(shadow: ck.Shadow, paths: list[str], candidates: list[refs.Listed], *, here: str | None = None) -> None:
    """InvalidInput for a path that neither the candidate checkpoints nor the checkout have (a typo restores nothing)."""
    known: set[str] = set()
    for c in candidates:
        known |= set(shadow.tree_paths(c.commit, paths)) | set(shadow.manifest(c.n))
    for p in paths:
        if here is not None and os.path.lexists(os.path.join(here, p)):
            continue
        if not any(_under([p])(k) for k in known):
            raise InvalidInput(f"{p} is in neither the checkpoint nor the checkout", field="files", path=p)


def _put_head_back(shadow: ck.Shadow, agent_git: Path, target: refs.Listed) -> tuple[str | None, str | None, str] | None:
    """Move HEAD (and its branch) back to where the checkpoint had it, when it moved; (branch, from, to)."""
    head = target.meta.get("head")
    if not isinstance(head, str) or not head:
        return None
    want_branch = target.meta.get("head_branch") if isinstance(target.meta.get("head_branch"), str) else None
    here = shadow.main.at(shadow.worktree)
    env = {"GIT_DIR": str(agent_git)}
    now_head = here.run(["rev-parse", "--verify", "-q", "HEAD^{commit}"], env=env, check=False).stdout.strip() or None
    on = gitdir.head_branch(agent_git)
    if now_head == head and on == want_branch:
        return None
    old = refs.move_branch(here, agent_git, branch=want_branch, to=head, head=now_head)
    return want_branch, old, head


def _tell(env: Env, agent: Agent, target: refs.Listed, result: UndoResult) -> bool:
    """A message the agent gets at its next turn: what was restored, and how to get the rest back."""
    from exo_cli.ops import delivery as msgs

    turn = target.meta.get("turn")
    parts = [f"exo restored your checkout to checkpoint {target.n}"
             + (f" (the end of your turn {turn})" if isinstance(turn, int) else "")
             + f" at {env.caller.agent_id}'s request:"]
    parts.append(f"{len(result.files)} file(s) written back, {len(result.deleted)} deleted"
                 + (f", {len(result.ignored)} ignored file(s) restored" if result.ignored else "") + ".")
    if result.files[:10]:
        parts.append("Restored: " + ", ".join(result.files[:10]) + (" ..." if len(result.files) > 10 else "") + ".")
    if result.moved_to:
        parts.append(f"Your branch {result.branch or '(detached HEAD)'} is back at {result.moved_to[:12]}"
                     + (f" (it was at {result.moved_from[:12]})" if result.moved_from else "") + ".")
    if result.worktree_recreated:
        parts.append("Your checkout had been removed; exo made it again at the same path (cd into it again).")
    if result.saved is not None:
        parts.append(f"What you had before is checkpoint {result.saved}.")
    if result.not_restored:
        parts.append("Not restored: " + "; ".join(result.not_restored[:10]) + ".")
    try:
        msgs.post_notice(env, msgs.EVENT, env.caller.agent_id, agent.id, " ".join(parts),
                         data={"event": "undo", "restored": target.n, "saved": result.saved})
    except Exception:  # noqa: BLE001 - the restore is done; a message that could not be stored is only said so
        return False
    return True
