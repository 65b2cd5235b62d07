"""exo across two hosts over a real sshd on 127.0.0.1 (tests/hosts_harness.py): host A is this
process and clone A, host B is clone B reached over ssh with its own HOME, tmux and state; one
bare ``origin``; the private PostgreSQL cluster is the store both share.

The lifecycle: a team lead on A spawns a worker on B, B's note wakes A's wait, B files a PR, A
merges it, A completes B's agent. Then: secrets travel on stdin only, an unreachable host's
agents show ``unreachable`` (never dead) and come back, and ``exo hosts``/``doctor --hosts``.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from hosts_harness import TwoHosts, _write_toml, wait_until

from conftest import Exo, agent_process_environ, agent_vars, git, stop_repo_agents

SCRIPT = [{"write": {"path": "w1.txt", "content": "made on host b\n"}}, {"commit": {"message": "w1: add w1.txt"}},
          {"note": {"message": "w1 is ready to merge"}}, {"pr": {"title": "w1 work", "body": "from host b"}}]


def _ok(res: Any) -> Any:
    assert res.exit_code == 0, res.stdout + res.stderr
    return res.json() if res.stdout.strip().startswith(("{", "[")) else res.stdout


def _script(tmp_path: Path, steps: list[Any] = SCRIPT) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(steps))
    return str(path)


def _remote_branches(h: TwoHosts) -> set[str]:
    return set(git(h.origin, "for-each-ref", "--format=%(refname:short)", "refs/heads").split())


def _agent(exo: Exo, name: str) -> dict[str, Any]:
    data = _ok(exo("agents", "--json"))
    return next(a for a in data["agents"] if a["id"] == name)


@pytest.fixture
def hosts(two_hosts: TwoHosts) -> Any:
    yield two_hosts
    stop_repo_agents(two_hosts.a)


def test_a_lead_on_a_runs_a_worker_on_b_from_spawn_to_complete(hosts: TwoHosts, exo: Exo, tmp_path: Path) -> None:
    h = hosts
    _ok(exo("spawn", "--subtree", "--task", "lead the work", "--branch", "tl1", "--agent", "demo", "--mux",
            "headless", "--json"))
    tl = agent_vars(h.a, "tl1")  # the test acts as the lead: its identity and proof, as its own session has them
    res = _ok(exo("spawn", "--host", "b", "--worker", "w1", "--prompt", "add w1.txt", "--agent", "demo",
                  "--demo-script", _script(tmp_path), "--json", env=tl))
    [w1] = res["agents"]
    assert (w1["host"], w1["parent"], w1["branch"], w1["base_branch"]) == ("b", "tl1", "main.tl1.w1", "main.tl1")
    _ok(exo("spawn", "--host", "b", "--worker", "w1b", "--prompt", "a sibling", "--agent", "demo", "--json", env=tl))
    assert w1["worktree"].startswith(str(h.b))
    assert "main.tl1" in _remote_branches(h)  # the lead's branch went through origin
    # B's note wakes A's wait (PostgreSQL's NOTIFY), then its PR arrives
    seen: list[dict[str, Any]] = []

    def heard() -> bool:
        seen.extend(_ok(exo("wait", "--timeout", "60", "--json", env=tl))["results"])
        return any(m["kind"] == "pr-filed" for m in seen)

    wait_until(heard, timeout=240, what="w1's note and PR")
    assert any(m["kind"] == "note" and m["agent_id"] == "w1" and "ready to merge" in m["message"] for m in seen)
    [pr] = [p for p in _ok(exo("pr", "list", "--json"))["prs"] if p["head"] == "main.tl1.w1"]
    assert (pr["base"], pr["author"], pr["state"]) == ("main.tl1", "w1", "open")
    assert "main.tl1.w1" in _remote_branches(h)  # pushed for the lead on the other host
    # operations on w1 run on B
    diff = _ok(exo("diff", "w1", "--name-only", "--json", env=tl))
    assert [f["path"] for f in diff["files"]] == ["w1.txt"]
    assert "w1.txt" in _ok(exo("read", "w1", "--json", env=tl))["text"]
    assert _agent(exo, "w1")["host"] == "b"
    # A merges: fetched from origin into the lead's branch, which goes back to origin
    merged = _ok(exo("pr", "merge", str(pr["number"]), "--json", env=tl))
    sha = merged["merge_commit"]
    assert git(h.a, "rev-parse", "refs/heads/main.tl1") == sha
    assert git(h.origin, "rev-parse", "refs/heads/main.tl1") == sha
    assert git(h.a, "for-each-ref", "refs/remotes/origin/main.tl1.w1") == ""  # the fetched copy is not kept
    assert git(h.b, "rev-parse", "refs/remotes/origin/main.tl1") == sha  # the sibling on b rebases onto the merge
    lead = _agent(exo, "tl1")
    assert git(h.a, "show", f"{sha}:w1.txt") == "made on host b"
    if lead["layout"] == "worktree":  # a worktree has the merge at once; a sandboxed lead's clone at its next stop
        assert (Path(lead["worktree"]) / "w1.txt").read_text() == "made on host b\n"
    # A completes B's agent: on B, with the same never-lose-work rules, after fetching the merge
    done = _ok(exo("complete", "w1", "--json", env=tl))
    assert done["worktree_removed"] and done["branch_deleted"], done
    assert not Path(w1["worktree"]).exists()
    assert git(h.b, "branch", "--list", "main.tl1.w1") == ""
    assert "main.tl1.w1" not in _remote_branches(h), done["warnings"]
    assert _agent(exo, "w1")["status"] == "done"


def test_complete_on_the_other_host_refuses_to_lose_work(hosts: TwoHosts, exo: Exo, tmp_path: Path) -> None:
    w = _ok(exo("spawn", "--host", "b", "--worker", "w2", "--prompt", "p", "--agent", "demo", "--demo-script",
                _script(tmp_path, [{"write": {"path": "draft.txt", "content": "unsaved\n"}}]), "--json"))["agents"][0]
    wait_until(lambda: _agent(exo, "w2")["status"] == "idle", timeout=120, what="w2 idle")
    res = exo("complete", "w2", "--json")
    assert res.exit_code == 5, res.stdout
    err = res.json()["error"]
    assert "draft.txt" in json.dumps(err) and err["data"]["host"] == "b"
    assert (Path(w["worktree"]) / "draft.txt").read_text() == "unsaved\n"


def test_secrets_reach_the_remote_agent_through_stdin_only(hosts: TwoHosts, exo: Exo, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    h = hosts
    key, token = "sk-ant-" + secrets.token_hex(16), "tok-" + secrets.token_hex(16)
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    monkeypatch.setenv("MY_SERVICE_TOKEN", token)
    _write_toml(h.a_config, {"hosts": {"b": {"env": ["MY_SERVICE_*"]}}})
    # sandboxed on b (the default), the demo agent gets only what b's [sandbox] env lets in
    _write_toml(h.b_config, {"sandbox": {"env": ["MY_SERVICE_*", "ANTHROPIC_API_KEY"]}})
    w = _ok(exo("spawn", "--host", "b", "--worker", "w3", "--prompt", "p", "--agent", "demo", "--json"))["agents"][0]
    wait_until(lambda: _agent(exo, "w3")["status"] in ("idle", "working"), timeout=120, what="w3 running")
    pid = int(w["location"].get("pid") or _agent(exo, "w3")["location"]["pid"])
    environ = agent_process_environ(pid)
    assert environ.get("ANTHROPIC_API_KEY") == key and environ.get("MY_SERVICE_TOKEN") == token
    for canary in (key, token):
        assert h.scan(canary, tmp_path) == []


def test_an_unreachable_host_shows_its_agents_unreachable_and_they_come_back(hosts: TwoHosts, exo: Exo) -> None:
    h = hosts
    _ok(exo("spawn", "--host", "b", "--worker", "w4", "--prompt", "p", "--agent", "demo", "--json"))
    wait_until(lambda: _agent(exo, "w4")["status"] == "idle", timeout=120, what="w4 idle")
    before = git(h.a, "status", "--porcelain")
    h.stop_sshd()
    assert _agent(exo, "w4")["status"] == "unreachable"
    for args in (["read", "w4"], ["kill", "w4"], ["complete", "w4"], ["diff", "w4"]):
        res = exo(*args, "--json")
        assert res.exit_code == 7, (args, res.stdout, res.stderr)
        err = res.json()["error"]
        assert (err["name"], err["data"]["reason"], err["data"]["host"]) == ("EnvironmentError", "unreachable", "b")
    sent = _ok(exo("send", "w4", "hello again", "--json"))
    assert sent["sent"][0]["delivery"] == "queued"  # stored: it reaches w4 when b is back
    from exo_cli.env import Env

    assert Env(cwd=h.a).store.agent("w4").status == "idle"  # type: ignore[union-attr] - never recorded dead
    assert git(h.a, "status", "--porcelain") == before
    listed = _ok(exo("hosts", "--json"))["hosts"]
    assert listed[0]["reachable"] is False
    h.start_sshd()
    wait_until(lambda: _agent(exo, "w4")["status"] == "idle", timeout=120, what="w4 back")
    wait_until(lambda: "hello again" in _ok(exo("read", "w4", "--json"))["text"], timeout=120,
               what="the queued message typed in")


def test_hosts_and_doctor_check_each_host(hosts: TwoHosts, exo: Exo) -> None:
    h = hosts
    [fresh] = _ok(exo("hosts", "--json"))["hosts"]
    assert fresh["reachable"] and fresh["same_origin"] and fresh["compatible"]
    assert fresh["store"] is None and fresh["error"] is None  # B has no state yet: it joins on the first call
    _ok(exo("spawn", "--host", "b", "--worker", "w5", "--prompt", "p", "--agent", "demo", "--json"))
    [joined] = _ok(exo("hosts", "--json"))["hosts"]
    assert joined["same_store"] is True and joined["host_name"] == "b" and joined["agents"] == 1
    assert _ok(exo("doctor", "--hosts", "--dry-run", "--json"))["remaining"] == 0
    git(h.b, "remote", "set-url", "origin", str(h.tmp / "elsewhere.git"))
    [moved] = _ok(exo("hosts", "--json"))["hosts"]
    assert moved["same_origin"] is False and "origin" in moved["error"]
    res = exo("doctor", "--hosts", "--dry-run", "--json")
    assert res.exit_code == 5 and any(p["kind"] == "host" for p in res.json()["problems"])


def test_attach_to_a_remote_agent_is_an_ssh_session_into_its_host(hosts: TwoHosts, exo: Exo) -> None:
    _ok(exo("spawn", "--host", "b", "--worker", "w6", "--prompt", "p", "--agent", "demo", "--json"))
    got = _ok(exo("attach", "w6", "--json"))
    assert got["mode"] == "ssh" and got["argv"][0] == "ssh" and "-t" in got["argv"]
    assert got["argv"][-1].endswith("host-call") is False and "attach w6" in got["argv"][-1]
    # the same argv, run without a terminal, reaches exo on b (which then wants a terminal of its own)
    proc = subprocess.run([*got["argv"][:-1], got["argv"][-1].replace("attach w6", "--version")],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 0 and "exo" in proc.stdout.lower(), proc.stderr


def test_one_master_connection_serves_every_call(hosts: TwoHosts, exo: Exo) -> None:
    h = hosts
    _ok(exo("hosts", "--json"))
    logins = h.sshd.log.read_text().count("Accepted publickey")
    for _ in range(3):
        _ok(exo("hosts", "--json"))
    time.sleep(0.5)
    assert h.sshd.log.read_text().count("Accepted publickey") == logins
