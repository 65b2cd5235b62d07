"""An agent's clone's object store, as exo reads it: checked, then mirrored into a folder exo owns.

The clone's ``.git/objects`` is the agent's to write, at any moment. git reading it follows
what it finds there: ``objects/info/alternates`` (another repository's store on disk), a link
in place of an object or a folder, a FIFO it would wait on. Checking the store and then letting
git read it leaves a window in which the agent can rewrite it (an alternate added after the
check has exo import another repository's objects into this one, where every agent reads them).

So git never reads the clone's store. ``check_store`` refuses a clone whose store is not what
``git clone --shared`` made (a clear error for a clone that is plainly hostile or broken), and
``mirror`` gives exo's private git folder an object folder of its own holding the clone's own
objects (loose objects and packs, by name only) as **hard links** to the clone's files (a copy
where a link cannot be made): every link is made without following a link (``linkat`` without
``AT_SYMLINK_FOLLOW``), from a folder opened without following one, and checked to be a regular
file once it is in exo's folder, which the agent cannot write. What the agent changes in its
store afterwards never reaches git's reading: no alternates file of the clone's, no link, no
FIFO, no ``multi-pack-index`` or commit graph of the clone's is ever read. (A linked file's
bytes stay the agent's to rewrite: git then reads wrong or broken objects of the clone's own,
and ``git fetch`` into the repository checks every object it takes.)
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path

from exo_cli.adapters.files import read_fd
from exo_cli.errors import StateError

MAX_SMALL = 4 << 20  # bytes: info/exclude, a state file
MAX_STORE_ENTRIES = 1 << 20  # loose objects and packs: a bigger store is refused (``git gc`` in the clone first)
MAX_PACKED_REFS = 64 << 20  # bytes: a bigger packed-refs is refused
MAX_COPY = 8 << 30  # bytes: one file copied where it cannot be linked (another file system); a bigger one is refused
_LOOSE_DIR = re.compile(r"^[0-9a-f]{2}$")
_LOOSE = re.compile(r"^(?:[0-9a-f]{38}|[0-9a-f]{62})$")
_PACK = re.compile(r"^pack-(?:[0-9a-f]{40}|[0-9a-f]{64})\.(?:pack|idx|rev)$")
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def read_inside(root: str | os.PathLike[str], rel: str, *, limit: int = MAX_SMALL) -> bytes | None:
    """The bytes of regular file ``root/rel``, opened one component at a time without following a link; None
    when any component is missing, a link or not what it should be, or the file is over ``limit``."""
    found = read_inside_stamped(root, rel, limit=limit)
    return None if found is None else found[0]


def read_inside_stamped(root: str | os.PathLike[str], rel: str, *,
                        limit: int = MAX_SMALL) -> tuple[bytes, int] | None:
    """``read_inside`` and the file's modification time (ns) as read from the same descriptor.

    A copy of a git index must keep its index's time: git takes an entry whose file changed in the
    same second as the index was written as "racily clean" only by comparing with the index's own
    time, and a copy stamped now would show such a change as clean.
    """
    parts = [p for p in rel.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        return None
    fds: list[int] = []
    try:
        fds.append(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW))
        for part in parts[:-1]:
            fds.append(os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fds[-1]))
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fds[-1])
        fds.append(fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        data = read_fd(fd, limit)
        return None if data is None else (data, st.st_mtime_ns)
    except OSError:
        return None
    finally:
        for fd in reversed(fds):
            os.close(fd)


def refuse(clone: str | os.PathLike[str], rel: str, why: str) -> StateError:
    """The StateError of a clone exo does not read, naming the file of its ``.git`` (``rel``) and why."""
    return StateError(f"{os.path.join(clone, '.git', rel)} {why}: exo does not read this clone",
                      worktree=str(clone), path=os.path.join(str(clone), ".git", rel), reason="hostile-clone",
                      hint="Only git clone --shared's own files are read; restore it (or remove the clone).")


def check_store(clone: str | os.PathLike[str], alternates: set[str]) -> None:
    """StateError unless the clone's object store is what ``git clone --shared`` made: its ``alternates`` naming
    exactly the repository's store (one of ``alternates``), no ``http-alternates``, no ``commondir``, and
    every entry of ``objects/`` a plain folder or regular file (never a link, a FIFO or a device), all read
    without following a link. (git never reads the store itself: ``mirror``; this says plainly what is wrong.)"""
    git_dir = os.path.join(clone, ".git")
    try:
        if not stat.S_ISDIR(os.lstat(os.path.join(git_dir, "objects")).st_mode):
            raise refuse(clone, "objects", "is not a folder")
    except FileNotFoundError:
        raise refuse(clone, "objects", "is missing") from None
    for rel in ("objects/info/http-alternates", "commondir"):
        if os.path.lexists(os.path.join(git_dir, rel)):
            raise refuse(clone, rel, "exists (git clone --shared writes none)")
    for rel, limit, needed in (("HEAD", 4096, True), ("packed-refs", MAX_PACKED_REFS, False)):
        try:  # read whole or refused: a branch silently unread would have its keep-alive ref pruned
            st = os.lstat(os.path.join(git_dir, rel))
        except FileNotFoundError:
            if needed:
                raise refuse(clone, rel, "is missing") from None
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise refuse(clone, rel, f"is a link, no regular file or over {limit} bytes")
    rel = "objects/info/alternates"
    data = read_inside(git_dir, rel, limit=64 << 10)
    lines = [x for x in (data or b"").decode("utf-8", "replace").splitlines() if x.strip()]
    if data is None or len(lines) != 1 or os.path.normpath(lines[0]) not in alternates:
        raise refuse(clone, rel, "does not name exactly the repository's object store")
    count = 0
    for rel_dir in ("objects", *(f"objects/{d}" for d in _subdirs(git_dir, "objects"))):
        with os.scandir(os.path.join(git_dir, rel_dir)) as it:
            for entry in it:
                count += 1
                if count > MAX_STORE_ENTRIES:
                    raise refuse(clone, "objects", f"holds over {MAX_STORE_ENTRIES} entries")
                if entry.is_dir(follow_symlinks=False):  # objects/xx, pack, info; info/commit-graphs (not read)
                    continue
                if not entry.is_file(follow_symlinks=False):
                    raise refuse(clone, f"{rel_dir}/{entry.name}", "is a link or no regular file")


def _subdirs(root: str, rel: str) -> list[str]:
    with os.scandir(os.path.join(root, rel)) as it:
        return sorted(e.name for e in it if e.is_dir(follow_symlinks=False))


def _store_fd(clone: str | os.PathLike[str]) -> int:
    """The clone's ``.git/objects``, opened one folder at a time without following a link."""
    fd = os.open(clone, _DIR)
    try:
        for part in (".git", "objects"):
            nxt = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError:
        os.close(fd)
        raise
    return fd


