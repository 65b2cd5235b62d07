"""A checkout's own git folder, read directly: operations in progress and the commits they hold.

Every checkout of a repository (the main one and each linked worktree) has its own git
folder: the main checkout's is the common ``.git``, a linked worktree's is
``.git/worktrees/<name>`` (its ``.git`` file says where). That folder holds what
``git worktree remove`` throws away with the checkout: its ``HEAD`` (a detached HEAD's
commits), a paused rebase (``rebase-merge/``, ``rebase-apply/``: the original branch, the
commits rewritten so far, an autostash), a merge, cherry-pick or revert in progress
(``MERGE_HEAD``, ``CHERRY_PICK_HEAD``, ``REVERT_HEAD``, ``sequencer/``), a bisect
(``BISECT_LOG``, ``BISECT_START``, ``refs/bisect/``) and its per-worktree refs
(``refs/worktree/``, ``refs/rewritten/``). This module reads those files (no git process)
so that removal and merging can see them; which of the commits are reachable from a ref
is the git client's question.

``common_dir`` finds a repository's shared git folder the same way, by reading files: for a
shell's TAB, where even one git process is a noticeable part of the budget. It knows the common
cases (a main checkout, a linked worktree, ``GIT_DIR``/``GIT_COMMON_DIR``) and answers None for
anything else, so its callers simply offer nothing; everything else asks git (``Git.discover``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from exo_cli.adapters.files import atomic_write, read_regular_text
from exo_cli.lite import NamedTuple

# A full object name, SHA-1 or SHA-256.
_SHA = re.compile(r"\b(?:[0-9a-f]{64}|[0-9a-f]{40})\b")
# Files at the top of a checkout's git folder that name commits it would lose.
HEAD_FILES = ("HEAD", "ORIG_HEAD", "MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "REBASE_HEAD",
              "BISECT_HEAD", "AUTO_MERGE")
# Folders of an operation in progress, read whole (todo lists, autostash, rewritten commits).
STATE_DIRS = ("rebase-merge", "rebase-apply", "sequencer")
# Every file and folder that belongs to an operation in progress (what an archive keeps a copy of).
STATE_FILES = (*STATE_DIRS, *HEAD_FILES[1:], "BISECT_LOG", "BISECT_START", "BISECT_TERMS", "BISECT_NAMES",
               "BISECT_EXPECTED_REV", "BISECT_ANCESTORS_OK", "MERGE_MSG", "MERGE_MODE", "MERGE_RR",
               "SQUASH_MSG", "refs")
# Per-worktree ref namespaces (in a linked worktree's own folder, gone with it).
WORKTREE_REFS = ("refs/bisect", "refs/worktree", "refs/rewritten")


def git_dir_of(checkout: str | os.PathLike[str]) -> Path | None:
    """The git folder of ``checkout``: its ``.git`` folder, or where its ``.git`` file points; None without one."""
    dot = Path(checkout) / ".git"
    if dot.is_dir() and not dot.is_symlink():
        return dot
    text = read_regular_text(dot, limit=4096, follow=False)  # the checkout's: never a FIFO, a device or a link
    if text is None or not text.startswith("gitdir:"):
        return None
    target = Path(text[len("gitdir:"):].strip())
    return target if target.is_absolute() else (Path(checkout) / target)


def _common(git_dir: Path) -> Path:
    """A linked worktree's git folder names the shared one in its ``commondir`` file."""
    return common_of(git_dir) or git_dir


def common_of(git_dir: Path) -> Path | None:
    """The shared git folder ``git_dir``'s ``commondir`` names (``git_dir`` without one); None when that file
    is there but unreadable (a FIFO, a device, a link, empty)."""
    common = _read(git_dir / "commondir")
    if not common:
        return None if os.path.lexists(git_dir / "commondir") else git_dir
    path = Path(common)
    return path if path.is_absolute() else git_dir / path


