"""Repository discovery, state dir, caller identity and roles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import Exo, agent_vars, git
from exo_cli.env import Env
from exo_cli.errors import EnvironmentError_, InvalidInput, StateError
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
    ids = agent_vars(repo, "w1")
    # A process claiming an agent that does not exist is refused, never the human...
    with pytest.raises(StateError, match="EXO_AGENT=ghost is not an agent exo recorded") as err:
        Env(cwd=repo, environ={**os.environ, "EXO_AGENT": "ghost"}).caller  # noqa: B018
    assert err.value.data["reason"] == "unknown-agent"
    # ...one naming a recorded agent with its proof is that agent, with the recorded role (not a claimed one).
    e = Env(cwd=repo, environ={**os.environ, **ids, "EXO_ROLE": "tl"})
    assert (e.caller.agent_id, e.role, e.caller.via) == ("w1", "dev", "env")


@pytest.mark.parametrize(("proof", "reason"), [(None, "no-proof"), ("", "no-proof"), ("0" * 64, "wrong-proof"),
                                               ("other", "wrong-proof")])
def test_identity_claim_without_its_proof_is_refused(repo: Path, proof: str | None, reason: str) -> None:
    base = Env(cwd=repo)
    _add(base, "w1", "dev")
    _add(base, "lead", "tl")
    agent_vars(repo, "w1")
    agent_vars(repo, "lead")
    environ = {**os.environ, "EXO_AGENT": "lead"}
    if proof is not None:
        environ["EXO_AGENT_PROOF"] = proof
    with pytest.raises(StateError) as err:
        Env(cwd=repo, environ=environ).caller  # noqa: B018
    assert err.value.data["reason"] == reason and err.value.data["claimed"] == "lead"
    assert "unset" in (err.value.hint or "")


def test_identity_proof_of_another_agent_proves_nothing(repo: Path) -> None:
    """A dev that sets EXO_AGENT to its TL's name keeps its own proof: refused."""
    base = Env(cwd=repo)
    _add(base, "w1", "dev")
    _add(base, "lead", "tl")
    mine = agent_vars(repo, "w1")
    agent_vars(repo, "lead")
    with pytest.raises(StateError, match="does not prove EXO_AGENT=lead"):
        Env(cwd=repo, environ={**os.environ, **mine, "EXO_AGENT": "lead"}).caller  # noqa: B018
    # Only the record keeps anything, and only a digest.
    spec = Env(cwd=repo).store.agent("w1").spec  # type: ignore[union-attr]
    assert mine["EXO_AGENT_PROOF"] not in json.dumps(spec) and len(spec["proof_sha256"]) == 64


@pytest.mark.parametrize("markers", [{"EXO_ROLE": "tl"}, {"EXO_PARENT": "root"}, {"EXO_AGENT_PROOF": "x"},
                                     {"EXO_AGENT": "root"}])
def test_any_agent_variable_must_be_proven(repo: Path, markers: dict[str, str]) -> None:
    _add(Env(cwd=repo), "w1", "dev")
    with pytest.raises(StateError, match="cannot tell who is calling"):
        Env(cwd=repo, environ={**os.environ, **markers}).caller  # noqa: B018


def test_no_state_never_makes_a_marked_caller_human(repo: Path, tmp_path: Path) -> None:
    # No state at all in the repository: a marked caller is refused...
    with pytest.raises(StateError, match="state database is missing"):
        Env(cwd=repo, environ={**os.environ, "EXO_AGENT": "w1"}).caller  # noqa: B018
    # ...and outside any repository too; the unmarked human is the human.
    with pytest.raises(StateError, match="outside any repository"):
        Env(cwd=tmp_path, environ={**os.environ, "EXO_AGENT": "w1"}).caller  # noqa: B018
    assert Env(cwd=tmp_path).caller.is_human
    assert not (repo / ".git" / "exo").exists()


def test_state_dir_override_refused_for_marked_callers(repo: Path, tmp_path: Path) -> None:
    base = Env(cwd=repo)
    _add(base, "w1", "dev")
    ids = agent_vars(repo, "w1")
    empty = tmp_path / "empty"
    empty.mkdir()
    # The agent's own state folder, however it is spelled, is fine.
    for same in (str(repo / ".git" / "exo"), str(repo / ".git" / "exo") + "/", str(repo / ".git" / ".." / ".git" / "exo")):
        e = Env(cwd=repo, environ={**os.environ, **ids, "EXO_STATE_DIR": same})
        assert (e.caller.agent_id, e.caller.via) == ("w1", "env")
    # Another one (an empty folder: "no state, so the human") is refused for every marked caller.
    for markers in (ids, {"EXO_AGENT": "w1"}, {"EXO_ROLE": "tl"}):
        e = Env(cwd=repo, environ={**os.environ, **markers, "EXO_STATE_DIR": str(empty)})
        with pytest.raises(InvalidInput, match="EXO_STATE_DIR=.* is refused") as err:
            e.caller  # noqa: B018
        assert err.value.exit_code == 4 and str(repo / ".git" / "exo") in err.value.message
        with pytest.raises(InvalidInput):
            e.state_dir  # noqa: B018
    # A process under an agent's recorded process is marked too, with no variable at all.
    _add(base, "w2", "dev", location={"pid": os.getpid()})
    with pytest.raises(InvalidInput, match="belongs to an agent"):
        Env(cwd=repo, environ={**os.environ, "EXO_STATE_DIR": str(empty)}).caller  # noqa: B018
    assert list(empty.iterdir()) == []


