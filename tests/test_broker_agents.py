"""Agents through the broker: the socket is the identity, relays carry calls, hooks and MCP sessions.

Real agents (headless custom agents running ``tests/broker_puppet.py``, which runs exo commands as
the agent, from inside its process tree), a real broker, the real MCP SDK client over stdio. A
``raw`` request is a hostile client: it speaks the broker's protocol itself (``adapters.broker``),
without the relay's own care (reading files itself, for one).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_broker_life import brokers_of

from conftest import ROOT, Exo, agent_process_environ, state_text, stop_repo_agents, wait_for, write_trusted
from exo_cli import __version__
from exo_cli.adapters import broker as adapter
from exo_cli.env import Env
from exo_cli.errors import ExoError
from exo_cli.ops import broker as ops

PUPPET = Path(__file__).with_name("broker_puppet.py")
EXO = [sys.executable, "-m", "exo_cli"]


class Team:
    """A repository whose custom agents are puppets: ``run`` has one run an exo command as itself."""

    def __init__(self, repo: Path, results: Path) -> None:
        self.repo = repo
        self.results = results
        self.exo = Exo(repo)

    def spawn(self, name: str, *extra: str, env: dict[str, str] | None = None) -> dict[str, Any]:
        args = ["--worker", name, "--prompt", "x"] if "--subtree" not in extra else ["--branch", name, "--task", "x"]
        r = self.exo("spawn", *args, *extra, "--agent", "custom", "--mux", "headless", "--json", env=env)
        assert r.exit_code == 0, r.stdout + r.stderr
        got: dict[str, Any] = json.loads(r.stdout)
        self.environ(name)  # its process runs (and its runner reads its messages) before anything is sent
        return got

    def environ(self, name: str) -> dict[str, str]:
        """The agent's own environment (from /proc)."""
        record = Env(cwd=self.repo).store.agent(name)
        assert record is not None
        return agent_process_environ(int(record.location["pid"]))

    def run(self, name: str, *args: str, unset: tuple[str, ...] = (), set: dict[str, str] | None = None,
            stdin: str | None = None, cwd: str | None = None, argv: list[str] | None = None) -> dict[str, Any]:
        """Have agent ``name`` run ``exo ARGS`` (or ``argv``) as a child of its own process; its result."""
        from exo_cli.adapters.mux import Location
        from exo_cli.adapters.mux.headless import Headless

        env = Env(cwd=self.repo)
        record = env.store.agent(name)
        assert record is not None
        ident = uuid.uuid4().hex
        line = json.dumps({"id": ident, "argv": argv or [*EXO, *args], "unset": list(unset), "set": set or {},
                           "stdin": stdin, "cwd": cwd})
        Headless(env.runtime_dir).send_text(Location.from_dict(record.location), line)
        out = self.results / f"{ident}.json"
        wait_for(out.exists, 120, f"{name} to run {args or argv}")
        result: dict[str, Any] = json.loads(out.read_text())
        return result


@pytest.fixture
def team(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Team]:
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    command = [sys.executable, str(PUPPET), str(results)]
    # the puppets are sandboxed (the default): the results folder is one they may write ([sandbox] paths)
    write_trusted(repo, f"[agent]\ncommand = {json.dumps(command)}\n[broker]\nidle_exit = 1\n"
                  f"[sandbox]\npaths = [{json.dumps(str(results))}]\n")
    yield Team(repo, results)
    stop_repo_agents(repo, tmux=False)
    adapter.stop(ops.paths(Env(cwd=repo)), __version__, timeout=30)
    wait_for(lambda: not brokers_of(repo), what="the test's broker to end")


def raw(team: Team, name: str, kind: str, *, proof: str | None, **fields: Any) -> dict[str, Any]:
    """One request on agent ``name``'s socket from this test's process (not of the agent's tree)."""
    sock_path = team.environ(name)["EXO_SOCKET"]
    try:
        sock, answer = adapter.hello(sock_path, kind, __version__, timeout=60, proof=proof, **fields)
    except ExoError as exc:
        return {"ok": False, "error": exc.to_dict()["error"]}
    sock.close()
    return answer


