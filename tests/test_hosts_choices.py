"""What a team shares across hosts: a store named in the committed exo.toml, the agent chosen on the
spawning side, and exo on every agent's PATH (here and on another host).

Two hosts over a real sshd on 127.0.0.1 (tests/hosts_harness.py), one bare origin, the private
PostgreSQL cluster as the store.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest
from hosts_harness import VENV_BIN, TwoHosts, _write_toml, wait_until

from conftest import Exo, git, stop_repo_agents, write_trusted


def _ok(res: Any) -> Any:
    assert res.exit_code == 0, res.stdout + res.stderr
    return res.json()


@pytest.fixture
def hosts(two_hosts: TwoHosts) -> Any:
    yield two_hosts
    stop_repo_agents(two_hosts.a)


# --------------------------------------------------------------------------- [store] url in exo.toml


def _commit_store_url(h: TwoHosts, monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """``[store] url`` in the committed exo.toml, on both clones; no EXO_STORE_URL anywhere."""
    monkeypatch.delenv("EXO_STORE_URL")
    write_trusted(h.a, f"[store]\nurl = {json.dumps(url)}\n")
    git(h.a, "add", "exo.toml")
    git(h.a, "commit", "-q", "-m", "exo: the team's store")
    git(h.a, "push", "-q", "origin", "main")
    git(h.b, "pull", "-q", "--ff-only", "origin", "main")


def test_a_store_committed_in_exo_toml_is_one_team_across_hosts(hosts: TwoHosts, exo: Exo,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    h = hosts
    _commit_store_url(h, monkeypatch, h.store_url)
    _ok(exo("agents", "--json"))  # A's exo puts its state there
    assert h.exo_on_b("trust").returncode == 0  # B's human trusts the committed store (its own clone's file)
    seen = h.exo_on_b("agents", "--json")  # and so does B's, looking first, as a team of its own
    assert seen.returncode == 0, seen.stderr
    [view] = _ok(exo("hosts", "--json"))["hosts"]
    assert view["same_store"] is True and view["error"] is None, view
    res = _ok(exo("spawn", "--host", "b", "--worker", "w1", "--prompt", "p", "--agent", "demo", "--json"))
    assert [a["host"] for a in res["agents"]] == ["b"]
    [view] = _ok(exo("hosts", "--json"))["hosts"]
    assert view["same_store"] is True and view["agents"] == 1
    on_b = h.exo_on_b("agents", "--json")  # B's human sees the same team
    assert on_b.returncode == 0, on_b.stderr
    assert [a["id"] for a in json.loads(on_b.stdout)["agents"]] == ["w1"]


def test_the_callers_trust_travels_to_the_clone_on_another_host(hosts: TwoHosts, exo: Exo) -> None:
    """B's clone brings the same committed post-create command: refused there until A's human trusts it, then
    trusted there by A's pins (carried with the call and recorded on B), without anyone running exo trust on B."""
    import sys

    h = hosts
    post = [sys.executable, "-c", "open('post-create-ran', 'w').close()"]
    (h.a / "exo.toml").write_text(f"[worktree]\npost_create = {json.dumps(post)}\n")
    git(h.a, "add", "exo.toml")
    git(h.a, "commit", "-q", "-m", "exo: the team's post-create command")
    git(h.a, "push", "-q", "origin", "main")
    git(h.b, "pull", "-q", "--ff-only", "origin", "main")
    res = exo("spawn", "--host", "b", "--worker", "t1", "--prompt", "p", "--agent", "demo", "--json")
    assert res.exit_code == 5, res.stdout + res.stderr
    err = res.json()["error"]  # type: ignore[index]  # refused there before anything was made
    assert err["data"]["reason"] == "untrusted-config" and err["data"]["keys"] == ["worktree.post_create"], err
    assert "host b" in err["message"] and "exo trust" in err["hint"], err
    assert not (h.b / ".exo" / "worktrees" / "t1").exists()
    _ok(exo("trust", "--json"))
    [agent] = _ok(exo("spawn", "--host", "b", "--worker", "t2", "--prompt", "p", "--agent", "demo", "--json"))["agents"]
    assert (Path(agent["worktree"]) / "post-create-ran").is_file()
    shown = h.exo_on_b("trust", "--show", "--json")  # recorded on B: its broker and hooks trust the same
    assert shown.returncode == 0, shown.stderr
    assert [(e["key"], e["state"]) for e in json.loads(shown.stdout)["entries"]] == [("worktree.post_create", "trusted")]


