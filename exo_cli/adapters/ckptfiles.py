"""A checkpoint's ignored files: private copies in exo's state, never in a git object.

Ignored files that are work (``keep.ignored_work``: not regenerable, not exo's own) hold what
git never sees: a ``.env``, local data, a notebook's outputs. A checkpoint keeps them beside
its commit, in the checkpoint folder of the agent (mode 0700, files 0600):

- ``blobs/<sha256[:2]>/<sha256>``: each content once (a file unchanged since the last
  checkpoint is not read again: its size, times and inode say so), so storage grows with what
  changed, never with the checkout's size;
- ``ignored/<n>.json``: checkpoint ``n``'s manifest, ``{path: [mode, size, mtime_ns, ctime_ns,
  ino, sha256 or link target]}``.

``restore`` writes such a manifest back (files, links, their modes); what the manifest of the
present has and the target's lacks is deleted (the present was checkpointed first, so nothing
is lost). Nothing here follows a symbolic link: links are kept and restored as links, and a
file is never written through a link or a file in the way of its folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from exo_cli.adapters.files import atomic_write, ensure_private_dir

Manifest = dict[str, list[Any]]  # path -> [mode, size, mtime_ns, ctime_ns, ino, sha256 or link target]
CHUNK = 1 << 20


def walk(worktree: str, entries: Iterable[str], *, skip: Callable[[str], bool]) -> Iterator[tuple[str, os.stat_result]]:
    """(path, lstat) of every file and link in ``entries`` (relative; folders end in ``/``), folders walked.

    Links are not followed; paths ``skip`` accepts are left out (a nested repository, a
    regenerable folder, exo's own files).
    """
    for entry in entries:
        rel = entry.rstrip("/")
        top = os.path.join(worktree, rel)
        try:
            st = os.lstat(top)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            yield rel, st
            continue
        for folder, dirs, files in os.walk(top):
            rel_folder = os.path.relpath(folder, worktree)
            dirs[:] = sorted(d for d in dirs if not skip(f"{rel_folder}/{d}/") and d != ".git")
            links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]  # walked as files, not followed
            dirs[:] = [d for d in dirs if d not in links]
            for name in sorted([*files, *links]):
                path = f"{rel_folder}/{name}"
                if skip(path):
                    continue
                with contextlib.suppress(OSError):
                    yield path, os.lstat(os.path.join(folder, name))


def snapshot(worktree: str, files: Iterable[tuple[str, os.stat_result]], *, store: Path, previous: Mapping[str, list[Any]],
             max_file: int, max_total: int) -> tuple[Manifest, list[tuple[str, str]]]:
    """Copy the ignored ``files`` into ``store``: (manifest, (path, why) of each file not kept).

    A file whose size, times and inode match ``previous`` keeps its recorded content without
    being read. Special files (sockets, pipes, devices), files over ``max_file`` bytes and
    what comes after ``max_total`` bytes of files are not kept, and listed.
    """
    manifest: Manifest = {}
    not_kept: list[tuple[str, str]] = []
    total = 0
    for rel, st in files:
        if stat.S_ISLNK(st.st_mode):
            with contextlib.suppress(OSError):
                manifest[rel] = [st.st_mode, 0, 0, 0, 0, os.readlink(os.path.join(worktree, rel))]
            continue
        if not stat.S_ISREG(st.st_mode):
            not_kept.append((rel, "not a regular file"))
            continue
        if st.st_size > max_file:
            not_kept.append((rel, f"over {max_file >> 20} MiB"))
            continue
        total += st.st_size
        if total > max_total:
            not_kept.append((rel, f"past the {max_total >> 20} MiB of ignored files one checkpoint copies"))
            continue
        key = [st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        before = previous.get(rel)
        if before and before[:5] == key and _has(store, str(before[5])):
            manifest[rel] = [*key, before[5]]
            continue
        try:
            sha, st = _copy_in(os.path.join(worktree, rel), store)
        except OSError as exc:
            not_kept.append((rel, f"unreadable: {exc.strerror}"))
            continue
        manifest[rel] = [st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, sha]
    return manifest, not_kept


def _blob(store: Path, sha: str) -> Path:
    return store / sha[:2] / sha


def _has(store: Path, sha: str) -> bool:
    return len(sha) == 64 and _blob(store, sha).is_file()


def _copy_in(path: str, store: Path) -> tuple[str, os.stat_result]:
    """Copy the file at ``path`` (never through a link) into the store; its sha256 and its stat as read."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(0, "not a regular file")
        tmp = ensure_private_dir(store, parents=True) / f".in.{os.getpid()}"
        digest = hashlib.sha256()
        with open(tmp, "wb", opener=lambda p, f: os.open(p, f, 0o600)) as out:
            while chunk := os.read(fd, CHUNK):
                digest.update(chunk)
                out.write(chunk)
        sha = digest.hexdigest()
        final = _blob(store, sha)
        ensure_private_dir(final.parent)
        if final.exists():
            os.unlink(tmp)
        else:
            os.replace(tmp, final)
        return sha, st
    finally:
        os.close(fd)


def write_manifest(path: Path, manifest: Manifest) -> None:
    atomic_write(path, json.dumps(manifest, separators=(",", ":"), sort_keys=True), mode=0o600, fsync=False)


def read_manifest(path: Path) -> Manifest:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, list) and len(v) == 6} if isinstance(data, dict) else {}


