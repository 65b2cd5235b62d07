"""Sandboxed agents in tmux panes keep their team's broker alive: the keeper beside each agent.

A sandboxed agent's relay cannot start a broker (exo's runtime folder is hidden in its sandbox), and
the pane's launcher ``exec``s the agent's ``bwrap``: so the launcher first starts a keeper
(``_runner.py --keep``, the headless runner's ``Keeper``) outside the sandbox. Real tmux on the run's
private socket, real bubblewrap, real custom agents (shell scripts running ``exo`` inside their
sandbox), a real broker killed with SIGKILL; nothing of the human's starts it again here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_life import brokers_of

from conftest import ROOT, Exo, stop_repo_agents, wait_for, write_trusted
from exo_cli import __version__
from exo_cli.adapters import broker as adapter
from exo_cli.env import Env
from exo_cli.ops import broker as ops
from exo_cli.ops import turnend

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("tmux") is None,
                                reason="needs bubblewrap and tmux")

# The lead blocks in `exo wait` (through its relay) from the start; the worker ends a turn that changed a
# file (its stop hook, as Claude Code runs it), then lives on.
STOP = '{"session_id": "s1", "hook_event_name": "Stop", "stop_hook_active": false, "last_assistant_message": "done"}'
AGENT = r"""
case "$EXO_AGENT" in
lead) exo wait --json --timeout 300 > .exo/wait.tmp 2> .exo/wait.err; mv .exo/wait.tmp .exo/wait.json ;;
w1) echo work > turn.txt; printf '%s' '""" + STOP + r"""' | exo hook stop --cli claude > .exo/hook.tmp 2>&1
    mv .exo/hook.tmp .exo/hook.json ;;
