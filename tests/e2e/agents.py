"""Isolated homes, environments and a private tmux server for driving the real agent CLIs.

Everything here follows tests/e2e/README.md and the CLIs' own documentation: the HOME files
that pre-empt every first-run dialog, the env that points each CLI at the scripted model server and
turns off its non-essential traffic, and the proxy env of the egress trap.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.model_server import ModelServer

E2E_DIR = Path(__file__).resolve().parent
NODE_DIR = E2E_DIR / "node"
BIN_DIR = NODE_DIR / "node_modules" / ".bin"
CLI_NAMES = ("claude", "gemini", "codex")
DUMMY_KEY = "dummy"


def cli_paths() -> dict[str, Path | None]:
    """Return each agent CLI's path under tests/e2e/node/node_modules/.bin (None when missing)."""
    return {name: (BIN_DIR / name if os.access(BIN_DIR / name, os.X_OK) else None) for name in CLI_NAMES}


def missing_reason(names: Iterable[str]) -> str | None:
    """Return why the named CLIs cannot run (missing binaries or Node), or None when they can."""
    paths = cli_paths()
    missing = [n for n in names if paths[n] is None]
    if missing:
        return (f"agent CLI(s) {', '.join(missing)} not installed in {BIN_DIR} "
                "(run tests/e2e/install.sh, which needs npm)")
    if shutil.which("node") is None and any(n in ("gemini", "codex") for n in names):
        return "node is not on PATH (the npm-installed gemini/codex launchers need it)"
    return None


@dataclass
class AgentHome:
    """One CLI's private HOME, TMPDIR and config, pointed at one model server."""

    cli: str
    home: Path
    tmpdir: Path
    server: ModelServer
    trusted: list[Path] = field(default_factory=list)

    @property
    def codex_home(self) -> Path:
        """Return $CODEX_HOME."""
        return self.home / ".codex"

    def env(self, extra: Mapping[str, str] | None = None, *, trap: bool = True) -> dict[str, str]:
        """Return the complete environment for this CLI (see agent_env)."""
        return agent_env(self, extra, trap=trap)


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def write_claude_home(home: Path, trusted: Sequence[Path] = (),
                      mcp_servers: Mapping[str, Any] | None = None) -> None:
    """Write ~/.claude.json and ~/.claude/settings.json so no dialog blocks the TUI."""
    projects = {str(p): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True} for p in trusted}
    _write_json(home / ".claude.json", {
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "customApiKeyResponses": {"approved": [DUMMY_KEY[-20:]], "rejected": []},
        "projects": projects,
        **({"mcpServers": dict(mcp_servers)} if mcp_servers else {}),
    })
    _write_json(home / ".claude" / "settings.json", {"skipDangerousModePermissionPrompt": True})


def write_gemini_home(home: Path, mcp_servers: Mapping[str, Any] | None = None) -> None:
    """Write ~/.gemini/settings.json: no telemetry or update checks, API-key auth (gateway via env)."""
    settings: dict[str, Any] = {
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "security": {"auth": {"selectedType": "gemini-api-key"}},
    }
    if mcp_servers:
        settings["mcpServers"] = dict(mcp_servers)
    _write_json(home / ".gemini" / "settings.json", settings)


def codex_config(server_url: str, trusted: Sequence[Path] = (),
                 mcp_servers: Mapping[str, Any] | None = None, notify: Sequence[str] | None = None) -> dict[str, Any]:
    """Return the $CODEX_HOME/config.toml content (as a dict) for the fake provider at server_url."""
    config: dict[str, Any] = {}
    if notify:
        config["notify"] = list(notify)
    config.update({
        "model": "fake-model",
        "model_provider": "fake",
        "approval_policy": "never",
        "sandbox_mode": "danger-full-access",
        "check_for_update_on_startup": False,
        "model_providers": {"fake": {"name": "Fake", "base_url": f"{server_url}/v1", "env_key": "FAKE_API_KEY",
                                     "wire_api": "responses"}},
        "projects": {str(p): {"trust_level": "trusted"} for p in trusted},
        "analytics": {"enabled": False},
        "features": {"plugins": False, "remote_plugin": False, "apps": False, "plugin_sharing": False,
                     "daemon_auto_start": False},
        "tui": {"show_tooltips": False},
    })
    if mcp_servers:
        # required = true makes Codex wait for the server before the first turn; an optional server still
        # starting is left out of the tool list ("omitting pending optional MCP server").
        config["mcp_servers"] = {name: {"required": True, **spec} for name, spec in mcp_servers.items()}
    return config


def write_codex_home(codex_home: Path, server_url: str, trusted: Sequence[Path] = (),
                     mcp_servers: Mapping[str, Any] | None = None, notify: Sequence[str] | None = None) -> None:
    """Write $CODEX_HOME/config.toml (top-level keys first, as Codex requires)."""
    import tomli_w

    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(tomli_w.dumps(codex_config(server_url, trusted, mcp_servers, notify)))


