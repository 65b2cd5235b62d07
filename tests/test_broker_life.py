"""The team broker's life: started on demand under a lock (never two), stale sockets, versions, idle exit.

Real brokers (``exo broker serve`` processes) on the test's repository; every test ends with no
broker left (``team``'s teardown stops it; most exit by themselves first). Another exo version
cannot be installed here: ``tests/broker_standin.py`` speaks the control protocol in its place.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, wait_for
from exo_cli import __version__
from exo_cli.adapters import broker as adapter
from exo_cli.adapters import brokerio
from exo_cli.env import Env
from exo_cli.errors import EnvironmentError_, InvalidInput, StateError
from exo_cli.ops import broker as ops

STANDIN = Path(__file__).with_name("broker_standin.py")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def brokers_of(repo: Path) -> list[int]:
    """The pids of the broker processes serving ``repo`` (read from /proc)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv]
        if "broker" in words and "serve" in words and str(repo) in words and _alive(int(name)):
            out.append(int(name))
    return out


@pytest.fixture
def team(repo: Path) -> Iterator[Path]:
    """The test repository with exo state and a broker that leaves one second after its last agent."""
    (repo / "exo.toml").write_text("[broker]\nidle_exit = 1\n")
    Env(cwd=repo).store.kv_set("test", "state")
    yield repo
    env = Env(cwd=repo)
    adapter.stop(ops.paths(env), __version__, timeout=30)
    wait_for(lambda: not brokers_of(repo), what="the test's broker to end")


def test_started_on_demand_private_and_gone_when_idle(team: Path) -> None:
    env = Env(cwd=team)
    info = ops.ensure(env)
    assert info["exo"] == __version__ and info["protocol"] == adapter.PROTOCOL and info["agents"] == 0
    assert brokers_of(team) == [info["pid"]]
    p = ops.paths(env)
    for folder in (p.runtime, p.dir, p.sockets):
        st = os.lstat(folder)
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700
    st = os.lstat(p.ctl)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert adapter.read_pid(p)["pid"] == info["pid"]
    # no agent: it leaves by itself after broker.idle_exit, and takes its files along (the runtime folder too,
    # since no agent runs and nobody waits on a doorbell)
    wait_for(lambda: not _alive(info["pid"]), what="the idle broker to exit")
    assert not p.ctl.exists() and not p.pid_file.exists() and not p.runtime.exists()
    log = (env.state_dir / "broker.log").read_text()
    assert "no agent left: exiting" in log
    # the environment it ran with carried no marker of whoever started it
    assert "EXO_AGENT" not in log


def test_racing_starters_start_exactly_one_broker(team: Path) -> None:
    code = ("import sys; from exo_cli.env import Env; from exo_cli.ops import broker; "
            "print(broker.ensure(Env(cwd=sys.argv[1]))['pid'])")
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(team)], stdout=subprocess.PIPE, text=True,
                              env=environ) for _ in range(4)]
    pids = {int(p.communicate(timeout=120)[0].strip()) for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(pids) == 1, pids
    assert brokers_of(team) == list(pids)


def test_kill_9_leaves_a_stale_socket_that_the_next_start_replaces(team: Path) -> None:
    env = Env(cwd=team)
    (team / "exo.toml").write_text("[broker]\nidle_exit = 60\n")
    first = ops.ensure(env)["pid"]
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: not _alive(first), what="the killed broker to be gone")
    p = ops.paths(env)
    assert p.ctl.exists() and adapter.ping(p, __version__) is None  # a stale socket: nobody answers
    second = ops.ensure(env)["pid"]
    assert second != first and brokers_of(team) == [second]
    assert adapter.read_pid(p)["pid"] == second