esac
exec sleep 600
"""


@pytest.fixture
def team(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    write_trusted(repo, f'[agent]\ncommand = ["sh", "-c", {json.dumps(AGENT)}, "{{prompt}}"]\n')
    yield repo
    stop_repo_agents(repo)
    adapter.stop(ops.paths(Env(cwd=repo)), __version__, timeout=30)
    wait_for(lambda: not brokers_of(repo), what="the test's broker to end")


def keepers(watched: dict[str, int]) -> dict[int, int]:
    """{pid: the pane process it watches} of the live keepers (``_runner.py --keep PID``, then its shell waiter)
    of ``watched``'s panes."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            state = _stat(int(name))[0]
        except (OSError, IndexError):
            continue
        mark = b"exo-keeper" if b"exo-keeper" in argv else b"--keep"  # the shell waiter, or Python's
        if mark in argv and any(a.endswith(b"_runner.py") for a in argv) and state != "Z":
            pane = int(argv[argv.index(mark) + 1])
            if pane in watched.values():
                out[int(name)] = pane
    return out


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name: state, ppid, pgrp, session, tty_nr, ..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def test_keepers_start_a_killed_broker_again_and_an_in_flight_wait_resumes(team: Path, exo: Exo) -> None:
    r = exo("spawn", "--subtree", "--branch", "lead", "--task", "wait", "--agent", "custom", "--mux", "tmux",
            "--sandbox", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    lead = r.json()["agents"][0]  # type: ignore[index]
    r = exo("spawn", "--worker", "w1", "--prompt", "go", "--agent", "custom", "--mux", "tmux", "--sandbox", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    env = Env(cwd=team)
    panes = {a.id: int(a.location["pid"]) for a in env.store.agents()}
    assert set(panes) == {"lead", "w1"}
    # one keeper beside each agent: the pane's process is its parent (the launcher, now the agent's bwrap);
    # it left the pane's session and terminal, and is not in the agent's pid namespace

    def settled() -> bool:  # each keeper is up and has left the pane's session (its first step)
        found = keepers(panes)
        return sorted(found.values()) == sorted(panes.values()) and all(_stat(k)[3] == str(k) for k in found)

    wait_for(settled, 60, "a keeper beside each agent")
    own_ns = os.readlink("/proc/self/ns/pid")
    for pid, parent in keepers(panes).items():
        state = _stat(pid)
        assert int(state[1]) == parent  # its parent: the pane's process
        pane = _stat(parent)
        assert state[3] != pane[3] and state[2] != pane[2], (state, pane)  # another session and process group
        assert state[4] == "0"  # no controlling terminal: the pane's Ctrl-C and hang-up never reach it
        assert os.readlink(f"/proc/{pid}/ns/pid") == own_ns
        assert not any(k.startswith("EXO_") for k in _environ(pid))  # none of the agent's variables
    p = ops.paths(env)
    # the worker's turn ended: its checkpoint, due after the hook's answer, is taken by the broker itself (a
    # helper process's call would come back through the agent's socket, not from the agent's process tree)
    w1 = env.store.agent("w1")
    assert w1 is not None
    hooked = Path(str(w1.worktree)) / ".exo" / "hook.json"
    wait_for(hooked.exists, 120, "the worker's stop hook")
    due = Path(turnend.folder(env, w1)) / turnend.DUE
    wait_for(lambda: not due.exists(), 120, f"the worker's due checkpoint ({hooked.read_text()})")
    taken = exo("checkpoints", "w1", "--json")
    assert taken.exit_code == 0 and taken.json()["checkpoints"], taken.stdout  # type: ignore[index]
    wait_for(lambda: (adapter.ping(p, __version__) or {}).get("connections", 0) >= 1, 120,
             "the lead's wait to be in flight in the broker")
    for kill in range(2):  # the keepers wait on the new broker's life lock again: a second kill goes the same way
        info = adapter.ping(p, __version__)
        assert info is not None
        os.kill(info["pid"], signal.SIGKILL)
        wait_for(lambda: info["pid"] not in brokers_of(team), what="the killed broker to be gone")
        # nothing of the human's runs meanwhile: only ping, which never starts one
        wait_for(lambda: (adapter.ping(p, __version__) or {}).get("agents") == 2, 120,
                 "a keeper to start the broker again")
        again = adapter.ping(p, __version__)
        assert again is not None and again["pid"] != info["pid"]
        assert brokers_of(team) == [again["pid"]]  # two keepers raced: one broker
        wait_for(lambda: (adapter.ping(p, __version__) or {}).get("connections", 0) >= 1, 120,
                 "the lead's relay to reconnect its wait")
    logs = "".join(path.read_text(errors="replace") for path in (env.state_dir / "logs").glob("*.keeper.log"))
    assert "exo's broker is gone; starting it again" in logs
    assert "cannot start" not in logs, logs
    # the wait that was in flight through both kills gets the human's message, once
    assert exo("send", "lead", "the one message").exit_code == 0
    result = Path(lead["worktree"]) / ".exo" / "wait.json"
    wait_for(result.exists, 120, "the lead's wait to return")
    got = [e["message"] for e in json.loads(result.read_text())["results"] if e["kind"] != "event"]
    assert got == ["the one message"], result.read_text()
    # Ctrl-C in the pane reaches the agent (it keeps its terminal), and its keeper ends with it
    sockets = [s for s in Path(os.environ["TMUX_TMPDIR"]).rglob(f"exo-{env.repo_id}") if s.is_socket()]
    assert len(sockets) == 1, sockets
    subprocess.run(["tmux", "-S", str(sockets[0]), "send-keys", "-t", str(lead["location"]["pane"]), "C-c"],
                   check=True, capture_output=True)
    wait_for(lambda: panes["lead"] not in keepers(panes).values(), 60, "the lead's keeper to end with it")
    assert list(keepers(panes).values()) == [panes["w1"]]
    assert exo("kill", "w1").exit_code == 0
    wait_for(lambda: not keepers(panes), 60, "the worker's keeper to end with it")


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(x.decode(errors="replace").split("=", 1) for x in raw.split(b"\0") if b"=" in x)


# --------------------------------------------------------------------------- the launchers' part, both of them

HOLDER = "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600); " \
    "fcntl.flock(fd, fcntl.LOCK_EX); print('!', flush=True); time.sleep(600)"
STANDIN = r"""
import fcntl, os, socket, sys, time
life, ctl, out = sys.argv[1:4]
r, w = os.pipe()
if os.fork():
    os.close(w)
    sys.exit(0 if os.read(r, 1) == b"!" else 1)
os.setsid()
null = os.open(os.devnull, os.O_RDWR)
for std in (0, 1, 2):  # a daemon, as the broker is: it keeps nothing of its starter's open
    os.dup2(null, std)
fd = os.open(life, os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
s = socket.socket(socket.AF_UNIX)
s.bind(ctl)
s.listen()
with open(out, "a") as fh:
    fh.write(f"{os.getpid()} {os.environ.get('EXO_STATE_DIR')}\n")
os.write(w, b"!")
time.sleep(600)
"""


@pytest.mark.parametrize("launcher", ["sh", "python", "sh-big"])
def test_each_launcher_starts_the_keeper_beside_the_agent(tmp_path: Path, launcher: str) -> None:
    """The shell launcher (tmux) and the Python one (Zellij: it stays the pane's process and records the
    exit status) start the keeper; it starts the broker (a stand-in here) once its life lock drops, with
    the environment it was given, and ends with the agent. It waits in a shell (``KEEP_SH``), or in Python
    where that cannot take its request (``sh-big``: an environment larger than a pipe holds; also what runs
    where util-linux is missing)."""
    from exo_cli.adapters.mux import _launch
    from exo_cli.adapters.mux.base import deliver_spec, encode_spec, keeper_line, launcher_argv, make_fifo

    if launcher != "python" and _launch.shell_programs() is None:
        pytest.skip("dash and env are needed for the shell launcher")
    life, ctl, started = tmp_path / "life", tmp_path / "ctl", tmp_path / "started"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(life)], stdout=subprocess.PIPE)  # the broker
    assert holder.stdout is not None and holder.stdout.read(1) == b"!"  # holds its life lock
    keeper = {"life": str(life), "ctl": str(ctl), "log": str(tmp_path / "keeper.log"),
              "argv": [sys.executable, "-c", STANDIN, str(life), str(ctl), str(started)],
              "env": {"EXO_STATE_DIR": "/the/state", "PATH": os.environ["PATH"]}}
    if launcher == "sh-big":
        keeper["env"]["BIG"] = "x" * 40000
    spec = {"argv": ["sleep", "600"], "env": {"PATH": os.environ["PATH"]}, "cwd": str(tmp_path), "keep": [],
            "keeper": keeper_line(keeper)}
    fifo = make_fifo(tmp_path / "fifo")
    if launcher != "python":
        programs = _launch.shell_programs()
        assert programs is not None
        argv, payload = _launch.sh_argv(str(fifo), [], programs), _launch.encode_sh(spec)
        assert payload is not None
    else:
        spec["exit_file"] = str(tmp_path / "exit")
        argv, payload = launcher_argv(fifo), encode_spec(spec)
    pane = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
    standin = 0
    try:
        deliver_spec(fifo, payload, timeout=60)
        found = wait_for(lambda: keepers({"a": pane.pid}), 60, "the keeper")
        (kpid,) = found
        wait_for(lambda: _stat(kpid)[3] == str(kpid), 30, "the keeper to leave the pane's session")
        shell = launcher != "sh-big" and Path("/usr/bin/setpriv").exists() and Path("/usr/bin/flock").exists()
        wait_for(lambda: (b"exo-keeper" in Path(f"/proc/{kpid}/cmdline").read_bytes()) == shell, 30,
                 "the keeper to wait where it should")
        assert not started.exists()  # the broker lives: the keeper only waits
        holder.kill()
        holder.wait()
        wait_for(lambda: started.exists() and started.read_text().endswith("\n"), 60, "the keeper to start the broker")
        pid, state = started.read_text().split()
        standin = int(pid)
        assert state == "/the/state"
        assert "exo keeper: exo's broker is gone; starting it again" in (tmp_path / "keeper.log").read_text()
        assert _stat(kpid)[2] != str(os.getpgid(pane.pid))  # not in the agent's process group
        if launcher == "python":  # the launcher waits for the agent, its child: the agent ends
            agent = [int(c) for c in Path(f"/proc/{pane.pid}/task/{pane.pid}/children").read_text().split()
                     if c != str(kpid)]
            os.kill(agent[0], signal.SIGTERM)
        else:  # the pane's process is the agent
            os.kill(pane.pid, signal.SIGTERM)
        pane.wait(timeout=60)
        wait_for(lambda: not keepers({"a": pane.pid}), 60, "the keeper to end with the agent")
        if launcher == "python":
            assert (tmp_path / "exit").read_text().strip() == "-15"
    finally:
        for p in (holder, pane):
            if p.poll() is None:
                p.kill()
                p.wait()
        if standin:
            os.kill(standin, signal.SIGKILL)