def notes_to_root(repo: Path) -> list[tuple[str, str]]:
    return [(m.sender, m.body) for m in Env(cwd=repo).store.messages(recipient="root") if m.kind == "note"]


# --------------------------------------------------------------------------- the socket is the identity


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"], indirect=True)
def test_an_agent_reaches_exo_through_its_own_socket_only(team: Team) -> None:
    team.spawn("w1")
    environ = team.environ("w1")
    path = Path(environ["EXO_SOCKET"])
    record = Env(cwd=team.repo).store.agent("w1")
    assert record is not None and path.parent.name == record.spec["socket_key"] and path.is_socket()
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    # Its relay never opens the state: a state folder that does not exist changes nothing.
    r = team.run("w1", "note", "hello from w1", set={"EXO_STATE_DIR": "/nonexistent/exo"})
    assert r["rc"] == 0, r
    assert notes_to_root(team.repo) == [("w1", "hello from w1")]
    r = team.run("w1", "status", "--json", cwd="/")  # a shell elsewhere acts from the agent's checkout
    assert r["rc"] == 0 and json.loads(r["stdout"])["agent"]["id"] == "w1", r
    # and the Env of a relay refuses the store outright (no path around the broker)
    env = Env(cwd=team.repo, environ={**os.environ, "EXO_SOCKET": str(path)})
    with pytest.raises(ExoError, match="through its broker"):
        env.store  # noqa: B018


def test_the_peer_must_be_the_agent_or_carry_its_proof(team: Team) -> None:
    team.spawn("w1")
    team.spawn("w2")
    w1, w2 = team.environ("w1"), team.environ("w2")
    # a process outside w1's tree without a proof: refused, and said so in the broker's log
    answer = raw(team, "w1", "call", proof=None, op="", environ={})
    assert not answer["ok"] and answer["error"]["name"] == "StateError", answer
    assert "not w1 nor one of its processes" in answer["error"]["message"]
    # another agent's proof on w1's socket: refused too
    answer = raw(team, "w1", "call", proof=w2["EXO_AGENT_PROOF"], op="", environ={})
    assert not answer["ok"] and answer["error"]["name"] == "StateError", answer
    # w1's own proof: it is w1
    answer = raw(team, "w1", "call", proof=w1["EXO_AGENT_PROOF"], op="", environ={})
    assert answer["ok"] and answer["agent"] == "w1" and answer["role"] == "dev", answer
    # a process of w1's own tree needs no proof: its ancestry proves it
    r = team.run("w1", "note", "by ancestry", unset=("EXO_AGENT_PROOF",))
    assert r["rc"] == 0, r
    assert ("w1", "by ancestry") in notes_to_root(team.repo)
    log = (Env(cwd=team.repo).state_dir / "broker.log").read_text()
    assert "refused a 'call' connection on w1's socket" in log
    assert w1["EXO_AGENT_PROOF"] not in log and w2["EXO_AGENT_PROOF"] not in log


def test_what_a_request_claims_changes_nothing(team: Team) -> None:
    team.spawn("w1")
    team.spawn("w2")
    proof = team.environ("w1")["EXO_AGENT_PROOF"]
    claims = {"EXO_AGENT": "root", "EXO_ROLE": "tl", "EXO_STATE_DIR": "/tmp", "EXO_PARENT": "none", "GIT_DIR": "/"}
    answer = raw(team, "w1", "call", proof=proof, op="kill", args={"agent": "w2"}, environ=claims, cwd=str(team.repo))
    assert not answer["ok"] and "dev role cannot" in answer["error"]["message"], answer
    assert Env(cwd=team.repo).store.agent("w2").live  # type: ignore[union-attr]
    # the same through the agent's real relay, with every marker it could set
    r = team.run("w1", "kill", "w2", "--json", set={"EXO_AGENT": "w2", "EXO_ROLE": "tl"})
    assert r["rc"] == 5 and "dev role cannot" in r["stdout"], r


