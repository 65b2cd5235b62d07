"""Processes: running programs (argv lists, never a shell) and reading Linux ``/proc``.

The one place that parses ``/proc``: a process's stat line (parent, group, session, start
time), its ancestors, its command line, and the processes whose working directory is inside a
folder. Where ``/proc`` is missing (macOS, the BSDs) the two readers exo cannot do without,
``ancestors`` (the caller's identity) and ``processes_inside`` (the "someone is still in this
worktree" guard), use psutil instead; the others answer "unknown" and the signal helpers fall
back to ``kill(pid, 0)``. ``EXO_PROCESS_READER=psutil`` takes the psutil path where ``/proc``
exists too, so the tests run it on Linux.

Stdlib only and cheap to import: identity by ancestry (``ancestors``) runs on every hook, so
``subprocess``, ``shutil``, ``signal`` and psutil are imported only by the functions that use
them, and psutil only where ``/proc`` is missing or the switch asks for it.
"""

from __future__ import annotations

import os
import select
import time

from exo_cli.errors import EnvironmentError_, ExternalFailure, InvalidInput, external
from exo_cli.lite import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

    Completed = subprocess.CompletedProcess[str]  # what ``run`` returns, for annotations elsewhere

# --------------------------------------------------------------------------- /proc


class ProcStat(NamedTuple):
    """The fields of ``/proc/<pid>/stat`` exo reads."""

    state: str  # "R", "S", ..., "Z" (zombie), "X" (dead)
    ppid: int
    pgrp: int
    session: int
    start_time: int  # clock ticks after boot: with the pid, the identity of a process


PROC_ROOT = "/proc"  # where the process file system is (the tests point it elsewhere to take it away)
READER_VAR = "EXO_PROCESS_READER"  # config.EnvVars.PROCESS_READER: "psutil" forces psutil where /proc exists


def has_proc() -> bool:
    """Whether this system has a Linux ``/proc``."""
    return os.path.exists(f"{PROC_ROOT}/self/stat")


def use_psutil() -> bool:
    """Whether the process readers go through psutil: no ``/proc``, or asked for."""
    return os.environ.get(READER_VAR) == "psutil" or not has_proc()


def proc_stat(pid: int) -> ProcStat | None:
    """Return the stat fields of ``pid`` from /proc, or None if unknown."""
    try:
        with open(f"{PROC_ROOT}/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces or ")".
    rest = data[data.rfind(b")") + 2 :].split()
    try:
        return ProcStat(rest[0].decode("ascii", "replace"), int(rest[1]), int(rest[2]), int(rest[3]), int(rest[19]))
    except (IndexError, ValueError):
        return None


