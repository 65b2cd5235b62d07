"""What removing a worktree would lose, and the archive that keeps it.

``survey`` lists everything in a worktree that ``git worktree remove`` would destroy and
that is not in a ref: modified, staged and untracked files; ignored files that exo did not
put there and that are not regenerable (``DEFAULT_REGENERABLE``, configurable); nested
repositories anywhere in it (untracked, ignored, or submodule checkouts); operations in
progress (rebase, merge, cherry-pick, revert, bisect, am); and the commits only the
worktree's own state reaches (a detached HEAD, a paused rebase's rewritten commits, an
autostash: see ``gitdir.state_commits``). The branch's own commits are the caller's to
judge (by content, against its base).

``keep`` archives all of it restorably before a forced removal: commits as refs under
``refs/exo/archive/``, the uncommitted work as a stash-shaped (or snapshot) commit there
too, and, in a private folder (mode 0700) of exo's state, never in a git object that could
be pushed: the ignored files, each nested repository whole (its ``.git`` included) plus a
``git bundle`` of every ref, and a copy of the git state of an operation in progress. It
returns the commands that restore it, and writes them to ``RESTORE.txt`` in that folder.

Nothing here follows a symbolic link: links are listed, measured and copied as links. What
would be copied is measured first against a limit (each file counting at least 4 KiB), so
a huge ignored folder is refused rather than copied or silently skipped.
"""

from __future__ import annotations

import contextlib
import filecmp
import os
import shlex
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, NamedTuple

from exo_cli.adapters import gitdir
from exo_cli.adapters.files import atomic_write, ensure_private_dir
from exo_cli.adapters.git import Git
from exo_cli.adapters.gitrun import Finished
from exo_cli.adapters.rmtree import set_folder_mode
from exo_cli.config import DEFAULTS
from exo_cli.errors import StateError

ARCHIVE_REFS = "refs/exo/archive/"
EXO_FOLDER = ".exo/"  # exo's own folder in every worktree (context, services, logs)
# Ignored files that come back by themselves (a build, an install): cleanup.regenerable's default.
DEFAULT_REGENERABLE = tuple(DEFAULTS["cleanup"]["regenerable"])
DEFAULT_LIMIT_MB = int(DEFAULTS["cleanup"]["max_keep_mb"])  # the most exo copies into an archive
MIN_FILE_BYTES = 4096  # every file counts at least one block: a million empty files is not "nothing"
MAX_LISTED = 50  # commits listed per report


# --------------------------------------------------------------------------- patterns


def is_regenerable(rel: str, patterns: Sequence[str]) -> bool:
    """Whether ``rel`` (relative to the worktree; folders end in ``/``) or a folder it is in matches a pattern.

    The patterns are a small subset of ``.gitignore``'s: ``name/`` matches a folder of that
    name at any depth, ``name`` (``*``, ``?`` and ``[...]`` allowed) a file or folder name at
    any depth, and a pattern with a ``/`` inside matches the path from the worktree's top.
    """
    is_dir = rel.endswith("/")
    parts = [p for p in rel.rstrip("/").split("/") if p]
    for pattern in patterns:
        dir_only = pattern.endswith("/")
        pat = pattern.strip("/") if "/" in pattern.rstrip("/") else pattern.rstrip("/")
        if not pat:
            continue
        for n in range(1, len(parts) + 1):
            here_is_dir = n < len(parts) or is_dir
            if dir_only and not here_is_dir:
                continue
            subject = "/".join(parts[:n]) if "/" in pat else parts[n - 1]
            if fnmatchcase(subject, pat):
                return True
    return False


def _within(rel: str, owned: Iterable[str]) -> bool:
    """Whether ``rel`` is one of ``owned`` or inside one of its folders (``dir/``)."""
    for o in owned:
        if rel == o or rel.rstrip("/") == o.rstrip("/") or (o.endswith("/") and rel.startswith(o)):
            return True
    return False


# --------------------------------------------------------------------------- exo's own files