# --------------------------------------------------------------------------- the confused deputy


def test_paths_outside_the_agents_folders_are_refused(team: Team, tmp_path: Path) -> None:
    outside = team.results / "outside"  # a folder the sandboxed agent sees (else -C fails before exo looks)
    outside.mkdir()
    canary = outside / "canary.txt"
    canary.write_text("CANARY-7f3a the text of a file no agent may make exo read\n")
    team.spawn("lead", "--subtree")
    proof = team.environ("lead")["EXO_AGENT_PROOF"]
    # --prompt-file naming the canary, sent as a path (a relay reads files itself and sends text)
    answer = raw(team, "lead", "call", proof=proof, op="spawn", environ={}, cwd=str(team.repo),
                 args={"worker": ["c1"], "prompt_file": str(canary), "agent": "custom", "mux": "headless"})
    assert not answer["ok"] and answer["error"]["name"] == "InvalidInput", answer
    assert "prompt_file" in answer["error"]["message"] and "outside lead's own folders" in answer["error"]["message"]
    for param in ("repo", "demo_script"):
        answer = raw(team, "lead", "call", proof=proof, op="spawn", environ={}, cwd=str(team.repo),
                     args={"worker": ["c2"], "prompt": ["x"], param: str(outside), "agent": "custom"})
        assert not answer["ok"] and answer["error"]["name"] == "InvalidInput", (param, answer)
    # a hook payload whose transcript_path names it (Gemini's failed turn would quote the file)
    payload = json.dumps({"prompt_response": "[no response text]", "transcript_path": str(canary)})
    canary.write_text(json.dumps({"type": "error", "content": "CANARY-7f3a"}) + "\n")
    answer = raw(team, "lead", "hook", proof=proof, event="stop", cli="gemini", payload=payload, environ={})
    assert not answer["ok"] and answer["error"]["name"] == "InvalidInput", answer
    assert "transcript_path" in answer["error"]["message"]
    # the agent's own hook fails open (neutral answer, one warning line), nothing read
    r = team.run("lead", "hook", "stop", "--cli", "gemini", stdin=payload)
    assert r["rc"] == 0 and r["stdout"].strip() == "{}", r
    assert r["stderr"].count("\n") == 1 and "transcript_path" in r["stderr"], r
    assert "CANARY-7f3a" not in state_text(Env(cwd=team.repo).store)
    assert not any(a.id.startswith("c") for a in Env(cwd=team.repo).store.agents())
    # -C outside the agent's folders is refused; its own checkout is fine
    r = team.run("lead", "-C", str(outside), "status", "--json")
    assert r["rc"] == 4 and "outside lead's own folders" in r["stdout"], r
    # a prompt file of the agent's own, read by its relay: fine
    record = Env(cwd=team.repo).store.agent("lead")
    assert record is not None and record.worktree
    (Path(record.worktree) / "task.txt").write_text("the child's task\n")
    r = team.run("lead", "spawn", "--worker", "c3", "--prompt-file", "task.txt", "--agent", "custom", "--mux",
                 "headless", "--json", cwd=record.worktree)
    assert r["rc"] == 0, r
    child = Env(cwd=team.repo).store.agent("c3")
    assert child is not None and child.parent == "lead" and child.task == "the child's task\n"


# --------------------------------------------------------------------------- when the broker cannot be reached


