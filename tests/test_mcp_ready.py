"""The Claude agent's session-start hook waits for its own exo MCP server (found by the real Claude TUI).

Claude Code 2.1.197's TUI sends the first prompt while MCP servers are still connecting (and
``MCP_CONNECTION_NONBLOCKING=0`` only affects ``claude -p``), so a first ``mcp__exo__*`` call failed
with "No such tool available ... still connecting" (tests/e2e/test_claude_lifecycle.py). Now exo's
MCP server records, on its first tools/list, the pid of the process that started it; the
session-start hook, given ``EXO_MCP_WAIT`` by the Claude backend, waits until that process is one of
its own ancestors (the same claude), at most that many seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

from test_backends import make_ctx
from test_hooks import START
from test_messages_helpers import EXO, agent_vars, env_for, hook_json, make_agent, run_hook

from conftest import kv_keys
from exo_cli.adapters import agents as backends
from exo_cli.config import EnvVars
from exo_cli.ops import mcpready

MCP_WAIT = EnvVars.MCP_WAIT  # set by the Claude backend, read by the session-start hook


def test_claude_backend_asks_the_hook_to_wait_for_exos_mcp_server(tmp_path: Path) -> None:
    launch = backends.get_backend("claude").prepare(make_ctx(tmp_path, tmp_path / "wt", created_worktree=False), {})
    assert 0 < float(launch.env[MCP_WAIT]) < 30  # below the SessionStart hook's timeout
    custom = make_ctx(tmp_path, tmp_path / "wt", created_worktree=False, env={MCP_WAIT: "3"})
    assert backends.get_backend("claude").prepare(custom, {}).env[MCP_WAIT] == "3"


def test_session_start_returns_once_its_own_claudes_server_listed_tools(repo: Path) -> None:
    make_agent(repo, "w1", task="Add a flag", status="starting")
    # The marker names this test process, an ancestor of the hook: the hook's own agent CLI.
    env_for(repo).store.kv_set(mcpready.mcp_ready_key("w1"), str(os.getpid()))
    proc = run_hook(repo, "w1", "session-start", "claude", START["claude"], extra_env={MCP_WAIT: "20"})
    out = hook_json(proc)
    assert "Add a flag" in out["hookSpecificOutput"]["additionalContext"]
    assert "warning" not in proc.stderr


def test_session_start_ignores_a_marker_of_another_process_and_gives_up(repo: Path) -> None:
    make_agent(repo, "w1", task="Add a flag", status="starting")
    other = subprocess.Popen(["true"])  # say an earlier claude of this agent: not the hook's ancestor
    other.wait()
    env_for(repo).store.kv_set(mcpready.mcp_ready_key("w1"), str(other.pid))
    proc = run_hook(repo, "w1", "session-start", "claude", START["claude"], extra_env={MCP_WAIT: "0.3"})
    out = hook_json(proc)  # fails open: the context still comes
    assert "Add a flag" in out["hookSpecificOutput"]["additionalContext"]
    assert "MCP server did not answer within 0.3s" in proc.stderr
    assert env_for(repo).store.agent("w1").status == "working"


def test_session_start_without_the_variable_or_for_another_cli_does_not_wait(repo: Path) -> None:
    make_agent(repo, "w1", task="Add a flag", status="starting")
    proc = run_hook(repo, "w1", "session-start", "claude", START["claude"])
    assert "Add a flag" in hook_json(proc)["hookSpecificOutput"]["additionalContext"]
    assert "MCP" not in proc.stderr
    # A Gemini child of a Claude agent inherits EXO_MCP_WAIT: its hook must not wait on it.
    proc = run_hook(repo, "w1", "session-start", "gemini", START["gemini"], extra_env={MCP_WAIT: "0.3"})
    assert "Add a flag" in hook_json(proc)["hookSpecificOutput"]["additionalContext"]
    assert "MCP" not in proc.stderr


def test_a_waiting_hook_wakes_when_the_server_marks_itself_ready(repo: Path) -> None:
    make_agent(repo, "w1", task="Add a flag", status="starting")
    env = {**os.environ, **agent_vars(repo, "w1"), MCP_WAIT: "25"}
    hook = subprocess.Popen([*EXO, "hook", "session-start", "--cli", "claude"], cwd=repo, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert hook.stdin is not None
        hook.stdin.write(json.dumps(START["claude"]))
        hook.stdin.close()
        # The hook marks the agent working, then waits; like exo's MCP server started by the same
        # claude, mark_mcp_ready records its parent (pytest's parent: an ancestor of the hook too).
        for _ in range(600):
            if env_for(repo).store.agent("w1").status == "working":
                break
            time.sleep(0.05)
        mcpready.mark_mcp_ready(env_for(repo, "w1"), "w1")
        assert hook.stdout is not None and hook.stderr is not None
        out, err = hook.stdout.read(), hook.stderr.read()
        hook.wait(timeout=60)
    finally:
        hook.kill()
    assert hook.returncode == 0, err
    assert "Add a flag" in json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert "warning" not in err  # it did not run into the 25 s limit


def test_an_agents_mcp_server_marks_itself_ready_when_tools_are_listed(repo: Path) -> None:
    from mcp import Client

    from exo_cli.mcp_server import READY_GRACE, build_server

    make_agent(repo, "w1", task="Add a flag")
    env = env_for(repo, "w1")
    key = mcpready.mcp_ready_key("w1")
    server = build_server(env, "auto")
    assert env.store.kv_get(key) is None

    async def go() -> list[str]:
        async with Client(server) as c:
            names = [t.name for t in (await c.list_tools()).tools]
            await asyncio.sleep(READY_GRACE * 4)  # recorded a moment after the answer, once the client has it
            return names

    assert "note" in asyncio.run(go())
    assert env.store.kv_get(key) == str(os.getppid())


def test_the_humans_mcp_server_marks_nothing(repo: Path) -> None:
    from mcp import Client

    from exo_cli.mcp_server import build_server

    make_agent(repo, "w1", task="Add a flag")
    env = env_for(repo)
    server = build_server(env, "auto")

    async def go() -> None:
        async with Client(server) as c:
            await c.list_tools()

    asyncio.run(go())
    assert kv_keys(env.store, "mcp-ready:") == []