def test_state_dir_override_for_the_human_and_outside_a_repository(repo: Path, tmp_path: Path) -> None:
    other = tmp_path / "state"
    assert Env(cwd=repo, environ={**os.environ, "EXO_STATE_DIR": str(other)}).caller.is_human
    # An agent working outside any repository may name its own repository's state folder...
    _add(Env(cwd=repo), "w1", "dev")
    ids = agent_vars(repo, "w1")
    e = Env(cwd=tmp_path, environ={**os.environ, **ids, "EXO_STATE_DIR": str(repo / ".git" / "exo")})
    assert e.caller.agent_id == "w1"
    # ...but not a folder that is no repository's state.
    with pytest.raises(InvalidInput, match="no repository's state folder"):
        Env(cwd=tmp_path, environ={**os.environ, **ids, "EXO_STATE_DIR": str(other)}).caller  # noqa: B018


def test_state_dir_override_pointing_at_a_file(repo: Path, tmp_path: Path) -> None:
    f = tmp_path / "a-file"
    f.write_text("x")
    r = Exo(repo)("agents", "--json", env={"EXO_STATE_DIR": str(f)})
    assert r.exit_code == 4, r.stdout
    err = r.json()["error"]  # type: ignore[index]
    assert err["code"] == -32002 and str(f) in err["message"] and "not a folder" in err["message"]
    r = Exo(repo)("agents", env={"EXO_STATE_DIR": str(f)})
    assert r.exit_code == 4 and "Traceback" not in r.stderr and "not a folder" in r.stderr


def test_is_human_never_comes_from_a_name() -> None:
    from exo_cli.env import Caller

    assert not Caller("root", "tl", "env").is_human
    assert not Caller("root", "dev", "ancestry").is_human
    assert Caller("root", "human", "none").is_human


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
    e = Env(cwd=repo, environ={**os.environ, **agent_vars(repo, "w4")})
    with pytest.raises(StateError, match="dev role cannot init"):
        check_role(get("init"), e)
    check_role(get("status"), e)  # allowed


def test_role_cap_lowers_never_raises(repo: Path) -> None:
    base = Env(cwd=repo)
    _add(base, "w5", "dev")
    e = Env(cwd=repo, environ={**os.environ, **agent_vars(repo, "w5")}, role_cap="tl")
    assert e.role == "dev"
    assert Env(cwd=repo, role_cap="dev").role == "dev"


def test_dev_agent_cannot_init_through_cli(repo: Path) -> None:
    base = Env(cwd=repo)
    _add(base, "w6", "dev")
    r = Exo(repo)("init", "--json", env=agent_vars(repo, "w6"))
    assert r.exit_code == 5
    assert r.json()["error"]["name"] == "StateError"
    assert not (repo / "exo.toml").exists()


def test_state_not_created_by_status_in_fresh_repo(repo: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "exo_cli", "agents", "--json"], cwd=repo, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    assert proc.returncode == 0, proc.stderr
    assert '"count": 0' in proc.stdout


def test_state_dir_confirmed_from_git_files_as_git_finds_it(repo: Path, tmp_path: Path) -> None:
    """The hooks' fast path (no git process) finds the same common dir as git, or defers to git."""
    from exo_cli.env import _common_dir_from_files

    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "feature", str(wt))
    (repo / "sub" / "deeper").mkdir(parents=True)
    (wt / "sub").mkdir()
    for cwd in (repo, repo / "sub" / "deeper", wt, wt / "sub"):
        env = Env(cwd=cwd)
        fast = _common_dir_from_files(env)
        assert fast is not None and os.path.realpath(fast) == os.path.realpath(env.repo.common_dir), cwd
    assert _common_dir_from_files(Env(cwd=repo / ".git")) is None  # inside .git: ask git
    assert _common_dir_from_files(Env(cwd=tmp_path)) is None
    assert _common_dir_from_files(Env(cwd=repo, environ={**os.environ, "GIT_DIR": str(repo / ".git")})) is None


def test_runtime_dir_follows_the_repository_and_uid_alone(repo: Path, tmp_path: Path) -> None:
    """Whatever environment an agent CLI gives exo (Codex drops XDG_RUNTIME_DIR, TMUX_TMPDIR), one folder."""
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    environs = [{}, {"XDG_RUNTIME_DIR": str(xdg)}, {"XDG_RUNTIME_DIR": str(xdg), "TMUX_TMPDIR": "/tmp", "TMPDIR": "/var/tmp"}]
    dirs = {Env(cwd=repo, environ={"PATH": os.environ["PATH"], **e}).runtime_dir for e in environs}
    assert len(dirs) == 1
    (only,) = dirs
    assert only.name.startswith("exo-") and str(os.getuid()) in str(only)
    assert not only.exists()  # made on use, not by looking at it
    assert not list(xdg.iterdir())