def _standin(p: adapter.Paths, version: str, agents: int) -> subprocess.Popen[str]:
    p.make()
    proc = subprocess.Popen([sys.executable, str(STANDIN), str(p.ctl), version, str(agents)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_an_idle_broker_of_another_version_is_replaced(team: Path) -> None:
    env = Env(cwd=team)
    old = _standin(ops.paths(env), "0.0.1", 0)
    try:
        info = ops.ensure(env)
        assert info["exo"] == __version__ and info["pid"] != old.pid
        assert old.wait(timeout=60) == 0  # asked to stop, it did
    finally:
        old.kill()
        old.wait()


def test_a_busy_broker_of_another_version_keeps_serving_and_new_agents_get_a_hint(team: Path) -> None:
    env = Env(cwd=team)
    old = _standin(ops.paths(env), "0.0.1", 2)
    try:
        assert ops.ensure(env)["exo"] == "0.0.1"  # still serving its two agents: left alone
        with pytest.raises(StateError) as caught:
            ops.register(env, "w1")
        assert "0.0.1" in caught.value.message and "still serves 2 agent(s)" in caught.value.message
        assert "exo broker stop" in (caught.value.hint or "")
        assert old.poll() is None and brokers_of(team) == []
    finally:
        old.kill()
        old.wait()


def test_a_caller_of_another_protocol_is_refused_with_a_hint(team: Path) -> None:
    env = Env(cwd=team)
    ops.ensure(env)
    sock = brokerio.connect(str(ops.paths(env).ctl))
    try:
        brokerio.send(sock, {"hello": adapter.PROTOCOL + 1, "exo": "9.9", "kind": "ctl", "pid": os.getpid()})
        answer = brokerio.recv(sock)
    finally:
        sock.close()
    assert answer is not None and not answer["ok"]
    assert answer["error"]["name"] == "StateError" and "protocol" in answer["error"]["message"]
    assert "exo broker stop" in answer["error"]["hint"]


def test_garbage_and_oversized_frames_leave_it_serving(team: Path) -> None:
    env = Env(cwd=team)
    p = ops.paths(env)
    pid = ops.ensure(env)["pid"]
    for data in (b"\xff\xff\xff\xff", b"\x00\x00\x00\x05hello", b"\x00\x00\x00\x02[]", b"\x00\x00"):
        sock = brokerio.connect(str(p.ctl))
        sock.sendall(data)
        sock.close()
    answer = adapter.ping(p, __version__)
    assert answer is not None and answer["pid"] == pid
    with pytest.raises(InvalidInput):  # an agent's kind of connection has no place on the control socket
        adapter.hello(p.ctl, "call", __version__)


def test_socket_paths_too_long_are_refused_by_name(tmp_path: Path) -> None:
    long = "/tmp/" + "x" * 120 + "/sock"
    with pytest.raises(EnvironmentError_) as caught:
        brokerio.listen(long)
    assert long in caught.value.message and "103" in caught.value.message


def test_a_runtime_folder_that_is_not_ours_and_private_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "runtime"
    link.symlink_to(target)
    with pytest.raises(EnvironmentError_):
        adapter.Paths(link).make()


def test_the_broker_leaves_when_its_state_folder_is_gone(team: Path) -> None:
    env = Env(cwd=team)
    (team / "exo.toml").write_text("[broker]\nidle_exit = 600\n")
    pid = ops.ensure(env)["pid"]
    import shutil

    shutil.rmtree(env.state_dir)
    wait_for(lambda: not _alive(pid), what="the broker to notice its state is gone")


def test_status_and_stop_commands(team: Path) -> None:
    from conftest import Exo

    exo = Exo(team)
    (team / "exo.toml").write_text("[broker]\nidle_exit = 600\n")
    r = exo("broker", "status", "--json")
    assert r.exit_code == 0 and r.json()["running"] is False
    pid = ops.ensure(Env(cwd=team))["pid"]
    r = exo("broker", "status", "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["running"] is True and r.json()["pid"] == pid and r.json()["exo"] == __version__
    r = exo("broker", "stop")
    assert r.exit_code == 0 and r.stdout.strip() == "Stopped the broker."
    wait_for(lambda: not _alive(pid), what="the broker to stop")
    r = exo("broker", "stop", "--json")
    assert r.exit_code == 0 and r.json() == {"stopped": False, "agents": 0}


def test_a_starter_killed_holding_the_lock_does_not_block_the_next(team: Path) -> None:
    """The start lock is an flock: the kernel drops it when its holder dies at any step."""
    env = Env(cwd=team)
    p = ops.paths(env)
    p.make()
    code = ("import sys, time; from exo_cli.adapters.files import FileLock; "
            "FileLock(__import__('pathlib').Path(sys.argv[1])).acquire(); print('held', flush=True); time.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(p.lock)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        holder.kill()
        holder.wait()
        assert ops.ensure(env)["exo"] == __version__  # not "another exo process has been starting it for too long"
    finally:
        holder.kill()
        holder.wait()