def test_a_clone_with_a_team_of_its_own_in_that_store_is_refused(hosts: TwoHosts, exo: Exo,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    h = hosts
    _commit_store_url(h, monkeypatch, h.store_url)
    _ok(exo("agents", "--json"))
    assert h.exo_on_b("trust").returncode == 0  # B's human trusts its clone's committed store
    own = h.exo_on_b("spawn", "--worker", "mine", "--prompt", "p", "--agent", "demo", "--mux", "headless", "--json")
    assert own.returncode == 0, own.stdout + own.stderr
    [view] = _ok(exo("hosts", "--json"))["hosts"]
    assert view["same_store"] is False and "team of its own" in view["error"]
    res = exo("spawn", "--host", "b", "--worker", "w1", "--prompt", "p", "--agent", "demo", "--json")
    assert res.exit_code == 5, res.stdout + res.stderr
    err = res.json()["error"]  # type: ignore[index]
    assert "team of its own" in err["message"] and err["data"]["host"] == "b"
    h.exo_on_b("kill", "mine")


def test_two_spellings_of_one_database_are_one_store() -> None:
    from exo_cli.adapters.store import same_store

    url = "postgresql://exo@/exo?host=/tmp/pg&port=5433"
    for other in ("postgres://exo@/exo?port=5433&host=/tmp/pg/", "host=/tmp/pg port=5433 user=exo dbname=exo",
                  " postgresql://exo@/exo?host=/tmp//pg&port=5433&application_name=x "):
        assert same_store(url, other), other
    for other in ("postgresql://exo@/other?host=/tmp/pg&port=5433", "postgresql://exo@/exo?host=/tmp/pg&port=5434",
                  "postgresql://exo@db.internal/exo?port=5433", None, ""):
        assert not same_store(url, other), other
    assert same_store("postgresql://Me@DB.example:5432/me", "postgresql://Me@db.example/me")


# --------------------------------------------------------------------------- the agent chosen here


def _custom_agent() -> list[str]:
    """A custom agent that says which exo it finds, runs it, and records its arguments; then waits."""
    return ["sh", "-c", 'command -v exo > found-exo.txt; exo --version >> found-exo.txt 2>&1;'
            ' printf "%s\\n" "$@" > args.txt; exec sleep 600', "agent"]


def test_spawn_on_another_host_runs_the_agent_chosen_here_with_exo_on_its_path(
        hosts: TwoHosts, exo: Exo, tmp_path: Path) -> None:
    h = hosts
    # A chooses a custom agent by configuration only; B would start claude by default
    _write_toml(h.a_config, {"agent": {"default": "custom", "command": _custom_agent(),
                                       "args": {"custom": ["--from-a"]}, "idle_quiet_seconds": 7,
                                       "idle_pattern": "^ready>$"}})
    _write_toml(h.b_config, {"agent": {"default": "claude", "idle_quiet_seconds": 99}})
    path = [p for p in h.b_environ["PATH"].split(":") if p != str(VENV_BIN)]  # no exo on B's login PATH
    h.set_b_env(PATH=":".join(path))
    res = _ok(exo("spawn", "--host", "b", "--worker", "c1", "--prompt", "do it", "--json"))
    [agent] = res["agents"]
    assert (agent["host"], agent["backend"]) == ("b", "custom")
    wt = Path(agent["worktree"])
    found = wait_until(lambda: (wt / "found-exo.txt").is_file() and (wt / "args.txt").is_file()
                       and (wt / "found-exo.txt").read_text().count("\n") >= 2 and (wt / "found-exo.txt").read_text(),
                       timeout=120, what="the custom agent on b to look for exo")
    exo_path, version = found.splitlines()[:2]
    assert exo_path == str(h.b / ".git" / "exo" / "bin" / "exo"), found  # exo's own folder, first on its PATH
    assert "exo" in version.lower() and "not found" not in version, found
    assert (wt / "args.txt").read_text().splitlines()[-1] == "--from-a"
    from exo_cli.env import Env

    rec = Env(cwd=h.a).store.agent("c1")
    assert rec is not None
    settings = rec.spec["settings"]  # the settings it runs by on b are A's
    assert (settings["agent.idle_quiet_seconds"], settings["agent.idle_pattern"]) == (7, "^ready>$")


def test_a_failure_on_another_host_names_the_host(hosts: TwoHosts, exo: Exo) -> None:
    h = hosts
    _write_toml(h.a_config, {"agent": {"default": "custom", "command": ["no-such-agent-cli", "{prompt}"]}})
    res = exo("spawn", "--host", "b", "--worker", "c2", "--prompt", "p", "--json")
    assert res.exit_code == 7, res.stdout + res.stderr
    [err] = res.json()["errors"]  # type: ignore[index]
    assert err["name"] == "EnvironmentError"
    assert "no-such-agent-cli" in err["message"] and "host b" in err["message"], err
    assert res.json()["failed"] == [["c2", err["message"]]]  # type: ignore[index]


def test_the_host_refuses_settings_a_spawn_may_not_carry(repo: Path) -> None:
    from exo_cli.ops.hostcall import answer

    for settings in ({"store.url": "postgresql://x@/y"}, {"agent.idle_quiet_seconds": "soon"}, ["agent.command"]):
        out, code = answer(json.dumps({"v": 1, "op": "spawn", "args": {"worker": ["w"], "prompt": ["p"]},
                                       "via": {"base_branch": "main", "settings": settings}}),
                           cwd=str(repo), environ=dict(os.environ))
        assert code == 4 and out["error"]["name"] == "InvalidInput", out
        assert not (repo / ".git" / "exo" / "agents").exists()


# --------------------------------------------------------------------------- exo on a local agent's PATH


def test_a_local_agent_finds_the_exo_that_started_it_first_on_its_path(repo: Path, exo: Exo, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = Path(os.environ["EXO_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "config.toml").write_text(f"[agent]\ncommand = {json.dumps(_custom_agent())}\n")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # exo run by its full path: its folder is not on PATH
    try:
        res = _ok(exo("spawn", "--worker", "c1", "--prompt", "p", "--agent", "custom", "--mux", "headless", "--json"))
        wt = Path(res["agents"][0]["worktree"])
        found = wait_until(lambda: (wt / "found-exo.txt").is_file()
                           and (wt / "found-exo.txt").read_text().count("\n") >= 2 and (wt / "found-exo.txt").read_text(),
                           timeout=120, what="the custom agent to look for exo")
        exo_path, version = found.splitlines()[:2]
        assert exo_path == str(repo / ".git" / "exo" / "bin" / "exo"), found
        assert "exo" in version.lower() and "not found" not in version, found
        script = Path(exo_path).read_text()
        assert shlex.split(script.splitlines()[1])[:2] == ["exec", str(VENV_BIN / "exo")], script  # this very exo
        assert sorted(os.listdir(Path(exo_path).parent)) == ["exo"]  # nothing else of exo's shadows the user's tools
    finally:
        stop_repo_agents(repo, tmux=False)
