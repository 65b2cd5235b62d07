"""Helpers for the Gemini CLI and Codex CLI lifecycle tests: a repo, exo as the root TL, observations.

The flow each test drives (issue 8, item 3): the test process is the root team lead; it runs
``exo spawn --worker w1 --agent <cli> --skip-permissions --prompt ...`` as a real subprocess whose
environment is the agent's (HOME, TMPDIR, the model server's base URLs and the egress trap), since
exo hands the spawning call's environment to the agent. exo starts the real CLI in its own private
tmux server (socket ``exo-<repo_id>``, killed by ``Lifecycle.close``). The scripted model server
drives the agent; the test asserts on exo's state (read straight from the SQLite file), on exo's
command output, and on the request log.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.agents import AgentHome
from e2e.model_server import Entry, ModelServer

ROOT = Path(__file__).resolve().parents[2]
EXO = [sys.executable, "-m", "exo_cli"]
GIT_ID = {"GIT_AUTHOR_NAME": "E2E TL", "GIT_AUTHOR_EMAIL": "tl@example.invalid",
          "GIT_COMMITTER_NAME": "E2E TL", "GIT_COMMITTER_EMAIL": "tl@example.invalid"}


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(x.decode("utf-8", "replace").split("=", 1) for x in raw.split(b"\0") if b"=" in x)


def _descends(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            return False
        pid = int(stat[stat.rfind(b")") + 2:].split()[1])
    return False


def assert_mcp_server_has_the_agents_proof(agent_pid: int) -> None:
    """exo's MCP server, started by the agent CLI (a descendant of its pane process), reaches exo as the agent.

    An agent spawned with a socket to the team broker (``EXO_SOCKET``): every such server is a relay
    on that very socket, holding no MCP SDK (no ``pydantic_core`` mapped: the broker serves the
    session), and carries no proof but the agent's own (Codex passes none: the socket and its
    ancestry prove it). Without a socket: the server has the agent's own EXO_AGENT_PROOF, proven
    even where ancestry could not be read.
    """
    agent = _environ(agent_pid)
    servers: list[tuple[int, dict[str, str]]] = []
    for name in Path("/proc").iterdir():
        if not name.name.isdigit():
            continue
        try:
            cmd = (name / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mcp" in cmd and b"--role" in cmd and _descends(int(name.name), agent_pid):
            servers.append((int(name.name), _environ(int(name.name))))
    assert servers, "no exo MCP server runs under the agent"
    socket = agent.get("EXO_SOCKET")
    if socket:
        assert all(env.get("EXO_SOCKET") == socket for _, env in servers), [e.get("EXO_SOCKET") for _, e in servers]
        assert all(env.get("EXO_AGENT_PROOF") in (None, agent["EXO_AGENT_PROOF"]) for _, env in servers)
        sdk = [pid for pid, _ in servers if "_pydantic_core" in Path(f"/proc/{pid}/maps").read_text()]
        assert not sdk, f"exo MCP servers {sdk} hold the SDK: not relays to the broker"
        return
    proof = agent["EXO_AGENT_PROOF"]
    assert all(env.get("EXO_AGENT_PROOF") == proof for _, env in servers), [e.get("EXO_AGENT_PROOF") for _, e in servers]


def make_repo(path: Path) -> Path:
    """Create a git repository on main with one commit (README.md) at path; return it."""
    path.mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(path), "GIT_CONFIG_NOSYSTEM": "1", **GIT_ID}
    (path / "README.md").write_text("# e2e\n")
    for args in (["init", "-q", "-b", "main"], ["add", "README.md"], ["commit", "-q", "-m", "initial"]):
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True, env=env)
    return path


@dataclass
class Lifecycle:
    """One repository driven by exo as the root TL, with one agent CLI home and one model server."""

    repo: Path
    home: AgentHome
    server: ModelServer
    env: dict[str, str]
    started: float = field(default_factory=time.monotonic)
    marks: dict[str, float] = field(default_factory=dict)

    # -- exo -------------------------------------------------------------------------------------

    def exo(self, *args: str, check: bool = True, timeout: float = 60,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``exo ARGS`` from the repository as the root TL; fail with its output unless check=False."""
        proc = subprocess.run([*EXO, *args], cwd=self.repo, env=self.env, input=input, capture_output=True,
                              text=True, timeout=timeout, stdin=None if input is not None else subprocess.DEVNULL)
        if check:
            assert proc.returncode == 0, (f"exo {' '.join(args)} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
                                          f"stderr:\n{proc.stderr}\n{self.describe()}")
        return proc

    def exo_json(self, *args: str, timeout: float = 60) -> Any:
        """Run ``exo ARGS --json`` and return the parsed output."""
        return json.loads(self.exo(*args, "--json", timeout=timeout).stdout)

    # -- state -----------------------------------------------------------------------------------

    @property
    def state_dir(self) -> Path:
        """exo's state folder of this repository."""
        return self.repo / ".git" / "exo"

    @property
    def socket(self) -> str:
        """exo's private tmux socket name for this repository (``exo-<repo_id>``)."""
        from exo_cli.env import Env

        return f"exo-{Env(cwd=self.repo, environ=self.env).repo_id}"

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run a read-only query on exo's state database; rows as dicts."""
        db = self.state_dir / "state.db"
        if not db.exists():
            return []
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
        try:
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute(sql, params)]
        finally:
            conn.close()

    def agent(self, name: str) -> dict[str, Any]:
        """Return the newest agent record named name (empty dict when none)."""
        rows = self.query("SELECT * FROM agents WHERE name = ? ORDER BY created_at DESC LIMIT 1", (name,))
        return rows[0] if rows else {}

    def hook_state(self, agent_id: str) -> dict[str, Any]:
        """Return exo's per-agent hook bookkeeping (kv ``hook:<id>``)."""
        rows = self.query("SELECT value FROM kv WHERE key = ?", (f"hook:{agent_id}",))
        return json.loads(rows[0]["value"]) if rows else {}

    def events(self, agent_id: str) -> list[dict[str, Any]]:
        """Return exo's events about an agent, oldest first."""
        return self.query("SELECT kind, data FROM events WHERE agent = ? ORDER BY id", (agent_id,))

    def net_refusals(self, name: str) -> list[dict[str, Any]]:
        """The refusals exo's network proxy logged for the agent's current life (host, port, agent, reason)."""
        from exo_cli.adapters import netlog

        key = json.loads(self.agent(name).get("spec") or "{}").get("socket_key")
        assert key, f"{name} has no socket key: no proxy"
        return netlog.refusals(netlog.folder(self.state_dir), netlog.stem(key), last=1000)

    def mark(self, what: str) -> None:
        """Record when a step happened (seconds since the test began), for the timings report."""
        self.marks[what] = round(time.monotonic() - self.started, 1)

    def wait_until(self, what: str, predicate: Callable[[], Any], timeout: float = 45.0) -> Any:
        """Poll predicate until it returns a truthy value; return it, or fail describing the state."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                self.mark(what)
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.describe()}")
            time.sleep(0.2)

    def wait_status(self, name: str, status: str, timeout: float = 45.0, *,
                    since_turns: int | None = None) -> dict[str, Any]:
        """Wait until the agent has status (and, with since_turns, more turns than that); return its record."""
        def ok() -> dict[str, Any] | None:
            rec = self.agent(name)
            if rec.get("status") != status:
                return None
            if since_turns is not None and int(rec.get("turns") or 0) <= since_turns:
                return None
            return rec

        label = f"{name} {status}" + (f" after turn {since_turns + 1}" if since_turns is not None else "")
        return self.wait_until(label, ok, timeout)

    # -- tmux ------------------------------------------------------------------------------------

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run one tmux command against exo's private server."""
        from e2e.lifecycle import tmux_env

        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30,
                              env=tmux_env(self.env))

    def screen(self, name: str) -> str:
        """Return the visible text of the agent's pane ('' when it has none)."""
        pane = json.loads(self.agent(name).get("location") or "{}").get("pane")
        if not pane:
            return ""
        return self.tmux("capture-pane", "-p", "-J", "-t", pane).stdout

    def wait_screen(self, name: str, needle: str, timeout: float = 30.0) -> str:
        """Wait until needle shows in the agent's pane; return the screen."""
        return self.wait_until(f"screen {needle!r}", lambda: (s := self.screen(name)) and needle in s and s, timeout)

    # -- model log -------------------------------------------------------------------------------

    def agent_requests(self) -> list[Entry]:
        """The agent requests the model server got."""
        return self.server.agent_requests()

    def request_text(self, entry: Entry) -> str:
        """The whole body of one logged request as JSON text (for substring assertions)."""
        return json.dumps(entry.get("body"))

    def describe(self) -> str:
        """A summary of exo's state, the model log and the agent's screen, for failure messages."""
        lines = ["--- agents:"]
        for rec in self.query("SELECT id, name, status, status_reason, turns, session_id FROM agents"):
            lines.append(f"  {rec}")
        lines.append("--- messages:")
        for rec in self.query("SELECT id, kind, sender, recipient, body, delivered_at, consumed_at, state "
                              "FROM messages ORDER BY id"):
            lines.append(f"  {rec}")
        lines.append("--- model log: " + ", ".join(f"{e['kind']}:{e.get('turn')}" for e in self.server.entries()))
        for rec in self.query("SELECT name FROM agents"):
            lines.append(f"--- screen of {rec['name']}:\n{self.screen(rec['name'])}")
        return "\n".join(lines)

    # -- end ---------------------------------------------------------------------------------------

    def close(self) -> None:
        """Kill exo's tmux server for this repository and remove exo's runtime folder."""
        from exo_cli.env import Env

        with contextlib.suppress(Exception):
            self.tmux("kill-server")
        with contextlib.suppress(Exception):
            shutil.rmtree(Env(cwd=self.repo, environ=self.env).runtime_dir, ignore_errors=True)