def exo_files(worktree: str, *, copies: Sequence[str] = (), source_root: str | None = None,
              written: Sequence[str] = ()) -> set[str]:
    """The paths (relative; folders end in ``/``) exo put into ``worktree`` and that hold only what exo put there.

    ``.exo/`` always; each of ``copies`` (absolute paths exo copied or linked from
    ``source_root``: ``worktree.copy`` and ``worktree.symlink``) while it is still the same
    link or the same bytes as its source; each of ``written`` (absolute paths of files an
    agent backend wrote, from its undo records).
    """
    owned = {EXO_FOLDER}

    def rel_of(path: str) -> str | None:
        rel = os.path.relpath(path, worktree)
        return None if rel == "." or rel.startswith("..") else rel

    for path in copies:
        rel = rel_of(path)
        if rel is None or source_root is None:
            continue
        src = os.path.join(source_root, rel)
        if os.path.islink(path):
            with contextlib.suppress(OSError):
                target = os.readlink(path)
                if target == src or (os.path.islink(src) and os.readlink(src) == target):
                    owned.add(rel)
        elif os.path.isfile(path):
            with contextlib.suppress(OSError):
                if os.path.isfile(src) and filecmp.cmp(path, src, shallow=False):
                    owned.add(rel)
        elif os.path.isdir(path) and os.path.isdir(src) and _same_tree(path, src):
            owned.add(rel + "/")
    for path in written:
        rel = rel_of(path)
        if rel is not None:
            owned.add(rel + "/" if os.path.isdir(path) and not os.path.islink(path) else rel)
    return owned


def _same_tree(a: str, b: str) -> bool:
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    if mismatch or errors:
        return False
    return all(_same_tree(os.path.join(a, d), os.path.join(b, d)) for d in cmp.common_dirs)


# --------------------------------------------------------------------------- walking


def _is_repo(folder: str) -> bool:
    return os.path.lexists(os.path.join(folder, ".git")) and not os.path.islink(folder)


class TooBig(Exception):
    """What would be copied exceeds the limit."""


def measure(worktree: str, entries: Iterable[str], *, skip: Callable[[str], bool], limit: int) -> int:
    """Bytes the ``entries`` (relative; folders end in ``/``) take, each file counting at least 4 KiB.

    Links are not followed; paths ``skip`` accepts are left out (never inside a ``.git``).
    Raises ``TooBig`` as soon as the total passes ``limit``, so a huge folder is not walked whole.
    """
    total = 0

    def add(n: int) -> None:
        nonlocal total
        total += max(n, MIN_FILE_BYTES)
        if total > limit:
            raise TooBig(total)

    for entry in entries:
        top = os.path.join(worktree, entry.rstrip("/"))
        try:
            st = os.lstat(top)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            add(st.st_size)
            continue
        for folder, dirs, files in os.walk(top):
            rel_folder = os.path.relpath(folder, worktree)
            in_git = "/.git/" in f"/{rel_folder}/"
            kept_dirs = []
            for d in dirs:
                rel = f"{rel_folder}/{d}/"
                if in_git or d == ".git" or not skip(rel):
                    kept_dirs.append(d)
                    add(0)
            dirs[:] = kept_dirs
            for f in files:
                rel = f"{rel_folder}/{f}"
                if not in_git and skip(rel):
                    continue
                with contextlib.suppress(OSError):
                    add(os.lstat(os.path.join(folder, f)).st_size)
    return total


def _copy(src: str, dst: str, rel: str, *, skip: Callable[[str], bool], skipped: list[str]) -> None:
    """Copy ``src`` to ``dst`` as it is: links as links, folders recursively, special files listed in ``skipped``."""
    st = os.lstat(src)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(src), dst)
    elif stat.S_ISDIR(st.st_mode):
        os.mkdir(dst, 0o700)
        in_git = "/.git/" in f"/{rel}/"
        for name in sorted(os.listdir(src)):
            child = f"{rel}/{name}" if rel else name
            full = os.path.join(src, name)
            is_dir = os.path.isdir(full) and not os.path.islink(full)
            if not in_git and name != ".git" and skip(child + ("/" if is_dir else "")):
                continue
            _copy(full, os.path.join(dst, name), child, skip=skip, skipped=skipped)
        shutil.copystat(src, dst, follow_symlinks=False)
    elif stat.S_ISREG(st.st_mode):
        shutil.copy2(src, dst, follow_symlinks=False)
    else:
        skipped.append(rel)


