"""Checkpoint refs: listing them with their metadata, retention, the archive, and putting HEAD back.

Every agent's checkpoints are commits under ``refs/exo/checkpoints/<key>/<n>`` (``complete
--force`` moves them under ``refs/exo/archive/checkpoints/``); each commit's message is a
subject line and the checkpoint's metadata as JSON. Only exo's own checkpoint refs are ever
deleted, each only while it still names the commit that was read.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from exo_cli.adapters import ckptfiles, gitdir
from exo_cli.adapters.git import Git

REFS = "refs/exo/checkpoints/"
ARCHIVED = "refs/exo/archive/checkpoints/"


class Listed(NamedTuple):
    """One checkpoint as its ref and commit say."""

    n: int
    ref: str
    commit: str
    meta: dict[str, Any]



def list_refs(main: Git, prefixes: Iterable[str]) -> list[Listed]:
    """The checkpoints under ``prefixes``, with their metadata, oldest first."""
    fmt = "%(refname)%00%(objectname)%00%(contents)%01"
    out: list[Listed] = []
    for prefix in prefixes:
        proc = main.run(["for-each-ref", f"--format={fmt}", prefix], check=False)
        for record in proc.stdout.split("\x01"):
            parts = record.strip("\n").split("\0", 2)
            if len(parts) != 3:
                continue
            ref, commit, message = parts
            n = ref.rsplit("/", 1)[-1]
            if not n.isdigit():
                continue
            out.append(Listed(int(n), ref, commit, parse_meta(message)))
    out.sort(key=lambda c: (c.n, c.ref))
    return out


def parse_meta(message: str) -> dict[str, Any]:
    """The metadata JSON of a checkpoint commit's message ({} when unreadable)."""
    _, _, body = message.partition("\n\n")
    try:
        data = json.loads(body.strip() or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def all_keys(main: Git) -> dict[str, list[Listed]]:
    """Every agent's kept (not archived) checkpoints, by key."""
    out: dict[str, list[Listed]] = {}
    for c in list_refs(main, [REFS]):
        key = c.ref[len(REFS):].rsplit("/", 1)[0]
        out.setdefault(key, []).append(c)
    return out


def delete_refs(main: Git, refs: Sequence[Listed]) -> None:
    """Delete these checkpoint refs (each only while it still names its commit), in one transaction."""
    if not refs:
        return
    lines = "".join(f"delete {c.ref} {c.commit}\n" for c in refs if c.ref.startswith(REFS))
    main.run(["update-ref", "--stdin"], input=f"start\n{lines}commit\n")


def archive_refs(main: Git, refs: Sequence[Listed]) -> list[str]:
    """Move these checkpoint refs under ``refs/exo/archive/checkpoints/`` (one transaction); the new refs."""
    moved = [(c, ARCHIVED + c.ref[len(REFS):]) for c in refs if c.ref.startswith(REFS)]
    if not moved:
        return []
    lines = "".join(f"create {new} {c.commit}\ndelete {c.ref} {c.commit}\n" for c, new in moved)
    main.run(["update-ref", "--stdin"], input=f"start\n{lines}commit\n")
    return [new for _, new in moved]


def prune_plan(checkpoints: Sequence[Listed], *, now: float, keep_turns: int, hourly_days: float) -> list[Listed]:
    """Which checkpoints retention drops: all but the newest ``keep_turns``, then one per hour for ``hourly_days``."""
    ordered = sorted(checkpoints, key=lambda c: c.n, reverse=True)
    drop: list[Listed] = []
    hours: set[int] = set()
    horizon = now - hourly_days * 86400
    for i, c in enumerate(ordered):
        if i < keep_turns:
            continue
        when = float(c.meta.get("time") or 0)
        hour = int(when // 3600)
        if when >= horizon and hour not in hours:
            hours.add(hour)
            continue
        drop.append(c)
    return drop


def forget(folder: Path, dropped: Sequence[Listed], kept: Sequence[Listed]) -> None:
    """Remove the ignored-file manifests of ``dropped`` and the copies no kept checkpoint names."""
    for c in dropped:
        with contextlib.suppress(FileNotFoundError):
            (folder / "ignored" / f"{c.n}.json").unlink()
    manifests = [ckptfiles.read_manifest(folder / "ignored" / f"{c.n}.json") for c in kept]
    try:
        last = json.loads((folder / "last.json").read_text(encoding="utf-8")).get("files") or {}
    except (OSError, ValueError, AttributeError):
        last = {}
    ckptfiles.collect(folder / "blobs", [*manifests, last])


# --------------------------------------------------------------------------- the checkout's HEAD


def move_branch(here: Git, agent_git: Path, *, branch: str | None, to: str, head: str | None) -> str | None:
    """Put HEAD back on ``branch`` at commit ``to`` (from ``head``); the agent's index follows, files stay.

    Returns the commit the branch was at (None when it did not exist). The branch moves only
    while it is where it was read (a compare-and-swap); the index becomes ``to``'s tree with the
    stat data of unchanged entries kept (``read-tree -m``).
    """
    env = {"GIT_DIR": str(agent_git)}
    old: str | None = head
    if branch:
        ref = f"refs/heads/{branch}"
        old = here.run(["rev-parse", "--verify", "-q", ref], env=env, check=False).stdout.strip() or None
        here.run(["update-ref", "-m", "exo undo", ref, to, old or ""], env=env)
        if gitdir.head_branch(agent_git) != branch:
            here.run(["symbolic-ref", "-m", "exo undo", "HEAD", ref], env=env)
    else:
        here.run(["update-ref", "--no-deref", "-m", "exo undo", "HEAD", to, head or ""], env=env)
    if not here.run(["read-tree", "-m", to], env=env, check=False).ok:
        here.run(["read-tree", to], env=env)
    return old


def readd_worktree(main: Git, worktree: str, *, branch: str | None, commit: str) -> None:
    """Make the worktree again at its path (removed by hand): on ``branch`` (made at ``commit`` when gone), no files
    checked out (the restore writes them), the index at HEAD."""
    if branch and main.rev(f"refs/heads/{branch}"):
        args = ["worktree", "add", "--no-checkout", "-f", worktree, branch]
    elif branch:
        args = ["worktree", "add", "--no-checkout", "-f", "-b", branch, worktree, commit]
    else:
        args = ["worktree", "add", "--no-checkout", "-f", "--detach", worktree, commit]
    main.run(args)
    main.at(worktree).run(["read-tree", "HEAD"])


__all__ = ["ARCHIVED", "REFS", "Listed", "all_keys", "archive_refs", "delete_refs", "forget", "list_refs", "move_branch",
           "parse_meta", "prune_plan", "readd_worktree"]
