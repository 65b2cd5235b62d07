"""Backend fixes found by driving the real Gemini CLI 0.61.0 and Codex CLI 0.169.0 (tests/e2e)."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from exo_cli.adapters import agents as backends
from exo_cli.adapters.agents import codex, gemini
from exo_cli.adapters.agents.base import LaunchContext


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    """A repository with no identity of its own, whose user config sits in a HOME of the test."""
    path = tmp_path / "wt"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    return path


def spawn_env(tmp_path: Path, gitconfig: str | None, **extra: str) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    if gitconfig is not None:
        (home / ".gitconfig").write_text(gitconfig)
    return {"PATH": os.environ["PATH"], "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", **extra}


def test_gemini_passes_the_users_git_identity_as_env(tmp_path: Path, worktree: Path) -> None:
    """Gemini 0.61's shell tool sets GIT_CONFIG_GLOBAL=/dev/null: the identity must come from the env."""
    env = spawn_env(tmp_path, "[user]\n\tname = Ada Lovelace\n\temail = ada@example.invalid\n")
    assert gemini.git_identity_env(worktree, env) == {
        "GIT_AUTHOR_NAME": "Ada Lovelace", "GIT_AUTHOR_EMAIL": "ada@example.invalid",
        "GIT_COMMITTER_NAME": "Ada Lovelace", "GIT_COMMITTER_EMAIL": "ada@example.invalid"}
    # a repository-level identity wins over the user's, as git itself decides
    git(worktree, "config", "user.email", "repo@example.invalid", env=env)
    assert gemini.git_identity_env(worktree, env)["GIT_AUTHOR_EMAIL"] == "repo@example.invalid"
    # variables the caller set are kept; none are invented when git knows no identity
    assert gemini.git_identity_env(worktree, {**env, "GIT_AUTHOR_NAME": "Set"}).get("GIT_AUTHOR_NAME") is None
    (tmp_path / "other").mkdir()
    bare = spawn_env(tmp_path / "other", None)
    git(tmp_path / "other", "init", "-q", env=bare)
    assert gemini.git_identity_env(tmp_path / "other", bare) == {}


def test_gemini_launch_env_commits_under_gemini_style_git_env(tmp_path: Path, worktree: Path) -> None:
    env = spawn_env(tmp_path, "[user]\n\tname = Ada Lovelace\n\temail = ada@example.invalid\n")
    ctx = LaunchContext(name="ada", role="dev", worktree=worktree, repo_root=worktree, prompt="go",
                        agent_dir=tmp_path / "agent", state_dir=tmp_path / "state", home=tmp_path / "home", env=env,
                        created_worktree=True)
    launch = backends.get_backend("gemini").prepare(ctx, {})
    try:
        # what Gemini's shell does to git config before running the agent's command
        shell_env = {**launch.env, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}
        git(worktree, "commit", "-q", "--allow-empty", "-m", "agent commit", env=shell_env)
        assert git(worktree, "log", "-1", "--format=%an <%ae>", env=shell_env).strip() == \
            "Ada Lovelace <ada@example.invalid>"
    finally:
        backends.cleanup(launch.undo)


def test_codex_session_end_timeout_is_within_codex_limit(tmp_path: Path) -> None:
    """Codex 0.169 clamps SessionEnd hook timeouts above 3 s (and warns in the TUI)."""
    ctx = LaunchContext(name="ada", role="dev", worktree=tmp_path, repo_root=tmp_path, prompt=None,
                        agent_dir=tmp_path / "agent", state_dir=tmp_path / "state", home=tmp_path, env={})
    codex.CodexBackend().prepare(ctx, {})
    groups = tomllib.loads((tmp_path / "agent" / "codex-home" / "config.toml").read_text())["hooks"]["SessionEnd"]
    assert groups[0]["hooks"][0]["timeout"] <= 3
