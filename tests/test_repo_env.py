"""Repository discovery, state dir, caller identity and roles."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import Exo, git
from exo_cli.env import Env
from exo_cli.errors import EnvironmentError_, StateError
from exo_cli.records import Agent
from exo_cli.registry import check_role, get


def test_every_worktree_finds_the_same_state_dir(repo: Path, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "feature", str(wt))
    (wt / "sub").mkdir()
    a, b = Env(cwd=repo), Env(cwd=wt / "sub")
    assert a.state_dir == b.state_dir == repo / ".git" / "exo"
    assert b.repo.root == repo and b.repo.toplevel == wt
    assert a.runtime_dir == b.runtime_dir
    assert len(str(a.runtime_dir / "bell" / ("x" * 40 + ".4194304.99"))) < 104


def test_state_dir_override(repo: Path, tmp_path: Path) -> None:
    env = Env(cwd=repo, environ={**os.environ, "EXO_STATE_DIR": str(tmp_path / "state")})
    assert env.state_dir == tmp_path / "state"


def test_outside_repo(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentError_):
        Env(cwd=tmp_path).repo  # noqa: B018


def _add(env: Env, agent_id: str, role: str, **kw: object) -> None:
    now = time.time()
    env.store.insert_agent(Agent(id=agent_id, name=agent_id, role=role, parent="root", status="working",
                                 backend="demo", mux="headless", created_at=now, updated_at=now,
                                 status_at=now, **kw))  # type: ignore[arg-type]


def test_identity_env_checked_against_records(repo: Path) -> None:
    base = Env(cwd=repo)
    _add(base, "w1", "dev")
    # A process claiming an agent that does not exist is the human...
    assert Env(cwd=repo, environ={**os.environ, "EXO_AGENT": "ghost"}).caller.agent_id == "root"
    # ...one naming a recorded agent is that agent, with the recorded role (not a claimed one).
    e = Env(cwd=repo, environ={**os.environ, "EXO_AGENT": "w1", "EXO_ROLE": "tl"})
    assert (e.caller.agent_id, e.role, e.caller.via) == ("w1", "dev", "env")


def test_identity_from_worktree(repo: Path, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "w2", str(wt))
    base = Env(cwd=repo)
    _add(base, "w2", "dev", worktree=str(wt))
    e = Env(cwd=wt)
    assert (e.caller.agent_id, e.caller.via) == ("w2", "worktree")
    assert Env(cwd=repo).caller.agent_id == "root"


def test_identity_from_process_ancestry_beats_env(repo: Path) -> None:
    base = Env(cwd=repo)
    _add(base, "w3", "dev", location={"pid": os.getpid()})
    _add(base, "tl1", "tl")
    e = Env(cwd=repo, environ={**os.environ, "EXO_AGENT": "tl1"})
    assert (e.caller.agent_id, e.caller.via, e.role) == ("w3", "ancestry", "dev")


def test_identity_rules_in_detail(repo: Path, tmp_path: Path) -> None:
    """The nearest recorded ancestor wins (by pid or process group; of two agents on one pid, the
    first recorded); a dead agent's or an uncreated worktree never makes its visitor that agent."""
    base = Env(cwd=repo)
    parent = os.getppid()
    _add(base, "old", "dev", location={"pgid": parent})
    time.sleep(0.01)
    _add(base, "new", "tl", location={"pid": parent})  # same process as "old": the first recorded wins
    assert (Env(cwd=repo).caller.agent_id, Env(cwd=repo).caller.via) == ("old", "ancestry")
    _add(base, "near", "dev", location={"pid": os.getpid(), "pgid": 1})  # the nearer ancestor wins
    assert Env(cwd=repo).caller.agent_id == "near"
    assert Env(cwd=repo, pid=999_999_999).caller.agent_id == "root"  # no such process: no ancestry

    outer, inner = tmp_path / "outer", tmp_path / "outer" / "inner"
    inner.mkdir(parents=True)
    (inner / "deep").mkdir()
    _add(base, "o", "dev", worktree=str(outer))
    _add(base, "i", "dev", worktree=str(inner) + "/")
    _add(base, "gone", "dev", worktree=str(inner / "deep"))
    base.store.update_agent("gone", status="dead")
    _add(base, "nowt", "dev", worktree=str(inner / "deep"), spec={"worktree_created": False})
    def at(cwd: Path) -> Env:  # a process with no recorded ancestor, in a folder outside the repository
        return Env(cwd=cwd, environ={**os.environ, "EXO_STATE_DIR": str(base.state_dir)}, pid=999_999_999)

    assert (at(inner / "deep").caller.agent_id, at(inner).caller.via) == ("i", "worktree")
    assert at(outer).caller.agent_id == "o"
    assert at(tmp_path).caller.agent_id == "root"


def test_dev_role_refused_human_only_ops(repo: Path) -> None:
    base = Env(cwd=repo)
    _add(base, "w4", "dev")
    e = Env(cwd=repo, environ={**os.environ, "EXO_AGENT": "w4"})
    with pytest.raises(StateError, match="dev role cannot init"):
        check_role(get("init"), e)
    check_role(get("status"), e)  # allowed


def test_role_cap_lowers_never_raises(repo: Path) -> None:
    base = Env(cwd=repo)
    _add(base, "w5", "dev")
    e = Env(cwd=repo, environ={**os.environ, "EXO_AGENT": "w5"}, role_cap="tl")
    assert e.role == "dev"
    assert Env(cwd=repo, role_cap="dev").role == "dev"


def test_dev_agent_cannot_init_through_cli(repo: Path) -> None:
    base = Env(cwd=repo)
    _add(base, "w6", "dev")
    r = Exo(repo)("init", "--json", env={"EXO_AGENT": "w6"})
    assert r.exit_code == 5
    assert r.json()["error"]["name"] == "StateError"
    assert not (repo / "exo.toml").exists()


def test_state_not_created_by_status_in_fresh_repo(repo: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "exo_cli", "agents", "--json"], cwd=repo, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    assert proc.returncode == 0, proc.stderr
    assert '"count": 0' in proc.stdout
