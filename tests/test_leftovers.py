"""The run's hygiene (tests/leftovers.py): the user's shell does not reach the tests, and a run that
leaves something running fails, naming it, and stops it; the user's own processes are never touched.

Real processes and a real tmux server; an inner pytest run (``-p leftovers``) for the whole hook.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import leftovers
import pytest

from conftest import wait_for

TESTS = Path(__file__).resolve().parent
SLEEP = ["sleep", "600"]


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts, killed afterwards whatever happened."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait()


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder of "the user": in no folder of this run."""
    path = Path(tempfile.mkdtemp(prefix="exo-user-", dir=os.path.realpath("/tmp")))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def bare_env(**extra: str) -> dict[str, str]:
    """An environment that names nothing of the run (no token, no folder of it)."""
    return {"PATH": os.environ["PATH"], **extra}


def test_the_users_shell_does_not_reach_the_tests() -> None:
    ours = {"EXO_CONFIG_DIR", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
            "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL"}  # set by conftest's isolate, after the scrub
    assert set(leftovers.scrub(dict(os.environ))) == ours
    root = Path(os.environ["TMUX_TMPDIR"])
    assert root.name.startswith("exo-run-") and len(str(root)) < 40
    assert os.environ["XDG_RUNTIME_DIR"] == str(root / "xdg")
    assert os.environ[leftovers.RUN_VAR]
    shell = {"TMUX": "/tmp/tmux-1/default,1,0", "TMUX_PANE": "%1", "ZELLIJ": "0", "ZELLIJ_SESSION_NAME": "s",
             "EXO_AGENT": "w1", "EXO_STORE_URL": "postgresql://x", "BEADS_DIR": "/b", "GIT_DIR": "/g", "PGHOST": "h",
             "EXO_UPDATE_SNAPSHOTS": "1", "EXO_TEST_README_INSTALL": "1", "PATH": "/bin", "TMUX_TMPDIR": "/t"}
    assert leftovers.scrub(shell) == ["BEADS_DIR", "EXO_AGENT", "EXO_STORE_URL", "GIT_DIR", "PGHOST", "TMUX",
                                      "TMUX_PANE", "ZELLIJ", "ZELLIJ_SESSION_NAME"]
    assert shell == {"EXO_UPDATE_SNAPSHOTS": "1", "EXO_TEST_README_INSTALL": "1", "PATH": "/bin", "TMUX_TMPDIR": "/t"}


def test_finds_what_points_into_the_run_and_never_the_users(tmp_path: Path, outside: Path,
                                                           started: list[subprocess.Popen[bytes]]) -> None:
    root = tmp_path / "run"
    (root / "sub").mkdir(parents=True)
    sibling = tmp_path / "run2"  # a longer name that starts like the root: not inside it
    sibling.mkdir()
    token = uuid.uuid4().hex

    def start(cwd: Path, argv: list[str] = SLEEP, **env: str) -> int:
        p = subprocess.Popen(argv, cwd=cwd, env=bare_env(**env), start_new_session=True)
        started.append(p)
        return p.pid

    by_cwd = start(root / "sub")
    by_argv = start(outside, [sys.executable, "-c", "import time; time.sleep(600)", f"{root}/x"])
    by_env = start(outside, HOME=str(root))
    by_token = start(outside, **{leftovers.RUN_VAR: token})
    users = [start(outside), start(sibling, HOME=str(sibling)), start(outside, **{leftovers.RUN_VAR: "another-run"})]
    found = {p.pid: p.why for p in leftovers.processes([root], token)}
    assert found == {by_cwd: f"works in {root / 'sub'}", by_argv: "its command line names a folder of this run",
                     by_env: "its environment names a folder of this run", by_token: "has this run's token"}
    assert os.getpid() not in found and not set(users) & set(found)
    leftovers.stop(leftovers.processes([root], token), grace=10)
    assert [p.poll() is not None for p in started] == [True] * 4 + [False] * 3


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_finish_stops_tmux_servers_and_processes_then_removes_the_root(outside: Path,
                                                                       started: list[subprocess.Popen[bytes]]) -> None:
    root = Path(tempfile.mkdtemp(prefix="exo-lt-", dir=os.path.realpath("/tmp")))
    sock = root / f"tmux-{os.getuid()}" / "s"
    sock.parent.mkdir(mode=0o700)
    user_sock = outside / "user"
    try:
        for s in (sock, user_sock):  # ours, and one of the user's (outside the run's folders)
            subprocess.run(["tmux", "-S", str(s), "new-session", "-d", "sleep 600"], check=True, cwd=outside,
                           env=bare_env())
        p = subprocess.Popen(SLEEP, cwd=root, env=bare_env(), start_new_session=True)
        started.append(p)
        report = leftovers.finish(root, None, None, grace=0.5)
        assert report[0] == f"tmux server on {sock}"
        assert any(line.startswith(f"pid {p.pid}: sleep 600 (works in {root})") for line in report)
        assert p.wait(30) == -signal.SIGTERM
        assert subprocess.run(["tmux", "-S", str(sock), "list-sessions"], capture_output=True).returncode != 0
        assert subprocess.run(["tmux", "-S", str(user_sock), "list-sessions"], capture_output=True).returncode == 0
        assert not root.exists()
    finally:
        subprocess.run(["tmux", "-S", str(user_sock), "kill-server"], capture_output=True)
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


INNER = '''
import os, subprocess

def test_leaves_a_process_behind(tmp_path):
    p = subprocess.Popen(["sleep", "600"], cwd=tmp_path, start_new_session=True)
    with open(os.environ["PIDFILE"], "w") as fh:
        fh.write(str(p.pid))
'''


CLEAN = {
    "nothing": "def test_nothing():\n    pass\n",
    # multiprocessing's resource tracker: a helper of pytest's own process, which ends with it
    "a helper of its own": "import multiprocessing.resource_tracker as rt\n\ndef test_helper():\n"
                           "    rt.ensure_running()\n",
}


@pytest.mark.parametrize("leave", [True, *CLEAN])
def test_a_run_that_leaves_something_running_fails_and_stops_it(tmp_path: Path, outside: Path, leave: bool | str,
                                                                started: list[subprocess.Popen[bytes]]) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "test_inner.py").write_text(textwrap.dedent(INNER) if leave is True else CLEAN[str(leave)])
    users = subprocess.Popen(SLEEP, cwd=outside, env=bare_env(), start_new_session=True)  # the user's own agent
    started.append(users)
    pidfile = tmp_path / "pid"
    env = {**os.environ, "PYTHONPATH": str(TESTS), "PIDFILE": str(pidfile), leftovers.GRACE_VAR: "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "leftovers", "-p", "no:cacheprovider",
                           "--rootdir", str(inner), "--basetemp", str(tmp_path / "bt"), str(inner)],
                          cwd=inner, env=env, capture_output=True, text=True, timeout=300)
    assert users.poll() is None
    if leave is not True:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "left" not in proc.stdout
        return
    assert proc.returncode == 1, proc.stdout + proc.stderr
    pid = int(pidfile.read_text())
    assert "1 passed" in proc.stdout
    assert "the run left 1 thing(s) running; now stopped" in proc.stdout
    assert f"pid {pid}: sleep 600 (has this run's token; works in {tmp_path / 'bt'}" in proc.stdout
    wait_for(lambda: not Path(f"/proc/{pid}").exists() or leftovers._stat(pid) is None
             or leftovers._stat(pid)[0] == "Z", what="the process left behind to be stopped")
