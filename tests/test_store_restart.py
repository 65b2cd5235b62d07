"""The PostgreSQL store under fault: a server restarted under `exo wait`, `exo mcp` and hooks, a connection
cut during COMMIT, and a hundred exo processes against a server with 20 connection slots.

Each test runs against a private cluster of its own module (restarting the session's shared
cluster would disturb the other tests): real `pg_ctl restart` / stop+start, real exo processes,
the real MCP SDK client. Nothing asserts on time: processes are waited for with generous
deadlines, and the few pauses only give a restart room to happen where the report saw it.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import EXO, ROOT, agent_vars, run_exo
from exo_cli.env import Env
from exo_cli.records import Agent


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    from pg_cluster import Cluster, pg_bin

    bindir = pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed")
    c = Cluster(bindir).start()
    yield c
    c.stop()


@pytest.fixture
def team(cluster: Any, repo: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A repository whose state is on the restartable cluster, with one idle child agent ``w1``."""
    name = f"r{os.getpid()}_{int(time.monotonic() * 1000) % 10**8}"
    cluster.psql(f"CREATE DATABASE {name}")
    url = cluster.url(name)
    monkeypatch.setenv("EXO_STORE_URL", url)
    assert run_exo("init", cwd=repo).returncode == 0
    now = time.time()
    Env(cwd=repo).store.insert_agent(Agent(
        id="w1", name="w1", role="dev", parent="root", status="idle", backend="custom", mux="headless",
        created_at=now, updated_at=now, status_at=now, repo=str(repo)))
    return {"EXO_STORE_URL": url, **agent_vars(repo, "w1")}