# --------------------------------------------------------------------------- the survey


@dataclass
class Inventory:
    """What a worktree holds that its removal would destroy (see the module)."""

    worktree: str
    head: str | None = None  # HEAD's commit (None: no commit yet)
    head_branch: str | None = None  # the branch HEAD is on (None: detached)
    uncommitted: list[str] = field(default_factory=list)  # "XY path"
    untracked: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # folders end in "/"
    nested: list[str] = field(default_factory=list)  # nested repositories (relative paths)
    in_progress: list[str] = field(default_factory=list)  # rebase, merge, cherry-pick, revert, bisect, am
    lost_tips: dict[str, str] = field(default_factory=dict)  # label -> commit only the worktree's state reaches
    lost_commits: list[str] = field(default_factory=list)  # "sha subject (label)"
    keep_bytes: int = 0  # what keeping the ignored files and nested repositories takes
    too_big: bool = False  # keep_bytes passed the limit (counting stopped there)
    limit: int = DEFAULT_LIMIT_MB << 20
    regenerable: tuple[str, ...] = DEFAULT_REGENERABLE
    owned: set[str] = field(default_factory=set)
    layout: str = "worktree"  # "clone": an agent's own clone (restored as one)

    def losses(self) -> dict[str, list[str]]:
        """The non-empty kinds of work, in ``would_lose`` form."""
        kinds = {
            "uncommitted": self.uncommitted,
            "untracked": self.untracked,
            "ignored": self.ignored,
            "nested_repos": self.nested,
            "off_branch_commits": self.lost_commits,
            "in_progress": self.in_progress,
        }
        return {k: list(v) for k, v in kinds.items() if v}

    def skip(self, rel: str) -> bool:
        """Whether a path is left out of copies: regenerable, exo's, or a nested repository (kept on its own)."""
        return (is_regenerable(rel, self.regenerable) or _within(rel, self.owned)
                or rel.rstrip("/") in self.nested)


class Clone(NamedTuple):
    """An agent's own clone as ``survey`` reads it (``ops/checkout``): its reader, git state and refs."""

    git: Git  # reads the clone's work tree and index through exo's own git folder
    state: dict[str, str]  # label -> commit: its branches, tags, stash, detached HEAD, operation in progress
    in_progress: list[str]
    refs: str  # the repository's refs that keep it (refs/exo/clones/<id>/): they go with the clone


def survey(worktree: str, *, main: Git, regenerable: Sequence[str] = DEFAULT_REGENERABLE,
           owned: Iterable[str] = (EXO_FOLDER,), limit: int = DEFAULT_LIMIT_MB << 20,
           clone: Clone | None = None) -> Inventory:
    """Everything in ``worktree`` that removing it would lose (see the module); ``main`` is the repository's git.

    For an agent's own clone, ``clone`` gives the git that reads it (never the clone's own
    config) and what its git state holds, as fetched into the repository under its refs.
    """
    here = clone.git if clone is not None else main.at(worktree)
    inv = Inventory(worktree=worktree, regenerable=tuple(regenerable), owned=set(owned) | {EXO_FOLDER}, limit=limit)
    git_dir = gitdir.git_dir_of(worktree) if clone is None else None  # a clone's files: only through ``clone``
    inv.head = here.rev("HEAD")
    inv.head_branch = gitdir.head_branch(git_dir) if git_dir else here.current_branch()
    for xy, path in here.changes():
        if xy != "??":
            inv.uncommitted.append(f"{xy} {path}")
        elif path.endswith("/") and _is_repo(os.path.join(worktree, path)):
            inv.nested.append(path.rstrip("/"))
        elif not _within(path, inv.owned):
            inv.untracked.append(path)
    inv.ignored, nested = ignored_work(inv, here.ignored())
    inv.nested += nested
    inv.nested += [p for p in here.gitlinks() if _is_repo(os.path.join(worktree, p))]
    inv.nested = sorted(set(inv.nested))
    inv.ignored = [e for e in inv.ignored if e.rstrip("/") not in inv.nested]
    if clone is not None:
        inv.layout = "clone"
        inv.in_progress = clone.in_progress
        _lost(main, inv, clone.state, but=clone.refs)
    elif git_dir is not None:
        linked = (git_dir / "commondir").exists()  # a linked worktree's own folder (the main one's is shared)
        inv.in_progress = gitdir.operations(git_dir)
        _lost(main, inv, gitdir.state_commits(git_dir, linked=linked))
    try:
        inv.keep_bytes = measure(worktree, [*inv.ignored, *(n + "/" for n in inv.nested)], skip=inv.skip,
                                 limit=limit)
    except TooBig as big:
        inv.keep_bytes, inv.too_big = int(big.args[0]), True
    return inv