def common_dir(start: str | os.PathLike[str], environ: Mapping[str, str]) -> Path | None:
    """The shared git folder of the repository around ``start`` (or above it), or None when none is found."""
    if environ.get("GIT_COMMON_DIR"):
        return Path(environ["GIT_COMMON_DIR"])
    if environ.get("GIT_DIR"):
        return _common(Path(environ["GIT_DIR"]))
    here = Path(start).absolute()
    for folder in (here, *here.parents):
        if os.path.lexists(folder / ".git"):
            git_dir = git_dir_of(folder)
            return _common(git_dir).resolve() if git_dir is not None else None
    return None


def _read(path: Path, limit: int = 1 << 20) -> str:
    """A git folder's file (an agent's to write): "" when missing or no regular file (a FIFO, a device, a link)."""
    return (read_regular_text(path, limit=limit, follow=False) or "").strip()


def operations(git_dir: Path) -> list[str]:
    """The operations in progress in the checkout of ``git_dir``: rebase, am, merge, cherry-pick, revert, bisect."""
    out: list[str] = []
    if (git_dir / "rebase-merge").is_dir():
        out.append("rebase")
    elif (git_dir / "rebase-apply").is_dir():
        out.append("am" if (git_dir / "rebase-apply" / "applying").exists() else "rebase")
    if (git_dir / "MERGE_HEAD").exists():
        out.append("merge")
    todo = _read(git_dir / "sequencer" / "todo")
    if (git_dir / "CHERRY_PICK_HEAD").exists() or todo.startswith(("pick", "p ")):
        out.append("cherry-pick")
    if (git_dir / "REVERT_HEAD").exists() or todo.startswith(("revert", "r ")):
        out.append("revert")
    if (git_dir / "sequencer").is_dir() and not {"cherry-pick", "revert"} & set(out):
        out.append("cherry-pick")
    if (git_dir / "BISECT_LOG").exists() or (git_dir / "BISECT_START").exists():
        out.append("bisect")
    return out


def head_branch(git_dir: Path) -> str | None:
    """The branch ``HEAD`` is on (None when detached)."""
    head = _read(git_dir / "HEAD")
    return head[len("ref: refs/heads/"):] if head.startswith("ref: refs/heads/") else None


def head_commit(git_dir: Path) -> str | None:
    """The commit ``HEAD`` names, read from the files (a loose or packed branch); None when unborn or unsure."""
    text = _read(git_dir / "HEAD")
    for _depth in range(5):
        if _SHA.fullmatch(text):
            return text
        if not text.startswith("ref: refs/"):
            return None
        ref = text[5:].strip()
        if ".." in ref.split("/"):
            return None
        text = _read(_common(git_dir) / ref)
        if not text:
            return _packed(_common(git_dir), ref)
    return None


def ref_commit(git_dir: Path, ref: str) -> str | None:
    """The object ``ref`` (``refs/...``) names in the repository of ``git_dir``, read from its loose or packed
    file (never a FIFO, a device or a link); None when unsure."""
    if not ref.startswith("refs/") or any(p in ("", ".", "..") for p in ref.split("/")):
        return None
    common = _common(git_dir)
    text = _read(common / ref, 4096)
    if text:
        return text if _SHA.fullmatch(text) else None
    return _packed(common, ref)


def _packed(common: Path, ref: str) -> str | None:
    for line in _read(common / "packed-refs", 256 << 20).splitlines():
        sha, _, name = line.partition(" ")
        if name == ref and _SHA.fullmatch(sha):
            return sha
    return None


def branches_concerned(git_dir: Path) -> set[str]:
    """Every branch this checkout has out or is in the middle of working on.

    ``HEAD``'s branch, the branch a paused rebase will update (``head-name``), and the
    branch a bisect started from (``BISECT_START``): during a rebase or a bisect ``HEAD``
    is detached, but the checkout is still that branch's.
    """
    out: set[str] = set()
    branch = head_branch(git_dir)
    if branch:
        out.add(branch)
    for name in ("rebase-merge/head-name", "rebase-apply/head-name"):
        text = _read(git_dir / name)
        if text.startswith("refs/heads/"):
            out.add(text[len("refs/heads/"):])
    start = _read(git_dir / "BISECT_START")
    if start and not _SHA.fullmatch(start):
        out.add(start.removeprefix("refs/heads/"))
    return out


def _files(root: Path) -> Iterator[Path]:
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            yield Path(folder) / name


