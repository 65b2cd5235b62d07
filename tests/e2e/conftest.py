"""Fixtures for driving the real agent CLIs against the scripted model server (see README.md here)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from e2e.agents import AgentHome, Tmux, agent_env, cli_paths, make_agent_home, missing_reason
from e2e.model_server import ModelServer


@pytest.fixture
def clis() -> dict[str, Path]:
    """Return the paths of claude, gemini and codex; skip naming what is missing when not installed."""
    reason = missing_reason(("claude", "gemini", "codex"))
    if reason:
        pytest.skip(reason)
    return {name: path for name, path in cli_paths().items() if path is not None}


@pytest.fixture
def require_cli() -> Callable[[str], Path]:
    """Return a function that yields one CLI's path or skips the test naming why it is missing."""

    def need(name: str) -> Path:
        reason = missing_reason((name,))
        if reason:
            pytest.skip(reason)
        path = cli_paths()[name]
        assert path is not None
        return path

    return need


@pytest.fixture
def model_server(tmp_path: Path) -> Iterator[ModelServer]:
    """A scripted model server on 127.0.0.1 (port 0), logging to tmp_path/model-log.jsonl."""
    server = ModelServer(tmp_path / "model-log.jsonl").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def agent_home(tmp_path: Path, model_server: ModelServer) -> Callable[..., AgentHome]:
    """Return make(cli, trusted=(), mcp_servers=None, notify=None) -> a fresh AgentHome for that CLI.

    The home holds the pre-written files that pre-empt every dialog; ``trusted`` are project folders
    (Claude trust / Codex trust_level); ``mcp_servers`` go into the CLI's own config format.
    """

    def make(cli: str, trusted: Sequence[Path] = (), mcp_servers: Mapping[str, Any] | None = None,
             notify: Sequence[str] | None = None) -> AgentHome:
        return make_agent_home(cli, tmp_path / "agents", model_server, trusted=trusted, mcp_servers=mcp_servers,
                               notify=notify)

    return make


@pytest.fixture(name="agent_env")
def agent_env_fixture() -> Callable[..., dict[str, str]]:
    """Return agent_env(home, extra=None, trap=True) -> the complete env for home's CLI."""
    return agent_env


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    """A private tmux server (own socket, no user config), killed after the test."""
    import shutil

    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    server = Tmux()
    try:
        yield server
    finally:
        server.kill()
