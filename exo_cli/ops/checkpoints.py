"""Checkpoints: every turn of every agent can be undone (``exo checkpoints``, ``exo checkpoint``).

At the end of each turn (the stop hook, a custom agent going idle: ``ops/turnend.py``) and
before exo itself rebases, merges into or completes an agent's checkout (``before_change``),
exo records a checkpoint of that checkout (``take``): its tracked and untracked files as a
commit under ``refs/exo/checkpoints/<key>/<n>`` built in a private index, its ignored files
that are work copied into exo's private state (``adapters/checkpoint.py``,
``adapters/ckptfiles.py``). The key is the agent's name and creation time
(``records.checkpoint_key``), never a name alone: names are reused once an agent is retired.
Only worktrees exo made for an agent are checkpointed, never the human's checkout.

Retention (``[checkpoints]``): the newest ``keep_turns``, then one per hour for
``hourly_days``; a completed agent's for ``after_complete_days``; ``complete --force`` moves
them to ``refs/exo/archive/checkpoints/`` with its archive, where no pruning reaches. Pruning
only ever deletes exo's own checkpoint refs. ``exo undo`` (``ops/undo.py``) restores one.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from exo_cli.adapters import checkpoint as ck
from exo_cli.adapters import ckptrefs as refs
from exo_cli.adapters.git import Git
from exo_cli.adapters.rmtree import remove_tree
from exo_cli.errors import ExoError, NotFound, StateError, UsageError
from exo_cli.ops import remote as _remote  # noqa: F401 - routes on_host operations to their agent's host
from exo_cli.ops import turnend
from exo_cli.ops.keeprules import cleanup_policy, exo_owned
from exo_cli.records import DONE, RETIRED_SEP, ROOT, Agent, checkpoint_key, in_subtree, pick_agent
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.env import Env

SWEEP_EVERY = 3600.0  # seconds between two looks at every agent's checkpoints (completed agents' expire)
ARCHIVED_MARK = "archived"  # in an agent's checkpoint folder: complete --force kept them with its archive


@dataclass(frozen=True)
class NotKept:
    path: str  # relative to the checkout; a folder ends in "/"
    why: str


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of an agent's checkout."""

    id: int  # the number `exo undo --to` and `exo diff --checkpoint` take
    ref: str
    commit: str
    time: float
    turn: int | None  # the agent's turn it ends (or the turn during which exo took it)
    reason: str  # turn | rebase | merge | complete | undo | manual
    head: str | None  # the commit HEAD was at
    branch: str | None  # the branch HEAD was on (None: detached)
    files: int  # files changed since the checkpoint before it
    added: int
    deleted: int
    ignored: list[str] = field(default_factory=list)  # ignored files kept in exo's state (never in git)
    not_kept: list[NotKept] = field(default_factory=list)
    archived: bool = False  # kept with complete --force's archive


@dataclass(frozen=True)
class CheckpointsResult:
    """An agent's checkpoints, newest first."""

    agent: str
    key: str
    worktree: str | None
    checkpoints: list[Checkpoint]


@dataclass(frozen=True)
class TakeResult:
    """What ``exo checkpoint`` did: the checkpoint taken (or the last one, when nothing changed), or why none."""

    agent: str
    taken: bool  # a new checkpoint was written
    checkpoint: Checkpoint | None
    skipped: str | None = None  # why there is none: disabled, not-due, not-checkpointed, elsewhere
    pruned: int = 0  # old checkpoints retention dropped just now


# --------------------------------------------------------------------------- finding and allowing


def find_agent(env: Env, ref: str) -> Agent:
    """The agent ``ref`` names: an id (a retired one too), else a name; NotFound otherwise."""
    from exo_cli.validate import check_name

    if RETIRED_SEP not in ref:
        check_name(ref, "agent name")
    rec = env.store.agent(ref) if env.has_state() and ref != ROOT else None
    if rec is None and env.has_state() and RETIRED_SEP not in ref:
        rec = pick_agent([a for a in env.store.agents() if a.id != ROOT and not a.retired], ref)
    if rec is None:
        raise NotFound(f"No agent named {ref!r}", hint="List agents with `exo agents --all`.", agent=ref)
    return rec


