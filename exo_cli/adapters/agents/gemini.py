"""Gemini CLI: hooks and MCP in the worktree's ``.gemini/settings.json``, kept out of git.

Gemini CLI has no per-run settings flag. ``GEMINI_CLI_SYSTEM_SETTINGS_PATH`` would move the
system layer, but Gemini 0.61 skips any system settings file (and system defaults file) that is
not owned by root with root-owned, non-group/other-writable parents
(``isFileAndDirectorySecureSync`` -> ``checkPosixStatsSecurity`` in the bundle), so an ordinary
user cannot use it. exo therefore merges its keys into the workspace settings file through
``project_file.edit_project_file``: the worktree stays clean in ``git status``, the main checkout
is untouched, and ``cleanup`` restores the project's own file byte for byte.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exo_cli.adapters.agents.base import Backend, Launch, LaunchContext, hook_command
from exo_cli.adapters.agents.project_file import edit_project_file
from exo_cli.errors import StateError

SETTINGS_RELPATH = ".gemini/settings.json"

# Gemini hook event -> (exo hook event, matcher or None, timeout in milliseconds).
HOOKS: tuple[tuple[str, str, str | None, int], ...] = (
    ("SessionStart", "session-start", None, 30_000),
    ("BeforeAgent", "prompt", None, 30_000),
    ("AfterAgent", "stop", None, 120_000),
    ("SessionEnd", "session-end", None, 10_000),
    ("Notification", "notification", None, 10_000),
    ("AfterTool", "tool", "*", 10_000),
)


# The git identity variables an agent's commits need, and the git config key each comes from.
IDENTITY_VARS: tuple[tuple[str, str], ...] = (
    ("GIT_AUTHOR_NAME", "user.name"),
    ("GIT_AUTHOR_EMAIL", "user.email"),
    ("GIT_COMMITTER_NAME", "user.name"),
    ("GIT_COMMITTER_EMAIL", "user.email"),
)


def git_identity_env(worktree: Path, env: Mapping[str, str]) -> dict[str, str]:
    """Return the GIT_AUTHOR_*/GIT_COMMITTER_* variables ``env`` lacks, from the identity git sees.

    Gemini CLI 0.61 runs every shell command with ``GIT_CONFIG_GLOBAL=/dev/null`` and
    ``GIT_CONFIG_SYSTEM=/dev/null`` (its ``getSafeGitEnv``), so the agent's ``git commit`` would
    not find the user's name and e-mail in ``~/.gitconfig`` and fail with "Author identity
    unknown". exo reads them once here, as the spawning call sees them, and passes them as
    environment variables, which Gemini keeps. Variables already set are left alone.
    """
    missing = [(var, key) for var, key in IDENTITY_VARS if not env.get(var)]
    if not missing:
        return {}
    from exo_cli.adapters.git import Git

    values: dict[str, str] = {}
    for key, value in Git(worktree, environ=env).config_matching(r"^user\.(name|email)$"):
        if value.strip():
            values[key] = value.strip()  # the last (most specific) level wins
    return {var: values[key] for var, key in missing if key in values}


def turn_error(transcript_path: str) -> str | None:
    """The API error that ended the last turn of a Gemini session, from its transcript; None otherwise.

    Gemini 0.61 has no failure hook: after an API error its AfterAgent hook fires with the
    placeholder response ``[no response text]``, and the session file (``transcript_path``)
    holds an entry ``{"type": "error", "content": "[API Error: ...]"}`` after the turn's
    user message.
    """
    from exo_cli.adapters.agents.base import tail_json_lines

    error = None
    for entry in tail_json_lines(transcript_path):
        if not isinstance(entry, dict):
            continue
        kind = entry.get("type")
        if kind == "user":
            error = None
        elif kind == "error" and isinstance(entry.get("content"), str):
            error = entry["content"]
        elif kind == "gemini":
            error = None
    return error


def exo_settings(mcp_server: Mapping[str, Any], *, keep_sessions: bool = False) -> dict[str, Any]:
    """Return exo's own Gemini settings: hooks enabled, exo's hooks, the exo MCP server.

    ``keep_sessions`` turns Gemini's startup session cleanup off (``general.sessionRetention``):
    Gemini 0.61 deletes a session resumed in a later minute at the next start of another session
    in the same project, which would lose a headless agent's conversation.
    """
    hooks: dict[str, list[dict[str, Any]]] = {}
    for gemini_event, exo_event, matcher, timeout in HOOKS:
        group: dict[str, Any] = {}
        if matcher:
            group["matcher"] = matcher
        group["hooks"] = [
            {
                "name": f"exo-{exo_event}",
                "type": "command",
                "command": hook_command(exo_event, "gemini"),
                "timeout": timeout,
            }
        ]
        hooks[gemini_event] = [group]
    out: dict[str, Any] = {
        "hooksConfig": {"enabled": True},
        "hooks": hooks,
        "mcpServers": {"exo": {**mcp_server, "trust": True}},
    }
    if keep_sessions:
        out["general"] = {"sessionRetention": {"enabled": False}}
    return out


def merge_settings(base: Mapping[str, Any], ours: Mapping[str, Any]) -> dict[str, Any]:
    """Merge exo's settings into a copy of ``base``: hook arrays append, other objects merge."""
    merged = copy.deepcopy(dict(base))
    for key, value in ours.items():
        if key == "hooks":
            hooks = merged.setdefault("hooks", {})
            for event, groups in value.items():
                hooks[event] = [*hooks.get(event, []), *groups]
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def render_settings(original: bytes | None, ours: Mapping[str, Any], path: str) -> bytes:
    """Return the settings file bytes: the project's JSON object (if any) with exo's keys merged."""
    base: dict[str, Any] = {}
    if original is not None and original.strip():
        try:
            loaded = json.loads(original.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise StateError(
                f"cannot merge exo's hooks into {path}: {exc}",
                hint="The project's .gemini/settings.json must be plain JSON (no comments) for exo to merge it.",
                path=path,
            ) from exc
        if not isinstance(loaded, dict):
            raise StateError(f"{path} does not hold a JSON object", path=path)
        base = loaded
    return (json.dumps(merge_settings(base, ours), indent=2) + "\n").encode()


class GeminiBackend(Backend):
    """Gemini CLI (``gemini``); its AfterAgent hook (``exo hook stop --cli gemini``) ends every turn."""

    name = "gemini"
    binary = "gemini"

    def prepare(self, ctx: LaunchContext, identity_env: Mapping[str, str]) -> Launch:
        """Merge exo's keys into the worktree's settings file and return the ``gemini -i`` launch."""
        self.no_resume(ctx)
        env = self.base_env(ctx, identity_env)
        launch = Launch(argv=[], env=env, cwd=str(ctx.worktree))
        ours = exo_settings(self.mcp_server(ctx, env), keep_sessions=ctx.headless)
        target = ctx.worktree / SETTINGS_RELPATH
        launch.undo += edit_project_file(
            ctx.worktree,
            SETTINGS_RELPATH,
            lambda original: render_settings(original, ours, str(target)),
            ctx.agent_dir / "backup",
        )
        launch.files.append(str(target))
        if ctx.created_worktree:
            env["GEMINI_CLI_TRUST_WORKSPACE"] = "true"
        env.update(git_identity_env(ctx.worktree, env))
        binary = self.binary or "gemini"
        head = [binary, *(["--approval-mode", "yolo"] if ctx.skip_permissions else []), *ctx.extra_args]
        if ctx.headless:
            # `gemini -p`, one turn per process; each message continues the session with
            # `--resume <id>` from the same folder. The id is chosen here (`--session-id`); the
            # `--prompt=` form keeps a message starting with '-' from being read as an option.
            session = str(uuid.uuid4())
            launch.argv = [*head, "--session-id", session, f"--prompt={ctx.prompt or '{message}'}"]
            launch.channel = {"mode": "resume", "session": session, "wait_first": not ctx.prompt,
                              "resume": [*head, "--resume", "{session}", "--prompt={message}"]}
            return launch
        argv = list(head)
        if ctx.prompt:
            # yargs would read a value starting with '-' as an option: use the '=' form then.
            if ctx.prompt.startswith("-"):
                argv.append(f"--prompt-interactive={ctx.prompt}")
            else:
                argv += ["-i", ctx.prompt]
        launch.argv = argv
        return launch
