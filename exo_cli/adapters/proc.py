"""Processes: running programs (argv lists, never a shell) and reading Linux ``/proc``.

The one place that parses ``/proc``: a process's stat line (parent, group, session, start
time), its ancestors, its command line, and the processes whose working directory is inside a
folder. Where ``/proc`` is missing the readers answer "unknown" and the signal helpers fall
back to ``kill(pid, 0)``.

Stdlib only and cheap to import: identity by ancestry (``ancestors``) runs on every hook, so
``subprocess``, ``shutil`` and ``signal`` are imported only by the functions that use them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence

from exo_cli.errors import EnvironmentError_, ExternalFailure, InvalidInput, external
from exo_cli.lite import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
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


def has_proc() -> bool:
    """Whether this system has a Linux ``/proc``."""
    return os.path.exists("/proc/self/stat")


def proc_stat(pid: int) -> ProcStat | None:
    """Return the stat fields of ``pid`` from /proc, or None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
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
    """Return the /proc start time of ``pid`` (None where /proc is missing)."""
    st = proc_stat(pid)
    return st.start_time if st else None


def ancestors(pid: int, limit: int = 64) -> list[int]:
    """``pid`` and its ancestors up to (without) init, from /proc (empty where /proc is missing)."""
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
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def command_name(pid: int) -> str | None:
    """The program name of ``pid`` (``/proc/<pid>/comm``), or None when unknown."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _pids() -> list[int]:
    try:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def processes_inside(path: str, *, exclude: set[int] | None = None) -> list[dict[str, Any]]:
    """Live processes whose working directory is ``path`` or inside it (scans /proc/*/cwd).

    Each is ``{"pid", "pgid", "sid", "cwd", "command"}`` (the command cut to 200 characters).
    """
    real = os.path.realpath(path)
    inside = real.rstrip("/") + "/"
    out: list[dict[str, Any]] = []
    for pid in _pids():
        if exclude and pid in exclude:
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd == real or cwd.startswith(inside):
            st = proc_stat(pid)
            out.append({"pid": pid, "pgid": st.pgrp if st else None, "sid": st.session if st else None,
                        "cwd": cwd, "command": cmdline(pid)[:200]})
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
