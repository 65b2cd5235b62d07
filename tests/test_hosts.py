"""Hosts without ssh: configuration, the wire format, routing rules and the answering side in-process.

The whole path over a real sshd (spawn on another host, PRs, complete, secrets, an unreachable
host) is in ``test_hosts_e2e.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import Exo, git

HOSTS_TOML = """
[hosts.b]
ssh = "exo-b"
path = "/srv/clone"
"""


def _config(home: Path, text: str) -> None:
    folder = Path(os.environ["EXO_CONFIG_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(text)


# -- configuration ------------------------------------------------------------------------------

@pytest.mark.parametrize(("entry", "why"), [
    ('[hosts.B]\nssh = "x"\npath = "/p"', "host name"),
    ('[hosts.b]\nssh = "-oProxyCommand=evil"\npath = "/p"', "ssh must be a destination"),
    ('[hosts.b]\nssh = "a b"\npath = "/p"', "ssh must be a destination"),
    ('[hosts.b]\nssh = "x"\npath = "relative"', "absolute path"),
    ('[hosts.b]\nssh = "x"\npath = "/p\\n"', "absolute path"),
    ('[hosts.b]\nssh = "x"\npath = "/p"\nport = 22', "unknown key"),
    ('[hosts.b]\nssh = "x"\npath = "/p"\nexo = 3', "exo must be a command"),
    ('[hosts.b]\nssh = "x"\npath = "/p"\nexo = "env \'HOME=/x"', "exo must be a command"),
    ('[hosts.b]\nssh = "x"\npath = "/p"\n[ssh]\ncommand = "ssh -F \'/x"', "ssh.command"),
    ('[hosts.b]\nssh = "x"\npath = "/p"\nenv = "KEY"', "env must be a list"),
    ("hosts = 3", "expected a table"),
])
def test_a_bad_host_entry_is_invalid_input_naming_it(isolate: Path, exo: Exo, entry: str, why: str) -> None:
    _config(isolate, entry + "\n")
    res = exo("hosts", "--json")
    assert res.exit_code == 4, res.stdout + res.stderr
    err = json.loads(res.stdout)["error"]
    assert err["name"] == "InvalidInput"
    assert why in err["message"]
    assert "Traceback" not in res.stderr


def test_no_hosts_lists_nothing_and_names_this_host(exo: Exo) -> None:
    res = exo("hosts", "--json")
    assert res.exit_code == 0, res.stderr
    data = res.json()
    assert data["hosts"] == [] and data["this_host"]


def test_an_unknown_host_is_not_found(isolate: Path, exo: Exo) -> None:
    _config(isolate, HOSTS_TOML)
    res = exo("hosts", "nosuch", "--json")
    assert res.exit_code == 3
    assert "configured: b" in res.json()["error"]["message"]  # type: ignore[index]
    res = exo("spawn", "--host", "nosuch", "--worker", "w1", "--prompt", "x", "--agent", "demo", "--json")
    assert res.exit_code == 3, res.stdout


def test_spawn_on_a_host_needs_a_shared_store(isolate: Path, exo: Exo, store_kind: str) -> None:
    _config(isolate, HOSTS_TOML)
    res = exo("spawn", "--host", "b", "--worker", "w1", "--prompt", "x", "--agent", "demo", "--json")
    assert res.exit_code == 5, res.stdout
    assert "SQLite" in res.json()["error"]["message"]  # type: ignore[index]


@pytest.mark.parametrize("flag", [["--repo", "."], ["--no-worktree"], ["--after", "w0"], ["--fork-session"]])
def test_spawn_options_that_cannot_go_to_another_host_are_usage_errors(isolate: Path, exo: Exo,
                                                                      flag: list[str]) -> None:
    _config(isolate, HOSTS_TOML)
    res = exo("spawn", "--host", "b", "--worker", "w1", "--prompt", "x", "--agent", "demo", *flag, "--json")
    assert res.exit_code == 2, res.stdout + res.stderr
    assert "--host" in res.json()["error"]["message"]  # type: ignore[index]


def test_an_unreachable_host_is_listed_not_raised(isolate: Path, exo: Exo, tmp_path: Path) -> None:
    fake = tmp_path / "ssh"
    fake.write_text("#!/bin/sh\necho 'ssh: connect to host nowhere port 22: Connection refused' >&2\nexit 255\n")
    fake.chmod(0o755)
    _config(isolate, HOSTS_TOML + f'\n[ssh]\ncommand = "{fake}"\n')
    res = exo("hosts", "--json")
    assert res.exit_code == 0, res.stderr
    [host] = res.json()["hosts"]  # type: ignore[index]
    assert host["reachable"] is False and "Connection refused" in host["error"]
    res = exo("doctor", "--hosts", "--dry-run", "--json")
    assert res.exit_code == 5
    assert any(p["kind"] == "host" and p["subject"] == "b" for p in res.json()["problems"])  # type: ignore[index]


# -- the wire format ------------------------------------------------------------------------------

def test_results_come_back_as_their_own_classes() -> None:
    from exo_cli.ops.lifecycle import KillResult, ReadManyResult, ReadResult
    from exo_cli.ops.spawn.result import SpawnedAgent, SpawnResult
    from exo_cli.records import Agent, to_jsonable
    from exo_cli.wire import from_jsonable

    spawned = SpawnResult(worktrees=[["w1", "/x"]], tabs=[["w1", "%1"]], failed=[], errors=[],
                          agents=[SpawnedAgent("w1", "w1", "dev", "root", "starting", None, "demo", "tmux", None,
                                               "t", "main.w1", "main", "/x", {"pane": "%1"}, "b")],
                          workers_awaiting_task=[], warnings=["w"])
    one = ReadResult("w1", "idle", "hi\n", 1, False, None, None)
    many = ReadManyResult([one, dataclasses.replace(one, agent="w2", matched=True)])
    agent = Agent(id="w1", name="w1", role="dev", parent=None, status="idle", backend="demo", mux="tmux",
                  spec={"host": "b"}, location={"pid": 3})
    for tp, value in ((SpawnResult, spawned), (ReadResult | ReadManyResult, one),
                      (ReadResult | ReadManyResult, many), (KillResult, KillResult(["w1"], [], [["w1", "/x"]])),
                      (Agent, agent)):
        back = from_jsonable(tp, json.loads(json.dumps(to_jsonable(value))))
        assert back == value
        assert type(back) is type(value)
    assert from_jsonable(Agent, to_jsonable(agent)).host == "b"


def test_errors_come_back_with_their_class_code_and_data() -> None:
    from exo_cli.errors import StateError
    from exo_cli.wire import error_from

    raised = StateError("w1 is busy \x1b[31m", hint="wait", agent="w1")
    back = error_from(raised.to_dict()["error"], host="b")
    assert isinstance(back, StateError) and back.exit_code == 5
    assert back.data["agent"] == "w1" and back.data["host"] == "b"
    assert "\x1b" not in back.message and "on host b" in back.message
    assert error_from("garbage", host="b").exit_code == 6
    gone = error_from({"code": -32001, "name": "NotFound", "message": "gone", "hint": None, "data": {"x": 1}}, host="b")
    assert gone.exit_code == 3 and gone.message == "gone (on host b)" and gone.data == {"x": 1, "host": "b"}
    for data in ({"hint": "x"}, {"message": "y"}, {"self": 1}):  # no exo error carries its own arguments as data
        odd = error_from({"code": -32001, "name": "NotFound", "message": "gone", "data": data}, host="b")
        assert odd.exit_code == 6 and "host b" in odd.message and odd.data["host"] == "b"


# -- the answering side ---------------------------------------------------------------------------

def _answer(repo: Path, request: object | str, environ: dict[str, str] | None = None) -> tuple[dict, int]:
    from exo_cli.ops.hostcall import answer

    raw = request if isinstance(request, str) else json.dumps(request)
    return answer(raw, cwd=str(repo), environ={**os.environ, **(environ or {})})


@pytest.mark.parametrize("raw", ["", "not json", "[1, 2]", '{"v": 1, "op": "agents", "args": 3}'])
def test_garbage_on_host_call_is_invalid_input(repo: Path, raw: str) -> None:
    out, code = _answer(repo, raw)
    assert code == 4 and out["ok"] is False and out["error"]["name"] == "InvalidInput"


def test_host_call_cli_answers_one_json_line(repo: Path) -> None:
    from conftest import run_exo

    proc = run_exo("host-call", cwd=repo, input="nonsense\n")
    assert proc.returncode == 4
    [line] = proc.stdout.splitlines()
    assert json.loads(line)["error"]["name"] == "InvalidInput"
    proc = run_exo("host-call", cwd=repo, input=json.dumps({"v": 1, "op": "", "args": {"hello": True}}) + "\n")
    assert proc.returncode == 0
    hello = json.loads(proc.stdout)["result"]
    assert hello["protocol"] == 1 and hello["version"]
    assert "host-call" not in run_exo("--help", cwd=repo).stdout


def test_an_unknown_operation_or_protocol_is_refused(repo: Path) -> None:
    out, code = _answer(repo, {"v": 1, "op": "nosuch", "args": {}})
    assert code == 3 and out["error"]["name"] == "NotFound"
    out, code = _answer(repo, {"v": 99, "op": "agents", "args": {}})
    assert code == 5 and "protocol" in out["error"]["message"]


def test_a_request_cannot_claim_an_agent_without_its_proof(repo: Path, exo: Exo) -> None:
    assert exo("init").exit_code == 0
    out, code = _answer(repo, {"v": 1, "op": "spawn", "args": {"worker": ["x"], "prompt": ["p"]},
                               "env": {"EXO_AGENT": "w1", "EXO_AGENT_PROOF": "forged"}})
    assert code == 5 and out["error"]["name"] == "StateError", out


def test_a_clone_with_state_of_its_own_does_not_join_another_team(repo: Path, exo: Exo,
                                                                    store_kind: str) -> None:
    assert exo("init").exit_code == 0  # SQLite state of its own
    out, code = _answer(repo, {"v": 1, "op": "agents", "args": {}, "as_host": "b",
                               "store": {"url": "postgresql://exo@/exo?host=/nonexistent", "team": "t"}})
    assert code == 5 and "SQLite" in out["error"]["message"], out
    common = Path(repo / git(repo, "rev-parse", "--git-common-dir"))
    assert not (common / "exo" / "store-url").exists()  # nothing joined


def test_a_clone_learns_its_host_name_once(repo: Path) -> None:
    out, code = _answer(repo, {"v": 1, "op": "agents", "args": {}, "as_host": "b"})
    assert code == 0, out
    common = Path(repo / git(repo, "rev-parse", "--git-common-dir"))
    assert (common / "exo" / "host-name").read_text().strip() == "b"
    out, code = _answer(repo, {"v": 1, "op": "agents", "args": {}, "as_host": "c"})
    assert code == 5 and "host 'b'" in out["error"]["message"]
    res = subprocess.run(["git", "status"], cwd=repo, capture_output=True, text=True)
    assert res.returncode == 0


def test_an_agent_of_this_host_cannot_use_host_call(repo: Path, exo: Exo) -> None:
    """A dev agent has a shell: host-call run by it (whatever env its request claims) is refused."""
    from conftest import agent_vars, stop_repo_agents

    assert exo("spawn", "--worker", "d1", "--prompt", "p", "--agent", "demo", "--mux", "headless").exit_code == 0
    try:
        dev = agent_vars(repo, "d1")
        for claimed in ({}, {"EXO_AGENT": "", "EXO_AGENT_PROOF": ""}):
            out, code = _answer(repo, {"v": 1, "op": "agents", "args": {}, "as_host": "zzz", "env": claimed}, dev)
            assert code == 5 and "agent of this host" in out["error"]["message"], out
        common = Path(repo / git(repo, "rev-parse", "--git-common-dir"))
        assert not (common / "exo" / "host-name").exists()  # nothing was renamed
    finally:
        stop_repo_agents(repo, tmux=False)


def test_a_record_without_a_host_runs_only_on_the_clone_that_made_it(repo: Path) -> None:
    """Records made before hosts (or on SQLite) carry no host: a clone that joined the team later
    must never observe, reap or kill them as its own."""
    from exo_cli.env import Env
    from exo_cli.records import Agent

    old = Agent(id="w0", name="w0", role="dev", parent=None, status="idle", backend="demo", mux="tmux")
    here = Agent(id="w1", name="w1", role="dev", parent=None, status="idle", backend="demo", mux="tmux",
                 spec={"host": "b"})
    state = Path(repo / git(repo, "rev-parse", "--git-common-dir")) / "exo"
    state.mkdir(parents=True, exist_ok=True)
    env = Env(cwd=repo, environ={**os.environ, "EXO_HOST": "b"})
    assert env.runs_here(old) and env.runs_here(here)
    (state / "store-url").write_text("postgresql://exo@/exo?host=/nonexistent\n/srv/a/.git/exo\n")
    env = Env(cwd=repo, environ={**os.environ, "EXO_HOST": "b"})
    assert env.joined and not env.runs_here(old) and env.runs_here(here)
    assert not Env(cwd=repo, environ={**os.environ, "EXO_HOST": "c"}).runs_here(here)


def test_a_call_to_a_host_ends_when_the_client_cancels(tmp_path: Path) -> None:
    """An MCP client cancelling a forwarded call closes its ssh session at once (no wait for the host)."""
    import threading
    import time

    from exo_cli.adapters.ssh import Host
    from exo_cli.errors import ExternalFailure

    fake = tmp_path / "ssh"  # starts the "master" at once; every session then hangs as a stuck host would
    fake.write_text("#!/bin/sh\ncase \"$*\" in *ControlMaster=yes*) exit 0;; esac\nexec sleep 300\n")
    fake.chmod(0o755)
    host = Host(name="b", dest="exo-b", path="/srv/clone", ssh=(str(fake),), control_dir=str(tmp_path / "run"))
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    t0 = time.monotonic()
    with pytest.raises(ExternalFailure) as caught:
        host.call({"v": 1}, timeout=600, cancelled=stop.is_set)
    assert caught.value.data["reason"] == "cancelled"
    assert time.monotonic() - t0 < 300  # long before the stuck session would have ended by itself
    with pytest.raises(ExternalFailure) as caught:
        host.call({"v": 1}, timeout=1)
    assert caught.value.data["reason"] == "timeout"


def test_ssh_itself_runs_without_the_agents_keys_but_with_what_it_needs(isolate: Path, repo: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A SendEnv in the user's ssh config would hand ssh's environment to the server (and its logs)."""
    from exo_cli.env import Env
    from exo_cli.ops.hosts import get_host

    _config(isolate, HOSTS_TOML + 'env = ["*"]\n')  # every variable for the agents on b
    for k, v in {"ANTHROPIC_API_KEY": "sk-x", "MY_TOKEN": "t", "EXO_AGENT_PROOF": "p", "EXO_ANTHROPIC_API_KEY": "k",
                 "SSH_AUTH_SOCK": "/run/agent.sock", "PATH": "/usr/bin:/bin", "KRB5CCNAME": "FILE:/tmp/k"}.items():
        monkeypatch.setenv(k, v)
    env = Env(str(repo), dict(os.environ))
    got = get_host(env, "b").environ()
    for gone in ("ANTHROPIC_API_KEY", "MY_TOKEN", "EXO_AGENT_PROOF", "EXO_ANTHROPIC_API_KEY", "EXO_CONFIG_DIR"):
        assert gone not in got, gone
    assert (got["SSH_AUTH_SOCK"], got["PATH"], got["HOME"]) == ("/run/agent.sock", "/usr/bin:/bin", str(isolate))
    assert got["KRB5CCNAME"] == "FILE:/tmp/k"  # what ssh itself may use stays
