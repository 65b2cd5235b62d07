"""Agents on other hosts, attacked: hostile requests to ``exo host-call``, what a request may carry,
records of other hosts seen from here (liveness, names, interrupted spawns). The two-host tests use a
private sshd on 127.0.0.1 and the PostgreSQL cluster (tests/hosts_twin.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import EXO, ROOT

needs_sshd = pytest.mark.skipif(not (Path("/usr/sbin/sshd").exists() and shutil.which("ssh")),
                                reason="OpenSSH server and client are not installed")


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
