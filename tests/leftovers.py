"""The test run's hygiene: a clean environment at the start, nothing left running at the end.

At the start (``begin``, from conftest's ``pytest_configure``), the variables of the shell that
started pytest that exo reads are taken out of ``os.environ``: the markers of being inside tmux or
Zellij or an exo agent, every ``EXO_*`` (but the suite's own knobs), ``BEADS_DIR``,
``HANGAR_ROOT``, the ``GIT_*`` and ``PG*`` variables that would point git or libpq elsewhere. Then
``TMUX_TMPDIR`` and ``XDG_RUNTIME_DIR`` point into a short folder of this run (the run root), so
every tmux server the run starts has its socket there, and every process the run starts carries
``RUN_VAR`` (this run's token) unless a test builds its environment from nothing.

At the end (``finish``, from ``pytest_sessionfinish``), what the run itself left behind fails it:
tmux servers still answering on a socket under the run root, and processes that point into the
run's folders (the run root and pytest's base temporary folder: their working folder, a word of
their command line or a value of their environment) or carry the run's token. Never the user's own
processes: pytest itself and its ancestors (the suite may run inside an exo agent) are skipped, and
nothing else points into this run's folders. Processes get a generous grace to end by themselves
(a background ``exo`` finishing its work), then the remaining ones are named and stopped.

Linux only (it reads /proc); elsewhere the check is skipped. tests/conftest.py takes the hooks and
the fixture below as its own; ``pytest -p leftovers`` (with tests/ on ``PYTHONPATH``) loads them alone,
as tests/test_leftovers.py does to prove that a run leaving something behind fails.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from shell_env import KEEP, SCRUB_EXACT, SCRUB_PREFIX, private, scrub, tmux_env, tmux_servers  # noqa: F401 - one list

RUN_VAR = "PYTEST_EXO_RUN"  # this run's token, inherited by what the run starts (not EXO_*: tests drop those)
GRACE = 20.0  # seconds a process found at the end has to end by itself before it counts as left behind
GRACE_VAR = "EXO_TEST_LEFTOVER_GRACE"  # another grace, in seconds (tests/test_leftovers.py's inner runs)


def begin(environ: MutableMapping[str, str]) -> Path:
    """Scrub ``environ`` and give the run its own root, ``TMUX_TMPDIR``, ``XDG_RUNTIME_DIR`` and token."""
    scrub(environ)
    # Short, under /tmp: tmux sockets live under it (a unix socket path holds about 104 bytes).
    root = Path(tempfile.mkdtemp(prefix="exo-run-", dir=os.path.realpath("/tmp")))
    private(environ, root)
    environ[RUN_VAR] = uuid.uuid4().hex
    return root


@dataclass(frozen=True)
class Leftover:
    """A process (or a tmux server) the run left running."""

    pid: int
    start: str  # the start time in /proc/PID/stat: a reused pid is not the same process
    argv: str
    why: str

    def __str__(self) -> str:
        return f"pid {self.pid}: {self.argv[:200]} ({self.why})"


def _helpers() -> set[int]:
    """The helper processes Python's multiprocessing started for this process (its resource tracker, its
    fork server): they are this process's own and end with it."""
    import sys

    pids = set()
    for module, obj, attr in (("multiprocessing.resource_tracker", "_resource_tracker", "_pid"),
                              ("multiprocessing.forkserver", "_forkserver", "_forkserver_pid")):
        pid = getattr(getattr(sys.modules.get(module), obj, None), attr, None)
        if isinstance(pid, int):
            pids.add(pid)
    return pids


