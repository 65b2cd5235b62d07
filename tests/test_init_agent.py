"""`exo init --agent claude|gemini|codex`: the human's own session wired as the root TL, on real files."""

from __future__ import annotations

import json
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

from conftest import Exo, git
from exo_cli.selfcmd import exo_command


def _init(repo: Path, agent: str) -> dict:  # type: ignore[type-arg]
    r = Exo(repo)("init", "--agent", agent, "--json")
    assert r.exit_code == 0, (r.stdout, r.stderr)
    return r.json()["wiring"]  # type: ignore[index, no-any-return]


def _snapshot(repo: Path, rels: list[str]) -> dict[str, bytes]:
    return {rel: (repo / rel).read_bytes() for rel in rels}


def _commands(settings: dict, event: str) -> list[str]:  # type: ignore[type-arg]
    return [h["command"] for g in settings["hooks"][event] for h in g["hooks"]]


def test_exo_command_is_absolute_and_runs() -> None:
    argv = exo_command()
    assert Path(argv[0]).is_absolute()
    p = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip()


def test_claude_wiring_merges_and_is_idempotent(repo: Path) -> None:
    (repo / ".mcp.json").write_text(json.dumps({"mcpServers": {"other": {"command": "other-server"}}}))
    (repo / ".claude").mkdir()
    user_hook = {"matcher": "Bash", "hooks": [{"type": "command", "command": "my-linter"}]}
    (repo / ".claude" / "settings.local.json").write_text(json.dumps({
        "permissions": {"allow": ["Bash(ls)"]},
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}]}], "PreToolUse": [user_hook]},
        "enabledMcpjsonServers": ["other"],
    }))
    w = _init(repo, "claude")
    exo = exo_command()
    assert w["agent"] == "claude" and w["mcp_command"] == [*exo, "mcp", "--role", "auto"]
    mcp = json.loads((repo / ".mcp.json").read_text())
    assert mcp["mcpServers"]["other"] == {"command": "other-server"}
    assert mcp["mcpServers"]["exo"] == {"type": "stdio", "command": exo[0], "args": [*exo[1:], "mcp", "--role", "auto"]}
    local = json.loads((repo / ".claude" / "settings.local.json").read_text())
    assert local["permissions"] == {"allow": ["Bash(ls)"]}
    assert local["hooks"]["PreToolUse"] == [user_hook]
    assert local["enabledMcpjsonServers"] == ["other", "exo"]
    assert _commands(local, "Stop") == ["say done", shlex.join([*exo, "hook", "stop", "--cli", "claude"])]
    for event, exo_event in (("SessionStart", "session-start"), ("UserPromptSubmit", "prompt"),
                             ("SessionEnd", "session-end"), ("Notification", "notification")):
        assert _commands(local, event) == [shlex.join([*exo, "hook", exo_event, "--cli", "claude"])]
    assert all(isinstance(h["timeout"], int) for g in local["hooks"]["Stop"] for h in g["hooks"] if "timeout" in h)
    assert w["excluded"] == []  # both files were the user's: they stay visible to git
    files = [".mcp.json", ".claude/settings.local.json"]
    before = _snapshot(repo, files)
    w2 = _init(repo, "claude")
    assert w2["changed"] == [] and _snapshot(repo, files) == before


