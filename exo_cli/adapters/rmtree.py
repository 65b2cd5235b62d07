"""Removing a tree an agent or a gate wrote: never through a link, read-only folders included, as a normal user.

``shutil.rmtree`` never follows a link, but it stops at a folder its writer made read-only (a
normal user cannot delete what is in it), and the usual fix, an error handler that ``chmod``s
the path and tries again, follows a link the writer planted there: the mode of a file outside
the tree changes. ``remove_tree`` walks the tree through folder file descriptors instead: each
folder is opened relative to the one holding it with ``O_NOFOLLOW`` and made writable through its
own descriptor (``fchmod``; a folder it cannot even open is made so through an ``O_PATH``
descriptor), and every entry is unlinked relative to its folder. Nothing is ever reached by a
path a link could redirect, and only folders inside the tree ever change mode. A very deep tree
is flattened as it goes (deep folders moved up to the top), so neither the stack nor the open
descriptors grow with its depth.

Every cleanup of a tree exo did not write alone (an agent's clone and exo's folder for it, a
candidate clone of the merge queue, an archive of agent files) goes through here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable

MAX_DEPTH = 32  # folders deeper than this are moved to the top of the tree before they are entered
MAX_ROUNDS = 1_000  # listings of the top before giving up (a writer that keeps adding files)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: str | os.PathLike[str], *, within: str | os.PathLike[str] | None = None) -> None:
    """Remove ``path`` and everything in it without following any link; nothing when it is gone.

    A link (or a file) at ``path`` itself is unlinked, never followed. The folder holding
    ``path`` is the caller's (it is opened as named), unless ``within`` names a folder of the
    caller's that holds ``path``: then every folder between the two is entered without following
    a link (a link the writer put among them means ``path`` is not there: nothing is removed).
    OSError when something cannot be removed (a folder of another user's, a writer adding files
    faster than they go), ValueError when ``path`` is not inside ``within``.
    """
    full = os.path.normpath(os.path.abspath(os.fspath(path)))
    parent, name = os.path.split(full)
    if not name or name in (".", ".."):
        raise OSError(errno.EINVAL, "refusing to remove this folder", full)
    steps: list[str] = []
    if within is not None:
        top = os.path.normpath(os.path.abspath(os.fspath(within)))
        rel = os.path.relpath(parent, top)
        if rel == ".." or rel.startswith("../") or os.path.isabs(rel):
            raise ValueError(f"{full} is not inside {top}")
        steps, parent = ([] if rel == "." else rel.split("/")), top
    pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for step in steps:
            try:
                nfd = os.open(step, _DIR_FLAGS, dir_fd=pfd)
            except (FileNotFoundError, NotADirectoryError):
                return
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # a link where a folder was: what it points at is not ours
                    return
                raise
            os.close(pfd)
            pfd = nfd
        _remove_at(pfd, name)
    finally:
        os.close(pfd)


def _remove_at(pfd: int, name: str) -> None:
    try:
        st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        _unlink(pfd, name)
        return
    try:
        top = _open_dir(pfd, name)
    except OSError as exc:  # swapped for a link or a file since: unlinked, never followed
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        _unlink(pfd, name)
        return
    try:
        _empty(top)
    finally:
        os.close(top)
    os.rmdir(name, dir_fd=pfd)


def _unlink(fd: int, name: str) -> None:
    """Unlink ``name`` in ``fd`` (a folder swapped in meanwhile: removed as a tree)."""
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        _remove_at(fd, name)
    except PermissionError as exc:  # unlink of a folder is EPERM on Linux: check what is there now
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            raise exc from None
        _remove_at(fd, name)


def _open_dir(pfd: int, name: str) -> int:
    """Open the folder ``name`` of ``pfd`` (never a link), made readable, writable and searchable by its owner."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=pfd)
    except PermissionError:
        _chmod_unreadable(pfd, name)
        fd = os.open(name, _DIR_FLAGS, dir_fd=pfd)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & 0o700 != 0o700:
            os.fchmod(fd, mode | 0o700)  # through the descriptor: the folder opened, never a link's target
    except BaseException:
        os.close(fd)
        raise
    return fd


def set_folder_mode(path: str | os.PathLike[str], mode: int) -> None:
    """Set the mode of the folder ``path`` (not of a link there: OSError ENOTDIR/ELOOP), even one its owner cannot
    read; the folder holding it is the caller's."""
    parent, name = os.path.split(os.path.normpath(os.path.abspath(os.fspath(path))))
    pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _chmod_folder(pfd, name, lambda _old: mode)
    finally:
        os.close(pfd)


def _chmod_unreadable(pfd: int, name: str) -> None:
    """Give its owner access to a folder it cannot open for reading, without following a link."""
    _chmod_folder(pfd, name, lambda old: old | 0o700)


def _chmod_folder(pfd: int, name: str, mode: Callable[[int], int]) -> None:
    """chmod the folder ``name`` of ``pfd`` to ``mode(its mode)``, never through a link."""
    if hasattr(os, "O_PATH"):  # Linux: a descriptor of the folder itself (a link fails O_DIRECTORY)
        fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISDIR(st.st_mode):
                raise OSError(errno.ENOTDIR, "not a folder", name)
            os.chmod(f"/proc/self/fd/{fd}", mode(stat.S_IMODE(st.st_mode)))  # the inode fd holds
        finally:
            os.close(fd)
    elif os.chmod in os.supports_follow_symlinks:  # macOS, the BSDs: lchmod
        st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            raise OSError(errno.ENOTDIR, "not a folder", name)
        os.chmod(name, mode(stat.S_IMODE(st.st_mode)), dir_fd=pfd, follow_symlinks=False)
    else:
        raise OSError(errno.EACCES, "cannot change a folder's mode without following links here", name)


def _empty(top: int) -> None:
    """Remove everything in the folder ``top`` (a descriptor); flatten what lies deeper than ``MAX_DEPTH``."""
    moved = 0
    for _ in range(MAX_ROUNDS):
        names = os.listdir(top)
        if not names:
            return
        # each level: (its descriptor, the names left to remove, its name in the level above)
        stack: list[tuple[int, list[str], str]] = [(top, names, "")]
        try:
            while stack:
                fd, left, _own = stack[-1]
                if not left:
                    stack.pop()
                    if stack:
                        os.close(fd)
                        with contextlib.suppress(FileNotFoundError):
                            os.rmdir(_own, dir_fd=stack[-1][0])  # ENOTEMPTY (a writer): the next round
                    continue
                name = left.pop()
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if not stat.S_ISDIR(st.st_mode):
                    _unlink(fd, name)
                elif len(stack) > MAX_DEPTH:  # moved to the top, removed by a later round
                    moved += 1
                    os.rename(name, f".exo-rm-{os.getpid()}-{moved}", src_dir_fd=fd, dst_dir_fd=top)
                else:
                    try:
                        child = _open_dir(fd, name)
                    except OSError as exc:  # swapped for a link or a file since: unlinked, never followed
                        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                            raise
                        _unlink(fd, name)
                        continue
                    try:
                        stack.append((child, os.listdir(child), name))
                    except BaseException:
                        os.close(child)
                        raise
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY:
                raise
        finally:
            for fd, _, _ in stack[1:]:
                os.close(fd)
    raise OSError(errno.ENOTEMPTY, "files keep appearing in a folder being removed")
