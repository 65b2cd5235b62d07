"""Helpers for the exo lifecycle tests with the real agent CLIs (shared by the Claude, Gemini and Codex files).

A ``Team`` is one test's world: a real git repository, the agent CLI's private HOME (from
``e2e.agents``), the scripted model server, and the environment of the human at the root. That
environment is what ``exo spawn`` runs under, and exo passes it to the agent it starts, so the
agent, its hooks and its MCP server all get the test HOME, TMPDIR, the model server's URL and the
egress trap. ``PYTHONPATH`` points at this checkout so every ``exo`` the agent runs (hooks, ``exo
mcp``) is the code under test, whatever ``exo`` script sits beside the interpreter.

exo's agents run in exo's own tmux server (``tmux -L exo-<repo id>``); ``Team.close`` kills it.
``DialogWatch`` samples an agent's pane in the background and keeps every screen that showed a
first-run dialog, so a test can assert that none ever appeared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.agents import AgentHome
from e2e.model_server import Entry, ModelServer, tool_results

CHECKOUT = Path(__file__).resolve().parents[2]
"""The exo checkout under test (its ``exo_cli`` is what every exo process imports)."""

# Text of the first-run dialogs that block an unattended TUI (lower case; seen with Claude Code 2.1.197).
CLAUDE_DIALOGS = (
    "trust this folder",  # "Is this a project you created or one you trust? ... 1. Yes, I trust this folder"
    "custom api key",  # "Detected a custom API key in your environment ... Do you want to use this API key?"
    "bypass permissions mode",  # "WARNING: Claude Code running in Bypass Permissions mode ... 2. Yes, I accept"
    "enter to confirm",  # the footer of every one of these dialogs
)


def git_repo(path: Path) -> Path:
    """Create a git repository on ``main`` with one commit (README.md) at path; return it."""
    path.mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(path.parent), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_AUTHOR_NAME": "Root", "GIT_AUTHOR_EMAIL": "root@example.invalid",
           "GIT_COMMITTER_NAME": "Root", "GIT_COMMITTER_EMAIL": "root@example.invalid"}
    (path / "README.md").write_text("# e2e\n")
    for args in (["init", "-q", "-b", "main"], ["add", "README.md"], ["commit", "-q", "-m", "initial"]):
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True, env=env)
    return path


def git(cwd: Path, *args: str) -> str:
    """Run git in cwd (no user config); return its stripped stdout."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