def _stat(pid: int) -> tuple[str, int, str] | None:
    """(state, ppid, start time) of ``pid``, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2:].split()
    return fields[0], int(fields[1]), fields[19]


def _ancestors(pid: int) -> set[int]:
    out = set()
    while pid > 0 and pid not in out:
        out.add(pid)
        st = _stat(pid)
        pid = st[1] if st else 0
    return out


def _mentions(roots: Sequence[str]) -> re.Pattern[str]:
    """A pattern for a path inside one of ``roots`` (not a longer sibling: pytest-12 is not pytest-123)."""
    return re.compile("(?:" + "|".join(re.escape(r) for r in roots) + r")(?=$|[/:;,\s\"'=])")


def processes(roots: Iterable[str | Path], token: str | None, *, skip: Iterable[int] = ()) -> list[Leftover]:
    """The live processes of this user that point into ``roots`` or carry ``token`` (not ``skip``,
    not this process and its ancestors)."""
    if not os.path.isdir("/proc/self"):
        return []
    paths = sorted({p for r in roots for p in (str(r), os.path.realpath(r))}, key=len, reverse=True)
    inside = _mentions(paths)
    mark = f"{RUN_VAR}={token}".encode() if token else None
    skipped = _ancestors(os.getpid()) | set(skip)
    uid = os.getuid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in skipped:
            continue
        pid = int(name)
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            st = _stat(pid)
            if st is None or st[0] in ("Z", "X"):  # a zombie has ended; its parent has not reaped it yet
                continue
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        command = " ".join(a.decode(errors="replace") for a in argv if a)
        why = []
        if mark is not None and mark in environ.split(b"\0"):
            why.append("has this run's token")
        if inside.match(cwd):
            why.append(f"works in {cwd}")
        if inside.search(command):
            why.append("its command line names a folder of this run")
        if not why and inside.search(environ.decode(errors="replace").replace("\0", "\n")):
            why.append("its environment names a folder of this run")
        if why:
            found.append(Leftover(pid, st[2], command, "; ".join(why)))
    return found


def _same(p: Leftover) -> bool:
    st = _stat(p.pid)
    return st is not None and st[2] == p.start and st[0] not in ("Z", "X")


def stop(found: Iterable[Leftover], *, grace: float = 5.0) -> None:
    """SIGTERM each process (if it is still the same one), then SIGKILL what is left after ``grace``."""
    found = list(found)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in found:
            if _same(p):
                try:
                    os.kill(p.pid, sig)
                except OSError:
                    pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_same(p) for p in found):
            time.sleep(0.1)


def finish(root: Path, basetemp: Path | None, token: str | None, *, grace: float = GRACE) -> list[str]:
    """Stop what the run left running and return what it was (empty: nothing); remove the run root."""
    report = []
    for sock in tmux_servers(root):
        report.append(f"tmux server on {sock}")
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, env=tmux_env(), timeout=30)
    roots = [root] + ([basetemp] if basetemp is not None else [])
    found = processes(roots, token, skip=_helpers())
    deadline = time.monotonic() + grace
    while found and time.monotonic() < deadline:  # a background exo may be finishing: it may end by itself
        time.sleep(0.2)
        found = [p for p in found if _same(p)]
    report += [str(p) for p in found]
    stop(found)
    shutil.rmtree(root, ignore_errors=True)
    return report


# --------------------------------------------------------------------------- as pytest hooks

RUN_ROOT = pytest.StashKey[Path]()
BASETEMP = pytest.StashKey[Path]()
LEFT = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[RUN_ROOT] = begin(os.environ)


@pytest.fixture(scope="session", autouse=True)
def run_folders(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> None:
    """Note pytest's base temporary folder of this run: one of the folders the end's check looks into."""
    pytestconfig.stash[BASETEMP] = tmp_path_factory.getbasetemp()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run on what it left running (tmux servers, processes in its folders); stop them."""
    config = session.config
    root = config.stash.get(RUN_ROOT, None)
    if root is None:
        return
    grace = float(os.environ.get(GRACE_VAR) or GRACE)
    left = finish(root, config.stash.get(BASETEMP, None), os.environ.get(RUN_VAR), grace=grace)
    if left:
        config.stash[LEFT] = left
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    left = config.stash.get(LEFT, None)
    if left:
        terminalreporter.write_sep("=", f"the run left {len(left)} thing(s) running; now stopped", red=True)
        for line in left:
            terminalreporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    root = config.stash.get(RUN_ROOT, None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)  # `pytest --collect-only` and the like: no session to finish
