"""Codex CLI: a private ``CODEX_HOME`` per agent holding exo's configuration next to the user's.

Codex 0.169 warns in its footer when configuration comes from ``-c`` overrides ("Running without
the shared background server: command-line configuration overrides (-c...) requires embedded
mode") and when hooks run under ``--dangerously-bypass-hook-trust``. exo uses neither: each agent
gets its own ``CODEX_HOME`` (``<agent folder>/codex-home``, mode 0700) where

- ``config.toml`` is the user's own ``$CODEX_HOME/config.toml`` (edited with tomlkit, so its
  comments, order and layout stay) plus exo's keys: ``notify``, ``[mcp_servers.exo]``
  (``required = true``), the worktree's ``trust_level`` when exo created it, exo's hooks as
  ``[[hooks.<Event>]]`` tables appended after the user's own, and for each of exo's hooks a
  ``[hooks.state."<file>:<event>:<group>:<handler>"] trusted_hash`` computed the way Codex computes
  it (``trust_hash``), so they run without the review dialog. The user's own hook trust entries
  (for its ``config.toml`` and its ``hooks.json``) are moved to this folder's paths, so the
  user's trusted hooks stay trusted;
- every other entry of the user's ``CODEX_HOME`` (``auth.json``, ``sessions``, ``history.jsonl``,
  ``hooks.json``, ...) is a symlink to the user's, so the login and the session history are
  the user's own.

The user's ``$CODEX_HOME`` is never written. The folder goes away with the agent's folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exo_cli.adapters.agents.base import Backend, Launch, LaunchContext, hook_argv, hook_command
from exo_cli.config import EnvVars
from exo_cli.errors import StateError

# Codex hook event -> (exo hook event, matcher or None, timeout in seconds). Codex 0.169 clamps a
# SessionEnd timeout above 3 s to 3 s and says so in a startup warning of the TUI: ask for 3.
HOOKS: tuple[tuple[str, str, str | None, int], ...] = (
    ("SessionStart", "session-start", "startup|resume|clear", 30),
    ("UserPromptSubmit", "prompt", None, 30),
    ("Stop", "stop", None, 120),
    ("SessionEnd", "session-end", None, 3),
    ("PostToolUse", "tool", None, 10),
)
# Codex's key label of each event (``hook_event_key_label``): the middle of a hooks.state key.
EVENT_LABELS = {
    "SessionStart": "session_start",
    "UserPromptSubmit": "user_prompt_submit",
    "Stop": "stop",
    "SessionEnd": "session_end",
    "PostToolUse": "post_tool_use",
    "PreToolUse": "pre_tool_use",
}
# Events whose matcher Codex ignores (and leaves out of the trust identity).
NO_MATCHER = ("UserPromptSubmit", "Stop", "SessionEnd")

HOME_DIR = "codex-home"
CONFIG = "config.toml"

def handler(exo_event: str, timeout: int) -> dict[str, Any]:
    """One of exo's hook handlers in Codex's (Claude-shaped) format."""
    return {"type": "command", "command": hook_command(exo_event, "codex"), "timeout": timeout}


def trust_hash(event: str, matcher: str | None, command: str, timeout: int) -> str:
    """The ``trusted_hash`` Codex 0.169 records when a user trusts this hook in its review dialog.

    Codex hashes a normalized identity of the hook (``command_hook_hash``: the event's key label,
    the group's matcher where the event has matchers, and the one handler with its timeout and
    ``async``), serialized as JSON with sorted keys, with SHA-256 (``version_for_toml``). The
    end-to-end test with the real Codex checks that no review dialog appears.
    """
    identity: dict[str, Any] = {
        "event_name": EVENT_LABELS[event],
        "hooks": [{"type": "command", "command": command, "timeout": max(int(timeout), 1), "async": False}],
    }
    if matcher and event not in NO_MATCHER:
        identity["matcher"] = matcher
    data = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(data.encode("utf-8")).hexdigest()


def user_codex_home(env: Mapping[str, str], home: Path) -> Path:
    """The user's Codex folder: ``$CODEX_HOME`` or ``~/.codex``."""
    custom = env.get("CODEX_HOME")
    return Path(custom) if custom else home / ".codex"


