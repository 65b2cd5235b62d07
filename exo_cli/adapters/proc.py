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

import contextlib
import os
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
TOKEN_VAR = "EXO_RUN"  # marks every process of one call exo runs with a deadline (see ``end_session``)
GRACE = 2.0  # seconds between SIGTERM and SIGKILL when a deadline ends a call
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


def parent_of(pid: int) -> int:
    """The parent of ``pid`` (``os.getppid()`` for this process; 0 when unknown)."""
    if pid == os.getpid():
        return os.getppid()
    chain = ancestors(pid, limit=2)
    return chain[1] if len(chain) > 1 else 0


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


def exo_git(process: dict[str, Any]) -> bool:
    """Whether a process of ``processes_inside`` is a git command exo runs (hooks pointed at exo's empty folder): it
    ends by itself, so a survey waits for it instead of counting it as someone's work in that folder."""
    from exo_cli.adapters.files import empty_path

    command = str(process.get("command") or "")
    return command.startswith("git ") and f"core.hooksPath={empty_path()} " in command


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


def open_files(pids: Iterable[int], suffix: str) -> dict[str, int]:
    """The files whose name ends with ``suffix`` that the processes ``pids`` hold open: path -> inode.

    Read from ``/proc/<pid>/fd`` (empty where /proc is missing); a file already removed is left out.
    """
    found: dict[str, int] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"{PROC_ROOT}/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            link = f"{PROC_ROOT}/{pid}/fd/{fd}"
            try:
                target = os.readlink(link)
                if target.endswith(suffix) and target.startswith("/"):
                    found[target] = os.stat(link).st_ino
            except OSError:
                continue
    return found


def run_token() -> str:
    """A fresh token for one call exo runs with a deadline (``TOKEN_VAR``): the caller's session id, then random
    digits, so stopping that session (an agent) also finds the calls its processes started (``kill_group``)."""
    try:
        sid = os.getsid(0)
    except OSError:
        sid = 0
    return f"{sid}-{os.urandom(8).hex()}"


def environ_value(pid: int, name: str, *, depth: int = 3) -> str | None:
    """The value of ``name`` in the environment of ``pid``, else of its first descendant that has it (breadth
    first, ``depth`` generations: a runner keeps its agent's environment in memory, its child has it)."""
    needle = name.encode() + b"="
    level = [pid]
    for _ in range(depth + 1):
        for p in level:
            try:
                with open(f"{PROC_ROOT}/{p}/environ", "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            for entry in data.split(b"\0"):
                if entry.startswith(needle):
                    return entry[len(needle):].decode("utf-8", "surrogateescape")
        level = [c for p in level for c in children_of(p)]
        if not level:
            break
    return None


def carrying(name: str, value: str, *, prefix: bool = False, also: Mapping[str, str] | None = None) -> list[int]:
    """The live processes whose environment has ``name=value`` (with ``prefix``: a value starting so), a token
    exo gave a process it started: its descendants keep it even when they leave its session; and every
    ``also`` name=value too (one look at each process). Empty where /proc is missing."""
    needle = f"{name}={value}".encode()
    more = [f"{k}={v}".encode() for k, v in (also or {}).items()]
    out = []
    for pid in _pids():
        try:
            with open(f"{PROC_ROOT}/{pid}/environ", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        entries = data.split(b"\0")
        if (any(e.startswith(needle) for e in entries) if prefix else needle in entries) and all(
                m in entries for m in more):
            st = proc_stat(pid)
            if st is not None and st.state not in ("Z", "X"):
                out.append(pid)
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
    # the calls with a deadline the group's processes started (git in a session of its own): they go too
    calls = set(carrying(TOKEN_VAR, f"{pgid}-", prefix=True)) - {os.getpid()}

    def left() -> bool:
        reap(pgid)
        return bool(group_members(pgid)) or any(pid_alive(p, reap_child=False) for p in calls)

    if not group_members(pgid) and not calls:
        return False
    for sig in (signal.SIGTERM, signal.SIGCONT):
        _signal_group(pgid, sig)
        _signal_each(calls, sig)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not left():
            return True
        time.sleep(0.02)
    _signal_group(pgid, signal.SIGKILL)
    _signal_each(calls, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        if not left():
            break
        time.sleep(0.02)
    return True


def _signal_each(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def _members(leader: int, token: str | None) -> set[int]:
    found = set(group_members(leader))
    if token:
        found.update(carrying(TOKEN_VAR, token))
    found.discard(os.getpid())
    return found


def _reap(pid: int) -> int | None:
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return -9  # not ours to reap (already reaped): as killed
    return os.waitstatus_to_exitcode(status) if done else None


def end_session(leader: int, *, token: str | None = None, grace: float = GRACE,
                held_suffix: str = ".lock") -> tuple[int, dict[str, int]]:
    """End the session (and process group) that ``leader`` (a child of ours) leads, and every process carrying
    ``token``: SIGTERM and SIGCONT, then SIGKILL after ``grace``. Returns the leader's exit status and the files
    ending with ``held_suffix`` its processes held open meanwhile (path -> inode)."""
    import signal

    held: dict[str, int] = {}
    status: int | None = None

    def look() -> set[int]:
        live = _members(leader, token)
        held.update(open_files(live, held_suffix))
        return live

    def send(pids: set[int], sig: int) -> None:
        with contextlib.suppress(OSError):
            os.killpg(leader, sig)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    live = look()
    send(live, signal.SIGTERM)
    send(live, signal.SIGCONT)
    for sig, wait in ((signal.SIGKILL, grace), (None, 5.0)):
        until = time.monotonic() + wait
        while live and time.monotonic() < until:
            if status is None:
                status = _reap(leader)
            time.sleep(0.02)
            live = look()
        if sig is not None and live:
            send(live, sig)
    if status is None:
        try:
            status = os.waitstatus_to_exitcode(os.waitpid(leader, 0)[1])
        except ChildProcessError:
            status = -9
    return status, held


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
    """Run ``argv`` and return the finished process; raise ExternalFailure on failure.

    With a ``timeout``, the program runs in a process group of its own, in the caller's session (so
    stopping an agent, which ends its session, still ends what it runs): at the ``timeout`` that whole
    group ends with it, and every process carrying its token (``end_session``), so nothing it started
    is left running. Without one it stays in the caller's process group: what ends the caller (a
    terminal's hangup reaches the foreground group only) ends it too, and nothing outlives an agent
    whose pane was closed.
    """
    import subprocess

    token = run_token()
    try:
        child = subprocess.Popen(
            list(argv), cwd=cwd, env={**(os.environ if env is None else env), TOKEN_VAR: token}, text=True,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=0 if timeout is not None else None,
        )
    except FileNotFoundError as exc:
        raise EnvironmentError_(
            f"{argv[0]} is not installed or not on PATH", hint=f"Install {argv[0]}.", binary=argv[0]
        ) from exc
    try:
        out, err = child.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        end_session(child.pid, token=token, held_suffix="\0")
        child.returncode = -9
        for pipe in (child.stdout, child.stderr, child.stdin):
            if pipe is not None:
                pipe.close()
        raise external(
            what or argv[0],
            subprocess.CompletedProcess(list(argv), -1, "", f"timed out after {timeout}s: it and every process it "
                                        "started were ended"),
        ) from exc
    except BaseException:
        end_session(child.pid, token=token, held_suffix="\0", grace=0.5)
        raise
    proc = subprocess.CompletedProcess(list(argv), child.returncode, out, err)
    if check and proc.returncode != 0:
        raise external(what or " ".join(argv[:2]), proc)
    return proc
