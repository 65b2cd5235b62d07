"""Faults: exo survives what kills its ground truth.

- The tmux server dies under live agents: `exo agents` shows them dead, `exo doctor` cleans
  up and exits 0 (and a second doctor finds nothing).
- The state database is corrupted, or missing: every `exo hook ...` still exits 0 with a
  warning on stderr (never bricking the agent), and the CLI fails with a clear error, its
  exit code and a hint that says how to fix it.
- The state database is lost under live demo agents (tmux and headless): `exo doctor` rebuilds
  them `idle` when their output has been quiet for `agent.idle_quiet_seconds`, `working`
  otherwise; a message to an idle one is typed at once, one queued for a working one is typed
  when the watcher sees it quiet, and `exo wait` gets the answer; the agents' hooks count again.

kill -9 of `exo spawn` at each of its fault points (EXO_FAULT, exo_cli/fault.py) followed by
a retry and `exo doctor` is tested in tests/test_spawn.py (test_crash_at_each_point_then_retry,
test_doctor_cleans_an_interrupted_spawn); it is not repeated here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, Exo, git, run_exo, stop_repo_agents, wait_for, write_trusted
from exo_cli.env import Env

EVENTS = ("session-start", "prompt", "stop", "session-end", "notification", "tool", "notify")
CLIS = ("claude", "gemini", "codex", "exo")
PAYLOAD = json.dumps({"session_id": "s1", "hook_event_name": "Stop", "transcript_path": "/nonexistent",
                      "cwd": "/tmp", "type": "agent-turn-complete", "last-assistant-message": "done"})


@pytest.fixture
def team(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    write_trusted(repo, '[agent]\ncommand = ["sleep", "600"]\n')
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    yield repo
    subprocess.run(["tmux", "-L", f"exo-{Env(cwd=repo).repo_id}", "kill-server"], capture_output=True)


def test_tmux_server_killed_under_live_agents(team: Path) -> None:
    exo = Exo(team)
    r = exo("spawn", "--worker", "k1", "--worker", "k2", "--worker", "k3", "--prompt", "x", "--agent", "custom",
            "--mux", "tmux", "--json")
    assert r.exit_code == 0, r.stdout
    rows = json.loads(exo("agents", "--json").stdout)["agents"]
    assert sorted((a["id"], a["status"]) for a in rows) == [("k1", "working"), ("k2", "working"), ("k3", "working")]
    sock = f"exo-{Env(cwd=team).repo_id}"
    subprocess.run(["tmux", "-L", sock, "kill-server"], check=True, capture_output=True)
    r = exo("agents", "--json")
    assert r.exit_code == 0, r.stdout
    rows = json.loads(r.stdout)["agents"]
    assert sorted((a["id"], a["status"]) for a in rows) == [("k1", "dead"), ("k2", "dead"), ("k3", "dead")]
    r = run_exo("doctor", "--json", cwd=team)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc.get("remaining", 0) == 0, doc
    again = run_exo("doctor", "--json", cwd=team)
    assert again.returncode == 0 and json.loads(again.stdout)["problems"] == [], again.stdout
    # The agents' work is never thrown away by doctor: worktrees and branches stay for reap/complete.
    for k in ("k1", "k2", "k3"):
        assert f"main.{k}" in git(team, "branch", "--list")
    # and the team can go on: a new agent starts a new server
    r = exo("spawn", "--worker", "k4", "--prompt", "x", "--agent", "custom", "--mux", "tmux", "--json")
    assert r.exit_code == 0, r.stdout
    rows = {a["id"]: a["status"] for a in json.loads(exo("agents", "--json").stdout)["agents"]}
    assert rows["k4"] == "working"


def _state(repo: Path) -> Path:
    Exo(repo)("init")
    from exo_cli.records import Agent

    Env(cwd=repo).store.insert_agent(Agent(id="w1", name="w1", role="dev", parent="root", status="working",
                                           backend="claude", mux="headless"))
    return repo / ".git" / "exo"


def _break(state: Path, how: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        (state / f"state.db{suffix}").unlink(missing_ok=True)
    if how == "corrupt":
        (state / "state.db").write_bytes(b"this is not a SQLite database\x00" * 200)


@pytest.mark.parametrize("how", ["corrupt", "missing"])
def test_hooks_fail_open_on_a_broken_state_db(repo: Path, how: str) -> None:
    state = _state(repo)
    _break(state, how)
    exo = Exo(repo)
    agent_env = {"EXO_AGENT": "w1", "EXO_PARENT": "root", "EXO_ROLE": "dev", "EXO_STATE_DIR": str(state)}
    for cli in CLIS:
        for event in EVENTS:
            args = ["hook", event, "--cli", cli]
            if cli == "codex" and event == "notify":
                args.append(PAYLOAD)
            r = exo(*args, input=PAYLOAD, env=agent_env)
            assert r.exit_code == 0, (cli, event, r.stdout, r.stderr)
            assert f"exo hook {event}: warning:" in r.stderr, (cli, event, r.stderr)
            assert "Traceback" not in r.stderr
            if r.stdout.strip():
                json.loads(r.stdout)  # the CLI's neutral answer (when it expects one): valid JSON
    # and for real, as the agent's CLI runs it
    p = subprocess.run([sys.executable, "-m", "exo_cli", "hook", "stop", "--cli", "claude"], cwd=repo, input=PAYLOAD,
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, **agent_env, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0 and "warning" in p.stderr, p.stderr
    if how == "missing":  # a hook never creates the database
        assert not (state / "state.db").exists()


def test_cli_on_a_corrupted_state_db_says_how_to_fix_it(repo: Path) -> None:
    state = _state(repo)
    _break(state, "corrupt")
    exo = Exo(repo)
    for args in (["agents"], ["status"], ["doctor"], ["spawn", "--worker", "x", "--prompt", "x"]):
        r = exo(*args, "--json")
        assert r.exit_code == 5, (args, r.stdout)
        doc = json.loads(r.stdout)
        err = doc["error"] if "error" in doc else doc["errors"][0]  # spawn: its per-task error objects
        assert err["code"] == -32004 and "state database is unreadable" in err["message"], err
        assert f"mv {state / 'state.db'} {state / 'state.db'}.broken" in err["hint"] and "exo doctor" in err["hint"]
    r = exo("agents")
    assert r.exit_code == 5 and "Error: exo's state database is unreadable" in r.stderr and "Hint: Move" in r.stderr
    assert "Traceback" not in r.stderr
    # Following the hint works: move it aside, doctor, and exo runs again.
    (state / "state.db").rename(state / "state.db.broken")
    r = exo("doctor", "--json")
    assert r.exit_code == 0, r.stdout
    assert exo("agents", "--json").exit_code == 0


def test_cli_on_a_missing_state_db(repo: Path) -> None:
    state = _state(repo)
    _break(state, "missing")
    exo = Exo(repo)
    # The human: no state is a fresh start, not an error.
    r = exo("agents", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["agents"] == []
    _break(state, "missing")
    # An agent whose state vanished gets a clear error saying what happened and what to do.
    r = exo("note", "finished", "--json", env={"EXO_AGENT": "w1", "EXO_STATE_DIR": str(state)})
    assert r.exit_code == 5, r.stdout
    err = json.loads(r.stdout)["error"]
    assert err["code"] == -32004 and "state database is missing" in err["message"] and "w1" in err["message"]
    assert "exo doctor" in err["hint"] and "exo spawn" in err["hint"]


def test_a_server_shutting_down_counts_as_no_server(tmp_path: Path) -> None:
    """Right after kill-server, a client may reach the dying server: that is "no panes", not a failure."""
    from exo_cli.adapters.mux.tmux import Tmux

    fake = tmp_path / "tmux"
    fake.write_text("#!/bin/sh\necho 'server exited unexpectedly' >&2\nexit 1\n")
    fake.chmod(0o755)
    t = Tmux("exo-test-dying", "exo", runtime_dir=tmp_path / "rt", binary=str(fake))
    assert t.list_states() == {}


# --------------------------------------------------------------------------- state lost under live agents

_GROUPS: list[dict[str, object]] = []  # where this module's demo agents run, to stop them once their records are gone


@pytest.fixture
def demo_team(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Demo agents (tmux or headless); everything they run is stopped afterwards, records lost or not."""
    from exo_cli.adapters.proc import kill_group

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    _GROUPS.clear()
    yield repo
    stop_repo_agents(repo)
    for loc in _GROUPS:
        if loc.get("mux") == "headless":
            try:
                kill_group(int(loc["pgid"]), grace=0.5, leader_start_time=loc.get("start_time"))  # type: ignore[arg-type]
            except Exception:  # noqa: BLE001 - already gone
                pass