def lifecycle_env(home: AgentHome, drop: Sequence[str] = (), extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return the env of the root TL's exo calls: the agent's env (trap on) plus exo's own needs.

    PYTHONPATH puts this checkout's exo_cli first (the hooks and MCP server exo writes for the agent
    run this interpreter, whose ``exo`` script would otherwise import the installed copy). ``drop``
    removes variables so that exo's own settings are what the CLI sees (e.g. Gemini's trust).
    """
    env = home.env({"PYTHONPATH": str(ROOT), "NO_COLOR": "1", "GIT_CONFIG_GLOBAL": str(home.home / ".gitconfig"),
                    "EXO_CONFIG_DIR": str(home.home / ".config" / "exo"), "XDG_CONFIG_HOME": str(home.home / ".config"),
                    **(extra or {})})
    for name in drop:
        env.pop(name, None)
    return env


def assert_no_egress(server: ModelServer) -> None:
    """Every proxied attempt was refused; no request named a host other than 127.0.0.1."""
    assert all(e["status"] == 403 for e in server.entries("proxy"))
    for entry in server.entries():
        if entry["kind"] != "proxy":
            assert entry["headers"].get("host", "127.0.0.1").startswith("127.0.0.1"), entry


def git(repo: Path, *args: str) -> str:
    """Run git in repo; return stdout stripped."""
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(repo), "GIT_CONFIG_NOSYSTEM": "1", **GIT_ID}
                          ).stdout.strip()


# -- the sandbox -------------------------------------------------------------------------------


def sandbox_on(repo: Path, more: str = "") -> None:
    """Run the repository's agents sandboxed whatever exo's default: ``[sandbox] mode = "on"`` in the user's own
    local configuration (``.exo/config.toml``, untracked, trusted as the user's), then ``more`` (other tables)."""
    (repo / ".exo").mkdir(exist_ok=True)
    (repo / ".exo" / "config.toml").write_text('[sandbox]\nmode = "on"\n' + more)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (depth first)."""
    out, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def _cmdline(pid: int) -> list[str]:
    try:
        return [a.decode("utf-8", "replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def _netns(pid: int | str) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def assert_through_the_proxy(agent_pid: int, server: ModelServer, cli: str, exo_json: Callable[..., Any],
                             agent: str = "w1") -> None:
    """The sandboxed agent's CLI reached the scripted model only through exo's allow-list proxy.

    The CLI runs in a network namespace of its own (not the host's: its 127.0.0.1 is not the one the
    model server listens on), beside exo's bridge, whose tunnel for the model server's port is a
    ``CONNECT`` through the proxy on the broker's side; the model server got its requests, and the
    broker's proxy counts the connections it carried for the agent (``exo broker status``).
    """
    port = server.port
    procs = {pid: _cmdline(pid) for pid in descendants(agent_pid)}
    bridges = [pid for pid, cmd in procs.items() if any(a.endswith("netbridge.py") for a in cmd)]
    assert bridges, f"no exo network bridge under the agent: {procs}"
    tunnel = f"{port}=127.0.0.1:{port}"
    assert any(tunnel in procs[b] for b in bridges), [procs[b] for b in bridges]
    from exo_cli.adapters.netproxy import INSIDE

    assert all(f"{INSIDE}/sock" in procs[b] for b in bridges)  # its one way out: the proxy's socket
    clis = [pid for pid, cmd in procs.items() if cmd and any(Path(a).name == cli for a in cmd[:2])
            and not any(a.endswith("netbridge.py") for a in cmd)]
    assert clis, f"no {cli} process under the agent: {procs}"
    mine = _netns("self")
    for pid in [*clis, *bridges]:
        assert _netns(pid) != mine, f"{procs[pid]} shares the host's network"
        assert _netns(pid) == _netns(bridges[0])
    assert server.agent_requests(), "the model server got no request"
    carried = {s["agent"]: s["net_carried"] for s in exo_json("broker", "status")["sockets"]}
    assert (carried.get(agent) or 0) >= 1, carried
