"""Agent backends: how to start Claude Code, Gemini CLI, Codex CLI, a custom command or the demo.

``get_backend(name)`` returns a ``Backend``; ``backend.prepare(ctx, identity_env)`` writes the
CLI's configuration (in exo's agent folder wherever the CLI allows it) and returns a ``Launch``
(argv, full env, cwd, files, undo records); ``cleanup(launch.undo)`` removes every trace again.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from exo_cli.adapters.agents.base import (
    HOOK_EVENTS,
    Backend,
    Launch,
    LaunchContext,
    cleanup,
    hook_argv,
    hook_command,
    mcp_argv,
)
from exo_cli.errors import InvalidInput
from exo_cli.records import BACKENDS


def get_backend(name: str, *, command: str | Sequence[str] | None = None, script: str | None = None) -> Backend:
    """Return the backend called ``name`` (``command`` for custom, ``script`` for demo)."""
    if name == "claude":
        from exo_cli.adapters.agents.claude import ClaudeBackend

        return ClaudeBackend()
    if name == "gemini":
        from exo_cli.adapters.agents.gemini import GeminiBackend

        return GeminiBackend()
    if name == "codex":
        from exo_cli.adapters.agents.codex import CodexBackend

        return CodexBackend()
    if name == "custom":
        from exo_cli.adapters.agents.custom import CustomBackend

        return CustomBackend(command)
    if name == "demo":
        from exo_cli.adapters.agents.demo import DemoBackend

        return DemoBackend(script)
    raise InvalidInput(f"unknown agent backend {name!r}", hint=f"Use one of: {', '.join(BACKENDS)}.", backends=list(BACKENDS))


def available(name: str, path_env: str | None, *, command: str | Sequence[str] | None = None) -> str | None:
    """Return the absolute path of the backend's program on ``path_env`` (None when missing)."""
    if name == "demo":
        return sys.executable
    if name == "custom":
        if command is None:
            return None
        from exo_cli.adapters.agents.custom import parse_template

        return shutil.which(parse_template(command)[0], path=path_env)
    if name not in BACKENDS:
        raise InvalidInput(f"unknown agent backend {name!r}", backends=list(BACKENDS))
    return shutil.which(name, path=path_env)


def transcript_roots(environ: Mapping[str, str], home: Path) -> list[Path]:
    """The folders the agent CLIs keep their transcripts in (what a hook's ``transcript_path`` names).

    Claude: ``$CLAUDE_CONFIG_DIR/projects`` or ``~/.claude/projects``; Gemini: ``~/.gemini/tmp``;
    Codex: ``$CODEX_HOME/sessions`` or ``~/.codex/sessions`` (an agent's private Codex home links
    its ``sessions`` there).
    """
    from exo_cli.adapters.agents.claude import config_dir
    from exo_cli.adapters.agents.codex import user_codex_home

    return [config_dir(environ, home) / "projects", home / ".gemini" / "tmp", user_codex_home(environ, home) / "sessions"]


__all__ = [
    "BACKENDS",
    "HOOK_EVENTS",
    "Backend",
    "Launch",
    "LaunchContext",
    "available",
    "cleanup",
    "get_backend",
    "hook_argv",
    "hook_command",
    "mcp_argv",
    "transcript_roots",
]
