"""Load: many exo processes at once never lose or double a write.

- 20 `exo spawn` processes at once, each for its own worker (half in tmux, half headless):
  every agent recorded exactly once, no "database is locked", one worktree and one window each.
- 20 recorded agents (processes with their EXO_AGENT) post 300 notes at once while the
  parent runs a `wait` loop: every note recorded exactly once and received by the loop.

Every process has a timeout, so a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import EXO, ROOT, agent_vars, git, run_exo, stop_repo_agents, write_trusted
from exo_cli.env import Env

N = 20


@pytest.fixture
def team(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    write_trusted(repo, '[agent]\ncommand = ["sleep", "600"]\n')
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    yield repo
    stop_repo_agents(repo)


def test_parallel_spawns_record_each_agent_once(team: Path) -> None:
    run_exo("init", cwd=team)  # the state database exists before the rush (as in real use)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = []
    for i in range(N):
        mux = "tmux" if i % 2 == 0 else "headless"
        argv = [*EXO, "spawn", "--worker", f"p{i:02d}", "--prompt", f"task {i}", "--agent", "custom", "--mux", mux,
                "--json"]
        procs.append(subprocess.Popen(argv, cwd=team, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        outs.append((p.returncode, out, err))
    for code, out, err in outs:
        assert "database is locked" not in out + err
        assert code == 0, out + err
        res = json.loads(out)
        assert res["failed"] == [] and res["errors"] == [], res
    rows = json.loads(run_exo("agents", "--json", cwd=team).stdout)["agents"]
    ids = Counter(a["id"] for a in rows)
    assert sorted(ids) == [f"p{i:02d}" for i in range(N)] and set(ids.values()) == {1}
    assert all(a["status"] not in ("dead", "done") for a in rows), [(a["id"], a["status"]) for a in rows]
    # Ground truth: one checkout per agent (a worktree, or a sandboxed agent's own clone), one tmux window per
    # tmux agent.
    assert sorted(p.name for p in (team / ".exo" / "worktrees").iterdir()) == sorted(ids)
    layouts = {a["id"]: a["layout"] for a in rows}
    worktrees = [line.split()[0] for line in git(team, "worktree", "list").splitlines()]
    assert len(worktrees) == len(set(worktrees))
    assert sorted(Path(w).name for w in worktrees if "/.exo/worktrees/" in w) == sorted(
        i for i in ids if layouts[i] == "worktree")
    assert all(layouts[i] == "worktree" or (team / ".exo" / "worktrees" / i / ".git").is_dir() for i in ids)
    sock = f"exo-{Env(cwd=team).repo_id}"
    windows = subprocess.run(["tmux", "-L", sock, "list-windows", "-a", "-F", "#{window_name}"],
                             capture_output=True, text=True, check=True).stdout.split()
    agents_windows = Counter(w for w in windows if w.startswith("p"))
    assert sorted(agents_windows) == [f"p{i:02d}" for i in range(0, N, 2)] and set(agents_windows.values()) == {1}
    branches = git(team, "branch", "--list", "main.p*", "--format=%(refname:short)").split()
    assert sorted(branches) == [f"main.p{i:02d}" for i in range(N)]


WRITER = r"""
import os, subprocess, sys
from exo_cli import registry
from exo_cli.env import Env
me, n, go = os.environ["EXO_AGENT"], int(sys.argv[1]), sys.argv[2]
import time
while not os.path.exists(go):
    time.sleep(0.005)
for i in range(n - 1):
    registry.invoke("note", Env(), message=f"{me}:{i}")
# the last one through the real command line
r = subprocess.run([sys.executable, "-m", "exo_cli", "note", f"{me}:{n - 1}", "--json"], capture_output=True, text=True)
sys.stdout.write(r.stdout)
sys.stderr.write(r.stderr)
sys.exit(r.returncode)
"""


def test_300_parallel_notes_all_recorded_once_and_received(repo: Path, tmp_path: Path) -> None:
    from exo_cli.ops import messages
    from exo_cli.records import Agent

    parent = Env(cwd=repo)
    now = time.time()
    for i in range(N):
        parent.store.insert_agent(Agent(id=f"n{i:02d}", name=f"n{i:02d}", role="dev", parent="root",
                                        status="working", backend="custom", mux="headless", created_at=now,
                                        updated_at=now, status_at=now))
    per_agent = 15
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(per_agent), str(go)], cwd=repo,
                                env={**env, **agent_vars(repo, f"n{i:02d}")}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for i in range(N)]
    expected = {f"n{i:02d}:{k}" for i in range(N) for k in range(per_agent)}
    received: list[str] = []
    errors: list[BaseException] = []

    def wait_loop() -> None:
        try:
            env = Env(cwd=repo)
            deadline = time.monotonic() + 120
            while len(received) < len(expected) and time.monotonic() < deadline:
                res = messages.wait(env, timeout=5)
                for entry in res.results:
                    if entry.message:
                        received.append(entry.message)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    waiter = threading.Thread(target=wait_loop)
    waiter.start()
    time.sleep(0.5)
    go.touch()
    outs = []
    for w in writers:
        out, err = w.communicate(timeout=120)
        outs.append((w.returncode, out, err))
    waiter.join(timeout=130)
    assert not waiter.is_alive() and not errors, errors
    for code, out, err in outs:
        assert "database is locked" not in out + err
        assert code == 0, out + err
    assert Counter(received) == Counter(expected), (len(received), sorted(set(expected) - set(received))[:5])
    stored = [m.body for m in Env(cwd=repo).store.messages(recipient="root") if m.kind == "note"]
    assert Counter(stored) == Counter(expected)