def ignored_work(inv: Inventory, entries: Iterable[str]) -> tuple[list[str], list[str]]:
    """(ignored entries to keep, nested repositories among them) of git's ignored ``entries`` (``Git.ignored``).

    The one rule of which ignored files are work (``complete`` and the checkpoints use it): not
    regenerable, not exo's own; a nested repository in an ignored folder is kept on its own.
    """
    kept = _ignored(inv, entries)
    nested: list[str] = []
    for entry in [e for e in kept if e.endswith("/")]:
        nested += _repos_under(inv.worktree, entry, inv)
    return kept, nested


def _ignored(inv: Inventory, entries: Iterable[str]) -> list[str]:
    """Ignored entries that are neither regenerable nor exo's; a folder holding exo's files is listed file by file."""
    out: list[str] = []
    for entry in entries:
        if is_regenerable(entry, inv.regenerable) or _within(entry, inv.owned):
            continue
        if entry.endswith("/") and any(o.startswith(entry) for o in inv.owned):
            top = os.path.join(inv.worktree, entry)
            for folder, dirs, files in os.walk(top):
                rel_folder = os.path.relpath(folder, inv.worktree)
                dirs[:] = [d for d in dirs if not inv.skip(f"{rel_folder}/{d}/")]
                out += [f"{rel_folder}/{f}" for f in files if not inv.skip(f"{rel_folder}/{f}")]
            continue
        out.append(entry)
    return out


def _repos_under(worktree: str, entry: str, inv: Inventory) -> list[str]:
    """Nested repositories in the (ignored) folder ``entry``, not descending into them or regenerable folders."""
    top = os.path.join(worktree, entry.rstrip("/"))
    if _is_repo(top):
        return [entry.rstrip("/")]
    found: list[str] = []
    for folder, dirs, _files in os.walk(top):
        rel_folder = os.path.relpath(folder, worktree)
        keep = []
        for d in dirs:
            rel = f"{rel_folder}/{d}"
            if is_regenerable(rel + "/", inv.regenerable):
                continue
            if _is_repo(os.path.join(folder, d)):
                found.append(rel)
            else:
                keep.append(d)
        dirs[:] = keep
    return found


def _lost(main: Git, inv: Inventory, state: Mapping[str, str], *, but: str | None = None) -> None:
    """Fill ``lost_tips`` and ``lost_commits``: commits the worktree's state reaches and no ref does (but the
    refs under ``but``, which go with it)."""
    commits = main.commits_among(state.values())
    tips = {label: sha for label, sha in state.items() if sha in commits}
    lost = main.unreachable_from_refs(tips.values(), but=but)
    if not lost:
        return
    lost_set = set(lost)
    seen: set[str] = set()
    for label, sha in tips.items():
        if sha in lost_set and sha not in seen:
            seen.add(sha)
            inv.lost_tips[label] = sha
    described = main.describe(lost[:MAX_LISTED])
    inv.lost_commits = described + ([f"... and {len(lost) - MAX_LISTED} more"] if len(lost) > MAX_LISTED else [])


# --------------------------------------------------------------------------- the archive