def listening(cluster: Any, n: int = 1, deadline: float = 120.0, proc: subprocess.Popen[str] | None = None) -> None:
    """Wait until ``n`` exo sessions LISTEN on the server (a waiter is in place)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the waiter ended: {proc.communicate()}")
        got = cluster.psql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'exo'"
                           " AND query LIKE 'LISTEN exo_%'")
        if int(got or 0) >= n:
            return
        time.sleep(0.05)
    raise AssertionError("no exo waiter listened on the server")


def popen_exo(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    full = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([*EXO, *args], cwd=cwd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def note(repo: Path, agent: dict[str, str], text: str) -> None:
    proc = run_exo("note", text, "--json", cwd=repo, env=agent, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def waiting(cluster: Any, repo: Path, url: str, seconds: int, then: Any) -> tuple[int | None, str, str]:
    """`exo wait --timeout SECONDS` as the human; once it listens on the server, ``then()``; how it ended."""
    waiter = popen_exo("wait", "--timeout", str(seconds), "--json", cwd=repo, env={"EXO_STORE_URL": url})
    try:
        listening(cluster, proc=waiter)
        then()
        out, err = waiter.communicate(timeout=300)
    finally:
        waiter.kill()
    return waiter.returncode, out, err


def test_wait_reconnects_after_a_restart_and_gets_the_note_posted_after_it(cluster: Any, team: dict[str, str],
                                                                           repo: Path) -> None:
    def restart_then_note() -> None:
        cluster.restart()
        time.sleep(2)  # the note comes two seconds after the restart, as in the report
        note(repo, team, "after the restart")

    code, out, err = waiting(cluster, repo, team["EXO_STORE_URL"], 300, restart_then_note)
    assert code == 0, out + err
    res = json.loads(out)
    assert [(r["name"], r["message"]) for r in res["results"]] == [("w1", "after the restart")]
    assert "Traceback" not in err


def test_wait_with_the_server_down_past_its_timeout_names_the_server(cluster: Any, team: dict[str, str],
                                                                      repo: Path) -> None:
    try:
        code, out, err = waiting(cluster, repo, team["EXO_STORE_URL"], 8, cluster.stop_server)
    finally:
        cluster.start_server()
    assert code == 7, out + err
    error = json.loads(out)["error"]
    assert error["name"] == "EnvironmentError" and error["data"]["url"] == team["EXO_STORE_URL"]
    assert team["EXO_STORE_URL"] in error["message"] and "exo kept trying" in error["message"]
    assert "Traceback" not in err and "bug" not in out + err


def test_a_long_running_mcp_server_goes_on_through_restarts(cluster: Any, team: dict[str, str],
                                                            repo: Path) -> None:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "exo_cli", "mcp"], cwd=str(repo),
                                   env={**os.environ, "PYTHONPATH": str(ROOT),
                                        "EXO_STORE_URL": team["EXO_STORE_URL"]})

    def later() -> None:  # while the wait below blocks: a restart, then a note
        listening(cluster)
        cluster.restart()
        time.sleep(2)
        note(repo, team, "posted after the second restart")

    async def go() -> None:
        async with Client(params) as c:
            first = await c.call_tool("list_agents", {})
            assert not first.is_error and first.structured_content["count"] == 1
            cluster.restart()
            for tool, args in (("list_agents", {}), ("exo_status", {}), ("send", {"to": ["w1"], "message": "hi"})):
                got = await c.call_tool(tool, args)
                assert not got.is_error, (tool, got.content)
            helper = threading.Thread(target=later)
            helper.start()
            try:
                waited = await c.call_tool("wait", {"timeout": 300})
            finally:
                await asyncio.to_thread(helper.join, 300)
            assert not waited.is_error, waited.content
            assert [r["message"] for r in waited.structured_content["results"]] == ["posted after the second restart"]
            last = await c.call_tool("list_agents", {})  # the session itself is intact
            assert not last.is_error

    asyncio.run(go())


def test_hooks_during_a_restart_fail_open_or_count_exactly_once(cluster: Any, team: dict[str, str],
                                                                repo: Path) -> None:
    """Hooks run while the server restarts: each exits 0 and either counts its tool call or says it did not."""
    outcomes: list[subprocess.CompletedProcess[str]] = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set() or len(outcomes) < 20:
            outcomes.append(run_exo("hook", "tool", "--cli", "claude", cwd=repo, env=team, input="{}", timeout=180))

    threads = [threading.Thread(target=hammer) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        while len(outcomes) < 4:
            time.sleep(0.05)
        cluster.restart()
        cluster.restart("immediate")  # a crash too: sessions cut without goodbye
    finally:
        stop.set()
        for t in threads:
            t.join(300)
    assert all(p.returncode == 0 for p in outcomes), [p.stderr for p in outcomes if p.returncode]
    assert not any("Traceback" in p.stderr or "internal error" in p.stderr for p in outcomes)
    warned = [p for p in outcomes if "warning" in p.stderr]
    for p in warned:
        assert "PostgreSQL store" in p.stderr, p.stderr  # what it says: the store, never a bug
    agent = Env(cwd=repo).store.agent("w1")
    assert agent is not None and agent.tool_calls == len(outcomes) - len(warned)


# -- a connection cut during COMMIT ------------------------------------------------------------------


class CommitCutter:
    """A Unix-socket proxy in front of the cluster (a real server behind it) that, once armed, cuts the
    client's connection at its next COMMIT: ``after`` the server answered it (the commit happened, the
    client never hears so), or ``before`` forwarding it (the transaction never commits)."""

    def __init__(self, server_sock: Path, folder: Path) -> None:
        self.server = str(server_sock / ".s.PGSQL.5432")
        self.folder = folder
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(folder / ".s.PGSQL.5432"))
        self.listener.listen(16)
        self.armed: str | None = None
        self.cut = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, db: str, user: str) -> str:
        return f"postgresql://{user}@/{db}?host={self.folder}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self.server)
            swallow = threading.Event()
            threading.Thread(target=self._up, args=(client, server, swallow), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, swallow), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, swallow: threading.Event) -> None:
        while data := _recv(client):
            if self.armed and b"COMMIT\x00" in data:
                mode, self.armed = self.armed, None
                if mode == "before":
                    _close(client, server)
                    self.cut.set()
                    return
                swallow.set()  # the server's answer to this COMMIT never reaches the client
            server.sendall(data)
        _close(client, server)

    def _down(self, server: socket.socket, client: socket.socket, swallow: threading.Event) -> None:
        while data := _recv(server):
            if swallow.is_set():
                _close(client, server)
                self.cut.set()
                return
            client.sendall(data)
        _close(client, server)

    def close(self) -> None:
        self.listener.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _close(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


@pytest.mark.parametrize("when", ["after", "before"])
def test_a_connection_cut_during_commit_is_neither_lost_nor_applied_twice(cluster: Any, tmp_path: Path,
                                                                          when: str) -> None:
    from exo_cli.adapters.store import open_store

    db = f"cut_{when}"
    cluster.psql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    cluster.psql(f"CREATE DATABASE {db}")
    proxy_dir = tmp_path / "proxy"
    proxy_dir.mkdir()
    proxy = CommitCutter(cluster.sock, proxy_dir)
    try:
        store = open_store(tmp_path, tmp_path, proxy.url(db, cluster.user))
        store.agents()  # the schema, and a connection this process has used
        proxy.armed = when
        msg_id = store.post("note", "w1", "root", "exactly once")
        assert proxy.cut.is_set()  # the cut did happen, at that COMMIT
        bodies = [m.body for m in store.messages(recipient="root")]
        assert bodies == ["exactly once"] and store.message(msg_id) is not None
    finally:
        proxy.close()


# -- a hundred processes, twenty connection slots ------------------------------------------------------


@pytest.fixture(scope="module")
def small_cluster() -> Iterator[Any]:
    from pg_cluster import Cluster, pg_bin

    bindir = pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed")
    c = Cluster(bindir).start(max_connections=20)
    yield c
    c.stop()


def _fill(cluster: Any, db: str) -> list[Any]:
    """Take every connection slot the server has left (returned, to be closed)."""
    import psycopg

    held = []
    while True:
        try:
            held.append(psycopg.connect(cluster.url(db), autocommit=True))
        except psycopg.OperationalError as exc:
            assert "too many clients" in str(exc)
            return held


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a hundred real processes on a loaded two-core machine
def test_a_hundred_exo_processes_share_twenty_connections(small_cluster: Any, repo: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    small_cluster.psql("CREATE DATABASE hundred")
    url = small_cluster.url("hundred")
    monkeypatch.setenv("EXO_STORE_URL", url)
    assert run_exo("init", cwd=repo).returncode == 0
    env = {"EXO_STORE_URL": url, "EXO_STORE_TIMEOUT": "600"}
    held = _fill(small_cluster, "hundred")  # all slots taken while the hundred start: each must wait its turn
    log = small_cluster.root / "pg" / "server.log"
    refused = log.read_text(errors="replace").count("too many clients")
    procs = [popen_exo("send", "root", f"message {i}", "--json", cwd=repo, env=env) for i in range(100)]
    try:
        end = time.monotonic() + 600
        # the slots stay taken until the server turned the hundred away (or they all gave up: the bug)
        while (log.read_text(errors="replace").count("too many clients") - refused < 100
               and any(p.poll() is None for p in procs) and time.monotonic() < end):
            time.sleep(0.1)
        for c in held:
            c.close()
        results = [(p, *p.communicate(timeout=900)) for p in procs]
    finally:
        for p in procs:
            p.kill()
    codes = [p.returncode for p, _, _ in results]
    assert set(codes) <= {0, 7}, [(p.returncode, out, err) for p, out, err in results if p.returncode not in (0, 7)]
    for p, out, err in results:
        assert "Traceback" not in err
        if p.returncode == 7:
            assert "max_connections" in json.loads(out)["error"]["message"]
    sent = sorted(json.loads(out)["sent"][0]["message_id"] for p, out, _ in results if p.returncode == 0)
    bodies = [m.body for m in Env(cwd=repo).store.messages(recipient="root")]
    assert len(bodies) == len(set(bodies)) == len(sent)  # each send stored exactly once
    assert codes.count(0) == 100  # with ten minutes of patience, every one got its turn


def test_a_server_full_past_the_timeout_is_an_environment_error_naming_the_limit(small_cluster: Any, repo: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch
                                                                                   ) -> None:
    small_cluster.psql("CREATE DATABASE full_db")
    url = small_cluster.url("full_db")
    monkeypatch.setenv("EXO_STORE_URL", url)
    assert run_exo("init", cwd=repo).returncode == 0
    held = _fill(small_cluster, "full_db")
    try:
        procs = [popen_exo("agents", "--json", cwd=repo, env={"EXO_STORE_URL": url, "EXO_STORE_TIMEOUT": "2"})
                 for _ in range(10)]
        results = [(p, *p.communicate(timeout=600)) for p in procs]
    finally:
        for c in held:
            c.close()
    for p, out, err in results:
        assert p.returncode == 7, out + err
        error = json.loads(out)["error"]
        assert error["name"] == "EnvironmentError" and error["data"]["limit"] == "max_connections"
        assert "max_connections" in error["message"] and "Traceback" not in err
