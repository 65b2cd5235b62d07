"""Files: private folders for sockets and locks, atomic writes, and exo's one file lock.

Stdlib only: used on the hooks' hot path.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from exo_cli.errors import EnvironmentError_, InvalidInput, NotFound

TYPE_CHECKING = False


def ensure_private_dir(path: Path, *, parents: bool = False) -> Path:
    """Create ``path`` with mode 0700 (or check an existing one is ours and private).

    ``parents`` creates missing parent folders first, private too (``mkdir(parents=True)`` would
    give them the umask's mode: exo's state folder once got a world-readable ``agents/``).
    """
    if parents:
        missing = []
        parent = path.parent
        while not parent.is_dir() and parent != parent.parent:
            missing.append(parent)
            parent = parent.parent
        for folder in reversed(missing):
            try:
                os.mkdir(folder, 0o700)
            except FileExistsError:
                pass
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise EnvironmentError_(
            f"Runtime folder {path} is not a folder owned by this user",
            hint="Remove it: exo makes it again, private to you.",
            path=str(path),
        )
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def read_named_text(name: str, cwd: Path, *, field: str, what: str) -> str:
    """The UTF-8 text of the file a user named (``~`` expanded, relative to ``cwd``).

    NotFound when it cannot be read, InvalidInput for a name the OS refuses (a NUL) or a file that
    is not UTF-8 text. Used for file arguments (``--prompt-file``): read where the caller runs, by
    the caller (an agent's relay sends the text, never the path, to the broker).
    """
    path = Path(name)
    try:
        path = Path(os.path.expanduser(name))  # ValueError for a NUL after "~"
        path = path if path.is_absolute() else cwd / path
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise NotFound(f"Cannot read {what} {path}: {exc.strerror}", path=str(path)) from exc
    except ValueError as exc:  # a NUL in the path, or a file that is not UTF-8 text
        raise InvalidInput(f"Cannot read {what} {name!r}: {exc}", field=field) from exc


SMALL_FILE = 1 << 20  # bytes: a git folder's small files (HEAD, commondir, a ref, a .git file), context files


def open_regular(path: str | os.PathLike[str], *, follow: bool = True) -> int:
    """A read-only descriptor of regular file ``path`` (the caller closes it); OSError when it is missing,
    no regular file (a FIFO is never waited on, a device or folder never read) or, unless ``follow``, a link.

    For every file an agent can write that exo opens: one in a worktree or its git folder, an
    agent's clone, a hook payload's transcript.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, f"{os.fspath(path)} is no regular file")
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], *, limit: int = SMALL_FILE, follow: bool = True) -> bytes | None:
    """The bytes of regular file ``path`` (``open_regular``); None when it cannot be opened so or holds more
    than ``limit`` bytes."""
    try:
        fd = open_regular(path, follow=follow)
    except OSError:
        return None
    try:
        return read_fd(fd, limit)
    finally:
        os.close(fd)


def read_fd(fd: int, limit: int) -> bytes | None:
    """All bytes of open regular file ``fd`` (from where it stands), or None past ``limit`` bytes or on an error
    (a file that grows while read is cut off at the limit, never read without end)."""
    try:
        if os.fstat(fd).st_size > limit:
            return None
        chunks: list[bytes] = []
        got = 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - got)):
            got += len(chunk)
            if got > limit:
                return None
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None


def read_regular_text(path: str | os.PathLike[str], *, limit: int = SMALL_FILE, follow: bool = True) -> str | None:
    """``read_regular`` as text (undecodable bytes replaced)."""
    data = read_regular(path, limit=limit, follow=follow)
    return None if data is None else data.decode("utf-8", "replace")


def sha256_hex(data: bytes) -> str:
    """``hashlib.sha256(data).hexdigest()``, without importing hashlib when CPython's own is there.

    ``hashlib`` loads OpenSSL, which costs a hook (it rings its parent in the runtime folder
    named by this digest) about a tenth of Python's whole start; the result is the same.
    """
    if TYPE_CHECKING:
        from hashlib import sha256
    else:
        try:
            from _sha256 import sha256  # CPython 3.11
        except ImportError:
            try:
                from _sha2 import sha256  # CPython 3.12+
            except ImportError:
                from hashlib import sha256
    return sha256(data).hexdigest()


def sha1_hex(data: bytes) -> str:
    """``hashlib.sha1(data).hexdigest()``, the same way (the repository id names its tmux socket)."""
    if TYPE_CHECKING:
        from hashlib import sha1
    else:
        try:
            from _sha1 import sha1
        except ImportError:
            from hashlib import sha1
    return sha1(data).hexdigest()