@dataclass(frozen=True)
class Kept:
    """What ``keep`` archived, and how to restore it."""

    refs: dict[str, str]  # ref -> sha
    restore: list[str]  # commands, in order; run them as written (they name every path)
    folder: str | None  # the private archive folder (None: nothing needed one)
    ignored: list[str]  # the ignored entries copied there
    nested: list[str]  # the nested repositories copied (and bundled) there
    notes: list[str]


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in label).strip(".-") or "x"


def keep(inv: Inventory, *, main: Git, archive_root: Path, label: str, branch: str | None, reason: str,
         here: Git | None = None) -> Kept:
    """Archive everything ``inv`` lists (see the module); StateError when it is too big to copy. ``here`` reads
    the checkout (an agent's clone's reader; default: git in the worktree)."""
    if inv.too_big:
        raise too_big_error(inv)
    wt = inv.worktree
    q = shlex.quote
    root = q(main.path)
    refs: dict[str, str] = {}
    restore: list[str] = []
    notes: list[str] = []
    if branch:
        sha = main.rev(f"refs/heads/{branch}")
        if sha:
            ref = main.keep_ref(ARCHIVE_REFS + branch, sha, reason=reason)
            refs[ref] = sha
            restore.append(f"git -C {root} branch {q(branch)} {q(ref)}")
    tip_refs: dict[str, str] = {}
    for tip_label, sha in inv.lost_tips.items():
        ref = main.keep_ref(f"{ARCHIVE_REFS}{label}-{_safe(tip_label)}", sha, reason=f"{reason} ({tip_label})")
        refs[ref] = sha
        tip_refs[tip_label] = ref
    if os.path.isdir(wt):
        restore += _restore_checkout(inv, main, branch, tip_refs)
        saved = (here or main.at(wt)).save_work(f"WIP archived ({reason})", label="exo archive")
        if saved:
            sha, how = saved
            ref = main.keep_ref(f"{ARCHIVE_REFS}{label}-wip", sha, reason=f"{reason} (uncommitted work)")
            refs[ref] = sha
            src = q(sha if inv.layout == "clone" else ref)  # a clone sees the repository's objects, not its refs
            restore.append(f"git -C {q(wt)} stash apply --index {src}" if how == "stash"
                           else f"git -C {q(wt)} restore --source={src} --worktree -- .")
            if how == "snapshot":
                notes.append("the uncommitted files were kept as they were on disk (conflict markers included); "
                             "the index's conflict state was not")
    for tip_label, ref in tip_refs.items():
        if tip_label != "HEAD":
            notes.append(f"kept {tip_label} of the worktree's git state at {ref}")
    folder: Path | None = None
    kept_nested: list[str] = []
    kept_ignored: list[str] = []
    if inv.nested or inv.ignored or inv.in_progress:
        folder = _new_folder(archive_root, label)
        skipped: list[str] = []
        for i, rel in enumerate(inv.nested, 1):
            restore += _keep_nested(main, inv, rel, folder / "nested" / str(i), notes, skipped)
            kept_nested.append(rel)
        if inv.ignored:
            dest = ensure_private_dir(folder / "ignored")
            for entry in inv.ignored:
                rel = entry.rstrip("/")
                src = os.path.join(wt, rel)
                if not os.path.lexists(src):
                    continue
                os.makedirs(os.path.dirname(os.path.join(dest, rel)) or dest, mode=0o700, exist_ok=True)
                _copy(src, str(dest / rel), rel, skip=inv.skip, skipped=skipped)
                kept_ignored.append(entry)
            restore.append(f"cp -a {q(str(dest))}/. {q(wt)}/")
        if inv.in_progress:
            _keep_git_state(wt, folder / "git-state")
            notes.append(f"a {', '.join(inv.in_progress)} was in progress: its commits are restored, the operation "
                         f"itself is not (its git files are kept in {folder / 'git-state'})")
        if skipped:
            notes.append(f"special files (sockets, pipes, devices) not copied: {', '.join(skipped[:10])}")
        _write_restore(folder, restore, notes, refs)
    return Kept(refs=refs, restore=restore, folder=str(folder) if folder else None, ignored=kept_ignored,
                nested=kept_nested, notes=notes)