def check_access(env: Env, agent: Agent, what: str) -> None:
    """The human may act on every agent, an agent on itself, a team lead on its descendants."""
    caller = env.caller
    if caller.is_human or caller.agent_id == agent.id:
        return
    if env.role == "tl" and in_subtree(env.store.agents(), caller.agent_id, agent.id):
        return
    raise StateError(f"{caller.agent_id} cannot {what} {agent.id}: it is not in its subtree",
                     hint="A team lead acts on its descendants' checkpoints; an agent on its own.", agent=agent.id,
                     caller=caller.agent_id)


def caller_or(env: Env, agent: str | None, what: str) -> Agent:
    """The agent named, or the caller's own record; the access check done."""
    if agent is None:
        rec = env.caller_agent()
        if rec is None:
            raise UsageError("Name the agent", hint=f"exo {what} AGENT (see `exo agents`).")
    else:
        rec = find_agent(env, agent)
    check_access(env, rec, what)
    return rec


# --------------------------------------------------------------------------- the pieces


def enabled(env: Env) -> bool:
    return bool(env.config.get("checkpoints.enabled"))


def not_checkpointed(env: Env, agent: Agent) -> str | None:
    """Why exo does not checkpoint ``agent``'s checkout (None: it does)."""
    if not (agent.worktree and agent.spec.get("worktree_created") is True):
        return "its checkout is not a worktree exo made for it (exo never checkpoints the human's checkout)"
    if not env.runs_here(agent):
        return f"it runs on host {agent.host}"
    return None


def policy(env: Env, agent: Agent) -> ck.Policy:
    """``complete``'s rules for ignored files (``cleanup.regenerable``, exo's own files) and the size limits."""
    regenerable, limit = cleanup_policy(env)
    max_file = int(env.config.get("checkpoints.max_file_mb")) << 20
    return ck.Policy(regenerable=tuple(regenerable), owned=frozenset(exo_owned(env, agent)),
                     max_file=max_file or 1 << 62, max_total=limit)  # 0: no limit


def shadow_of(env: Env, agent: Agent) -> ck.Shadow:
    from exo_cli.ops import checkout

    return ck.Shadow(Git(env.repo.root), str(agent.worktree or ""), Path(turnend.folder(env, agent)),
                     checkpoint_key(agent), clone=checkout.objects(env, agent) if checkout.is_clone(agent) else None)


def view(c: refs.Listed, shadow: ck.Shadow) -> Checkpoint:
    """A checkpoint as ``exo checkpoints`` shows it (its ignored files read from exo's state)."""
    m = c.meta
    turn = m.get("turn")
    return Checkpoint(
        id=c.n, ref=c.ref, commit=c.commit, time=float(m.get("time") or 0), turn=turn if isinstance(turn, int) else None,
        reason=str(m.get("reason") or "turn"), head=m.get("head"), branch=m.get("head_branch"),
        files=int(m.get("files") or 0), added=int(m.get("added") or 0), deleted=int(m.get("deleted") or 0),
        ignored=sorted(shadow.manifest(c.n)),
        not_kept=[NotKept(str(x.get("path")), str(x.get("why"))) for x in m.get("not_kept") or [] if isinstance(x, dict)],
        archived=c.ref.startswith(refs.ARCHIVED))


# --------------------------------------------------------------------------- taking one


