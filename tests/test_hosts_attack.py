"""Agents on other hosts, attacked: hostile requests to ``exo host-call``, what a request may carry,
records of other hosts seen from here (liveness, names, interrupted spawns). The two-host tests use a
private sshd on 127.0.0.1 (tests/hosts_harness.py) and the PostgreSQL cluster (tests/hosts_twin.py)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hosts_harness import Sshd
from hosts_twin import Twin

from conftest import EXO, ROOT, stop_repo_agents


def host_call(repo: Path, request: object, **env: str) -> tuple[dict[str, object], int]:
    """``exo host-call`` run in ``repo`` with ``request`` (JSON, or a raw string) on stdin."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    raw = request if isinstance(request, str) else json.dumps(request)
    proc = subprocess.run([*EXO, "host-call"], cwd=repo, env=full, input=raw + "\n", capture_output=True, text=True,
                          timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.returncode


# --------------------------------------------------------------------------- bad requests, no ssh


@pytest.mark.parametrize(("request_", "name", "code"), [
    ({"v": 1, "op": "agents", "args": {"bogus": 1}}, "UsageError", 2),
    ({"v": 1, "op": "read", "args": {"agent": "w1", "lines": "x"}}, "UsageError", 2),
    ({"v": 1, "op": "kill", "args": {"agent": "w1"}, "store": 5}, "InvalidInput", 4),
    ({"v": 1, "op": "kill", "args": {"agent": "w1"}, "store": {"url": 5}}, "InvalidInput", 4),
    ({"v": 1, "op": "spawn", "args": {}, "via": "main"}, "InvalidInput", 4),
    ({"v": 1, "op": "agents", "as_host": 5}, "InvalidInput", 4),
    ({"v": 1, "op": "agents", "as_host": "Bad Name"}, "InvalidInput", 4),
    ({"v": 1, "op": "", "args": {"deliver": True, "agent": "w1"}}, "InvalidInput", 4),
    ({"v": 1, "op": "", "args": {"refresh": [1, 2]}}, "InvalidInput", 4),
])
def test_host_call_refuses_a_malformed_request_with_exos_own_error(repo: Path, request_: dict[str, object],
                                                                   name: str, code: int) -> None:
    out, rc = host_call(repo, request_)
    assert out["ok"] is False
    assert out["error"]["name"] == name, out  # type: ignore[index]
    assert rc == code


@pytest.mark.parametrize("var", ["EXO_STATE_DIR", "EXO_STORE_URL", "EXO_HOST", "EXO_CONFIG_DIR", "PATH", "HOME",
                                 "LD_PRELOAD", "PYTHONPATH", "GIT_DIR", "TMUX_TMPDIR"])
def test_host_call_refuses_a_request_that_would_steer_exo_or_the_process(repo: Path, var: str) -> None:
    out, rc = host_call(repo, {"v": 1, "op": "agents", "args": {}, "env": {var: "/tmp/elsewhere"}})
    assert out["ok"] is False and rc == 4
    assert var in out["error"]["message"]  # type: ignore[index]
    assert not (repo / ".git" / "exo").exists()  # refused before anything was written


def test_a_request_carries_the_proof_and_the_keys_but_no_process_variable(repo: Path) -> None:
    from exo_cli.env import Env
    from exo_cli.ops.hosts import get_host
    from exo_cli.ops.remote import secrets_for

    cfg = Path(os.environ["EXO_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "config.toml").write_text('[hosts.b]\nssh = "exo-b"\npath = "/srv/clone"\nenv = ["*"]\n')
    environ = {**os.environ, "PATH": "/usr/bin", "HOME": "/home/a", "LD_PRELOAD": "/x.so", "EXO_STATE_DIR": "/y",
               "TMUX_TMPDIR": "/t", "GIT_DIR": "/g", "ANTHROPIC_API_KEY": "sk-canary", "MY_TOKEN": "tok"}
    env = Env(str(repo), environ)
    got = secrets_for(env, get_host(env, "b"))
    assert got["ANTHROPIC_API_KEY"] == "sk-canary" and got["MY_TOKEN"] == "tok"
    for var in ("PATH", "HOME", "LD_PRELOAD", "EXO_STATE_DIR", "TMUX_TMPDIR", "GIT_DIR"):
        assert var not in got


# --------------------------------------------------------------------------- two hosts


@pytest.fixture
def twin(tmp_path: Path, sshd: Sshd, pg_cluster: object) -> Iterator[Twin]:
    t = Twin(tmp_path / "twin", sshd, pg_cluster.url())  # type: ignore[attr-defined]
    (tmp_path / "script.json").write_text(json.dumps([{"write": {"path": "w.txt", "content": "x\n"}},
                                                      {"commit": {"message": "w: add"}}]))
    t.script = tmp_path / "script.json"  # type: ignore[attr-defined]
    try:
        yield t
    finally:
        t.stop()
        stop_repo_agents(t.a, tmux=False)


def spawn_on_b(t: Twin, name: str) -> dict[str, object]:
    got = t.exo_a("spawn", "--host", "b", "--worker", name, "--prompt", "work", "--agent", "demo",
                  "--demo-script", str(t.script), "--json")  # type: ignore[attr-defined]
    assert got.returncode == 0, got.stderr
    [agent] = json.loads(got.stdout)["agents"]
    assert agent["host"] == "b"
    return dict(agent)


def test_another_hosts_live_agent_takes_a_slot_here(twin: Twin) -> None:
    spawn_on_b(twin, "w1")
    got = twin.exo_a("spawn", "--worker", "here", "--prompt", "p", "--agent", "demo", "--mux", "headless",
                     EXO_MAX_AGENTS="1")
    assert got.returncode == 5, got.stdout + got.stderr
    assert "Too many agents: 1 running" in got.stderr


def test_a_spawn_here_never_cleans_up_another_hosts_spawn_of_that_name(twin: Twin) -> None:
    from exo_cli.env import Env

    agent = spawn_on_b(twin, "w1")
    env = Env(str(twin.a), twin.env_a())
    rec = env.store.agent("w1")
    assert rec is not None
    env.store.update_agent("w1", spec={**rec.spec, "phase": "worktree"})  # as if exo on b were still at it
    got = twin.exo_a("spawn", "--worker", "w1", "--prompt", "p", "--agent", "demo", "--mux", "headless")
    assert got.returncode == 5, got.stdout + got.stderr
    assert "being spawned on host b" in got.stderr
    assert Path(str(agent["worktree"])).is_dir()
    assert Env(str(twin.a), twin.env_a()).store.agent("w1") is not None


def test_a_clone_keeps_the_host_name_its_agents_are_recorded_with(repo: Path, pg_cluster: object) -> None:
    from exo_cli.env import Env

    url = pg_cluster.url()  # type: ignore[attr-defined]
    got = subprocess.run([*EXO, "spawn", "--worker", "w1", "--prompt", "p", "--agent", "demo", "--mux", "headless",
                          "--json"], cwd=repo, env={**os.environ, "PYTHONPATH": str(ROOT), "EXO_STORE_URL": url},
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    try:
        recorded = json.loads(got.stdout)["agents"][0]["host"]
        # another host's config names this clone otherwise: refused, never a silent rename
        out, rc = host_call(repo, {"v": 1, "op": "agents", "args": {}, "as_host": "renamed"}, EXO_STORE_URL=url)
        assert out["ok"] is False and rc == 5, out
        assert recorded in out["error"]["message"]  # type: ignore[index]
        assert Env(str(repo), {**os.environ, "EXO_STORE_URL": url}).host_name == recorded
    finally:
        subprocess.run([*EXO, "kill", "w1"], cwd=repo, env={**os.environ, "PYTHONPATH": str(ROOT),
                                                            "EXO_STORE_URL": url}, capture_output=True, timeout=120)
        stop_repo_agents(repo, tmux=False)