def too_big_error(inv: Inventory) -> StateError:
    """The refusal of an archive over the limit: what is big, and what to do."""
    big = _biggest(inv)
    mb = inv.limit >> 20
    return StateError(
        f"Not archiving {inv.worktree}: its ignored files and nested repositories take more than {mb} MiB "
        f"({', '.join(big)})",
        hint="Move or delete what you do not need, add regenerable folders to cleanup.regenerable, or raise "
        "cleanup.max_keep_mb in exo.toml; exo copies everything it keeps and never skips a file silently.",
        worktree=inv.worktree, limit_mb=mb, largest=big, reason="too-big",
    )


def _biggest(inv: Inventory, n: int = 5) -> list[str]:
    sizes: list[tuple[int, str]] = []
    for entry in [*inv.ignored, *(x + "/" for x in inv.nested)]:
        try:
            size = measure(inv.worktree, [entry], skip=inv.skip, limit=inv.limit)
        except TooBig as big:
            size = int(big.args[0])
        sizes.append((size, entry))
    sizes.sort(reverse=True)
    return [f"{entry} ({'>' if size > inv.limit else ''}{size >> 20} MiB)" for size, entry in sizes[:n]]


def _restore_checkout(inv: Inventory, main: Git, branch: str | None, tip_refs: Mapping[str, str]) -> list[str]:
    """The checkout as it was, on its branch or detached at its HEAD: ``git worktree add`` for a worktree, ``git
    clone --shared`` for an agent's own clone (which sees every commit of the repository, the archived ones too)."""
    q = shlex.quote
    root, wt = q(main.path), q(inv.worktree)
    on_branch = bool(inv.head_branch and main.rev(f"refs/heads/{inv.head_branch}"))
    at = tip_refs.get("HEAD") or inv.head or (f"refs/heads/{branch}" if branch else None)
    if inv.layout == "clone":
        if on_branch:
            return [f"git clone --shared --branch {q(inv.head_branch or '')} {root} {wt}"]
        sha = main.rev(at) if at else None
        return [f"git clone --shared --no-checkout {root} {wt}", f"git -C {wt} checkout --detach {q(sha)}"] if sha \
            else []
    if on_branch:
        return [f"git -C {root} worktree add {wt} {q(inv.head_branch or '')}"]
    return [f"git -C {root} worktree add --detach {wt} {q(at)}"] if at else []