def digest(manifest: Manifest) -> str:
    """What identifies a manifest's content (paths, modes, contents; not times)."""
    rows = sorted((p, v[0], v[5]) for p, v in manifest.items())
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def collect(store: Path, manifests: Iterable[Manifest]) -> int:
    """Delete the blobs no manifest of ``manifests`` names (and copies a killed process left); how many."""
    wanted = {str(v[5]) for m in manifests for v in m.values() if not stat.S_ISLNK(int(v[0]))}
    gone = 0
    if not store.is_dir():
        return 0
    for sub in store.iterdir():
        if sub.name.startswith(".in.") and sub.name != f".in.{os.getpid()}":
            with contextlib.suppress(OSError):
                sub.unlink()
            continue
        if not sub.is_dir():
            continue
        for blob in sub.iterdir():
            if blob.name not in wanted:
                with contextlib.suppress(OSError):
                    blob.unlink()
                    gone += 1
    return gone


# --------------------------------------------------------------------------- writing back


def in_the_way(worktree: str, rel: str, *, folder_ok: bool = False) -> str | None:
    """What stops writing ``rel`` without following a link: a link or a file among its folders, or (unless
    ``folder_ok``) a folder at it."""
    parts = rel.split("/")
    for n in range(1, len(parts)):
        here = os.path.join(worktree, *parts[:n])
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"{'/'.join(parts[:n])}: {exc.strerror}"
        if not stat.S_ISDIR(st.st_mode):
            return f"{'/'.join(parts[:n])} is {'a link' if stat.S_ISLNK(st.st_mode) else 'a file'}"
    full = os.path.join(worktree, rel)
    if not folder_ok and os.path.isdir(full) and not os.path.islink(full):
        with contextlib.suppress(OSError):
            os.rmdir(full)  # an empty folder is no loss
        if os.path.isdir(full):
            return f"{rel} is a folder"
    return None


def safe_rel(rel: str) -> bool:
    """Whether ``rel`` names a place inside the checkout (relative, no ``..``, not in a ``.git``)."""
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and ".." not in parts and ".git" not in parts and "" not in parts


def remove(worktree: str, rel: str) -> bool:
    """Delete the file or link ``rel``, then its folders that became empty; never through a link or a file among
    its folders (False: not deleted; True also when it is gone already)."""
    if not safe_rel(rel):
        return False
    parts = rel.split("/")
    for n in range(1, len(parts)):
        try:
            st = os.lstat(os.path.join(worktree, *parts[:n]))
        except FileNotFoundError:
            return True
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode):
            return False  # a link (or a file) where a folder was: what it points to is not the checkout's
    full = os.path.join(worktree, rel)
    try:
        if stat.S_ISDIR(os.lstat(full).st_mode):
            return False
        os.unlink(full)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    prune_empty(worktree, rel)
    return True


def prune_empty(worktree: str, rel: str) -> None:
    """Remove the folders of ``rel`` that are empty now, up to the worktree's top."""
    parts = rel.split("/")[:-1]
    while parts:
        try:
            os.rmdir(os.path.join(worktree, *parts))
        except OSError:
            return
        parts.pop()


def restore(worktree: str, store: Path, target: Manifest, present: Manifest, *,
            keep: Callable[[str], bool] = lambda _rel: True) -> tuple[list[str], list[str], list[str]]:
    """Make the ignored files of ``worktree`` those of ``target``: (written, deleted, not restored with why).

    Only paths ``keep`` accepts are touched. A file already as the target has it is left
    alone; one the present has and the target lacks is deleted.
    """
    written: list[str] = []
    deleted: list[str] = []
    skipped: list[str] = []
    for rel in sorted(set(present) - set(target)):
        if not keep(rel):
            continue
        if remove(worktree, rel):
            deleted.append(rel)
        else:
            skipped.append(f"{rel} (could not be deleted)")
    for rel, entry in sorted(target.items()):
        if not keep(rel):
            continue
        if not safe_rel(rel):
            skipped.append(f"{rel} (not a path inside the checkout)")
            continue
        mode, sha = int(entry[0]), str(entry[5])
        if _same(worktree, rel, present.get(rel), entry):
            continue
        why = in_the_way(worktree, rel)
        if why is not None:
            skipped.append(f"{rel} ({why})")
            continue
        full = os.path.join(worktree, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        try:
            if stat.S_ISLNK(mode):
                tmp = f"{full}.exo-undo.{os.getpid()}"
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                os.symlink(sha, tmp)
                os.replace(tmp, full)
            else:
                src = _blob(store, sha)
                if not src.is_file():
                    skipped.append(f"{rel} (its copy is gone from exo's state)")
                    continue
                put(full, src.read_bytes(), stat.S_IMODE(mode))
        except OSError as exc:
            skipped.append(f"{rel} ({exc.strerror})")
            continue
        written.append(rel)
    return written, deleted, skipped


def _same(worktree: str, rel: str, present: list[Any] | None, entry: list[Any]) -> bool:
    """Whether ``rel`` on disk already is ``entry``: the same link, or the file the present's manifest
    recorded (same size, times and inode) with the same content and mode."""
    full = os.path.join(worktree, rel)
    try:
        st = os.lstat(full)
        if stat.S_ISLNK(int(entry[0])):
            return stat.S_ISLNK(st.st_mode) and os.readlink(full) == entry[5]
    except OSError:
        return False
    return (present is not None and present[0] == entry[0] and present[5] == entry[5]
            and [st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino] == present[:5])


def put(full: str, data: bytes, mode: int) -> None:
    """Replace the file at ``full`` with ``data`` and ``mode`` (a new file beside it, then a rename: a link there is
    replaced, never followed)."""
    atomic_write(Path(full), data, mode=mode, fsync=False)


__all__ = ["Manifest", "collect", "digest", "in_the_way", "prune_empty", "put", "read_manifest", "remove", "restore",
           "safe_rel", "snapshot", "walk", "write_manifest"]