def _names(fd: int, pattern: re.Pattern[str]) -> list[str]:
    return sorted(n for n in os.listdir(fd) if pattern.match(n))


def mirror(clone: str | os.PathLike[str], dest: Path) -> int:
    """Make object folder ``dest`` (exo's, made) hold exactly the clone's own loose objects and packs, linked (or
    copied) as the module says; how many entries it holds. StateError when one of them is not a regular file
    once in ``dest`` (a link, a FIFO, a device swapped in), or the store holds too many."""
    try:
        store = _store_fd(clone)
    except OSError as exc:
        raise refuse(clone, "objects", f"cannot be opened as a folder ({exc.strerror})") from None
    wanted: set[str] = set()
    try:
        for sub in (*_names(store, _LOOSE_DIR), "pack"):
            try:
                fd = os.open(sub, _DIR, dir_fd=store)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise refuse(clone, f"objects/{sub}", f"is a link or no folder ({exc.strerror})") from None
            try:
                for name in _names(fd, _PACK if sub == "pack" else _LOOSE):
                    wanted.add(f"{sub}/{name}")
                    if len(wanted) > MAX_STORE_ENTRIES:
                        raise refuse(clone, "objects", f"holds over {MAX_STORE_ENTRIES} entries")
                    _take(clone, fd, sub, name, dest)
            finally:
                os.close(fd)
    finally:
        os.close(store)
    _drop_others(dest, wanted)
    return len(wanted)


def _take(clone: str | os.PathLike[str], src_dir: int, sub: str, name: str, dest: Path) -> None:
    """Link (or copy) ``sub/name`` of the clone's store into ``dest``, unless already there; checked once there."""
    target = dest / sub / name
    try:
        if stat.S_ISREG(os.lstat(target).st_mode):
            return  # named by its content: the one already taken is as good
        os.unlink(target)
    except FileNotFoundError:
        pass
    (dest / sub).mkdir(mode=0o700, exist_ok=True)
    try:
        os.link(name, target, src_dir_fd=src_dir, follow_symlinks=False)  # a link in the clone: linked as a link
    except FileNotFoundError:
        return  # gone meanwhile (the clone's gc): not there to read
    except OSError:
        _copy(clone, src_dir, sub, name, target)
    if not stat.S_ISREG(os.lstat(target).st_mode):
        os.unlink(target)
        raise refuse(clone, f"objects/{sub}/{name}", "is a link or no regular file")


def _copy(clone: str | os.PathLike[str], src_dir: int, sub: str, name: str, target: Path) -> None:
    """Copy ``sub/name`` (opened without following a link or waiting on a FIFO) to ``target``, at most MAX_COPY."""
    try:
        src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=src_dir)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise refuse(clone, f"objects/{sub}/{name}", f"cannot be read ({exc.strerror})") from None
    tmp = target.with_name(f".{name}.{os.getpid()}.tmp")
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_COPY:
            raise refuse(clone, f"objects/{sub}/{name}", f"is no regular file or over {MAX_COPY} bytes")
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            left = MAX_COPY
            while left > 0 and (chunk := os.read(src, min(1 << 20, left))):
                left -= len(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
        finally:
            os.close(out)
        os.replace(tmp, target)
    finally:
        os.close(src)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _drop_others(dest: Path, wanted: set[str]) -> None:
    """Remove from ``dest`` every object or pack the clone no longer has (its gc ran: no link kept alive), and what
    a copy killed midway left."""
    for sub in (*(p.name for p in dest.iterdir() if _LOOSE_DIR.match(p.name)), "pack"):
        folder = dest / sub
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(folder):
                if f"{sub}/{name}" not in wanted:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(folder / name)
