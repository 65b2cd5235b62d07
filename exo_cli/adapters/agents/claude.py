"""Claude Code: hooks and MCP through exo's own files (--settings, --mcp-config), trust via ~/.claude.json.

Nothing is written into the worktree. The only user file exo touches is Claude's global state
file (``$CLAUDE_CONFIG_DIR/.claude.json`` or ``~/.claude.json``), and only to mark a worktree
exo created as trusted; the undo record removes exactly that again.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exo_cli.adapters.agents.base import (
    Backend,
    Launch,
    LaunchContext,
    add_json_entry,
    hook_command,
    write_private_json,
)
from exo_cli.config import EnvVars
from exo_cli.errors import InvalidInput, NotFound, UsageError

SETTINGS_FILE = "claude-settings.json"
MCP_FILE = "mcp.json"

# Claude hook event -> (exo hook event, matcher or None, timeout in seconds).
HOOKS: tuple[tuple[str, str, str | None, int], ...] = (
    ("SessionStart", "session-start", "startup|resume|clear|compact", 30),
    ("UserPromptSubmit", "prompt", None, 30),
    ("Stop", "stop", None, 120),
    # Fires instead of Stop when an API error (rate limit, auth failure, overload) ends the turn.
    ("StopFailure", "stop-failure", None, 10),
    ("SessionEnd", "session-end", None, 10),
    ("Notification", "notification", "permission_prompt", 10),
    ("PostToolUse", "tool", None, 10),
)

MCP_WAIT = 20  # seconds (EnvVars.MCP_WAIT); below the SessionStart hook's timeout (30)

# Claude Code asks "Detected a custom API key in your environment ... Do you want to use this API
# key?" when ANTHROPIC_API_KEY is set and not approved in ~/.claude.json, and approving it there
# stores the key's last 20 characters. exo instead moves the key to this variable and gives
# Claude an apiKeyHelper (in exo's own settings file) that prints it: no dialog, and neither the
# key nor any part of it is written anywhere (only the variable's name is).
KEY_VAR = "EXO_ANTHROPIC_API_KEY"
API_KEY_HELPER = f'printf %s "${KEY_VAR}"'


def hide_api_key(env: dict[str, str]) -> bool:
    """Move ``ANTHROPIC_API_KEY`` to ``EXO_ANTHROPIC_API_KEY`` in ``env``; True when there was one."""
    key = env.pop("ANTHROPIC_API_KEY", None)
    if not key:
        return False
    env[KEY_VAR] = key
    return True


def restore_api_key(env: dict[str, str]) -> None:
    """The reverse, for what a Claude agent spawns: its children get ``ANTHROPIC_API_KEY`` back."""
    key = env.pop(KEY_VAR, None)
    if key and not env.get("ANTHROPIC_API_KEY"):
        env["ANTHROPIC_API_KEY"] = key

TRUST_KEYS = {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}

_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


def stale_paths_warning(worktree: Path, branch: str | None) -> str:
    """Return the warning for a child forked from its parent's conversation: its paths are stale."""
    where = f"You are now in worktree {worktree}" + (f" on branch {branch}" if branch else "")
    return (
        f"{where}. All file paths from your inherited context are STALE — use relative paths "
        "only and re-read files before editing."
    )


def encode_project_dir(path: Path | str) -> str:
    """Return Claude's folder name for a cwd: every non-alphanumeric character becomes '-'."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(path))


def config_dir(env: Mapping[str, str], home: Path) -> Path:
    """Return Claude's config folder: ``$CLAUDE_CONFIG_DIR`` or ``~/.claude``."""
    custom = env.get("CLAUDE_CONFIG_DIR")
    return Path(custom) if custom else home / ".claude"


def global_state_file(env: Mapping[str, str], home: Path) -> Path:
    """Return Claude's global state file: ``$CLAUDE_CONFIG_DIR/.claude.json`` or ``~/.claude.json``."""
    custom = env.get("CLAUDE_CONFIG_DIR")
    return Path(custom) / ".claude.json" if custom else home / ".claude.json"


def settings_document(skip_permissions: bool, *, key_helper: bool = False) -> dict[str, Any]:
    """Return the ``--settings`` file: exo's hooks (and the bypass-warning and API-key dialog pre-emptions)."""
    hooks: dict[str, list[dict[str, Any]]] = {}
    for claude_event, exo_event, matcher, timeout in HOOKS:
        group: dict[str, Any] = {}
        if matcher:
            group["matcher"] = matcher
        group["hooks"] = [{"type": "command", "command": hook_command(exo_event, "claude"), "timeout": timeout}]
        hooks[claude_event] = [group]
    doc: dict[str, Any] = {"hooks": hooks}
    if skip_permissions:
        # Claude reads this from user, local, flag (--settings) and policy settings, never from
        # project settings; the flag source is exo's own file, so no user file is rewritten.
        doc["skipDangerousModePermissionPrompt"] = True
    if key_helper:
        doc["apiKeyHelper"] = API_KEY_HELPER
    return doc