def make_agent_home(cli: str, root: Path, server: ModelServer, *, trusted: Sequence[Path] = (),
                    mcp_servers: Mapping[str, Any] | None = None,
                    notify: Sequence[str] | None = None) -> AgentHome:
    """Create a fresh HOME + TMPDIR under root with cli's pre-written files; return it."""
    if cli not in CLI_NAMES:
        raise ValueError(f"unknown agent CLI {cli!r}")
    home = root / f"{cli}-home"
    tmpdir = root / f"{cli}-tmp"
    home.mkdir(parents=True)
    tmpdir.mkdir(parents=True)
    trusted = [Path(p).resolve() for p in trusted]
    if cli == "claude":
        write_claude_home(home, trusted, mcp_servers)
    elif cli == "gemini":
        write_gemini_home(home, mcp_servers)
    else:
        write_codex_home(home / ".codex", server.url, trusted, mcp_servers, notify)
    (home / ".gitconfig").write_text("[user]\n\tname = E2E Agent\n\temail = e2e@example.invalid\n"
                                     "[init]\n\tdefaultBranch = main\n")
    return AgentHome(cli, home, tmpdir, server, trusted)


def agent_env(home: AgentHome, extra: Mapping[str, str] | None = None, *, trap: bool = True) -> dict[str, str]:
    """Return a complete, minimal environment (not inherited) for running home.cli against its server.

    PATH puts the pinned CLIs first, then this Python's bin folder, then the system. With trap=True
    every proxy variable points at the model server, which refuses all egress with 403.
    """
    url = home.server.url
    path = os.pathsep.join([str(BIN_DIR), str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
    env = {
        "PATH": path,
        "HOME": str(home.home),
        "TMPDIR": str(home.tmpdir),
        "LANG": "C.UTF-8",
        "TERM": "xterm-256color",
        "COLORTERM": "truecolor",
        "GIT_CONFIG_NOSYSTEM": "1",
        # Claude Code
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": DUMMY_KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL": "1",
        # wait for MCP servers before the first request; by default a slow server is "still connecting"
        # and a scripted mcp__* call fails with "No such tool available"
        "MCP_CONNECTION_NONBLOCKING": "0",
        # ... for long enough: that wait ends after MCP_CONNECT_TIMEOUT_MS (5 s by default), which a
        # Python MCP server (the mcp SDK alone takes ~1 s of CPU to import) misses on a loaded machine;
        # MCP_TIMEOUT (30 s by default) bounds each server's connection
        "MCP_CONNECT_TIMEOUT_MS": "60000",
        "MCP_TIMEOUT": "60000",
        # Gemini CLI
        "GOOGLE_GEMINI_BASE_URL": url,
        "GEMINI_API_KEY": DUMMY_KEY,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        # Codex CLI
        "CODEX_HOME": str(home.codex_home),
        "FAKE_API_KEY": DUMMY_KEY,
    }
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"
    if trap:
        env.update(home.server.proxy_env())
    if extra:
        env.update(extra)
    return env


class Tmux:
    """A private tmux server (its own -L socket name, no user config); kill() ends it."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name or f"exo-e2e-{uuid.uuid4().hex[:10]}"

    def cmd(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run one tmux command against this server."""
        return subprocess.run(["tmux", "-L", self.name, "-f", "/dev/null", *args], capture_output=True, text=True,
                              check=check, timeout=30)

    def new_session(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, session: str = "e2e",
                    width: int = 160, height: int = 45) -> str:
        """Start argv under exactly env (env -i) in a detached session; return the target pane."""
        launcher = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
        self.cmd("new-session", "-d", "-s", session, "-x", str(width), "-y", str(height), "-c", str(cwd),
                 "--", *launcher)
        self.cmd("set-option", "-t", session, "remain-on-exit", "on", check=False)
        return f"{session}:0.0"

    def capture(self, target: str = "e2e:0.0") -> str:
        """Return the visible text of a pane."""
        return self.cmd("capture-pane", "-p", "-J", "-t", target).stdout

    def send_text(self, text: str, target: str = "e2e:0.0", *, enter: bool = True, pause: float = 0.6) -> None:
        """Type text literally, then (after pause: Gemini needs it) press Enter."""
        self.cmd("send-keys", "-t", target, "-l", text)
        if enter:
            time.sleep(pause)
            self.cmd("send-keys", "-t", target, "Enter")

    def wait_for_text(self, needle: str, target: str = "e2e:0.0", timeout: float = 30.0) -> str:
        """Poll the pane until needle shows; return the screen, or raise TimeoutError with it."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.capture(target)
            if needle in screen:
                return screen
            time.sleep(0.2)
        raise TimeoutError(f"{needle!r} not on screen within {timeout}s; screen:\n{screen}")

    def kill(self) -> None:
        """Kill this tmux server (and every process in its panes)."""
        self.cmd("kill-server", check=False)