def state_commits(git_dir: Path, *, linked: bool = True) -> dict[str, str]:
    """Object names the checkout's own state holds: label -> name (not checked to be commits).

    A detached ``HEAD``, the other ``*_HEAD`` files, every name in ``rebase-merge/``,
    ``rebase-apply/`` and ``sequencer/`` (an autostash, the commits rewritten so far, the
    original branch), and, for a linked worktree (``linked``), its per-worktree refs. A
    file naming several objects gives labels ``file#2``, ``file#3``... A ``HEAD`` on a branch
    is the branch's business (a ref), so it is not listed; neither is ``ORIG_HEAD`` when no
    operation is in progress (it is then what a finished rebase or a reset left behind, the
    commits they replaced on purpose, like the reflog's).
    """
    found: dict[str, str] = {}
    busy = bool(operations(git_dir))

    def add(label: str, text: str) -> None:
        for i, sha in enumerate(dict.fromkeys(_SHA.findall(text))):
            found[label if i == 0 else f"{label}#{i + 1}"] = sha

    for name in HEAD_FILES:
        text = _read(git_dir / name)
        if (name == "HEAD" and text.startswith("ref:")) or (name == "ORIG_HEAD" and not busy):
            continue
        add(name, text)
    for name in STATE_DIRS:
        folder = git_dir / name
        if folder.is_dir():
            for path in _files(folder):
                add(path.relative_to(git_dir).as_posix(), _read(path))
    if linked:
        for ns in WORKTREE_REFS:
            folder = git_dir / ns
            if folder.is_dir():
                for path in _files(folder):
                    add(path.relative_to(git_dir).as_posix(), _read(path))
    return found


class Checkout(NamedTuple):
    """One checkout of a repository as its git folder describes it."""

    path: str  # the checkout's folder ("" when its git folder does not say)
    git_dir: str
    branches: set[str]  # see ``branches_concerned``
    operations: list[str]  # see ``operations``


def checkouts(common_dir: str | os.PathLike[str]) -> list[Checkout]:
    """Every checkout of the repository whose shared git folder is ``common_dir``, the main one first."""
    common = Path(common_dir)
    out: list[Checkout] = []
    if (common / "HEAD").exists() and not _read(common / "config").count("bare = true"):
        out.append(Checkout(str(common.parent), str(common), branches_concerned(common), operations(common)))
    admin = common / "worktrees"
    if admin.is_dir():
        for entry in sorted(admin.iterdir()):
            if not (entry / "HEAD").exists():
                continue
            dot_git = _read(entry / "gitdir")
            if dot_git and not os.path.lexists(dot_git):
                continue  # its folder is gone (prunable): nothing there to protect
            path = str(Path(dot_git).parent) if dot_git else ""
            out.append(Checkout(path, str(entry), branches_concerned(entry), operations(entry)))
    return out


class Locks(NamedTuple):
    """The ``*.lock`` files in the folders where git takes its locks, at one moment."""

    folders: frozenset[str]  # the folders looked at (a lock elsewhere is not known)
    files: dict[str, int]  # path -> inode


def git_dir_around(path: str | os.PathLike[str]) -> Path | None:
    """The git folder of the checkout ``path`` is in (or of the bare repository ``path`` is), or None."""
    here = Path(path).absolute()
    if (here / "HEAD").is_file() and (here / "objects").is_dir() and (here / "refs").is_dir():
        return here  # a bare repository or a git folder itself
    for folder in (here, *here.parents):
        if os.path.lexists(folder / ".git"):
            return git_dir_of(folder)
    return None