def test_hooks_fail_open_and_calls_exit_7_never_as_the_human(repo: Path, tmp_path: Path) -> None:
    from conftest import run_exo

    Env(cwd=repo).store.kv_set("test", "state")
    dead = tmp_path / "rt" / "s" / "0123456789ab" / "sock"
    environ = {"EXO_SOCKET": str(dead), "EXO_STATE_DIR": str(tmp_path / "no-state"), "EXO_AGENT": "w1"}
    r = run_exo("hook", "stop", "--cli", "claude", cwd=repo, env=environ, input="{}")
    assert r.returncode == 0 and r.stdout.strip() == "{}", r
    assert r.stderr.count("\n") == 1 and "(exo ignored this hook)" in r.stderr, r.stderr
    r = run_exo("note", "hi", cwd=repo, env=environ)
    assert r.returncode == 7, r
    assert "broker does not answer" in r.stderr and "Hint:" in r.stderr
    assert notes_to_root(repo) == []  # nothing acted as the human
    r = run_exo("mcp", cwd=repo, env=environ, input="")
    assert r.returncode == 7 and "broker does not answer" in r.stderr, r


def test_a_killed_broker_is_started_again_by_the_agents_next_call(team: Team) -> None:
    team.spawn("w1")
    first = adapter.ping(ops.paths(Env(cwd=team.repo)), __version__)
    assert first is not None
    os.kill(first["pid"], signal.SIGKILL)
    r = team.run("w1", "note", "after the kill")
    assert r["rc"] == 0, r
    assert ("w1", "after the kill") in notes_to_root(team.repo)
    second = adapter.ping(ops.paths(Env(cwd=team.repo)), __version__)
    assert second is not None and second["pid"] != first["pid"] and second["agents"] == 1


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"], indirect=True)
def test_a_wait_the_broker_died_in_resumes_without_loss_or_duplicate(team: Team) -> None:
    """kill -9 of the broker after `wait` took the message and before it answered: the relay starts it
    again and sends the wait again under the same key; it gets that message, once."""
    team.spawn("lead", "--subtree")
    env = Env(cwd=team.repo)
    paths = ops.paths(env)
    adapter.stop(paths, __version__)
    broken = {**adapter.broker_environ(os.environ, str(env.state_dir)), "EXO_FAULT": "wait.taken"}
    adapter.ensure(paths, argv=ops.serve_argv(env), environ=broken, version=__version__)
    faulty = adapter.ping(paths, __version__)
    assert faulty is not None
    assert Exo(team.repo)("send", "lead", "the one message").exit_code == 0
    r = team.run("lead", "wait", "--json", "--timeout", "60")
    assert r["rc"] == 0, r
    got = [e["message"] for e in json.loads(r["stdout"])["results"] if e["kind"] != "event"]
    assert got == ["the one message"], r
    assert not any(p == faulty["pid"] for p in brokers_of(team.repo))  # that broker really died
    r = team.run("lead", "wait", "--json", "--timeout", "0")
    assert r["rc"] == 0 and [e for e in json.loads(r["stdout"])["results"] if e["kind"] != "event"] == [], r


# --------------------------------------------------------------------------- MCP through the broker


def _mcp_params(environ: dict[str, str], cwd: str, *args: str) -> Any:
    from mcp import StdioServerParameters

    return StdioServerParameters(command=EXO[0], args=[*EXO[1:], "mcp", *args], env=environ, cwd=cwd)


def test_the_mcp_session_is_the_brokers_with_the_same_tools(team: Team) -> None:
    from mcp import Client

    team.spawn("w1")
    environ = {**os.environ, **team.environ("w1")}
    record = Env(cwd=team.repo).store.agent("w1")
    assert record is not None

    async def go() -> tuple[list[dict[str, Any]], Any]:
        async with Client(_mcp_params(environ, str(record.worktree))) as c:
            listed = await c.list_tools()
            tools = listed.model_dump(mode="json", by_alias=True, exclude_none=True)["tools"]
            result = await c.call_tool("note", {"message": "over MCP"})
            return tools, result

    tools, result = anyio.run(go)
    snapshot = json.loads((ROOT / "tests" / "snapshots" / "list_tools.dev.json").read_text())
    assert {"tools": tools} == snapshot  # the relayed session serves exactly `exo mcp`'s dev tools
    assert not result.is_error
    assert ("w1", "over MCP") in notes_to_root(team.repo)