def test_claude_wiring_replaces_an_older_exo_entry(repo: Path) -> None:
    (repo / ".claude").mkdir()
    old = "/old/venv/bin/exo hook stop --cli claude"
    (repo / ".claude" / "settings.local.json").write_text(json.dumps(
        {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": old}]}]}}))
    _init(repo, "claude")
    local = json.loads((repo / ".claude" / "settings.local.json").read_text())
    assert _commands(local, "Stop") == [shlex.join([*exo_command(), "hook", "stop", "--cli", "claude"])]


def test_new_files_are_hidden_from_git_status(repo: Path) -> None:
    w = _init(repo, "claude")
    assert sorted(w["excluded"]) == ["/.claude/settings.local.json", "/.mcp.json", ]
    w = _init(repo, "gemini")
    assert w["excluded"] == ["/.gemini/settings.json"]
    status = git(repo, "status", "--porcelain", "--untracked-files=all")
    assert status == "?? exo.toml", status  # exo.toml is the user's to commit; the wiring is not


def test_gemini_wiring(repo: Path) -> None:
    (repo / ".gemini").mkdir()
    (repo / ".gemini" / "settings.json").write_text(json.dumps({
        "model": {"name": "gemini-2.5-pro"},
        "mcpServers": {"other": {"command": "x"}},
        "hooks": {"AfterAgent": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]},
        "hooksConfig": {"notifications": False},
    }))
    w = _init(repo, "gemini")
    s = json.loads((repo / ".gemini" / "settings.json").read_text())
    exo = exo_command()
    assert s["model"] == {"name": "gemini-2.5-pro"} and s["mcpServers"]["other"] == {"command": "x"}
    assert s["mcpServers"]["exo"] == {"command": exo[0], "args": [*exo[1:], "mcp", "--role", "auto"]}
    assert s["hooksConfig"] == {"notifications": False, "enabled": True}
    assert _commands(s, "AfterAgent") == ["notify-send done", shlex.join([*exo, "hook", "stop", "--cli", "gemini"])]
    handler = s["hooks"]["BeforeAgent"][0]["hooks"][0]
    assert handler["command"].endswith("hook prompt --cli gemini") and handler["timeout"] >= 1000  # milliseconds
    assert "enabled" not in s["hooks"]  # Gemini >= 0.26: only event names under hooks
    before = _snapshot(repo, [".gemini/settings.json"])
    assert _init(repo, "gemini")["changed"] == [] and _snapshot(repo, [".gemini/settings.json"]) == before
    assert any("trusted folder" in n for n in w["notes"])


def test_codex_wiring_keeps_user_toml_and_comments(repo: Path) -> None:
    (repo / ".codex").mkdir()
    user = '# my project settings\nmodel = "gpt-5"\n\n[mcp_servers.docs]\ncommand = "docs-mcp"\n'
    (repo / ".codex" / "config.toml").write_text(user)
    w = _init(repo, "codex")
    text = (repo / ".codex" / "config.toml").read_text()
    assert text.startswith(user)  # edited in place with tomlkit: the user's text stays as it was
    cfg = tomllib.loads(text)
    exo = exo_command()
    assert cfg["model"] == "gpt-5" and cfg["mcp_servers"]["docs"] == {"command": "docs-mcp"}
    assert cfg["mcp_servers"]["exo"] == {"command": exo[0], "args": [*exo[1:], "mcp", "--role", "auto"]}
    hooks = json.loads((repo / ".codex" / "hooks.json").read_text())
    from exo_cli.adapters.agents import codex

    assert set(hooks["hooks"]) == {event for event, *_ in codex.HOOKS}
    assert {"SessionStart", "UserPromptSubmit", "Stop"} <= set(hooks["hooks"])
    assert _commands(hooks, "Stop") == [shlex.join([*exo, "hook", "stop", "--cli", "codex"])]
    note = " ".join(w["notes"])
    assert "trusted project" in note and "codex mcp add exo --" in note and "CODEX_HOME" in note
    before = _snapshot(repo, [".codex/config.toml", ".codex/hooks.json"])
    assert _init(repo, "codex")["changed"] == []
    assert _snapshot(repo, [".codex/config.toml", ".codex/hooks.json"]) == before


def test_codex_wiring_replaces_its_own_table_keeping_comments(repo: Path) -> None:
    (repo / ".codex").mkdir()
    user = ('# top comment\nmodel = "gpt-5"  # inline\n\n[mcp_servers.exo]  # old exo entry\n'
            'command = "old-exo"\n\n[mcp_servers.docs]\n# docs server\ncommand = "docs-mcp"\n')
    (repo / ".codex" / "config.toml").write_text(user)
    _init(repo, "codex")
    text = (repo / ".codex" / "config.toml").read_text()
    for kept in ("# top comment", 'model = "gpt-5"  # inline', "# docs server", 'command = "docs-mcp"'):
        assert kept in text
    assert "old-exo" not in text
    assert tomllib.loads(text)["mcp_servers"]["exo"]["args"][-3:] == ["mcp", "--role", "auto"]


def test_codex_fresh_config_and_user_home_untouched(repo: Path, isolate: Path) -> None:
    _init(repo, "codex")
    cfg = tomllib.loads((repo / ".codex" / "config.toml").read_text())
    assert list(cfg) == ["mcp_servers"]
    assert not (isolate / ".codex").exists()


def test_unparsable_settings_are_refused_not_overwritten(repo: Path) -> None:
    (repo / ".mcp.json").write_text("{not json")
    r = Exo(repo)("init", "--agent", "claude", "--json")
    assert r.exit_code == 4
    err = r.json()["error"]  # type: ignore[index]
    assert err["name"] == "InvalidInput" and ".mcp.json" in err["message"] and err["hint"]
    assert (repo / ".mcp.json").read_text() == "{not json"


@pytest.mark.parametrize("bad", ["cursor", "../x"])
def test_unknown_agent_is_a_usage_error(repo: Path, bad: str) -> None:
    r = Exo(repo)("init", "--agent", bad)
    assert r.exit_code == 2 and "--agent" in r.stderr
    assert not (repo / "exo.toml").exists()


def test_operation_rejects_unknown_agent(repo: Path) -> None:
    from exo_cli.env import Env
    from exo_cli.errors import InvalidInput
    from exo_cli.registry import invoke

    with pytest.raises(InvalidInput):
        invoke("init", Env(cwd=repo), agent="cursor")
    assert not (repo / "exo.toml").exists()