def proc_start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot, as /proc has it (psutil where /proc is
    missing, converted to the same figure); None when unknown. A recorded pid whose start time
    changed is another process that got the same number."""
    if use_psutil():
        return _psutil_start_time(pid)
    st = proc_stat(pid)
    return st.start_time if st else None


def _psutil_start_time(pid: int) -> int | None:
    import psutil

    try:
        created = psutil.Process(pid).create_time()
        booted = psutil.boot_time()
    except psutil.Error:
        return None
    try:
        ticks = os.sysconf("SC_CLK_TCK")
    except (AttributeError, ValueError, OSError):
        ticks = 100
    return round((created - booted) * ticks)


def ancestors(pid: int, limit: int = 64) -> list[int]:
    """``pid`` and its ancestors up to (without) init (from /proc, else from psutil)."""
    if use_psutil():
        return _psutil_ancestors(pid, limit)
    chain: list[int] = []
    while pid > 1 and len(chain) < limit:
        chain.append(pid)
        st = proc_stat(pid)
        if st is None:
            break
        pid = st.ppid
    return chain


def cmdline(pid: int) -> str:
    """The command line of ``pid``, its arguments joined by spaces ("" when unknown)."""
    try:
        with open(f"{PROC_ROOT}/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def command_name(pid: int) -> str | None:
    """The program name of ``pid`` (``/proc/<pid>/comm``), or None when unknown."""
    try:
        with open(f"{PROC_ROOT}/{pid}/comm", encoding="utf-8", errors="replace") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def cwd_of(pid: int) -> str | None:
    """The working directory of ``pid`` (None when unknown or gone)."""
    try:
        return os.readlink(f"{PROC_ROOT}/{pid}/cwd")
    except OSError:
        return None


def _pids() -> list[int]:
    try:
        return [int(p) for p in os.listdir(PROC_ROOT) if p.isdigit()]
    except OSError:
        return []


def processes_inside(path: str, *, exclude: set[int] | None = None) -> list[dict[str, Any]]:
    """Live processes whose working directory is ``path`` or inside it (scans /proc/*/cwd).

    Each is ``{"pid", "pgid", "sid", "cwd", "command"}`` (the command cut to 200 characters).
    """
    real = os.path.realpath(path)
    inside = real.rstrip("/") + "/"
    if use_psutil():
        return _psutil_inside(real, inside, exclude or set())
    out: list[dict[str, Any]] = []
    for pid in _pids():
        if exclude and pid in exclude:
            continue
        try:
            cwd = os.readlink(f"{PROC_ROOT}/{pid}/cwd")
        except OSError:
            continue
        if cwd == real or cwd.startswith(inside):
            st = proc_stat(pid)
            out.append({"pid": pid, "pgid": st.pgrp if st else None, "sid": st.session if st else None,
                        "cwd": cwd, "command": cmdline(pid)[:200]})
    return out


def _psutil_ancestors(pid: int, limit: int) -> list[int]:
    import psutil

    chain: list[int] = []
    while pid > 1 and len(chain) < limit:
        chain.append(pid)
        try:
            pid = psutil.Process(pid).ppid()
        except psutil.Error:
            break
    return chain


def _psutil_inside(real: str, inside: str, exclude: set[int]) -> list[dict[str, Any]]:
    import psutil

    out: list[dict[str, Any]] = []
    for p in psutil.process_iter():
        if p.pid in exclude:
            continue
        try:
            cwd = p.cwd()
            if not cwd or not (cwd == real or cwd.startswith(inside)):
                continue
            command = " ".join(p.cmdline())
        except psutil.Error:  # gone meanwhile, a zombie, or another user's (access denied)
            continue
        ids: list[int | None] = []
        for get in (os.getpgid, os.getsid):
            try:
                ids.append(get(p.pid))
            except OSError:
                ids.append(None)
        out.append({"pid": p.pid, "pgid": ids[0], "sid": ids[1], "cwd": cwd, "command": command[:200]})
    return out


# --------------------------------------------------------------------------- liveness and signals


def reap(pid: int) -> int | None:
    """Reap ``pid`` if it is a finished child of this process; return its exit status."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    if done == 0:
        return None
    return os.waitstatus_to_exitcode(status)


def pid_alive(pid: int | None, start_time: int | None = None, *, reap_child: bool = True) -> bool:
    """Whether ``pid`` runs (not a zombie) and, if given, has the recorded start time."""
    if not pid or pid <= 0:
        return False
    if reap_child:
        reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    st = proc_stat(pid)
    if st is None:
        return not has_proc()
    if st.state in ("Z", "X"):
        return False
    return start_time is None or st.start_time == start_time


def group_members(pgid: int) -> list[int]:
    """Return the live (non-zombie) processes of group ``pgid`` and of session ``pgid``.

    A pane's process leads its own session, so descendants that moved to another
    process group (a shell's jobs) are found through the session id.
    """
    if not has_proc():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    members = []
    for pid in _pids():
        st = proc_stat(pid)
        if st and (st.pgrp == pgid or st.session == pgid) and st.state not in ("Z", "X"):
            members.append(pid)
    return members


def tree_activities(pgids: Iterable[int]) -> dict[int, str]:
    """A fingerprint, per process group/session in ``pgids``, of what its processes wrote so far.

    The count of its live members and the sum of their ``wchar`` (bytes written, terminal
    output included, from ``/proc/<pid>/io``): it changes whenever the agent prints or writes,
    so an observer that sees it unchanged for N seconds knows the agent was quiet that long.
    One scan of ``/proc`` for all of them; empty where ``/proc`` is missing.
    """
    wanted = {g for g in pgids if g and g > 1}
    if not wanted or not has_proc():
        return {}
    counts = dict.fromkeys(wanted, 0)
    totals = dict.fromkeys(wanted, 0)
    for pid in _pids():
        st = proc_stat(pid)
        if st is None or st.state in ("Z", "X"):
            continue
        group = st.pgrp if st.pgrp in wanted else st.session if st.session in wanted else None
        if group is None:
            continue
        counts[group] += 1
        try:
            with open(f"/proc/{pid}/io", "rb") as fh:
                for line in fh:
                    if line.startswith(b"wchar:"):
                        totals[group] += int(line.split()[1])
                        break
        except (OSError, ValueError):
            continue
    return {g: f"{counts[g]}:{totals[g]}" for g in wanted}


def children_of(pid: int) -> list[int]:
    """The live (non-zombie) direct children of ``pid`` (empty where /proc is missing)."""
    out = []
    for p in _pids():
        st = proc_stat(p)
        if st is not None and st.ppid == pid and st.state not in ("Z", "X"):
            out.append(p)
    return out


def kill_group(pgid: int, *, grace: float = 3.0, leader_start_time: int | None = None) -> bool:
    """Stop process group ``pgid``: SIGTERM, then SIGKILL after ``grace`` seconds.

    When the leader still runs but its start time differs from ``leader_start_time``
    the id was reused by another program and nothing is signalled. Returns whether
    the group had live members.
    """
    import signal

    if pgid <= 1:
        raise InvalidInput(f"Refusing to signal process group {pgid}", field="pgid")
    if leader_start_time is not None:
        st = proc_stat(pgid)
        if st and st.state not in ("Z", "X") and st.start_time != leader_start_time:
            return False
    if not group_members(pgid):
        return False
    for sig in (signal.SIGTERM, signal.SIGCONT):
        _signal_group(pgid, sig)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        reap(pgid)
        if not group_members(pgid):
            return True
        time.sleep(0.02)
    _signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        reap(pgid)
        if not group_members(pgid):
            break
        time.sleep(0.02)
    return True


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
    except PermissionError as exc:
        raise ExternalFailure(f"Not allowed to signal process group {pgid}", pgid=pgid) from exc
    for pid in group_members(pgid):  # members of the session in other groups
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


# --------------------------------------------------------------------------- running programs


def run_captured(argv: list[str], env: Mapping[str, str], timeout: float,
                 stdin: bytes | None) -> tuple[int, bytes, bytes, bool]:
    """posix_spawn ``argv`` with stdout/stderr captured; stdin is ``stdin`` or /dev/null (git's runner).

    No ``subprocess`` import: git runs on every hook, and importing it costs more than git itself.

    Returns (exit code, stdout, stderr, timed out). The child is killed at the deadline.
    """
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
        pid = os.posix_spawnp(argv[0], argv, dict(env), file_actions=actions)
    except BaseException:
        for fd in (out_r, err_r, in_w):
            if fd >= 0:
                os.close(fd)
        raise
    finally:
        for fd in (out_w, err_w, in_r):
            if fd >= 0:
                os.close(fd)
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
    timed_out = False
    try:
        while readers or writers:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, 9)
                timed_out = True
                break
            ready, can_write, _ = select.select(readers, writers, [], left)
            if can_write:
                try:
                    pending = pending[os.write(in_w, pending[:65536]):]
                except BrokenPipeError:  # git stopped reading: what it wrote still counts
                    pending = pending[:0]
                if not pending:
                    os.close(in_w)
                    writers = []
            for fd in ready:
                data = os.read(fd, 65536)
                if data:
                    chunks[fd].append(data)
                else:
                    readers.remove(fd)
    finally:
        os.close(out_r)
        os.close(err_r)
        if writers:
            os.close(in_w)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks[out_r]), b"".join(chunks[err_r]), timed_out


def spawn_detached(argv: list[str], env: Mapping[str, str]) -> int | None:
    """Start ``argv`` in a session of its own, stdin/stdout/stderr on /dev/null, and never wait for it.

    One ``posix_spawn`` (no ``subprocess`` import: the stop hook calls it): the caller goes on at
    once, and the child outlives it. Returns the child's pid, or None when it could not start.
    """
    actions: list[tuple[int, int, str, int, int]] = [
        (os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)
    ]
    _no_inherit_above_stderr()  # a pipe the caller's caller waits on must not stay open in the child
    try:
        return os.posix_spawn(argv[0], argv, dict(env), file_actions=actions, setsid=True)
    except OSError:
        return None


def _no_inherit_above_stderr() -> None:
    """Mark every open descriptor above 2 close-on-exec (Python's own already are; inherited ones are not)."""
    try:
        fds = [int(name) for name in os.listdir("/dev/fd") if name.isdigit()]
    except OSError:
        return
    for fd in fds:
        if fd > 2:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass  # the listing's own descriptor, closed by now


def run_foreground(argv: list[str], env: Mapping[str, str] | None = None) -> int:
    """Run ``argv`` on this terminal (stdin, stdout and stderr inherited) and wait; its exit code (127: not found)."""
    import shutil

    program = argv[0] if os.sep in argv[0] else shutil.which(argv[0])
    if program is None:
        return 127
    try:
        pid = os.posix_spawn(program, argv, dict(os.environ if env is None else env))
    except OSError:
        return 127
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def which(name: str, path: str | None = None) -> str | None:
    import shutil

    return shutil.which(name, path=path)


def run(
    argv: Sequence[str],
    *,
    what: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    check: bool = True,
    timeout: float | None = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` and return the finished process; raise ExternalFailure on failure."""
    import subprocess

    try:
        proc = subprocess.run(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise EnvironmentError_(
            f"{argv[0]} is not installed or not on PATH", hint=f"Install {argv[0]}.", binary=argv[0]
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise external(
            what or argv[0],
            subprocess.CompletedProcess(list(argv), -1, exc.stdout or "", f"timed out after {timeout}s"),
        ) from exc
    if check and proc.returncode != 0:
        raise external(what or " ".join(argv[:2]), proc)
    return proc
