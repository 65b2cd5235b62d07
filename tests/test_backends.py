"""Agent backends: argv, config files, trust entries, git cleanliness and cleanup, for real."""

from __future__ import annotations

import json
import multiprocessing
import os
import shlex
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from exo_cli.adapters import agents as backends
from exo_cli.adapters.agents import base, claude, codex
from exo_cli.adapters.agents.base import LaunchContext
from exo_cli.errors import InvalidInput, UsageError

CANARY = "sk-canary-123"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def fake_exo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An interpreter folder with spaces holding an ``exo`` script that records its argv."""
    bindir = tmp_path / "my tools" / "bin"
    bindir.mkdir(parents=True)
    record = tmp_path / "argv.jsonl"
    script = bindir / "exo"
    script.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(record)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bindir / "python"))
    return script


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, Path]:
    """A real repository (main checkout) and a linked worktree exo 'created'."""
    main = tmp_path / "main repo"
    main.mkdir()
    git(main, "init", "-q", "-b", "main")
    (main / "README").write_text("hi\n")
    git(main, "add", "README")
    git(main, "commit", "-qm", "init")
    wt = tmp_path / "wt.d" / "agent one"
    git(main, "worktree", "add", "-q", "-b", "agent-one", str(wt))
    return main, wt


def make_ctx(tmp_path: Path, worktree: Path, repo_root: Path | None = None, **kw) -> LaunchContext:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    state = tmp_path / "state dir"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "ANTHROPIC_API_KEY": CANARY, "OPENAI_API_KEY": CANARY}
    env.update(kw.pop("env", {}))
    defaults = dict(
        name="ada",
        role="dev",
        worktree=worktree,
        repo_root=repo_root or worktree,
        prompt="fix the bug",
        agent_dir=state / "agents" / "ada",
        state_dir=state,
        home=home,
        env=env,
        created_worktree=True,
    )
    defaults.update(kw)
    return LaunchContext(**defaults)


IDENTITY = {"EXO_PARENT": "root", "BEADS_DIR": "/r/.beads"}


def assert_private_and_clean(paths: list[str]) -> None:
    for p in paths:
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p
        assert CANARY not in Path(p).read_text(), p


def all_text_under(folder: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


# -- base ------------------------------------------------------------------------------------


def test_exo_command_prefers_script_beside_interpreter(fake_exo: Path) -> None:
    assert base.exo_command() == [str(fake_exo)]
    assert os.path.isabs(base.exo_command()[0])


def test_exo_command_falls_back_to_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "py"))
    assert base.exo_command() == [str(tmp_path / "py"), "-m", "exo_cli"]


def test_hook_command_survives_a_shell_with_spaces(fake_exo: Path, tmp_path: Path) -> None:
    cmd = base.hook_command("stop", "claude")
    assert " " in str(fake_exo)
    subprocess.run(["sh", "-c", cmd], check=True)
    recorded = [json.loads(line) for line in (tmp_path / "argv.jsonl").read_text().splitlines()]
    assert recorded == [["hook", "stop", "--cli", "claude"]]
    assert shlex.split(cmd) == [str(fake_exo), "hook", "stop", "--cli", "claude"]
    with pytest.raises(UsageError):
        base.hook_command("nope", "claude")


def test_identity_env_is_added_to_the_callers_env(tmp_path: Path, fake_exo: Path) -> None:
    ctx = make_ctx(tmp_path, tmp_path)
    launch = backends.get_backend("demo").prepare(ctx, IDENTITY)
    assert launch.env["ANTHROPIC_API_KEY"] == CANARY  # secrets reach the agent via env only
    assert launch.env["EXO_AGENT"] == "ada" and launch.env["EXO_ROLE"] == "dev"
    assert launch.env["EXO_STATE_DIR"] == str(ctx.state_dir)
    assert launch.env["EXO_PARENT"] == "root" and launch.env["BEADS_DIR"] == "/r/.beads"
    with pytest.raises(UsageError):
        backends.get_backend("demo").prepare(make_ctx(tmp_path, tmp_path, role="boss"), {})


# -- claude ----------------------------------------------------------------------------------


def test_claude_argv_and_files(tmp_path: Path, fake_exo: Path) -> None:
    ctx = make_ctx(tmp_path, tmp_path / "wt", created_worktree=False, extra_args=["--model", "m"])
    launch = backends.get_backend("claude").prepare(ctx, IDENTITY)
    settings_file = ctx.agent_dir / "claude-settings.json"
    mcp_file = ctx.agent_dir / "mcp.json"
    assert launch.argv == [
        "claude", "--mcp-config", str(mcp_file), "--settings", str(settings_file), "--model", "m", "--", "fix the bug",
    ]
    assert launch.cwd == str(ctx.worktree)
    assert stat.S_IMODE(ctx.agent_dir.stat().st_mode) == 0o700
    assert sorted(launch.files) == sorted([str(settings_file), str(mcp_file)])
    assert_private_and_clean(launch.files)
    doc = json.loads(settings_file.read_text())
    assert "skipDangerousModePermissionPrompt" not in doc
    hooks = doc["hooks"]
    assert set(hooks) == {"SessionStart", "UserPromptSubmit", "Stop", "StopFailure", "SessionEnd", "Notification",
                          "PostToolUse"}
    assert hooks["SessionStart"][0]["matcher"] == "startup|resume|clear|compact"
    assert hooks["Notification"][0]["matcher"] == "permission_prompt"
    events = {"SessionStart": "session-start", "UserPromptSubmit": "prompt", "Stop": "stop",
              "StopFailure": "stop-failure", "SessionEnd": "session-end", "Notification": "notification",
              "PostToolUse": "tool"}
    for event, exo_event in events.items():
        (handler,) = hooks[event][0]["hooks"]
        assert handler["type"] == "command" and isinstance(handler["timeout"], int)
        assert shlex.split(handler["command"]) == [str(fake_exo), "hook", exo_event, "--cli", "claude"]
    server = json.loads(mcp_file.read_text())["mcpServers"]["exo"]
    assert server == {"type": "stdio", "command": str(fake_exo), "args": ["mcp", "--role", "auto"],
                      "env": {"EXO_AGENT": "ada", "EXO_STATE_DIR": str(ctx.state_dir)}}
    assert launch.undo == []  # not created by exo: no trust entry
    assert not (ctx.home / ".claude.json").exists()
    assert launch.env["MCP_CONNECTION_NONBLOCKING"] == "0"  # wait for exo's MCP server before the first request
    # The API key dialog is pre-empted: the key moves to another variable that exo's apiKeyHelper prints.
    assert "ANTHROPIC_API_KEY" not in launch.env and launch.env["EXO_ANTHROPIC_API_KEY"] == CANARY
    assert doc["apiKeyHelper"] == 'printf %s "$EXO_ANTHROPIC_API_KEY"'
    helper = subprocess.run(["sh", "-c", doc["apiKeyHelper"]], env=launch.env, capture_output=True, text=True)
    assert helper.stdout == CANARY


def test_claude_without_api_key_has_no_helper(tmp_path: Path, fake_exo: Path) -> None:
    ctx = make_ctx(tmp_path, tmp_path / "wt", created_worktree=False, env={"ANTHROPIC_API_KEY": ""})
    launch = backends.get_backend("claude").prepare(ctx, {})
    assert "apiKeyHelper" not in json.loads((ctx.agent_dir / "claude-settings.json").read_text())
    assert "EXO_ANTHROPIC_API_KEY" not in launch.env


def test_claude_headless_continues_its_session(tmp_path: Path, fake_exo: Path) -> None:
    ctx = make_ctx(tmp_path, tmp_path / "wt", created_worktree=False, headless=True, skip_permissions=True)
    launch = backends.get_backend("claude").prepare(ctx, {})
    session = launch.channel["session"]
    wiring = ["--mcp-config", str(ctx.agent_dir / "mcp.json"), "--settings", str(ctx.agent_dir / "claude-settings.json")]
    assert launch.argv == ["claude", "-p", "--dangerously-skip-permissions", "--session-id", session, *wiring,
                           "--", "fix the bug"]
    assert launch.channel == {"mode": "resume", "session": session, "wait_first": False,
                              "resume": ["claude", "-p", "--dangerously-skip-permissions", "--resume", "{session}",
                                         *wiring, "--", "{message}"]}


def test_codex_and_gemini_headless_continue_their_sessions(tmp_path: Path, fake_exo: Path) -> None:
    ctx = make_ctx(tmp_path, tmp_path / "wt", created_worktree=False, headless=True, prompt="-start")
    codex_launch = backends.get_backend("codex").prepare(ctx, {})
    assert codex_launch.argv == ["codex", "exec", "--json", "--", "-start"]
    assert codex_launch.channel == {"mode": "resume", "session_from": "codex-json", "wait_first": False,
                                    "resume": ["codex", "exec", "--json", "resume", "{session}", "--", "{message}"]}
    (tmp_path / "wt").mkdir(exist_ok=True)
    gem = backends.get_backend("gemini").prepare(ctx, {})
    try:
        session = gem.channel["session"]
        assert gem.argv == ["gemini", "--session-id", session, "--prompt=-start"]
        assert gem.channel["resume"] == ["gemini", "--resume", "{session}", "--prompt={message}"]
        settings = json.loads((tmp_path / "wt" / ".gemini" / "settings.json").read_text())
        assert settings["general"]["sessionRetention"] == {"enabled": False}  # or it deletes resumed sessions
    finally:
        backends.cleanup(gem.undo)
    no_prompt = backends.get_backend("codex").prepare(make_ctx(tmp_path, tmp_path / "wt", headless=True,
                                                                prompt=None), {})
    assert no_prompt.argv[-1] == "{message}" and no_prompt.channel["wait_first"] is True


def test_claude_skip_permissions(tmp_path: Path, fake_exo: Path) -> None:
    ctx = make_ctx(tmp_path, tmp_path / "wt", created_worktree=False, skip_permissions=True, prompt=None)
    launch = backends.get_backend("claude").prepare(ctx, {})
    assert launch.argv[:2] == ["claude", "--dangerously-skip-permissions"]
    assert "--" not in launch.argv
    doc = json.loads((ctx.agent_dir / "claude-settings.json").read_text())
    assert doc["skipDangerousModePermissionPrompt"] is True
    assert ("IS_SANDBOX" in launch.env) == (os.geteuid() == 0)
    plain = backends.get_backend("claude").prepare(make_ctx(tmp_path, tmp_path / "wt", created_worktree=False), {})
    assert "IS_SANDBOX" not in plain.env


def test_claude_trust_entry_merged_and_removed_byte_identical(tmp_path: Path, fake_exo: Path) -> None:
    ctx = make_ctx(tmp_path, tmp_path / "wt")
    state = ctx.home / ".claude.json"
    original = {"hasCompletedOnboarding": True, "oauthAccount": {"x": "ü"}, "projects": {"/else": {"a": 1}}}
    state.write_text(json.dumps(original, indent=2, ensure_ascii=False))
    state.chmod(0o640)
    before = state.read_bytes()
    launch = backends.get_backend("claude").prepare(ctx, {})
    data = json.loads(state.read_text())
    assert data["projects"][str(ctx.worktree)] == {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}
    assert data["projects"]["/else"] == {"a": 1} and data["oauthAccount"] == {"x": "ü"}
    assert stat.S_IMODE(state.stat().st_mode) == 0o640
    assert CANARY not in state.read_text() and CANARY not in json.dumps(launch.undo)
    json.dumps(launch.undo)  # serializable
    backends.cleanup(launch.undo)
    assert state.read_bytes() == before
    backends.cleanup(launch.undo)  # idempotent
    assert state.read_bytes() == before


def test_claude_trust_keeps_what_pre_existed(tmp_path: Path, fake_exo: Path) -> None:
    ctx = make_ctx(tmp_path, tmp_path / "wt", env={"CLAUDE_CONFIG_DIR": str(tmp_path / "cfg")})
    state = tmp_path / "cfg" / ".claude.json"
    state.parent.mkdir()
    state.write_text(json.dumps({"projects": {str(ctx.worktree): {"hasTrustDialogAccepted": True, "x": 1}}}, indent=2))
    before = state.read_bytes()
    launch = backends.get_backend("claude").prepare(ctx, {})
    assert json.loads(state.read_text())["projects"][str(ctx.worktree)]["hasCompletedProjectOnboarding"] is True
    assert not (ctx.home / ".claude.json").exists()
    (record,) = launch.undo
    assert record["added_keys"] == ["hasCompletedProjectOnboarding"] and record["added_entry"] is False
    backends.cleanup(launch.undo)
    assert state.read_bytes() == before


def test_claude_trust_creates_and_removes_missing_state_file(tmp_path: Path, fake_exo: Path) -> None:
    ctx = make_ctx(tmp_path, tmp_path / "wt")
    launch = backends.get_backend("claude").prepare(ctx, {})
    state = ctx.home / ".claude.json"
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    backends.cleanup(launch.undo)
    assert not state.exists()


def _add_trust(args: tuple[str, str]) -> dict:
    path, project = args
    return base.add_json_entry(Path(path), ["projects", project], claude.TRUST_KEYS)


def test_concurrent_trust_entries_never_lose_keys(tmp_path: Path) -> None:
    state = tmp_path / ".claude.json"
    state.write_text(json.dumps({"keep": True}, indent=2))
    projects = [f"/w/{i}" for i in range(12)]
    with multiprocessing.get_context("fork").Pool(4) as pool:
        records = pool.map(_add_trust, [(str(state), p) for p in projects])
    data = json.loads(state.read_text())
    assert data["keep"] is True and sorted(data["projects"]) == sorted(projects)
    backends.cleanup(records)
    assert json.loads(state.read_text()) == {"keep": True}
    assert not list(tmp_path.glob(".*.tmp"))


def test_claude_fork_session_copies_transcript_and_warns(tmp_path: Path, fake_exo: Path) -> None:
    parent_cwd = tmp_path / "parent.wt"
    ctx = make_ctx(tmp_path, tmp_path / "child wt", resume_session="abc-123", fork_session=True,
                   branch="main.auth", parent_cwd=parent_cwd, created_worktree=False)
    projects = ctx.home / ".claude" / "projects"
    src = projects / claude.encode_project_dir(parent_cwd) / "abc-123.jsonl"
    src.parent.mkdir(parents=True)
    src.write_text('{"type":"user"}\n')
    launch = backends.get_backend("claude").prepare(ctx, {})
    dest = projects / claude.encode_project_dir(ctx.worktree) / "abc-123.jsonl"
    assert claude.encode_project_dir(ctx.worktree).startswith("-") and "/" not in claude.encode_project_dir(ctx.worktree)
    assert dest.read_text() == src.read_text()
    i = launch.argv.index("--resume")
    assert launch.argv[i : i + 3] == ["--resume", "abc-123", "--fork-session"]
    prompt = launch.argv[-1]
    assert prompt.startswith(f"You are now in worktree {ctx.worktree} on branch main.auth.")
    assert "STALE" in prompt and prompt.endswith("fix the bug")
    backends.cleanup(launch.undo)
    assert not dest.exists() and src.exists()
    with pytest.raises(UsageError):
        backends.get_backend("claude").prepare(make_ctx(tmp_path, tmp_path, fork_session=True), {})


# -- gemini ----------------------------------------------------------------------------------


def status(path: Path) -> str:
    return git(path, "status", "--porcelain", "--untracked-files=all")


def test_gemini_argv(tmp_path: Path, fake_exo: Path, repo: tuple[Path, Path]) -> None:
    main, wt = repo
    ctx = make_ctx(tmp_path, wt, main, skip_permissions=True)
    launch = backends.get_backend("gemini").prepare(ctx, {})
    assert launch.argv == ["gemini", "--approval-mode", "yolo", "-i", "fix the bug"]
    assert launch.env["GEMINI_CLI_TRUST_WORKSPACE"] == "true"
    backends.cleanup(launch.undo)
    dash = backends.get_backend("gemini").prepare(make_ctx(tmp_path, wt, main, prompt="-x", created_worktree=False), {})
    assert dash.argv == ["gemini", "--prompt-interactive=-x"] and "GEMINI_CLI_TRUST_WORKSPACE" not in dash.env
    backends.cleanup(dash.undo)


def test_gemini_untracked_settings_keep_git_clean(tmp_path: Path, fake_exo: Path, repo: tuple[Path, Path]) -> None:
    main, wt = repo
    (main / ".gemini").mkdir()  # the main checkout's own untracked file must stay visible
    (main / ".gemini" / "settings.json").write_text("{}")
    main_status = status(main)
    assert ".gemini/settings.json" in main_status
    ctx = make_ctx(tmp_path, wt, main)
    launch = backends.get_backend("gemini").prepare(ctx, {})
    target = wt / ".gemini" / "settings.json"
    doc = json.loads(target.read_text())
    assert doc["hooksConfig"] == {"enabled": True}
    assert set(doc["hooks"]) == {"SessionStart", "BeforeAgent", "AfterAgent", "SessionEnd", "Notification", "AfterTool"}
    stop = doc["hooks"]["AfterAgent"][0]["hooks"][0]
    assert shlex.split(stop["command"]) == [str(fake_exo), "hook", "stop", "--cli", "gemini"]
    assert stop["timeout"] >= 1000  # milliseconds
    assert doc["mcpServers"]["exo"]["trust"] is True
    assert doc["mcpServers"]["exo"]["args"] == ["mcp", "--role", "auto"]
    assert status(wt) == ""
    assert status(main) == main_status
    for p in [target, wt / ".gemini" / ".gitignore"]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert CANARY not in all_text_under(wt / ".gemini") + all_text_under(ctx.state_dir)
    backends.cleanup(launch.undo)
    assert not (wt / ".gemini").exists()
    assert status(wt) == "" and status(main) == main_status


def test_gemini_tracked_settings_merged_and_restored(tmp_path: Path, fake_exo: Path, repo: tuple[Path, Path]) -> None:
    main, wt = repo
    original = b'{\n    "mcpServers": {"theirs": {"command": "x"}},\n    "hooks": {"AfterAgent": [{"hooks": [{"type": "command", "command": "mine"}]}]}\n}'
    (main / ".gemini").mkdir()
    (main / ".gemini" / "settings.json").write_bytes(original)
    git(main, "add", ".gemini/settings.json")
    git(main, "commit", "-qm", "gemini settings")
    git(wt, "merge", "-q", "main")
    assert status(wt) == ""
    ctx = make_ctx(tmp_path, wt, main)
    launch = backends.get_backend("gemini").prepare(ctx, {})
    doc = json.loads((wt / ".gemini" / "settings.json").read_text())
    assert set(doc["mcpServers"]) == {"theirs", "exo"}
    assert [g["hooks"][0]["command"] for g in doc["hooks"]["AfterAgent"]][0] == "mine"
    assert len(doc["hooks"]["AfterAgent"]) == 2
    assert status(wt) == "" and status(main) == ""
    assert not (wt / ".gemini" / ".gitignore").exists()
    assert git(wt, "ls-files", "-v", ".gemini/settings.json").startswith("S ")
    assert CANARY not in all_text_under(ctx.state_dir)
    backends.cleanup(launch.undo)
    assert (wt / ".gemini" / "settings.json").read_bytes() == original
    assert git(wt, "ls-files", "-v", ".gemini/settings.json").startswith("H ")
    assert status(wt) == "" and status(main) == ""


def test_gemini_refuses_to_merge_unparseable_settings(tmp_path: Path, fake_exo: Path, repo: tuple[Path, Path]) -> None:
    main, wt = repo
    (wt / ".gemini").mkdir()
    (wt / ".gemini" / "settings.json").write_text("// comment\n{}")
    with pytest.raises(Exception, match="cannot merge"):
        backends.get_backend("gemini").prepare(make_ctx(tmp_path, wt, main), {})
    assert (wt / ".gemini" / "settings.json").read_text() == "// comment\n{}"


# -- codex -----------------------------------------------------------------------------------


def test_codex_private_home_argv_and_config(tmp_path: Path, fake_exo: Path) -> None:
    wt = tmp_path / 'we.ird "wt" \\ dir'
    user_home = tmp_path / "home" / ".codex"
    user_home.mkdir(parents=True)
    user_cfg = user_home / "config.toml"
    user_text = (
        "# my settings\n"
        'model = "gpt-5"  # keep me\n\n'
        "[[hooks.Stop]]\n[[hooks.Stop.hooks]]\ntype = \"command\"\ncommand = \"my-hook\"\n\n"
        f'[hooks.state."{user_cfg}:stop:0:0"]\ntrusted_hash = "sha256:mine"\n'
        f'[hooks.state."{user_home / "hooks.json"}:pre_tool_use:0:0"]\ntrusted_hash = "sha256:json"\n'
    )
    user_cfg.write_text(user_text)
    (user_home / "auth.json").write_text("{}")
    ctx = make_ctx(tmp_path, wt, skip_permissions=True, extra_args=["-m", "gpt"])
    launch = backends.get_backend("codex").prepare(ctx, IDENTITY)
    argv = launch.argv
    # no -c overrides and no --dangerously-bypass-hook-trust: Codex warns about both
    assert argv == ["codex", "--dangerously-bypass-approvals-and-sandbox", "-m", "gpt", "--", "fix the bug"]
    own = ctx.agent_dir / "codex-home"
    assert launch.env["CODEX_HOME"] == str(own)
    assert stat.S_IMODE(os.stat(own).st_mode) == 0o700
    assert os.readlink(own / "auth.json") == str(user_home / "auth.json")  # the user's login, shared
    assert user_cfg.read_text() == user_text  # the user's file is never written
    text = (own / "config.toml").read_text()
    assert text.startswith("# my settings\n") and 'model = "gpt-5"  # keep me' in text  # tomlkit keeps the layout
    parsed = tomllib.loads(text)
    exo = str(fake_exo)
    assert parsed["notify"] == [exo, "hook", "notify", "--cli", "codex"]
    # The proof passes by name only (Codex starts MCP servers with a reduced environment).
    assert parsed["mcp_servers"]["exo"] == {"command": exo, "args": ["mcp", "--role", "auto"], "required": True,
                                            "env_vars": ["EXO_AGENT_PROOF"],
                                            "env": {"EXO_AGENT": "ada", "EXO_STATE_DIR": str(ctx.state_dir)}}
    assert parsed["projects"] == {str(wt): {"trust_level": "trusted"}}
    hooks = parsed["hooks"]
    assert set(hooks) == {"SessionStart", "UserPromptSubmit", "Stop", "SessionEnd", "PostToolUse", "state"}
    assert hooks["Stop"][0]["hooks"][0]["command"] == "my-hook"  # the user's hook first, index kept
    start = hooks["SessionStart"][0]
    assert start["matcher"] == "startup|resume|clear"
    assert shlex.split(start["hooks"][0]["command"]) == [exo, "hook", "session-start", "--cli", "codex"]
    state = hooks["state"]
    own_cfg = own / "config.toml"
    assert state[f"{own_cfg}:stop:0:0"] == {"trusted_hash": "sha256:mine"}  # the user's trust, moved
    assert state[f"{own / 'hooks.json'}:pre_tool_use:0:0"] == {"trusted_hash": "sha256:json"}
    mine = hooks["Stop"][1]["hooks"][0]
    assert state[f"{own_cfg}:stop:1:0"]["trusted_hash"] == codex.trust_hash("Stop", None, mine["command"], 120)
    assert CANARY not in " ".join(argv) and CANARY not in text


def test_codex_trust_hash_is_codexs() -> None:
    # What Codex 0.169 itself wrote after "Trust all and continue" for this hook.
    assert codex.trust_hash("Stop", None, "/bin/true", 10) == (
        "sha256:3c75cb092e3950863ad8058f4bb30d306cedb26dfb7b5eb217733b2635579c77")


def test_codex_without_created_worktree_adds_no_trust(tmp_path: Path, fake_exo: Path) -> None:
    ctx = make_ctx(tmp_path, tmp_path, created_worktree=False, prompt=None)
    launch = backends.get_backend("codex").prepare(ctx, {})
    assert "projects" not in tomllib.loads((ctx.agent_dir / "codex-home" / "config.toml").read_text())
    assert "--dangerously-bypass-approvals-and-sandbox" not in launch.argv and "--" not in launch.argv


# -- custom and demo ---------------------------------------------------------------------------


def test_custom_template_substitutes_per_element(tmp_path: Path) -> None:
    be = backends.get_backend("custom", command=["my-agent", "--cwd={worktree}", "--as", "{name}", "{prompt}"])
    ctx = make_ctx(tmp_path, tmp_path / "w t", prompt="say {name}; rm -rf $HOME")
    launch = be.prepare(ctx, {})
    assert launch.argv == ["my-agent", f"--cwd={tmp_path / 'w t'}", "--as", "ada", "say {name}; rm -rf $HOME"]
    no_prompt = be.prepare(make_ctx(tmp_path, tmp_path, prompt=None), {})
    assert no_prompt.argv == ["my-agent", f"--cwd={tmp_path}", "--as", "ada"]
    s = backends.get_backend("custom", command="agent 'two words' {prompt}").prepare(ctx, {})
    assert s.argv == ["agent", "two words", "say {name}; rm -rf $HOME"]
    with pytest.raises(InvalidInput):
        backends.get_backend("custom", command="")
    with pytest.raises(InvalidInput):
        backends.get_backend("custom").prepare(ctx, {})


def test_demo_argv(tmp_path: Path) -> None:
    launch = backends.get_backend("demo", script="/s.toml").prepare(make_ctx(tmp_path, tmp_path), {})
    assert launch.argv == [sys.executable, "-m", "exo_cli.demo_agent", "--script", "/s.toml"]
    assert backends.get_backend("demo").prepare(make_ctx(tmp_path, tmp_path), {}).argv[-1] == "exo_cli.demo_agent"


def test_registry_and_available(tmp_path: Path) -> None:
    assert backends.BACKENDS == ("claude", "gemini", "codex", "custom", "demo")
    for name in ("claude", "gemini", "codex"):
        be = backends.get_backend(name)
        assert be.name == name and be.binary == name
    with pytest.raises(InvalidInput):
        backends.get_backend("vim")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "codex").write_text("#!/bin/sh\n")
    (bindir / "codex").chmod(0o755)
    assert backends.available("codex", str(bindir)) == str(bindir / "codex")
    assert backends.available("claude", str(bindir)) is None
    assert backends.available("custom", str(bindir), command=["codex", "x"]) == str(bindir / "codex")
    assert backends.available("demo", "") == sys.executable


@pytest.mark.parametrize("cli", ["claude", "gemini", "codex"])
def test_mcp_entry_names_tmux_tmpdir_whatever_env_the_cli_gives_its_servers(tmp_path: Path, fake_exo: Path,
                                                                           cli: str) -> None:
    """Codex starts MCP servers with a reduced environment: the entry itself carries TMUX_TMPDIR when set."""
    from exo_cli.adapters.agents import get_backend

    backend = get_backend(cli)
    ctx = make_ctx(tmp_path, tmp_path, env={"TMUX_TMPDIR": "/tmp/tt", "XDG_RUNTIME_DIR": "/run/user/77"})
    entry = backend.mcp_server(ctx, backend.base_env(ctx, IDENTITY))
    assert entry["env"] == {"EXO_AGENT": "ada", "EXO_STATE_DIR": str(ctx.state_dir), "TMUX_TMPDIR": "/tmp/tt"}
    without = make_ctx(tmp_path, tmp_path)
    assert "TMUX_TMPDIR" not in backend.mcp_server(without, backend.base_env(without, IDENTITY))["env"]


SOCKET = "/tmp/exo-0-0123456789ab/s/0123456789ab/sock"


@pytest.mark.parametrize("cli", ["claude", "gemini", "codex"])
def test_with_a_socket_the_mcp_wiring_names_it_and_no_secret(tmp_path: Path, fake_exo: Path, cli: str) -> None:
    """Each CLI's MCP entry carries EXO_SOCKET (its exo mcp is a relay to the broker) and never the proof,
    not even by name (Codex's env_vars); without a socket the entry is as it was."""
    import json
    import tomllib

    wt = tmp_path / "wt"
    wt.mkdir()
    ctx = make_ctx(tmp_path, wt)
    identity = {**IDENTITY, "EXO_AGENT_PROOF": "p" * 64, "EXO_SOCKET": SOCKET}
    launch = backends.get_backend(cli).prepare(ctx, identity)
    assert launch.env["EXO_SOCKET"] == SOCKET and launch.env["EXO_AGENT_PROOF"] == "p" * 64  # the agent's own env
    if cli == "codex":
        entry = tomllib.loads((ctx.agent_dir / "codex-home" / "config.toml").read_text())["mcp_servers"]["exo"]
    elif cli == "claude":
        entry = json.loads((ctx.agent_dir / "mcp.json").read_text())["mcpServers"]["exo"]
    else:
        entry = json.loads((wt / ".gemini" / "settings.json").read_text())["mcpServers"]["exo"]
    assert entry["env"] == {"EXO_AGENT": "ada", "EXO_STATE_DIR": str(ctx.state_dir), "EXO_SOCKET": SOCKET}
    assert "env_vars" not in entry
    for f in launch.files:
        assert "p" * 64 not in Path(f).read_text()