def lock_files(path: str | os.PathLike[str]) -> Locks | None:
    """Every ``*.lock`` git may hold for a command run in ``path``: at the top of its git folder and of the
    shared one, under their ``refs/``, in each checkout's folder (``worktrees/*``) and ``objects/info``.
    None when no git folder is found there."""
    git_dir = git_dir_around(path)
    if git_dir is None:
        return None
    common = _common(git_dir)
    folders: set[str] = set()
    files: dict[str, int] = {}

    def scan(folder: str, deep: bool) -> None:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        folders.add(folder)
        for entry in entries:
            try:
                if entry.name.endswith(".lock") and not entry.is_dir(follow_symlinks=False):
                    files[entry.path] = entry.inode()
                elif deep and entry.is_dir(follow_symlinks=False):
                    scan(entry.path, True)
            except OSError:
                continue

    for root in dict.fromkeys((os.path.realpath(git_dir), os.path.realpath(common))):
        scan(root, False)
        scan(os.path.join(root, "refs"), True)
    shared = os.path.realpath(common)
    scan(os.path.join(shared, "objects", "info"), False)
    admin = os.path.join(shared, "worktrees")
    try:
        names = os.listdir(admin)
    except OSError:
        names = []
    for name in names:
        scan(os.path.join(admin, name), False)
    return Locks(frozenset(folders), files)


def created_locks(held: Mapping[str, int], before: Locks | None) -> dict[str, int]:
    """Of the lock files ``held`` (path -> inode, open in a process of one git call), those that call created:
    in a folder ``before`` looked at, and not the same file as one that was there before it. Without
    ``before`` nothing is known, so nothing is."""
    if before is None:
        return {}
    out = {}
    for path, inode in held.items():
        real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        if os.path.dirname(real) in before.folders and before.files.get(real) != inode:
            out[real] = inode
    return out


def remove_locks(locks: Mapping[str, int]) -> list[str]:
    """Remove each lock file (path -> inode) that is still that very file; the paths removed."""
    gone = []
    for path, inode in sorted(locks.items()):
        try:
            if os.lstat(path).st_ino != inode:
                continue  # released, and taken again by someone else
            os.unlink(path)
        except OSError:
            continue
        gone.append(path)
    return gone


__all__ = ["HEAD_FILES", "STATE_DIRS", "STATE_FILES", "Checkout", "Locks", "branches_concerned", "checkouts", "common_dir",
           "created_locks", "git_dir_around", "git_dir_of", "head_branch", "head_commit", "common_of", "lock_files", "operations", "ref_commit",
           "remove_locks", "state_commits"]


EXCLUDE_LIMIT = 16 << 20  # bytes of info/exclude exo reads


def add_exclude(common_dir: Path, pattern: str) -> bool:
    """Add ``pattern`` to ``info/exclude`` once; return True when it was added."""
    path = common_dir / "info" / "exclude"
    path.parent.mkdir(parents=True, exist_ok=True)
    existing = read_regular_text(path, limit=EXCLUDE_LIMIT, follow=False)
    if existing is None:
        if os.path.lexists(path):
            return False  # a link, a FIFO, a device, a huge file: never written through nor replaced
        existing = ""
    if pattern in existing.splitlines():
        return False
    atomic_write(path, existing + ("\n" if existing and not existing.endswith("\n") else "") + pattern + "\n")
    return True


def remove_exclude(common_dir: Path, pattern: str) -> bool:
    """Take every ``pattern`` line out of ``info/exclude`` (the rest byte for byte); True when one was there."""
    path = common_dir / "info" / "exclude"
    existing = read_regular_text(path, limit=EXCLUDE_LIMIT, follow=False)
    if existing is None:
        return False
    lines = existing.splitlines(keepends=True)
    kept = [line for line in lines if line.rstrip("\r\n") != pattern]
    if len(kept) == len(lines):
        return False
    atomic_write(path, "".join(kept))
    return True


def shared_clone_top(cwd: str | os.PathLike[str]) -> str | None:
    """The top of the ``git clone --shared`` around ``cwd``, found as files, never by git (a clone's configuration
    is its owner's: an ``include.path`` naming a FIFO would hold git, ``core.worktree`` would move it): the
    nearest folder up from ``cwd`` with a ``.git``, when that is a folder (no link) whose object store has
    alternates. None otherwise."""
    here = os.path.abspath(cwd)
    while not os.path.lexists(os.path.join(here, ".git")):  # on the hooks' path: a few lstat calls
        if os.path.dirname(here) == here:
            return None
        here = os.path.dirname(here)
    dot = os.path.join(here, ".git")
    if os.path.islink(dot) or not os.path.lexists(os.path.join(dot, "objects", "info", "alternates")):
        return None
    return here