def test_the_relay_imports_no_sdk_and_opens_no_state(team: Team, tmp_path: Path) -> None:
    team.spawn("w1")
    mark = team.results / "modules.json"  # where the sandboxed agent may write
    probe = ("import json, runpy, sys\nsys.argv = ['exo', 'mcp']\ntry:\n    runpy.run_module('exo_cli', "
             "run_name='__main__')\nfinally:\n    json.dump(sorted(m for m in sys.modules if m.split('.')[0] in "
             f"('mcp', 'sqlite3', '_sqlite3', 'psycopg', 'click')), open({str(mark)!r}, 'w'))\n")
    r = team.run("w1", argv=[sys.executable, "-c", probe], stdin="")
    assert r["rc"] == 0, r
    assert json.loads(mark.read_text()) == []


def test_a_cancelled_tool_call_reaches_the_broker(team: Team) -> None:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    team.spawn("w1")
    environ = {**os.environ, **team.environ("w1")}

    def status() -> str:
        rec = Env(cwd=team.repo).store.agent("w1")
        return rec.status if rec is not None else ""

    async def go() -> None:
        async with stdio_client(_mcp_params(environ, str(team.repo))) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(s.call_tool, "question", {"message": "may I?"})
                    with anyio.fail_after(60):
                        while status() != "asking":
                            await anyio.sleep(0.05)
                    scope.cancel()
            assert scope.cancelled_caught
            with anyio.fail_after(60):  # the question op in the broker saw the cancellation and ended
                while status() == "asking":
                    await anyio.sleep(0.05)

    anyio.run(go)


def test_an_mcp_session_survives_a_broker_killed_mid_call(team: Team) -> None:
    from mcp import Client

    team.spawn("lead", "--subtree")
    environ = {**os.environ, **team.environ("lead")}
    paths = ops.paths(Env(cwd=team.repo))

    async def go() -> Any:
        async with Client(_mcp_params(environ, str(team.repo))) as c:
            async with anyio.create_task_group() as tg:
                box: dict[str, Any] = {}

                async def waiting() -> None:
                    box["wait"] = await c.call_tool("wait", {"timeout": 90})

                tg.start_soon(waiting)
                await anyio.sleep(1.0)  # the wait is in the broker (a message now would answer it at once)
                info = await anyio.to_thread.run_sync(adapter.ping, paths, __version__)
                os.kill(info["pid"], signal.SIGKILL)
                with anyio.fail_after(60):
                    while True:  # the relay starts it again and sends the wait again
                        info2 = await anyio.to_thread.run_sync(adapter.ping, paths, __version__)
                        if info2 is not None and info2["pid"] != info["pid"] and info2["connections"]:
                            break
                        await anyio.sleep(0.1)
                assert Exo(team.repo)("send", "lead", "sent after the kill").exit_code == 0
            note = await c.call_tool("note", {"message": "the session still works"})
            return box["wait"], note

    waited, note = anyio.run(go)
    assert not waited.is_error and not note.is_error
    got = [e["message"] for e in waited.structured_content["results"] if e["kind"] != "event"]
    assert got == ["sent after the kill"]
    assert ("lead", "the session still works") in notes_to_root(team.repo)


# --------------------------------------------------------------------------- continuity


def test_without_a_socket_an_agent_keeps_the_direct_path(team: Team) -> None:
    """An agent of an exo before the broker: no socket, unsandboxed (a sandbox hides the state it would open)."""
    team.spawn("old", "--no-sandbox", env={"EXO_BROKER": "0"})
    environ = team.environ("old")
    assert "EXO_SOCKET" not in environ and environ["EXO_AGENT_PROOF"]
    record = Env(cwd=team.repo).store.agent("old")
    assert record is not None and "socket_key" not in record.spec
    r = team.run("old", "note", "the direct way")
    assert r["rc"] == 0, r
    assert ("old", "the direct way") in notes_to_root(team.repo)


