"""Helpers for the PR, complete and watch tests: real worktrees, agent records, snapshots."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from exo_cli.env import Env
from exo_cli.records import IDLE, Agent


def git(cwd: Path | str, *args: str, check: bool = True) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=check, capture_output=True, text=True).stdout.strip()


def commit(wt: Path | str, name: str, text: str, msg: str | None = None) -> str:
    path = Path(wt) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    git(wt, "add", name)
    git(wt, "commit", "-q", "-m", msg or f"edit {name}")
    return git(wt, "rev-parse", "HEAD")


def env_for(cwd: Path | str, agent: str | None = None, extra: dict[str, str] | None = None) -> Env:
    """The Env of ``agent`` (its EXO_AGENT and proof) in ``cwd``, or of the human."""
    from conftest import agent_vars

    environ = dict(os.environ)
    environ.pop("EXO_AGENT", None)
    environ.pop("EXO_AGENT_PROOF", None)
    if agent:
        environ.update(agent_vars(Path(cwd), agent))
    environ.update(extra or {})
    return Env(cwd=cwd, environ=environ)


def make_agent(repo: Path, name: str, *, parent: str = "root", role: str = "dev", base: str = "main",
               branch: str | None = None, start: list[str] | None = None, bead: str | None = None) -> Agent:
    """A real worktree on a new branch off ``base`` plus an agent record; optionally a live headless process."""
    from exo_cli.ops import agentctl

    branch = branch or f"{base}.{name}"
    wt = repo / ".exo" / "worktrees" / name
    wt.parent.mkdir(parents=True, exist_ok=True)
    from exo_cli.adapters.git import add_exclude

    add_exclude(repo / ".git", "/.exo/")
    git(repo, "worktree", "add", "-q", "-b", branch, str(wt), base)
    env = env_for(repo)
    location: dict[str, Any] = {}
    if start:
        loc = agentctl.mux_for(env, "headless").start(name, start, cwd=wt, env={"PATH": os.environ["PATH"]})
        location = loc.to_dict()
    now = time.time()
    agent = Agent(id=name, name=name, role=role, parent=parent, status=IDLE, backend="demo",
                  mux="headless", worktree=str(wt), branch=branch, base_branch=base, repo=str(repo),
                  location=location, bead=bead, created_at=now, updated_at=now, status_at=now,
                  spec={"worktree_created": True})
    env.store.insert_agent(agent)
    return agent


def snapshot(wt: Path | str) -> tuple[str, str, dict[str, str]]:
    """`git status --porcelain`, HEAD and the bytes (hashed) of every file outside .git."""
    files: dict[str, str] = {}
    root = Path(wt)
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if rel.parts[0] in (".git", ".exo") or not p.is_file():
            continue
        files[str(rel)] = hashlib.sha256(p.read_bytes()).hexdigest()
    status = git(wt, "status", "--porcelain", "--untracked-files=all")
    return status, git(wt, "rev-parse", "HEAD"), files


def tree_bytes(root: Path | str) -> dict[str, bytes]:
    """Every file under ``root`` (but .git) with its exact bytes."""
    out: dict[str, bytes] = {}
    r = Path(root)
    for p in sorted(r.rglob("*")):
        rel = p.relative_to(r)
        if rel.parts[0] == ".git" or not p.is_file():
            continue
        out[str(rel)] = p.read_bytes()
    return out
