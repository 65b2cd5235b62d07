"""Configuration precedence and validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from exo_cli.config import load
from exo_cli.errors import InvalidInput


def test_defaults(tmp_path: Path) -> None:
    cfg = load(repo_root=tmp_path, environ={"EXO_CONFIG_DIR": str(tmp_path / "cfg")})
    assert cfg.get("agent.default") == "claude"
    assert cfg.get("mux.default") == "tmux"
    assert cfg.origin("mux.default") == "default"


def test_precedence_flag_env_local_repo_user(tmp_path: Path) -> None:
    user = tmp_path / "cfg"
    user.mkdir()
    (user / "config.toml").write_text('[agent]\ndefault = "gemini"\n[mux]\ndefault = "zellij"\n'
                                      '[limits]\nmax_agents = 3\n[forge]\nkind = "github"\n')
    (tmp_path / "exo.toml").write_text('[mux]\ndefault = "headless"\n[limits]\nmax_agents = 4\n'
                                       '[forge]\nkind = "local"\n')
    (tmp_path / ".exo").mkdir()
    (tmp_path / ".exo" / "config.toml").write_text("[limits]\nmax_agents = 5\n")
    environ = {"EXO_CONFIG_DIR": str(user), "EXO_MAX_AGENTS": "6", "EXO_FORGE": "auto"}
    cfg = load(repo_root=tmp_path, environ=environ, overrides={"forge.kind": "github"})
    assert cfg.get("agent.default") == "gemini"  # user
    assert cfg.get("mux.default") == "headless"  # repo beats user
    assert cfg.get("limits.max_agents") == 6  # env beats local
    assert cfg.origin("limits.max_agents") == "$EXO_MAX_AGENTS"
    assert cfg.get("forge.kind") == "github"  # flag beats env
    assert cfg.origin("forge.kind") == "flag"
    del environ["EXO_MAX_AGENTS"]
    assert load(repo_root=tmp_path, environ=environ).get("limits.max_agents") == 5  # local beats repo


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[agent]\ndefault = "vim"\n', "agent.default"),
        ("[limits]\nmax_agents = -1\n", "limits.max_agents"),
        ('[limits]\nmax_agents = "3"\n', "limits.max_agents"),
        ('[agent]\nskip_permissions = "yes"\n', "agent.skip_permissions"),
        ("[worktree]\ncopy = [1]\n", "worktree.copy"),
        ("[nonsense]\nx = 1\n", "nonsense"),
    ],
)
def test_bad_values_name_their_key(tmp_path: Path, text: str, key: str) -> None:
    (tmp_path / "exo.toml").write_text(text)
    with pytest.raises(InvalidInput) as info:
        load(repo_root=tmp_path, environ={"EXO_CONFIG_DIR": str(tmp_path / "none")})
    assert key in info.value.message
    assert str(tmp_path / "exo.toml") in info.value.message


def test_bad_env_value_names_variable(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as info:
        load(repo_root=tmp_path, environ={"EXO_CONFIG_DIR": str(tmp_path), "EXO_MUX": "screen"})
    assert "mux.default" in info.value.message and "$EXO_MUX" in info.value.message


def test_invalid_toml_is_clear(tmp_path: Path) -> None:
    (tmp_path / "exo.toml").write_text("[agent\n")
    with pytest.raises(InvalidInput) as info:
        load(repo_root=tmp_path, environ={"EXO_CONFIG_DIR": str(tmp_path / "none")})
    assert "not valid TOML" in info.value.message