def _settings(repo: Path, quiet: int) -> None:
    (repo / "exo.toml").write_text(f'[agent]\ndefault = "demo"\nidle_quiet_seconds = {quiet}\n')


def _idle_demo(repo: Path, name: str, mux: str) -> None:
    """A demo agent that did its first turn (wrote, committed, noted) and rests at its input."""
    r = Exo(repo)("spawn", "--worker", name, "--prompt", "go", "--mux", mux, "--json")
    assert r.exit_code == 0, r.stdout
    wait_for(lambda: (Env(cwd=repo).store.agent(name) or Env(cwd=repo).store.agent("root")).status == "idle",
             timeout=120, what=f"{name} idle")
    _GROUPS.append(dict(Env(cwd=repo).store.agent(name).location))  # type: ignore[union-attr]
    assert Exo(repo)("wait", "--timeout", "0", "--json").exit_code == 0  # its first notes read


def _lose_state(repo: Path) -> None:
    db = Env(cwd=repo).state_dir / "state.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def _rebuild(repo: Path, name: str) -> object:
    r = Exo(repo)("doctor", "--json")
    assert r.exit_code == 0, r.stdout
    fixed = [p["subject"] for p in json.loads(r.stdout)["problems"] if p["kind"] == "lost-record" and p["repaired"]]
    assert fixed == [name], r.stdout
    return Env(cwd=repo).store.agent(name)