class ClaudeBackend(Backend):
    """Claude Code (``claude``); its Stop hook (``exo hook stop --cli claude``) ends every turn."""

    name = "claude"
    binary = "claude"

    def prepare(self, ctx: LaunchContext, identity_env: Mapping[str, str]) -> Launch:
        """Write the settings and MCP files, trust a created worktree, fork a transcript."""
        env = self.base_env(ctx, identity_env)
        launch = Launch(argv=[], env=env, cwd=str(ctx.worktree))
        settings = ctx.agent_dir / SETTINGS_FILE
        mcp = ctx.agent_dir / MCP_FILE
        key_helper = hide_api_key(env)
        launch.files.append(write_private_json(settings, settings_document(ctx.skip_permissions,
                                                                           key_helper=key_helper)))
        mcp_entry = {"type": "stdio", **self.mcp_server(ctx, env)}
        launch.files.append(write_private_json(mcp, {"mcpServers": {"exo": mcp_entry}}))

        if ctx.skip_permissions and hasattr(os, "geteuid") and os.geteuid() == 0:
            env["IS_SANDBOX"] = "1"
        # Claude Code sends its first request while MCP servers may still be connecting, and a
        # call to mcp__exo__* then fails with "No such tool ... still connecting" (2.1.197).
        # MCP_CONNECTION_NONBLOCKING=0 makes `claude -p` wait, but not the TUI exo runs; so
        # the SessionStart hook waits (EXO_MCP_WAIT seconds at most) until exo's MCP server
        # started by this claude has listed its tools (tests/e2e/test_claude_lifecycle.py).
        env.setdefault("MCP_CONNECTION_NONBLOCKING", "0")
        env.setdefault(EnvVars.MCP_WAIT, str(MCP_WAIT))

        prompt = ctx.prompt
        if ctx.fork_session:
            if not ctx.resume_session:
                raise UsageError("--fork-session needs the parent's session id (--resume)")
            copied = self._copy_transcript(ctx)
            if copied is not None:
                launch.files.append(copied["path"])
                launch.undo.append(copied)
            warning = stale_paths_warning(ctx.worktree, ctx.branch)
            prompt = f"{warning}\n\n{prompt}" if prompt else warning

        if ctx.created_worktree:
            record = add_json_entry(
                global_state_file(ctx.env, ctx.home), ["projects", str(ctx.worktree)], TRUST_KEYS
            )
            if record is not None:
                launch.undo.append(record)

        perm = ["--dangerously-skip-permissions"] if ctx.skip_permissions else []
        # --mcp-config is variadic: another option must follow it before any positional.
        wiring = ["--mcp-config", str(mcp), "--settings", str(settings), *ctx.extra_args]
        binary = self.binary or "claude"
        fork = ["--resume", ctx.resume_session] if ctx.resume_session else []
        if ctx.resume_session and ctx.fork_session:
            fork.append("--fork-session")
        if ctx.headless:
            # Print mode, one turn per process; each message continues the same session from the
            # same folder (`claude -p --resume <id>`). The id is chosen here (`--session-id`).
            session = str(uuid.uuid4())
            launch.argv = [binary, "-p", *perm, *fork, "--session-id", session, *wiring, "--", prompt or "{message}"]
            launch.channel = {"mode": "resume", "session": session, "wait_first": not prompt,
                              "resume": [binary, "-p", *perm, "--resume", "{session}", *wiring, "--", "{message}"]}
            return launch
        launch.argv = [binary, *perm, *fork, *wiring, *(["--", prompt] if prompt else [])]
        return launch

    def _copy_transcript(self, ctx: LaunchContext) -> dict[str, Any] | None:
        """Copy the parent's transcript under the worktree's project folder; return its undo.

        A sandboxed agent's copy goes into its private HOME (``ctx.home``), from the Claude folder
        the parent's transcript is in (``ctx.parent_config``: the user's, or a sandboxed parent's
        private one, read without following a link the parent planted there).
        """
        session = ctx.resume_session or ""
        if not _SESSION_ID.match(session):
            raise InvalidInput(f"invalid Claude session id {session!r}")
        projects = (ctx.parent_config or config_dir(ctx.env, ctx.home)) / "projects"
        names = ([encode_project_dir(ctx.parent_cwd)] if ctx.parent_cwd is not None else []) + (
            sorted(p.parent.name for p in projects.glob(f"*/{session}.jsonl")) if projects.is_dir() else [])
        name = f"{session}.jsonl"
        if ctx.parent_config is not None:
            from exo_cli.adapters.sandbox_home import copy_in, open_inside

            base, lead = (ctx.parent_config, ("projects",)) if ctx.parent_confined else (projects, ())
            for folder in names:
                fd = open_inside(base, (*lead, folder, name)) if ctx.parent_confined else _open_followed(
                    projects / folder / name)
                if fd is not None:
                    break
            else:
                raise self._no_transcript(session, projects)
            try:
                dest = copy_in(ctx.home, (".claude", "projects", encode_project_dir(ctx.worktree), name), fd)
            finally:
                os.close(fd)
            return {"kind": "remove-file", "path": str(dest)}
        source = next((projects / f / name for f in names if (projects / f / name).is_file()), None)
        if source is None:
            raise self._no_transcript(session, projects)
        dest_dir = projects / encode_project_dir(ctx.worktree)
        dest = dest_dir / name
        if dest.resolve() == source.resolve() or dest.exists():
            return None
        dest_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest)
        os.chmod(dest, 0o600)
        return {"kind": "remove-file", "path": str(dest)}

    @staticmethod
    def _no_transcript(session: str, projects: Path) -> NotFound:
        return NotFound(f"no Claude transcript for session {session}",
                        hint=f"Expected {projects}/<encoded parent cwd>/{session}.jsonl.")


def _open_followed(path: Path) -> int | None:
    """A read descriptor of the user's regular file ``path`` (links followed: the user's own), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd
