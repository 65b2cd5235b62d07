"""Diffs between two revisions, through the one git client (``Git.run``): files, line counts, patch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from exo_cli.adapters.git import Git


class FileChange(NamedTuple):
    path: str
    status: str  # git's letter: A added, M modified, D deleted, T type changed
    added: int | None  # None for a binary file
    deleted: int | None


def diff_files(git: Git, revs: Sequence[str]) -> list[FileChange]:
    """``git diff REVS`` file by file, renames as a deletion and an addition."""
    status = git.run(["diff", "--no-renames", "--name-status", "-z", *revs, "--"]).stdout.split("\0")
    numstat = git.run(["diff", "--no-renames", "--numstat", "-z", *revs, "--"]).stdout.split("\0")
    counts: dict[str, tuple[int | None, int | None]] = {}
    for entry in numstat:
        parts = entry.split("\t", 2)
        if len(parts) == 3:
            added, deleted, path = parts
            counts[path] = (int(added) if added.isdigit() else None, int(deleted) if deleted.isdigit() else None)
    out: list[FileChange] = []
    for letter, path in zip(status[0::2], status[1::2], strict=False):
        if letter and path:
            out.append(FileChange(path, letter[:1], *counts.get(path, (None, None))))
    return out


def diff_patch(git: Git, revs: Sequence[str], *, limit: int) -> tuple[str, bool]:
    """The patch of ``git diff REVS`` (no colour, no external tool), cut at ``limit`` characters at a line end."""
    text = git.run(["diff", "--no-color", "--no-ext-diff", *revs, "--"]).stdout
    if len(text) <= limit:
        return text, False
    cut = text[:limit]
    return cut[: cut.rfind("\n") + 1], True


def merge_base(git: Git, a: str, b: str) -> str | None:
    """The best common ancestor of ``a`` and ``b`` (None when they share no history)."""
    proc = git.run(["merge-base", a, b], check=False)
    return (proc.stdout.strip() or None) if proc.ok else None