@dataclass
class Team:
    """One lifecycle test's repository, agent HOME, model server and the root's environment."""

    repo: Path
    home: AgentHome
    server: ModelServer
    env: dict[str, str]
    log: list[tuple[float, str]] = field(default_factory=list)

    @classmethod
    def create(cls, repo: Path, home: AgentHome, extra_env: Mapping[str, str] | None = None) -> Team:
        """Build the root's environment from home (trap on) plus PYTHONPATH at this checkout."""
        env = home.env({"PYTHONPATH": str(CHECKOUT), "NO_COLOR": "1", "COLUMNS": "120",
                        **(dict(extra_env) if extra_env else {})})
        return cls(repo=repo, home=home, server=home.server, env=env)

    # -- exo as the human runs it ------------------------------------------------------------

    def exo(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run ``exo ARGS`` as a real subprocess in the repository under the root's environment."""
        start, wall = time.monotonic(), time.time()
        proc = subprocess.run([sys.executable, "-m", "exo_cli", *args], cwd=self.repo, env=self.env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        self.log.append((wall, f"exo {' '.join(args[:2])} -> exit {proc.returncode} "
                                      f"after {time.monotonic() - start:.1f}s"))
        if check and proc.returncode != 0:
            raise AssertionError(f"exo {' '.join(args)} exited {proc.returncode}\n"
                                 f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc

    def exo_json(self, *args: str, timeout: float = 60) -> Any:
        """Run ``exo ARGS --json`` (must succeed) and return the parsed output."""
        return json.loads(self.exo(*args, "--json", timeout=timeout).stdout)

    def trace(self) -> str:
        """Return the exo calls and the model requests in time order (seconds from the first)."""
        events = list(self.log) + [(e["time"], f"model {e['kind']} {e['path']} turn={e.get('turn')}")
                                   for e in self.server.entries()]
        events.sort()
        start = events[0][0] if events else 0.0
        return "\n".join(f"{t - start:7.2f}s {what}" for t, what in events)

    # -- exo's state, read in-process ---------------------------------------------------------

    def _env(self) -> Any:
        from exo_cli.env import Env

        return Env(cwd=self.repo, environ=self.env)

    @property
    def repo_id(self) -> str:
        """exo's id of this repository (its tmux socket is ``exo-<repo_id>``)."""
        return str(self._env().repo_id)

    @property
    def tmux_socket(self) -> str:
        return f"exo-{self.repo_id}"

    def agent(self, name: str) -> Any:
        """Return exo's record of agent name (an ``Agent``), or None."""
        env = self._env()
        return env.store.agent(name) if env.has_state() else None

    def wait_agent(self, name: str, ok: Callable[[Any], bool], *, timeout: float = 45,
                   what: str = "condition", watch: DialogWatch | None = None) -> Any:
        """Poll the agent's record until ok(record) holds; return it, or fail with its state and screen."""
        deadline = time.monotonic() + timeout
        rec = None
        while time.monotonic() < deadline:
            rec = self.agent(name)
            if rec is not None and ok(rec):
                return rec
            time.sleep(0.1)
        screen = self.screen(rec) if rec is not None else ""
        raise AssertionError(f"{name}: {what} not reached within {timeout}s; record status "
                             f"{getattr(rec, 'status', None)!r} ({getattr(rec, 'status_reason', None)!r})\n"
                             f"requests: {[(e['kind'], e.get('turn')) for e in self.server.entries()]}\n"
                             f"screen:\n{screen}")

    def wait_status(self, name: str, *statuses: str, timeout: float = 45) -> Any:
        """Wait until the agent's status is one of statuses."""
        return self.wait_agent(name, lambda a: a.status in statuses, timeout=timeout,
                               what=f"status in {statuses}")

    # -- the agent's pane ----------------------------------------------------------------------

    def tmux(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run one tmux command against exo's server for this repository."""
        return subprocess.run(["tmux", "-L", self.tmux_socket, *args], capture_output=True, text=True,
                              check=check, timeout=30, env=tmux_env(self.env))

    def screen(self, agent: Any) -> str:
        """Return the visible text of the agent's pane ('' when it has none)."""
        pane = (getattr(agent, "location", None) or {}).get("pane")
        if not pane:
            return ""
        return self.tmux("capture-pane", "-p", "-J", "-t", pane).stdout

    def close(self) -> None:
        """Kill exo's tmux server for this repository (and every agent in it)."""
        self.tmux("kill-server")

    # -- the model log ------------------------------------------------------------------------

    def wait_request(self, predicate: Callable[[Entry], bool], *, timeout: float = 45, what: str = "request",
                     agent: str | None = None) -> Entry:
        """Wait for a logged agent request matching predicate; fail with the log and the screen."""
        try:
            return self.server.wait_for(lambda e: e["kind"] == "agent" and predicate(e), timeout)
        except TimeoutError as exc:
            screen = self.screen(self.agent(agent)) if agent else ""
            raise AssertionError(f"no {what} within {timeout}s: {exc}\nscreen:\n{screen}") from None


def tmux_env(env: Mapping[str, str]) -> dict[str, str]:
    """This process's environment with the root's TMUX_TMPDIR, so ``tmux -L`` finds exo's server."""
    out = dict(os.environ)
    out.pop("TMUX_TMPDIR", None)
    if env.get("TMUX_TMPDIR"):
        out["TMUX_TMPDIR"] = env["TMUX_TMPDIR"]
    return out


def runtime_vars(root: Path) -> dict[str, str]:
    """A user's XDG_RUNTIME_DIR and TMUX_TMPDIR (private folders under root), which some CLIs drop for MCP servers."""
    out = {}
    for var, name in (("XDG_RUNTIME_DIR", "xdg"), ("TMUX_TMPDIR", "tt")):
        (root / name).mkdir(mode=0o700, exist_ok=True)
        out[var] = str(root / name)
    return out


def assert_mcp_waits_in_the_runtime_folder(env: Mapping[str, str], repo: Path, agent: str) -> None:
    """While the agent's MCP ``question`` call blocks, its doorbell is in the folder every exo process derives.

    The MCP server runs in whatever environment the agent CLI gives it (Codex and the MCP SDK
    drop XDG_RUNTIME_DIR); exo derives its runtime folder from the repository and uid alone.
    """
    from exo_cli.env import Env

    bell = Env(cwd=repo, environ=dict(env)).runtime_dir / "bell"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if bell.is_dir() and any(n.startswith(f"{agent}.") for n in os.listdir(bell)):
            return
        time.sleep(0.1)
    raise AssertionError(f"no doorbell of {agent}'s MCP server in {bell}: "
                         f"{sorted(os.listdir(bell)) if bell.is_dir() else 'no folder'}")


# -- the model log, by content --------------------------------------------------------------


def result_for(entry: Entry, tool_id: str) -> dict[str, Any] | None:
    """Return the tool result for tool_id carried by this request (any API), or None."""
    return next((r for r in tool_results(entry) if r["id"] == tool_id), None)


def anthropic_is_error(entry: Entry, tool_id: str) -> bool:
    """Whether the Anthropic tool_result block for tool_id says is_error."""
    for message in entry["body"].get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("tool_use_id") == tool_id:
                    return bool(block.get("is_error"))
    return False


def texts(value: Any) -> Iterable[str]:
    """Yield every string inside a JSON value (to search request bodies for exact texts)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from texts(v)


def user_texts(entry: Entry) -> list[str]:
    """Texts of the ``role: user`` text blocks of an Anthropic request (not tool results)."""
    out: list[str] = []
    for message in entry["body"].get("messages", []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return out


def assert_no_egress(server: ModelServer) -> None:
    """Every proxied attempt was refused; no request named a host other than 127.0.0.1."""
    assert all(e["status"] == 403 for e in server.entries("proxy"))
    for entry in server.entries():
        if entry["kind"] != "proxy":
            assert entry["headers"].get("host", "127.0.0.1").startswith("127.0.0.1"), entry


class DialogWatch:
    """Sample a pane in a background thread; keep every screen that shows one of ``markers``."""

    def __init__(self, team: Team, agent: str, markers: Iterable[str] = CLAUDE_DIALOGS, period: float = 0.25) -> None:
        self.team = team
        self.agent = agent
        self.markers = tuple(m.lower() for m in markers)
        self.period = period
        self.samples = 0
        self.hits: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"dialog-watch-{agent}", daemon=True)

    def __enter__(self) -> DialogWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                rec = self.team.agent(self.agent)
                screen = self.team.screen(rec) if rec is not None else ""
            except Exception:  # noqa: BLE001 - sampling is best effort (state being written)
                screen = ""
            if screen:
                self.samples += 1
                low = screen.lower()
                for marker in self.markers:
                    if marker in low:
                        self.hits.append((marker, screen))
            self._stop.wait(self.period)
