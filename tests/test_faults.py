"""Faults: exo survives what kills its ground truth.

- The tmux server dies under live agents: `exo agents` shows them dead, `exo doctor` cleans
  up and exits 0 (and a second doctor finds nothing).
- The state database is corrupted, or missing: every `exo hook ...` still exits 0 with a
  warning on stderr (never bricking the agent), and the CLI fails with a clear error, its
  exit code and a hint that says how to fix it.

kill -9 of `exo spawn` at each of its fault points (EXO_FAULT, exo_cli/fault.py) followed by
a retry and `exo doctor` is tested in tests/test_spawn.py (test_crash_at_each_point_then_retry,
test_doctor_cleans_an_interrupted_spawn); it is not repeated here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, Exo, git, run_exo
from exo_cli.env import Env

EVENTS = ("session-start", "prompt", "stop", "session-end", "notification", "tool", "notify")
CLIS = ("claude", "gemini", "codex", "exo")
PAYLOAD = json.dumps({"session_id": "s1", "hook_event_name": "Stop", "transcript_path": "/nonexistent",
                      "cwd": "/tmp", "type": "agent-turn-complete", "last-assistant-message": "done"})


@pytest.fixture
def team(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (repo / "exo.toml").write_text('[agent]\ncommand = ["sleep", "600"]\n')
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
