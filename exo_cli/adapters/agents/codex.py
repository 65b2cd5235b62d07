"""Codex CLI: everything through ``-c`` overrides, no file written anywhere.

``-c key=value`` lands in Codex's session-flags config layer: ``key`` is split on literal dots
(no quoting, so a path never goes into a key) and ``value`` is parsed as TOML. Tables merge
recursively into the user's config; arrays and scalars replace. So:

- ``mcp_servers.exo={command=..., args=[...], env={...}}`` adds exo's MCP server;
- ``projects={"<worktree>"={trust_level="trusted"}}`` trusts a worktree exo created (merged into
  the user's ``projects`` table for this run only; ``~/.codex/config.toml`` is never rewritten);
- ``hooks.<Event>=[{matcher=..., hooks=[{type="command", command=..., timeout=...}]}]`` declares
  exo's hooks in the session-flags layer (hook discovery is per layer, so the user's own hooks
  still run), and ``--dangerously-bypass-hook-trust`` lets them run without the review dialog;
- ``notify=[<exo>, "hook", "notify", "--cli", "codex"]`` (Codex appends the JSON payload).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from exo_cli.adapters.agents.base import Backend, Launch, LaunchContext, hook_argv, hook_command
from exo_cli.config import EnvVars

# Codex hook event -> (exo hook event, matcher or None, timeout in seconds). Codex 0.169 clamps a
# SessionEnd timeout above 3 s to 3 s and says so in a startup warning of the TUI: ask for 3.
HOOKS: tuple[tuple[str, str, str | None, int], ...] = (
    ("SessionStart", "session-start", "startup|resume|clear", 30),
    ("UserPromptSubmit", "prompt", None, 30),
    ("Stop", "stop", None, 120),
    ("SessionEnd", "session-end", None, 3),
    ("PostToolUse", "tool", None, 10),
)

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def toml_string(value: str) -> str:
    """Return ``value`` as a TOML basic string (control characters escaped, Unicode kept)."""
    out = []
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_key(key: str) -> str:
    """Return ``key`` bare when TOML allows it, quoted otherwise."""
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)  # match() would let "0\n" through


def toml_inline(value: Any) -> str:
    """Return ``value`` (str, bool, int, list, dict) as a one-line TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_inline(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{toml_key(str(k))} = {toml_inline(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def override(key: str, value: Any) -> str:
    """Return one ``-c`` argument: ``key=<TOML value>``."""
    return f"{key}={toml_inline(value)}"


def hook_groups(exo_event: str, matcher: str | None, timeout: int) -> list[dict[str, Any]]:
    """Return one event's matcher groups in Codex's (Claude-shaped) hooks format."""
    group: dict[str, Any] = {}
    if matcher:
        group["matcher"] = matcher
    group["hooks"] = [{"type": "command", "command": hook_command(exo_event, "codex"), "timeout": timeout}]
    return [group]


class CodexBackend(Backend):
    """Codex CLI (``codex``); a turn ends with its Stop hook and ``notify`` (agent-turn-complete)."""

    name = "codex"
    binary = "codex"

    def overrides(self, ctx: LaunchContext, env: Mapping[str, str]) -> list[str]:
        """Return the ``-c`` values (without the ``-c`` flags)."""
        # required: Codex otherwise omits a server that is still starting ("omitting pending
        # optional MCP server") and the agent never sees exo's tools (0.169; tests/e2e/README.md).
        # env_vars: Codex starts MCP servers with a reduced environment; the agent's proof passes
        # by name only (its value never reaches a command line).
        server = {**self.mcp_server(ctx, env), "env_vars": [EnvVars.PROOF], "required": True}
        values = [override("mcp_servers.exo", server)]
        if ctx.created_worktree:
            values.append(override("projects", {str(ctx.worktree): {"trust_level": "trusted"}}))
        values.append(override("notify", hook_argv("notify", "codex")))
        for codex_event, exo_event, matcher, timeout in HOOKS:
            values.append(override(f"hooks.{codex_event}", hook_groups(exo_event, matcher, timeout)))
        return values

    def prepare(self, ctx: LaunchContext, identity_env: Mapping[str, str]) -> Launch:
        """Return the ``codex`` launch; nothing is written to disk."""
        self.no_resume(ctx)
        env = self.base_env(ctx, identity_env)
        argv = [self.binary or "codex", "--dangerously-bypass-hook-trust"]
        if ctx.skip_permissions:
            argv.append("--dangerously-bypass-approvals-and-sandbox")
        for value in self.overrides(ctx, env):
            argv += ["-c", value]
        argv += list(ctx.extra_args)
        if ctx.prompt:
            argv += ["--", ctx.prompt]
        return Launch(argv=argv, env=env, cwd=str(ctx.worktree))