@pytest.mark.parametrize("mux", ["tmux", "headless"])
def test_doctor_rebuilds_a_quiet_agent_idle_and_a_message_reaches_it(demo_team: Path, mux: str) -> None:
    repo = demo_team
    _settings(repo, 2)
    _idle_demo(repo, "w1", mux)
    _lose_state(repo)
    time.sleep(3)  # its pane or log stays quiet past idle_quiet_seconds
    rec = _rebuild(repo, "w1")
    assert (rec.status, rec.backend, rec.turns) == ("idle", "demo", 0), rec  # type: ignore[attr-defined]
    assert rec.status_reason.startswith("record rebuilt by exo doctor; quiet for "), rec  # type: ignore[attr-defined]
    exo = Exo(repo)
    r = exo("send", "w1", "hello after the loss", "--json")
    assert [s["delivery"] for s in json.loads(r.stdout)["sent"]] == ["typed"], r.stdout
    r = exo("wait", "w1", "--timeout", "120", "--json")
    got = json.loads(r.stdout)["results"][0]
    assert (got["status"], got["message"]) == ("received", "w1 got: [MESSAGE from root] hello after the loss"), got
    # its own hooks report again: the stop hook counted the turn and set it idle
    wait_for(lambda: (a := Env(cwd=repo).store.agent("w1")) is not None and a.status == "idle" and a.turns == 1,
             timeout=60, what="w1 idle after its turn")


@pytest.mark.parametrize("mux", ["tmux", "headless"])
def test_doctor_rebuilds_a_recent_agent_working_then_the_watcher_hands_it_the_queued_message(
        demo_team: Path, mux: str) -> None:
    repo = demo_team
    _settings(repo, 3600)  # its last output is recent by this measure: working
    _idle_demo(repo, "w1", mux)
    _lose_state(repo)
    rec = _rebuild(repo, "w1")
    assert rec.status == "working" and rec.status_reason.startswith(  # type: ignore[attr-defined]
        "record rebuilt by exo doctor; output "), rec
    exo = Exo(repo)
    r = exo("send", "w1", "queued while it worked", "--json")
    assert [s["delivery"] for s in json.loads(r.stdout)["sent"]] == ["queued"], r.stdout
    r = exo("wait", "w1", "--timeout", "0", "--json")
    assert json.loads(r.stdout)["results"][0]["status"] == "running", r.stdout
    _settings(repo, 1)  # now it has been quiet long enough: the waiting parent's watcher sees it rest
    r = exo("wait", "w1", "--timeout", "120", "--json")
    got = json.loads(r.stdout)["results"][0]
    assert (got["status"], got["message"]) == ("received", "w1 got: [MESSAGE from root] queued while it worked"), got
    events = [e["kind"] for e in Env(cwd=repo).store.events(agent="w1", limit=20)]
    assert "idle" in events, events