def _new_folder(archive_root: Path, label: str) -> Path:
    ensure_private_dir(archive_root, parents=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = f"{stamp}-{_safe(label)}"
    for n in range(1, 10000):
        candidate = archive_root / (base if n == 1 else f"{base}.{n}")
        try:
            os.mkdir(candidate, 0o700)
            return candidate
        except FileExistsError:
            continue
    raise StateError(f"Too many archives named {base} in {archive_root}")


def _keep_nested(main: Git, inv: Inventory, rel: str, dest: Path, notes: list[str], skipped: list[str]) -> list[str]:
    """Copy the nested repository at ``rel`` whole (its ``.git`` too) and bundle its refs; its restore commands."""
    q = shlex.quote
    src = os.path.join(inv.worktree, rel)
    ensure_private_dir(dest.parent)
    _copy(src, str(dest), rel, skip=inv.skip, skipped=skipped)
    with contextlib.suppress(OSError):  # the folder copied, never a link's target (swapped in since the survey)
        set_folder_mode(dest, 0o700)
    dot = dest / ".git"
    if dot.is_file() and not dot.is_symlink():  # a submodule: its git folder lives in the worktree's, which goes
        real = gitdir.git_dir_of(src)
        dot.unlink()
        if real is not None and real.is_dir():
            _copy(str(real), str(dot), ".git", skip=lambda _rel: False, skipped=skipped)
            main.run(["config", "--file", str(dot / "config"), "--unset", "core.worktree"], check=False)
    if os.path.islink(os.path.join(src, ".git")):  # its history lives elsewhere, not ours to copy: kept as the link
        notes.append(f"nested repository {rel}: its .git is a link to {os.readlink(os.path.join(src, '.git'))}; "
                     "kept as that link, with its files")
        target = os.path.join(inv.worktree, rel)
        return [f"mkdir -p {q(target)}", f"cp -a {q(str(dest))}/. {q(target)}/"]
    bundle = dest.parent / f"{dest.name}.bundle"
    proc = _bundle_copy(main, dest, bundle)
    if proc.returncode != 0:
        notes.append(f"nested repository {rel}: no bundle ({(proc.stderr.strip().splitlines() or ['no commits'])[-1]});"
                     " its folder is kept whole")
    target = os.path.join(inv.worktree, rel)
    return [f"mkdir -p {q(target)}", f"cp -a {q(str(dest))}/. {q(target)}/"]


def _bundle_copy(main: Git, repo: Path, bundle: Path) -> Finished:
    """Bundle exo's copy ``repo`` of a nested repository with exo's configuration in place of its own (which is the
    agent's: an ``include.path`` naming a FIFO or a huge file would hold git); its own is put back after."""
    config, saved = repo / ".git" / "config", repo / ".git" / "config.exo-saved"
    if not (repo / ".git").is_dir() or (repo / ".git").is_symlink():
        return main.at(repo).bundle_all(bundle)  # no git folder of its own: git says so
    had = os.path.lexists(config)
    if had:
        os.replace(config, saved)
    try:
        keep = ""
        st = os.lstat(saved) if had else None
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_size <= 1 << 20:  # its format, read as a file
            keep = main.run(["config", "--file", str(saved), "--get-regexp",
                             r"^(core\.repositoryformatversion|extensions\..*)$"], check=False).stdout
        lines = [line.split(" ", 1) for line in keep.splitlines() if " " in line and "\n" not in line]
        text = "[core]\n\tbare = false\n" + "".join(f"\t{k.split('.', 1)[1]} = {v}\n" for k, v in lines
                                                    if k.startswith("core."))
        ext = [(k.split(".", 1)[1], v) for k, v in lines if k.startswith("extensions.")]
        text += ("[extensions]\n" + "".join(f"\t{k} = {v}\n" for k, v in ext)) if ext else ""
        atomic_write(config, text, mode=0o600, fsync=False)
        return main.at(repo).bundle_all(bundle)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(config)
        if had:
            os.replace(saved, config)


def _keep_git_state(wt: str, dest: Path) -> None:
    """A copy of the files of the operation in progress in ``wt``'s git folder."""
    git_dir = gitdir.git_dir_of(wt)
    if git_dir is None:
        return
    ensure_private_dir(dest)
    for name in gitdir.STATE_FILES:
        src = git_dir / name
        if os.path.lexists(src):
            with contextlib.suppress(OSError):
                _copy(str(src), str(dest / name), name, skip=lambda _rel: False, skipped=[])


def _write_restore(folder: Path, restore: Sequence[str], notes: Sequence[str], refs: Mapping[str, str]) -> None:
    from exo_cli.adapters.files import atomic_write

    lines = ["# What exo archived here, and how to restore it (run the commands in order).", ""]
    lines += [f"# {ref} = {sha}" for ref, sha in refs.items()]
    lines += [f"# note: {n}" for n in notes]
    lines += ["", *restore, ""]
    atomic_write(folder / "RESTORE.txt", "\n".join(lines), mode=0o600, fsync=False)


def describe_kept(kept: Kept) -> dict[str, Any]:
    """A JSON-ready summary of ``kept`` (for records and events)."""
    return {"refs": kept.refs, "restore": kept.restore, "folder": kept.folder, "ignored": kept.ignored,
            "nested": kept.nested, "notes": kept.notes}


__all__ = ["ARCHIVE_REFS", "DEFAULT_LIMIT_MB", "DEFAULT_REGENERABLE", "EXO_FOLDER", "Inventory", "Kept", "TooBig",
           "describe_kept", "exo_files", "ignored_work", "is_regenerable", "keep", "measure", "survey", "too_big_error"]
