"""What git prints, as values: the records exo reads from ``git status`` and ``git worktree list``.

Pure parsing, no process: ``exo_cli.adapters.git`` runs the commands and returns these.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


class RepoInfo(NamedTuple):
    """Where a repository lives, seen from one of its worktrees."""

    toplevel: Path  # the worktree the caller is in
    common_dir: Path  # shared .git directory
    git_dir: Path  # this worktree's git dir
    root: Path  # the main checkout


class Snapshot(NamedTuple):
    """Branch, head, upstream, ahead/behind and changed files from one ``git status`` call."""

    branch: str | None
    head: str | None
    upstream: str | None
    ahead: int | None
    behind: int | None
    changes: list[str]


class Worktree(NamedTuple):
    """One record of ``git worktree list --porcelain``.

    ``locked`` and ``prunable`` are None when absent and the reason ("" without one) when
    present; ``attrs`` holds every attribute as git printed it (label -> value).
    """

    path: str
    head: str | None
    branch: str | None  # the full ref (refs/heads/...); None when detached or bare
    bare: bool
    detached: bool
    locked: str | None
    prunable: str | None
    attrs: dict[str, str]

    @property
    def branch_name(self) -> str | None:
        b = self.branch
        return b[len("refs/heads/"):] if b and b.startswith("refs/heads/") else b


class MergeTree(NamedTuple):
    """``git merge-tree --write-tree``: the merged tree, or the conflicting files."""

    tree: str | None  # None on a conflict
    conflicts: list[str]


def parse_worktrees(text: str, *, nul: bool = True) -> list[Worktree]:
    """Parse ``git worktree list --porcelain`` output (``-z``: NUL-terminated lines)."""
    out: list[Worktree] = []
    attrs: dict[str, str] = {}

    def close() -> None:
        if "worktree" in attrs:
            out.append(Worktree(
                path=attrs["worktree"], head=attrs.get("HEAD"), branch=attrs.get("branch"),
                bare="bare" in attrs, detached="detached" in attrs,
                locked=attrs.get("locked"), prunable=attrs.get("prunable"), attrs=dict(attrs),
            ))
        attrs.clear()

    for line in text.split("\0" if nul else "\n"):
        if not line:
            close()
            continue
        key, _, value = line.partition(" ")
        if key == "worktree" and attrs:  # a record not closed by an empty line
            close()
        attrs[key] = value
    close()
    return out


def parse_status(text: str) -> Snapshot:
    """Parse ``git status --porcelain=v2 --branch`` output."""
    branch = head = upstream = None
    ahead = behind = None
    changes: list[str] = []
    for line in text.splitlines():
        if line.startswith("# branch.oid "):
            oid = line[13:]
            head = None if oid == "(initial)" else oid[:7]
        elif line.startswith("# branch.head "):
            name = line[14:]
            branch = None if name == "(detached)" else name
        elif line.startswith("# branch.upstream "):
            upstream = line[18:]
        elif line.startswith("# branch.ab "):
            a, b = line[12:].split()
            ahead, behind = int(a), -int(b)
        elif line.startswith("1 ") or line.startswith("2 "):
            parts = line.split(" ", 8 if line[0] == "1" else 9)
            path = parts[-1].split("\t")[0] if line[0] == "2" else parts[-1]
            changes.append(f"{parts[1].replace('.', ' ')} {path}")
        elif line.startswith("u "):
            changes.append(f"UU {line.split(' ', 10)[-1]}")
        elif line.startswith("? "):
            changes.append(f"?? {line[2:]}")
    return Snapshot(branch, head, upstream, ahead, behind, changes)


def parse_changes(text: str) -> list[tuple[str, str]]:
    """(XY, path) of each entry of ``git status --porcelain=v1 -z`` (a rename's path reads ``old -> new``)."""
    fields = text.split("\0")
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        xy, path = entry[:2], entry[3:]
        if xy[0] in "RC" and i < len(fields):  # -z puts the old name in the next field
            path = f"{fields[i]} -> {path}"
            i += 1
        out.append((xy, path))
    return out