def runtime_dir_for(key: str, *, create: bool = True) -> Path:
    """Return (and with ``create``, make, mode 0700) the runtime folder for ``key`` (a repo's state dir).

    Derived from ``key`` and the user id alone, never from the environment: an agent CLI may
    start exo's MCP server with a reduced environment (Codex drops ``XDG_RUNTIME_DIR`` and
    ``TMUX_TMPDIR``), and every exo process of a repository must find the same folder.
    ``/run/user/<uid>/exo-<hash>`` when that per-user folder exists and is private, else
    ``/tmp/exo-<uid>-<hash>``; short enough for unix socket paths (about 104 bytes at most).
    """
    digest = sha256_hex(key.encode("utf-8"))[:12]
    uid = os.getuid()
    user_run = Path(f"/run/user/{uid}")
    if _private_folder(user_run, uid):
        base = user_run / f"exo-{digest}"
    else:
        base = Path("/tmp") / f"exo-{uid}-{digest}"
    return ensure_private_dir(base) if create else base


def _private_folder(path: Path, uid: int) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o077 and os.access(path, os.W_OK | os.X_OK)


def empty_dir() -> Path:
    """A folder exo owns that stays empty (mode 0500): what ``core.hooksPath`` names so that git runs no hook.

    Per user and fixed (``/run/user/<uid>/exo-empty``, else ``/tmp/exo-<uid>-empty``), made
    on first use and checked on every use: a folder that is not ours or not empty is an
    EnvironmentError (something wrote into exo's private folder), never used.
    """
    global _EMPTY
    if _EMPTY is not None:
        try:
            if not os.listdir(_EMPTY):
                return _EMPTY  # checked whole once in this process; still empty
        except OSError:
            pass
        _EMPTY = None
    uid = os.getuid()
    path = empty_path()
    try:
        os.mkdir(path, 0o500)
    except FileExistsError:
        pass
    except OSError as exc:
        raise EnvironmentError_(f"Cannot create exo's empty folder {path}: {exc.strerror}", path=str(path)) from exc
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or os.listdir(path):
        raise EnvironmentError_(
            f"{path} must be an empty folder of yours: exo points git's core.hooksPath there so that no hook runs",
            hint=f"Remove {path} (and what is in it): exo makes it again.", path=str(path))
    if st.st_mode & 0o777 != 0o500:
        os.chmod(path, 0o500)
    _EMPTY = path
    return path


_EMPTY: Path | None = None  # ``empty_dir`` once checked in this process


def empty_path() -> Path:
    """Where ``empty_dir`` is: ``/run/user/<uid>/exo-empty`` when that folder is private, else ``/tmp/exo-<uid>-empty``."""
    uid = os.getuid()
    user_run = Path(f"/run/user/{uid}")
    return user_run / "exo-empty" if _private_folder(user_run, uid) else Path(f"/tmp/exo-{uid}-empty")


def release_runtime_dir(path: Path) -> bool:
    """Remove exo's runtime folder ``path`` unless a process still waits on one of its doorbells.

    A doorbell socket somebody has bound (a ``wait`` or ``question`` under way) keeps the
    folder, and so does a broker that answers on its control socket (it removes its own files
    when it leaves); sockets left by processes that are gone do not. Only a folder of ours named
    ``exo-...`` is removed. Returns True when the folder is gone.
    """
    import contextlib
    import socket

    if not path.name.startswith("exo-"):
        return False
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return False
    from exo_cli.adapters.brokerio import answers

    if answers(str(path / "broker" / "ctl")):
        return False
    try:
        names = os.listdir(path / "bell")
    except OSError:
        names = []
    for name in names:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            probe.connect(str(path / "bell" / name))  # connects only while someone has it bound; sends nothing
            return False
        except OSError:
            continue
        finally:
            probe.close()
    from exo_cli.adapters.rmtree import remove_tree

    with contextlib.suppress(OSError):
        remove_tree(path)
    return not os.path.lexists(path)