def test_the_socket_goes_once_the_agents_process_is_gone(team: Team) -> None:
    team.spawn("w1")
    path = Path(team.environ("w1")["EXO_SOCKET"])
    assert Exo(team.repo)("kill", "w1").exit_code == 0
    wait_for(lambda: not path.exists() and not path.parent.exists(), what="w1's socket to go")
    wait_for(lambda: not brokers_of(team.repo), what="the broker to leave after its last agent")


# --------------------------------------------------------------------------- the human's exo and doctor


def _kill_broker(repo: Path) -> int:
    info = adapter.ping(ops.paths(Env(cwd=repo)), __version__)
    assert info is not None
    os.kill(info["pid"], signal.SIGKILL)
    wait_for(lambda: info["pid"] not in brokers_of(repo), what="the killed broker to be gone")
    return int(info["pid"])


def test_headless_runners_start_a_killed_broker_again_with_no_command_of_anyone(team: Team) -> None:
    """Sandboxed agents cannot start a broker: their runners (outside) do, woken by the broker's life lock
    dropping. Two agents' runners race; exactly one broker comes back, and the agents' calls work."""
    team.spawn("w1")
    team.spawn("w2")
    old = _kill_broker(team.repo)
    p = ops.paths(Env(cwd=team.repo))
    wait_for(lambda: (adapter.ping(p, __version__) or {}).get("agents") == 2, 120, "a runner to start the broker")
    info = adapter.ping(p, __version__)
    assert info is not None and info["pid"] != old
    assert brokers_of(team.repo) == [info["pid"]]
    logs = "".join((Env(cwd=team.repo).state_dir / "logs" / f"{n}.log").read_text(errors="replace")
                   for n in ("w1", "w2"))
    assert "exo's broker is gone; starting it again" in logs
    assert "cannot start" not in logs, logs
    r = team.run("w2", "note", "after the restart")
    assert r["rc"] == 0, r
    # the runners wait on the new broker's life lock again: a second kill is survived the same way
    old = _kill_broker(team.repo)
    wait_for(lambda: (adapter.ping(p, __version__) or {}).get("agents") == 2, 120, "a runner to start it again")
    assert len(brokers_of(team.repo)) == 1


def test_the_humans_look_at_the_team_starts_a_broker_its_agents_lost(team: Team) -> None:
    team.spawn("w1")
    old = _kill_broker(team.repo)
    assert team.exo("agents", "--json").exit_code == 0
    info = adapter.ping(ops.paths(Env(cwd=team.repo)), __version__)
    assert info is not None and info["pid"] != old and info["agents"] == 1


def test_doctor_shows_the_broker_and_repairs_its_leftovers(team: Team) -> None:
    import socket as socketmod

    team.spawn("w1")
    env = Env(cwd=team.repo)
    p = ops.paths(env)
    _kill_broker(team.repo)
    gone = p.sockets / "0123456789ab"  # the socket of an agent that is gone, left by the killed broker
    gone.mkdir(mode=0o700)
    s = socketmod.socket(socketmod.AF_UNIX, socketmod.SOCK_STREAM)
    s.bind(str(gone / "sock"))
    s.close()
    r = team.exo("doctor", "--dry-run", "--json")
    found = {(x["kind"], x["subject"]) for x in r.json()["problems"]}  # type: ignore[index]
    assert {("broker-down", "broker"), ("stale-socket", str(gone))} <= found, r.stdout
    assert r.exit_code == 5 and r.json()["broker"]["running"] is False  # type: ignore[index]
    r = team.exo("doctor", "--json")
    doc = r.json()
    assert all(x["repaired"] for x in doc["problems"] if x["kind"] in ("broker-down", "stale-socket")), doc  # type: ignore[index]
    assert not gone.exists()
    assert doc["broker"]["running"] is True  # type: ignore[index]
    assert [(s["agent"], s["present"]) for s in doc["broker"]["sockets"]] == [("w1", True)]  # type: ignore[index]
    r = team.run("w1", "note", "after doctor")
    assert r["rc"] == 0, r
    assert any(line.startswith("broker: running (pid ") for line in team.exo("doctor").stdout.splitlines()[-2:])
