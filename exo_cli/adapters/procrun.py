"""Starting programs: with a deadline that ends everything they started, or as nobody's child.

``run_captured`` is git's runner: ``posix_spawn`` (no ``subprocess`` import: git runs on every
hook) in a session of its own, output captured. At the deadline ``end_session`` ends the whole
session (SIGTERM, so git removes its own lock files, then SIGKILL), and every process that still
carries the call's token in its environment (``EXO_RUN``), which finds what a helper moved into a
session of its own; it reports the ``.lock`` files those processes held open, so that the caller
can remove the ones its own call created (``gitrun``). When the program exits on its own, what
it left in the pipes is read and the call returns, even if a process it started still holds them.

``start_orphan`` starts a program on behalf of the human (the notify command): through a short
Python intermediate that forks it into a session of its own and exits, and the program waits
until it is reparented before it runs, so it is never a descendant of the process that raised
the event (an agent's hook): exo's identity by ancestry cannot take it for that agent.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time

from exo_cli.adapters.proc import TOKEN_VAR, end_session, run_token
from exo_cli.lite import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

PIPE_MAX = 60000  # what a pipe holds without a reader (Linux: 64 KiB): an orphan's stdin is written at once


class Captured(NamedTuple):
    """A finished program: exit code, output, whether the deadline ended it, the lock files its processes held."""

    code: int
    out: bytes
    err: bytes
    timed_out: bool
    held: dict[str, int]  # path -> inode of every ``*.lock`` file open in the call's processes when it was ended
    on_fifo: bool = False  # ended early: it waited to open a FIFO nobody writes (``fifo_watch``)


FIFO_LOOK = 1.0  # seconds between two looks at whether the program waits to open a FIFO (``fifo_watch``)


def waits_on_fifo(pid: int, depth: int = 0) -> bool:
    """Whether ``pid`` (or a process it started, a few levels down) sleeps in the kernel waiting for the other end
    of a FIFO it opens (``wait_for_partner``): a named pipe nobody writes would hold it to its deadline."""
    try:
        with open(f"/proc/{pid}/wchan", "rb") as fh:
            if fh.read(64) == b"wait_for_partner":
                return True
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as fh:
            children = [int(x) for x in fh.read(4096).split()]
    except (OSError, ValueError):
        return False
    return depth < 3 and any(waits_on_fifo(c, depth + 1) for c in children[:32])


def run_captured(argv: list[str], env: Mapping[str, str], timeout: float,
                 stdin: bytes | None, *, fifo_watch: bool = False) -> Captured:
    """posix_spawn ``argv`` in a session of its own with stdout/stderr captured; stdin is ``stdin`` or /dev/null.

    At the deadline the whole session is ended (``end_session``). Once the program has exited,
    the output already in the pipes is read and the call returns. With ``fifo_watch``, a program
    found waiting to open a FIFO at two looks in a row (``waits_on_fifo``) is ended then (``on_fifo``).
    """
    token = run_token()
    env = {**env, TOKEN_VAR: token}
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r = in_w = -1
    actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = []
    if stdin is None:
        actions.append((os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0))
    else:
        in_r, in_w = os.pipe()
        actions += [(os.POSIX_SPAWN_DUP2, in_r, 0), (os.POSIX_SPAWN_CLOSE, in_w)]
    actions += [
        (os.POSIX_SPAWN_DUP2, out_w, 1),
        (os.POSIX_SPAWN_DUP2, err_w, 2),
        (os.POSIX_SPAWN_CLOSE, out_r),
        (os.POSIX_SPAWN_CLOSE, err_r),
    ]
    try:
        pid = os.posix_spawnp(argv[0], argv, env, file_actions=actions, setsid=True)
    except BaseException:
        for fd in (out_r, err_r, in_w):
            if fd >= 0:
                os.close(fd)
        raise
    finally:
        for fd in (out_w, err_w, in_r):
            if fd >= 0:
                os.close(fd)
    exited = _pidfd(pid)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    readers = [out_r, err_r]
    pending = memoryview(stdin or b"")
    writers = [in_w] if in_w >= 0 else []
    if writers:
        os.set_blocking(in_w, False)
        if not pending:
            os.close(in_w)
            writers = []
    deadline = time.monotonic() + timeout
    status: int | None = None
    held: dict[str, int] = {}
    timed_out = on_fifo = False
    look, stuck = time.monotonic() + FIFO_LOOK, 0
    try:
        while True:
            now = time.monotonic()
            if fifo_watch and now >= look:
                stuck = stuck + 1 if waits_on_fifo(pid) else 0
                look = now + FIFO_LOOK
                if stuck >= 2:
                    on_fifo = True
                    status, held = end_session(pid, token=token)
                    break
            left = deadline - now
            if left <= 0:
                timed_out = True
                status, held = end_session(pid, token=token)
                break
            if fifo_watch:
                left = min(left, max(look - now, 0.01))
            if not readers and not writers:  # the program closed its output: wait for its exit, to the deadline
                if exited is None:
                    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
                    break
                if select.select([exited], [], [], left)[0]:
                    break
                continue
            ready, can_write, _ = select.select(readers + ([exited] if exited is not None else []), writers, [], left)
            if can_write:
                try:
                    pending = pending[os.write(in_w, pending[:65536]):]
                except BrokenPipeError:  # git stopped reading: what it wrote still counts
                    pending = pending[:0]
                if not pending:
                    os.close(in_w)
                    writers = []
            if exited is not None and exited in ready:
                _drain(readers, chunks)  # the program is gone: what is in the pipes is all of its output
                break
            for fd in ready:
                data = os.read(fd, 65536)
                if data:
                    chunks[fd].append(data)
                else:
                    readers.remove(fd)
    except BaseException:  # interrupted (Ctrl-C): the program and what it started must not outlive us
        if status is None:
            end_session(pid, token=token, grace=0.5)
        raise
    finally:
        for fd in (out_r, err_r, *((in_w,) if writers else ()), *((exited,) if exited is not None else ())):
            os.close(fd)
    if status is None:
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return Captured(status, b"".join(chunks[out_r]), b"".join(chunks[err_r]), timed_out, held, on_fifo)


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` exits (Linux 5.3+), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _drain(readers: list[int], chunks: dict[int, list[bytes]]) -> None:
    """Read what the pipes already hold, without waiting for writers that may never close them."""
    for fd in readers:
        os.set_blocking(fd, False)
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not data:
                break
            chunks[fd].append(data)


# The intermediate of ``start_orphan``: fork the program into a session of its own and exit at once; the
# program waits until it has been reparented (no longer the intermediate's child), then runs.
_ORPHAN = (
    "import os,sys,time\n"
    "me=os.getpid()\n"
    "if os.fork():\n"
    "    os._exit(0)\n"
    "os.setsid()\n"
    "while os.getppid()==me:\n"
    "    time.sleep(0.001)\n"
    "try:\n"
    "    os.chdir(sys.argv[1])\n"
    "except OSError:\n"
    "    os.chdir('/')\n"
    "try:\n"
    "    os.execv(sys.argv[2],sys.argv[2:])\n"
    "finally:\n"
    "    os._exit(127)\n"
)


def start_orphan(argv: Sequence[str], env: Mapping[str, str], *, cwd: str, stdin: bytes = b"") -> int | None:
    """Start ``argv`` (its program by absolute path) with exactly ``env`` in ``cwd``, as nobody's child.

    Its standard input holds ``stdin`` (at most PIPE_MAX bytes, written before this returns, so a
    hook that exits right after loses nothing); its output goes to /dev/null. It runs in a
    session of its own and starts only once it has been reparented, so it descends from no
    process of the caller. Returns the intermediate's pid (reaped by a daemon thread), or None
    when it could not start.
    """
    import threading

    if len(stdin) > PIPE_MAX:
        raise ValueError("payload too large for a pipe")
    r, w = os.pipe()
    actions = [(os.POSIX_SPAWN_DUP2, r, 0), (os.POSIX_SPAWN_CLOSE, w),
               (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0), (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)]
    try:
        pid = os.posix_spawn(sys.executable, [sys.executable, "-I", "-S", "-c", _ORPHAN, cwd, *argv], dict(env),
                             file_actions=actions, setsid=True)
    except OSError:
        os.close(w)
        return None
    finally:
        os.close(r)
    with contextlib.suppress(OSError):  # a program that exits without reading: EPIPE, nothing lost for us
        os.write(w, stdin)
    os.close(w)

    def reap() -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)

    threading.Thread(target=reap, daemon=True).start()
    return pid
