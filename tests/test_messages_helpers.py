"""Helpers shared by the messages/hooks/demo-agent tests (no tests here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from conftest import agent_vars as proven
from exo_cli.env import Env
from exo_cli.records import Agent

ROOT = Path(__file__).resolve().parent.parent
EXO = [sys.executable, "-m", "exo_cli"]


def state_dir(repo: Path) -> Path:
    return repo / ".git" / "exo"


def env_for(repo: Path, agent: str | None = None) -> Env:
    """The Env of ``agent`` (its EXO_AGENT and proof, as exo gives them), or of the human."""
    environ = {**os.environ, "EXO_STATE_DIR": str(state_dir(repo))}
    environ.pop("EXO_AGENT", None)
    environ.pop("EXO_AGENT_PROOF", None)
    if agent:
        environ.update(proven(repo, agent))
    return Env(cwd=repo, environ=environ)


def make_agent(repo: Path, agent_id: str, *, parent: str = "root", role: str = "dev", status: str = "working",
               location: dict[str, Any] | None = None, **kw: Any) -> Agent:
    now = time.time()
    a = Agent(id=agent_id, name=kw.pop("name", agent_id), role=role, parent=parent, status=status,
              backend=kw.pop("backend", "demo"), mux=kw.pop("mux", "headless"), location=location or {},
              created_at=now, updated_at=now, status_at=now, **kw)
    env_for(repo).store.insert_agent(a)
    return a


def agent_vars(repo: Path, agent_id: str | None) -> dict[str, str]:
    out = {"EXO_STATE_DIR": str(state_dir(repo)), "PYTHONPATH": str(ROOT)}
    if agent_id:
        out.update(proven(repo, agent_id))
    return out


def run_hook(repo: Path, agent_id: str | None, event: str, cli: str, payload: dict[str, Any] | str | None,
             *, argv_payload: bool = False, cwd: Path | None = None,
             extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `exo hook EVENT --cli CLI` as a real subprocess, as the agent's CLI would."""
    env = {**os.environ, **agent_vars(repo, agent_id), **(extra_env or {})}
    if agent_id is None:
        env.pop("EXO_AGENT", None)
        env.pop("EXO_AGENT_PROOF", None)
    text = payload if isinstance(payload, str) or payload is None else json.dumps(payload)
    argv = [*EXO, "hook", event, "--cli", cli]
    if argv_payload:
        argv.append(text or "")
    return subprocess.run(argv, cwd=cwd or repo, env=env, input=None if argv_payload else (text or ""),
                          capture_output=True, text=True, timeout=60)


def hook_json(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if proc.stdout.strip() else None


def run_exo_as(repo: Path, agent_id: str | None, *args: str, timeout: float = 60,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **agent_vars(repo, agent_id)}
    if agent_id is None:
        env.pop("EXO_AGENT", None)
        env.pop("EXO_AGENT_PROOF", None)
    return subprocess.run([*EXO, *args], cwd=cwd or repo, env=env, capture_output=True, text=True, timeout=timeout)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()
