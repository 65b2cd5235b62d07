"""Spawn's speed mechanisms, for real: batched tmux windows, the start batcher, plain task threads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, Exo, run_exo, sandbox_reach, write_trusted
from exo_cli.adapters.mux.tmux import StartRequest, Tmux
from exo_cli.errors import ExoError, InvalidInput, StateError
from exo_cli.ops.spawn.starter import Starter, run_all

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
PY = sys.executable
SLEEPER = [PY, "-c", "import time; time.sleep(120)"]


def wait_for(pred, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.03)
    raise AssertionError("timed out")


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(f"exo-test-{uuid.uuid4().hex[:10]}", "exotest", runtime_dir=tmp_path / "rt")
    yield t
    t.kill_server()


def counting(tmux: Tmux) -> list[tuple[str, ...]]:
    calls: list[tuple[str, ...]] = []
    real = tmux._exec

    def wrapper(*args, **kw):
        calls.append(args)
        return real(*args, **kw)

    tmux._exec = wrapper  # type: ignore[method-assign]
    return calls


@needs_tmux
@pytest.mark.tmux
def test_start_many_opens_all_windows_with_one_tmux_call(tmux, tmp_path):
    env = {"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8"}
    tmux.ensure_session()
    calls = counting(tmux)
    reqs = [StartRequest(f"a{i}", SLEEPER, tmp_path, env) for i in range(4)]
    reqs.insert(2, StartRequest("bad", SLEEPER, tmp_path / "missing", env))
    out = tmux.start_many(reqs)
    assert [c[0] for c in calls].count("new-window") == 1
    assert isinstance(out[2], InvalidInput)
    locs = [o for i, o in enumerate(out) if i != 2]
    assert [loc.name for loc in locs] == ["a0", "a1", "a2", "a3"]
    states = tmux.list_states()
    assert all(states[loc.pane].alive and states[loc.pane].pid == loc.pid for loc in locs)
    assert not any((tmux.runtime_dir / "fifo").iterdir())


@needs_tmux
@pytest.mark.tmux
def test_a_failing_window_in_the_batch_fails_alone(tmux, tmp_path, monkeypatch):
    env = {"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8"}
    real = tmux._prepare

    def prepare(index, req):
        p = real(index, req)
        if req.name == "b1":  # tmux refuses this one: the list stops there, the rest go again
            p.args[p.args.index("-t") + 1] = "=no-such-session:"
        return p

    monkeypatch.setattr(tmux, "_prepare", prepare)
    out = tmux.start_many([StartRequest(f"b{i}", SLEEPER, tmp_path, env) for i in range(3)])
    assert isinstance(out[1], ExoError) and "no-such-session" in out[1].message
    assert out[0].name == "b0" and out[2].name == "b2"
    assert set(tmux.list_states()) == {out[0].pane, out[2].pane}
    assert not any((tmux.runtime_dir / "fifo").iterdir())


@needs_tmux
@pytest.mark.tmux
def test_arguments_ending_in_a_semicolon_are_not_split(tmux, tmp_path):
    work = tmp_path / "odd;"
    work.mkdir()
    seen = tmp_path / "cwd.txt"
    prog = [PY, "-c", "import os, sys, time; open(sys.argv[1], 'w').write(os.getcwd()); time.sleep(60)", str(seen)]
    tmux.start("semi", prog, cwd=work, env={"PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8"})
    assert wait_for(lambda: seen.exists() and seen.read_text()) == str(work)


class FakeMux:
    """Records batches; start_many returns names (or an error for names starting with 'x')."""

    kind = "tmux"

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def start_many(self, reqs):
        self.batches.append([r.name for r in reqs])
        return [InvalidInput("refused") if r.name.startswith("x") else f"loc-{r.name}" for r in reqs]


def test_starter_runs_one_batch_when_every_task_is_ready():
    mux = FakeMux()
    starter = Starter(mux, patience=60)  # type: ignore[arg-type]  # batch on readiness, not on the clock
    results: dict[str, object] = {}
    names = ["t0", "t1", "x2", "t3", "t4"]
    starter.reserve(len(names))  # as run_tasks does before its threads run

    def task(i: int) -> None:
        starter.enter()
        try:
            if i == 3:
                raise StateError("failed before starting")  # leaves without queueing
            time.sleep(0.01 * i)
            try:
                results[names[i]] = starter.start(names[i], ["a"], cwd="/", env={}, log_path=Path("/l"))
            except ExoError as exc:
                results[names[i]] = exc
        except StateError:
            pass
        finally:
            starter.leave()

    run_all(task, len(names))
    assert len(mux.batches) == 1 and sorted(mux.batches[0]) == ["t0", "t1", "t4", "x2"]
    assert results["t0"] == "loc-t0" and results["t4"] == "loc-t4"
    assert isinstance(results["x2"], InvalidInput)


def test_starter_does_not_wait_for_a_task_that_steps_aside():
    mux = FakeMux()
    starter = Starter(mux, patience=30)  # type: ignore[arg-type]
    release = threading.Event()
    got: dict[str, object] = {}

    def waiting_for_a_slot() -> None:
        starter.enter()
        starter.leave()  # what _slot does before it waits for a free agent slot
        release.wait(10)
        got["late"] = starter.start("late", ["a"], cwd="/", env={}, log_path=Path("/l"))

    def ready() -> None:
        starter.enter()
        got["ready"] = starter.start("ready", ["a"], cwd="/", env={}, log_path=Path("/l"))
        starter.leave()

    t1 = threading.Thread(target=waiting_for_a_slot)
    t1.start()
    time.sleep(0.05)
    t2 = threading.Thread(target=ready)
    t2.start()
    t2.join(60)
    assert got.get("ready") == "loc-ready" and mux.batches == [["ready"]]
    release.set()
    t1.join(60)
    assert got.get("late") == "loc-late" and mux.batches == [["ready"], ["late"]]


def test_starter_patience_bounds_the_wait_for_a_slow_task():
    mux = FakeMux()
    starter = Starter(mux, patience=0.2)  # type: ignore[arg-type]
    slow_done = threading.Event()
    got: dict[str, object] = {}

    def slow() -> None:
        starter.enter()
        slow_done.wait(10)  # e.g. a long worktree.post_create
        starter.leave()

    threading.Thread(target=slow, daemon=True).start()
    time.sleep(0.05)
    starter.enter()
    got["fast"] = starter.start("fast", ["a"], cwd="/", env={}, log_path=Path("/l"))
    starter.leave()
    assert got["fast"] == "loc-fast" and mux.batches == [["fast"]]
    slow_done.set()


def test_run_all_reraises_unexpected_errors_and_runs_everything():
    seen: list[int] = []
    lock = threading.Lock()

    def fn(i: int) -> None:
        with lock:
            seen.append(i)
        if i == 7:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run_all(fn, 40, max_threads=5)
    assert sorted(seen) == list(range(40))


@needs_tmux
@pytest.mark.tmux
def test_spawn_of_several_workers_uses_one_new_window_call(repo: Path, exo: Exo, tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    agent = tmp_path / "agent.py"
    agent.write_text(
        "import json, os, sys, time\n"
        "p = os.path.join(os.environ['OUT_DIR'], os.environ['EXO_AGENT'] + '.json')\n"
        "json.dump({'env': dict(os.environ), 'argv': sys.argv[1:]}, open(p + '.tmp', 'w'))\n"
        "os.replace(p + '.tmp', p)\n"
        "time.sleep(120)\n"
    )
    write_trusted(repo, sandbox_reach(out, env=["OUT_DIR", "SECRET_TOKEN"])  # sandboxed, the default
                  + f'[agent]\ncommand = [{json.dumps(PY)}, {json.dumps(str(agent))}, "{{prompt}}"]\n')
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("OUT_DIR", str(out))
    monkeypatch.setenv("SECRET_TOKEN", "sk-perf-canary")
    calls: list[tuple[str, ...]] = []
    real = Tmux._exec

    def wrapper(self, *args, **kw):
        calls.append(args)
        return real(self, *args, **kw)

    monkeypatch.setattr(Tmux, "_exec", wrapper)
    from exo_cli.env import Env

    sock = f"exo-{Env(cwd=repo).repo_id}"
    try:
        r = exo("spawn", "--worker", "p1", "--worker", "p2", "--worker", "p3", "--prompt", "do it",
                "--agent", "custom", "--mux", "tmux", "--json")
        assert r.exit_code == 0, r.stdout + r.stderr
        data = r.json()
        assert not data["failed"] and len(data["tabs"]) == 3
        assert [c[0] for c in calls].count("new-window") == 1
        for name in ("p1", "p2", "p3"):
            seen = wait_for(lambda n=name: (out / f"{n}.json").exists() and json.loads((out / f"{n}.json").read_text()))
            assert seen["argv"] == ["do it"]  # the first prompt on argv
            assert seen["env"]["EXO_AGENT"] == name and seen["env"]["SECRET_TOKEN"] == "sk-perf-canary"
        listing = subprocess.run(["tmux", "-L", sock, "show-environment", "-g"], capture_output=True, text=True)
        assert "sk-perf-canary" not in listing.stdout
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)


def test_spawn_ends_at_once_with_its_records_committed(sleepers: Path) -> None:
    """`exo spawn` ends without the interpreter's teardown (``main.AT_ONCE``), as the quick reads and the hooks
    do: the database is left as such an end leaves it (its WAL in place, no closing checkpoint), and everything
    the spawn recorded is there for the next command."""
    wal = sleepers / ".git" / "exo" / "state.db-wal"
    assert run_exo("init", cwd=sleepers).returncode == 0
    assert not wal.exists()  # exo init ends as usual: closing the database checkpoints it and removes the WAL
    proc = run_exo("spawn", "--worker", "s1", "--worker", "s2", "--prompt", "x", "--agent", "custom", "--mux",
                   "headless", "--json", cwd=sleepers)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(name for name, _ in json.loads(proc.stdout)["worktrees"]) == ["s1", "s2"]
    assert wal.exists()
    listed = json.loads(run_exo("agents", "--json", cwd=sleepers).stdout)
    assert sorted((a["name"], a["status"] in ("starting", "working", "idle")) for a in listed["agents"]) == [
        ("s1", True), ("s2", True)]