def atomic_write(path: Path, data: bytes | str, *, mode: int | None = None, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically: a unique temporary file in the same folder, then rename.

    The folder is created. ``mode`` sets the file's permissions; without it an existing file
    keeps its mode and a new one gets 0644. Readers never see a half-written file, and two
    writers never share a temporary file.
    """
    import contextlib
    import tempfile

    if isinstance(data, str):
        data = data.encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".exo-tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:  # make the rename itself durable
        with contextlib.suppress(OSError):
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)


def command_folder(folder: Path, name: str, argv: list[str]) -> Path:
    """A private folder holding one program, ``name``, that runs ``argv`` (a two-line sh script); the folder.

    For a PATH entry that adds exactly one command: the folder a program is installed in may
    hold others (a virtual environment's python and pip) that must not shadow the user's.
    Written atomically, and only when it changed.
    """
    import shlex

    script = f"#!/bin/sh\nexec {shlex.join(argv)} \"$@\"\n"
    target = folder / name
    try:
        if target.read_text(encoding="utf-8") == script:
            return folder
    except (OSError, UnicodeDecodeError):
        pass
    ensure_private_dir(folder, parents=True)
    atomic_write(target, script, mode=0o700)
    return folder


class FileLock:
    """An exclusive ``flock`` on one file: the lock every exo lock is made of.

    Two kinds of file, chosen by ``own_inode``:

    - ``FileLock(path)``: a lock file, created (with ``mode``) when missing and never removed.
    - ``FileLock(path, own_inode=True)``: the locked file itself, never created. After the
      lock is taken, ``path`` must still name the locked inode (another writer may have
      replaced the file with ``os.replace`` meanwhile); if not, the new file is locked instead.
      ``acquire`` returns False when the file does not exist; ``fd`` reads it.

    ``acquire(blocking=False)`` returns False at once when someone else holds the lock. Every
    ``acquire`` opens the file anew, and flock locks belong to an open file, so threads of one
    process exclude each other as processes do. Use ``locked()`` for a block of code, or
    ``acquire``/``release`` to hold the lock across threads or a long-running loop (the forge
    poller). Closing the file releases it; so does the process's exit.
    """

    def __init__(self, path: Path, *, own_inode: bool = False, mode: int = 0o600) -> None:
        self.path = path
        self.own_inode = own_inode
        self.mode = mode
        self.fd: int | None = None

    @property
    def held(self) -> bool:
        return self.fd is not None

    def acquire(self, *, blocking: bool = True) -> bool:
        """Take the lock; return whether it is held (see the class for when it is not)."""
        import fcntl  # here: the hooks import this module but take no lock

        if self.fd is not None:
            raise RuntimeError(f"{self.path} is already locked by this FileLock")
        flags = fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB)
        while True:
            try:
                if self.own_inode:
                    fd = os.open(self.path, os.O_RDONLY)
                else:
                    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, self.mode)
            except FileNotFoundError:
                if self.own_inode:
                    return False
                raise
            try:
                fcntl.flock(fd, flags)
            except BlockingIOError:
                os.close(fd)
                return False
            except BaseException:
                os.close(fd)
                raise
            if self.own_inode and not self._still_named(fd):
                os.close(fd)
                continue
            self.fd = fd
            return True

    def _still_named(self, fd: int) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def write(self, text: str) -> None:
        """Replace the held lock file's content with ``text`` (say, the holder's pid)."""
        if self.fd is None:
            raise RuntimeError(f"{self.path} is not locked by this FileLock")
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, text.encode("utf-8"), 0)

    def release(self) -> None:
        """Let go of the lock (nothing happens when it is not held)."""
        fd, self.fd = self.fd, None
        if fd is not None:
            import fcntl

            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            except OSError:
                pass
            os.close(fd)


@contextmanager
def locked(path: Path, *, blocking: bool = True, own_inode: bool = False, mode: int = 0o600) -> Iterator[FileLock]:
    """Hold a ``FileLock`` on ``path`` for the block; check ``.held`` where it may not be held.

    ``with locked(lock_file):`` waits for the lock; ``blocking=False`` yields at once, held or
    not; ``own_inode=True`` locks the file itself (not held: the file does not exist).
    """
    lock = FileLock(path, own_inode=own_inode, mode=mode)
    lock.acquire(blocking=blocking)
    try:
        yield lock
    finally:
        lock.release()


@contextmanager
def state_lock(state_dir: Path, name: str, *, blocking: bool = True) -> Iterator[FileLock]:
    """Hold the lock file ``<state_dir>/locks/<name>.lock`` (the folder is made, mode 0700, on first use)."""
    folder = state_dir / "locks"
    folder.mkdir(mode=0o700, exist_ok=True)
    with locked(folder / f"{name}.lock", blocking=blocking) as lock:
        yield lock