def test_a_herd_of_keepers_starts_the_broker_once(tmp_path: Path) -> None:
    """Eight agents' keepers wake together when the broker dies: one starts it, the others wait for that one
    (the keepers' own lock) and find it running; nobody starts a second exo."""
    from exo_cli.adapters.mux._launch import keeper_argv
    from exo_cli.adapters.mux.base import keeper_line

    life, ctl, started = tmp_path / "life", tmp_path / "ctl", tmp_path / "started"
    calls = tmp_path / "calls"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(life)], stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.read(1) == b"!"
    # each start is counted, then takes two seconds before the stand-in holds the life lock (a real start
    # on a loaded machine takes as long): the keepers spread over those two seconds find no broker meanwhile
    start = (f"import sys, time; open({str(calls)!r}, 'a').write('x'); time.sleep(2); sys.argv = sys.argv[1:]; "
             "exec(compile(sys.argv[0], 's', 'exec'))")
    (tmp_path / "line").write_text(keeper_line({
        "life": str(life), "ctl": str(ctl), "log": "",
        "argv": [sys.executable, "-c", start, STANDIN, str(life), str(ctl), str(started)], "env": {}}) + "\n")
    command = " ".join(f"'{a}'" for a in keeper_argv(sys.executable))
    panes = [subprocess.Popen(["/bin/sh", "-c", f'{command} "$$" < "$1" & exec sleep 600', "sh",
                               str(tmp_path / "line")], start_new_session=True) for _ in range(8)]
    standin = 0
    try:
        watched = {str(i): p.pid for i, p in enumerate(panes)}
        wait_for(lambda: len(keepers(watched)) == 8, 60, "eight keepers")
        holder.kill()
        holder.wait()
        wait_for(lambda: started.exists() and started.read_text().endswith("\n"), 60, "a keeper to start the broker")
        standin = int(started.read_text().split()[0])
        # every keeper is back to waiting on the new broker's life lock (/proc/locks lists each blocked request)
        inode = f":{life.stat().st_ino} "

        def blocked() -> bool:  # each keeper, or its shell waiter's flock
            waiting = {int(line.split()[5]) for line in Path("/proc/locks").read_text().splitlines()
                       if "->" in line and "FLOCK" in line and inode in line}
            return all(k in waiting or waiting & _children(k) for k in keepers(watched))

        wait_for(blocked, 60, "every keeper to wait on the new broker")
        assert calls.read_text() == "x"
        assert len(started.read_text().splitlines()) == 1
    finally:
        for p in (holder, *panes):
            if p.poll() is None:
                p.kill()
                p.wait()
        if standin:
            os.kill(standin, signal.SIGKILL)


def _children(pid: int) -> set[int]:
    try:
        return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except OSError:
        return set()