def _read_user_config(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def config_text(user_text: str, *, user_file: Path, own_file: Path, mcp_entry: Mapping[str, Any],
                trusted_project: Path | None) -> str:
    """The agent's ``config.toml``: the user's text with exo's keys merged in (tomlkit, format kept)."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        doc = tomlkit.parse(user_text)
    except TOMLKitError as exc:
        raise StateError(f"{user_file} is not valid TOML: {exc}", hint="Fix it, then spawn again.",
                         path=str(user_file)) from exc
    doc["notify"] = hook_argv("notify", "codex")
    servers = _table(doc, "mcp_servers")
    # env_vars: Codex starts MCP servers with a reduced environment; without a socket the agent's
    # proof passes by name only (its value is never written to the config file). With one, the
    # entry names the socket and the relay needs no secret (its process descends from the agent).
    entry = {**mcp_entry}
    if EnvVars.SOCKET not in dict(mcp_entry.get("env") or {}):
        entry["env_vars"] = [EnvVars.PROOF]
    servers["exo"] = {**entry, "required": True}
    if trusted_project is not None:
        projects = _table(doc, "projects")
        projects[str(trusted_project)] = {"trust_level": "trusted"}
    hooks = _table(doc, "hooks")
    state = _table(hooks, "state")
    # The user's trusted hooks (its config.toml's and its hooks.json's, now read through this
    # folder) keep their trust: their keys name the file they come from.
    old_prefix, new_prefix = f"{user_file.parent}{os.sep}", f"{own_file.parent}{os.sep}"
    for key in list(state.keys()):
        if key.startswith(old_prefix):
            state[new_prefix + key[len(old_prefix):]] = state.pop(key)
    for event, exo_event, matcher, timeout in HOOKS:
        groups = hooks.get(event)
        if groups is None:
            groups = tomlkit.aot()
            hooks[event] = groups
        group: dict[str, Any] = {"matcher": matcher} if matcher else {}
        group["hooks"] = [handler(exo_event, timeout)]
        index = len(groups)
        groups.append(group)
        key = f"{own_file}:{EVENT_LABELS[event]}:{index}:0"
        state[key] = {"trusted_hash": trust_hash(event, matcher, hook_command(exo_event, "codex"), timeout)}
    return tomlkit.dumps(doc)


def _table(container: Any, key: str) -> Any:
    import tomlkit

    if key not in container:
        container[key] = tomlkit.table(is_super_table=True)
    value = container[key]
    if not isinstance(value, dict):
        raise StateError(f"Codex config key {key!r} is not a table", key=key)
    return value


def make_home(ctx: LaunchContext, mcp_entry: Mapping[str, Any]) -> tuple[Path, Path]:
    """Create the agent's private ``CODEX_HOME``; return (its folder, its config.toml)."""
    from exo_cli.adapters.agents.base import write_private
    from exo_cli.adapters.files import ensure_private_dir

    user_home = user_codex_home(ctx.env, ctx.home)
    own = ensure_private_dir(ctx.agent_dir / HOME_DIR, parents=True)
    own_file = own / CONFIG
    text = config_text(_read_user_config(user_home / CONFIG), user_file=user_home / CONFIG, own_file=own_file,
                       mcp_entry=mcp_entry, trusted_project=ctx.worktree if ctx.created_worktree else None)
    write_private(own_file, text)
    try:
        entries = sorted(os.listdir(user_home))
    except OSError:
        entries = []
    for name in entries:
        if name == CONFIG:
            continue
        link = own / name
        if not link.exists() and not link.is_symlink():
            os.symlink(user_home / name, link)
    return own, own_file


def turn_error(rollout_path: str) -> tuple[str, float] | None:
    """(error, when) of the error that ended the session's last turn, from its rollout file; None otherwise.

    Codex 0.169 has no failure hook (no Stop, no notify after an API error): the turn ends
    with a ``task_complete`` event whose ``error.message`` says what happened, written to the
    rollout file its hooks report as ``transcript_path``. ``when`` is the event's time (epoch).
    """
    from datetime import datetime

    from exo_cli.adapters.agents.base import tail_json_lines

    found: tuple[str, float] | None = None
    for entry in tail_json_lines(rollout_path, 64 * 1024, containing=b'"task_complete"'):
        payload = entry.get("payload") if isinstance(entry, dict) else None
        if not isinstance(payload, dict) or entry.get("type") != "event_msg":
            continue
        if payload.get("type") == "task_started":
            found = None
        elif payload.get("type") == "task_complete":
            failure = payload.get("error")
            found = None
            if isinstance(failure, dict):
                try:
                    when = datetime.fromisoformat(str(entry.get("timestamp")).replace("Z", "+00:00")).timestamp()
                except ValueError:
                    when = 0.0
                found = (str(failure.get("message") or failure), when)
    return found


class CodexBackend(Backend):
    """Codex CLI (``codex``); a turn ends with its Stop hook and ``notify`` (agent-turn-complete)."""

    name = "codex"
    binary = "codex"

    def prepare(self, ctx: LaunchContext, identity_env: Mapping[str, str]) -> Launch:
        """Write the agent's private CODEX_HOME and return the ``codex`` launch (no ``-c``, no trust bypass)."""
        self.no_resume(ctx)
        env = self.base_env(ctx, identity_env)
        own, own_file = make_home(ctx, self.mcp_server(ctx, env))
        env["CODEX_HOME"] = str(own)
        binary = self.binary or "codex"
        perm = ["--dangerously-bypass-approvals-and-sandbox"] if ctx.skip_permissions else []
        launch = Launch(argv=[], env=env, cwd=str(ctx.worktree), files=[str(own_file)])
        if ctx.headless:
            # `codex exec`, one turn per process (stdin closed by the runner); each message
            # continues the thread with `codex exec resume <thread_id>`, the id read from the
            # first turn's `thread.started` event.
            head = [binary, "exec", "--json", *perm, *ctx.extra_args]
            launch.argv = [*head, "--", ctx.prompt or "{message}"]
            launch.channel = {"mode": "resume", "session_from": "codex-json", "wait_first": not ctx.prompt,
                              "resume": [*head, "resume", "{session}", "--", "{message}"]}
            return launch
        launch.argv = [binary, *perm, *ctx.extra_args, *(["--", ctx.prompt] if ctx.prompt else [])]
        return launch