def take(env: Env, agent: Agent, *, reason: str, turn: int | None = None, due_only: bool = False,
         always: bool = False) -> TakeResult:
    """Checkpoint ``agent``'s checkout now (deduplicated); ``due_only``: only if a turn's checkpoint is still due.

    ``always`` takes it even with ``checkpoints.enabled`` off (undo checkpoints the present whatever
    the setting). StateError when the checkout cannot be read.
    """
    why = not_checkpointed(env, agent)
    if why is not None:
        return TakeResult(agent=agent.id, taken=False, checkpoint=None, skipped=why)
    shadow = shadow_of(env, agent)
    due = shadow.folder / turnend.DUE
    on = enabled(env)
    turnend.remember_off(env, agent, off=not on)  # the hooks then stop marking turns due
    if not (always or on):
        with contextlib.suppress(FileNotFoundError):
            due.unlink()
        return TakeResult(agent=agent.id, taken=False, checkpoint=None, skipped="checkpoints.enabled is false")
    with shadow.lock():
        if due_only:
            try:
                marked = json.loads(due.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return TakeResult(agent=agent.id, taken=False, checkpoint=None, skipped="no checkpoint is due")
            turn = marked.get("turn") if isinstance(marked, dict) and isinstance(marked.get("turn"), int) else turn
        meta = {"agent": agent.id, "name": agent.name, "reason": reason,
                "turn": agent.turns if turn is None else turn}
        if shadow.clone:  # the commits it builds on are in the repository, and kept there, first
            from exo_cli.ops import checkout

            checkout.sync(env, agent)
        taken = shadow.capture(policy=policy(env, agent), meta=meta, branch=agent.branch)
        if shadow.clone and taken.created:  # its staged files' objects may be the clone's only: the repository's too
            from exo_cli.ops import checkout

            try:
                checkout.keep_objects(env, agent, [taken.commit])
            except ExoError:  # never a checkpoint naming objects the repository lacks
                Git(env.repo.root).delete_ref(taken.ref, taken.commit)
                raise
        with contextlib.suppress(FileNotFoundError):
            due.unlink()  # whatever was due is in this checkpoint (or the identical one before it)
        pruned = prune(env, shadow, upto=taken.n) if taken.created else 0
    with contextlib.suppress(ExoError, OSError):
        sweep(env)
    listed = refs.Listed(taken.n, taken.ref, taken.commit, taken.meta)
    return TakeResult(agent=agent.id, taken=taken.created, checkpoint=view(listed, shadow), pruned=pruned)


def take_due(env: Env, agent: Agent) -> bool:
    """Take the agent's turn checkpoint now if it is still due; whether one was taken. Never raises (hooks fail open)."""
    return turnend.is_due(env, agent) and take_quietly(env, agent, due=True)


def take_quietly(env: Env, agent: Agent, *, turn: int | None = None, due: bool = False) -> bool:
    """A turn's checkpoint taken on a hook's path: whether one was taken; a failure is only a missed checkpoint."""
    try:
        return take(env, agent, reason="turn", turn=turn, due_only=due).checkpoint is not None
    except Exception:  # noqa: BLE001 - a hook fails open: the agent goes on, the next turn is checkpointed again
        return False


def before_change(env: Env, agent: Agent, reason: str, *, turn: int | None = None) -> str | None:
    """The checkpoint exo takes before it rebases, merges into or completes ``agent``'s checkout; a warning when it
    could not (what comes next goes ahead: it never loses work of its own)."""
    if not turnend.eligible(agent) and reason != "complete":
        return None
    try:
        take(env, agent, reason=reason, turn=turn)
    except (ExoError, OSError) as exc:
        text = exc.message if isinstance(exc, ExoError) else str(exc)
        return f"no checkpoint of {agent.name} before the {reason}: {text}"
    return None


def before_branch_moves(env: Env, branch: str, reason: str) -> list[str]:
    """Checkpoint the agents whose checkout has ``branch`` out (a merge is about to move it); warnings."""
    here = os.path.realpath(Git(env.repo.root).worktree_of(branch) or "")
    if not here:
        return []
    out: list[str] = []
    for a in env.store.agents():
        if a.worktree and turnend.eligible(a) and os.path.realpath(a.worktree) == here and env.runs_here(a):
            warn = before_change(env, a, reason)
            out += [warn] if warn else []
    return out


# --------------------------------------------------------------------------- retention


def prune(env: Env, shadow: ck.Shadow, *, upto: int | None = None) -> int:
    """Drop the agent's checkpoints retention no longer keeps (its own refs only); how many.

    With ``upto`` (the newest checkpoint's number), only once there can be more than
    ``keep_turns`` of them, and then every ``min(10, keep_turns)`` checkpoints: listing them
    costs a little, and a few more kept for a while costs nothing.
    """
    keep_turns = max(1, int(env.config.get("checkpoints.keep_turns")))
    mark = shadow.folder / "pruned"
    if upto is not None:
        try:
            last = int(mark.read_text(encoding="utf-8").strip() or 0)
        except (OSError, ValueError):
            last = 0
        if upto <= keep_turns or upto - last < min(10, keep_turns):
            return 0
        mark.write_text(str(upto), encoding="utf-8")
    kept = refs.list_refs(shadow.main, [shadow.refs])
    drop = refs.prune_plan(kept, now=time.time(), keep_turns=keep_turns,
                         hourly_days=float(env.config.get("checkpoints.hourly_days")))
    if drop:
        refs.delete_refs(shadow.main, drop)
        gone = {c.n for c in drop}
        refs.forget(shadow.folder, drop, [c for c in kept if c.n not in gone])
    return len(drop)


def sweep(env: Env, *, force: bool = False) -> list[str]:
    """Drop the checkpoints of agents completed more than ``after_complete_days`` ago (and of records gone).

    Runs at most once an hour (a stamp in the checkpoints folder) unless ``force``; returns
    the keys dropped. Checkpoints archived with ``complete --force`` are never touched.
    """
    base = env.state_dir / turnend.FOLDER
    stamp = base / ".swept"
    now = time.time()
    with contextlib.suppress(OSError):
        if not force and now - stamp.stat().st_mtime < SWEEP_EVERY:
            return []
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    stamp.touch()
    days = float(env.config.get("checkpoints.after_complete_days")) * 86400
    agents = {checkpoint_key(a): a for a in env.store.agents() if a.id != ROOT}
    main = Git(env.repo.root)
    dropped: list[str] = []
    by_key = refs.all_keys(main)
    for key in sorted(set(by_key) | {p.name for p in base.iterdir() if p.is_dir()}):
        folder = base / key
        if (folder / ARCHIVED_MARK).exists():
            continue
        a = agents.get(key)
        mine = by_key.get(key, [])
        if a is not None and a.status != DONE:
            continue
        if a is not None:
            ended = float(a.completed_at or a.updated_at or 0)
        else:
            ended = max([float(c.meta.get("time") or 0) for c in mine] or [_mtime(folder)])
        if now - ended < days:
            continue
        refs.delete_refs(main, mine)
        with contextlib.suppress(OSError):
            remove_tree(folder)
        dropped.append(key)
    return dropped


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def archive_with(env: Env, agent: Agent) -> list[str]:
    """``complete --force``: move the agent's checkpoints under ``refs/exo/archive/checkpoints/`` (never pruned)."""
    if not_checkpointed(env, agent) is not None:
        return []
    shadow = shadow_of(env, agent)
    with shadow.lock():
        moved = refs.archive_refs(shadow.main, [c for c in shadow.history() if c.ref.startswith(refs.REFS)])
        (shadow.folder / ARCHIVED_MARK).write_text("kept with exo complete --force's archive\n", encoding="utf-8")
    return moved


# --------------------------------------------------------------------------- the operations


@op(
    "checkpoints",
    cli="checkpoints",
    tools=["list_checkpoints"],
    roles=("tl", "dev"),
    read_only=True,
    idempotent=True,
    on_host="agent",
    help={"agent": "The agent whose checkpoints to list (default: your own)."},
)
def checkpoints(env: Env, *, agent: str | None = None) -> CheckpointsResult:
    """List an agent's checkpoints: time, turn, files changed and lines, newest first.

    exo takes a checkpoint of an agent's checkout at the end of every turn and before it
    rebases, merges into or completes it: tracked and untracked files as a commit under
    refs/exo/checkpoints/, ignored files that are work copied into exo's private state.
    `exo undo` restores one, `exo diff AGENT --checkpoint ID` shows one. A team lead lists
    its descendants', an agent its own.
    """
    rec = caller_or(env, agent, "list the checkpoints of")
    shadow = shadow_of(env, rec)
    listed = [view(c, shadow) for c in reversed(shadow.history())] if not_checkpointed(env, rec) is None else []
    return CheckpointsResult(agent=rec.id, key=checkpoint_key(rec), worktree=rec.worktree, checkpoints=listed)


@op(
    "checkpoint",
    cli="checkpoint",
    tools=[],
    no_tools="exo takes checkpoints by itself at every turn's end; the command is for the human and the hooks' "
    "background helper",
    roles=("tl", "dev"),
    on_host="agent",
    help={
        "agent": "The agent whose checkout to checkpoint.",
        "due": "Only when the checkpoint of a finished turn is still due (what the hooks' background helper runs).",
    },
)
def checkpoint(env: Env, *, agent: str, due: bool = False) -> TakeResult:
    """Take a checkpoint of an agent's checkout now.

    Its tracked and untracked files become a commit under refs/exo/checkpoints/ (the
    checkout's index, HEAD, stash and files untouched); its ignored files that are work are
    copied into exo's private state. Nothing is taken when nothing changed since the last one.
    """
    rec = find_agent(env, agent)
    check_access(env, rec, "checkpoint")
    if rec.status == DONE and not due:
        raise StateError(f"{rec.id} is done: its checkout is exo complete's now", agent=rec.id)
    return take(env, rec, reason="turn" if due else "manual", due_only=due)
