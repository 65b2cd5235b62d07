"""The scripted model server alone, then smoke tests of the real agent CLIs against it.

The first group needs nothing but Python. The ``e2e`` group drives the pinned real CLIs installed by
tests/e2e/install.sh (skipping, with the reason, when they are missing): each runs in its own HOME,
TMPDIR and tmux socket, talks only to 127.0.0.1, and every attempted egress is refused by the trap.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e.agents import AgentHome, Tmux
from e2e.model_server import ModelServer, find_schema, schema_instance, tool_names, tool_results

MCP_ECHO = Path(__file__).resolve().parent / "fixtures" / "mcp_echo.py"


def post(server: ModelServer, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    """POST JSON straight to the server (no proxy); return status, content type, body."""
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=10) as resp:
        return resp.status, resp.headers["Content-Type"], resp.read()


def sse_events(raw: bytes) -> list[tuple[str | None, dict[str, Any]]]:
    """Parse a server-sent-events body into (event name, data) pairs."""
    events = []
    for block in raw.decode().replace("\r\n", "\n").split("\n\n"):
        name, data = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        if data is not None:
            events.append((name, data))
    return events


ANTHROPIC_TOOLS = [{"name": "Bash", "input_schema": {"type": "object"}}]


# -- the server alone ----------------------------------------------------------------------------


def test_anthropic_stream_tool_use_then_text_then_done(model_server: ModelServer) -> None:
    model_server.script({"tool": "Bash", "input": {"command": "true"}}, {"text": "ok"})
    _, ctype, raw = post(model_server, "/v1/messages?beta=true",
                         {"model": "m", "stream": True, "tools": ANTHROPIC_TOOLS, "messages": []})
    assert ctype == "text/event-stream"
    events = sse_events(raw)
    assert [name for name, _ in events] == ["message_start", "content_block_start", "content_block_delta",
                                            "content_block_stop", "message_delta", "message_stop"]
    assert events[1][1]["content_block"]["name"] == "Bash"
    assert json.loads(events[2][1]["delta"]["partial_json"]) == {"command": "true"}
    assert events[4][1]["delta"]["stop_reason"] == "tool_use"
    tool_id = events[1][1]["content_block"]["id"]
    assert model_server.agent_requests()[0]["tool_id"] == tool_id

    answer = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "out"}]}
    _, _, raw = post(model_server, "/v1/messages", {"model": "m", "tools": ANTHROPIC_TOOLS, "messages": [answer]})
    message = json.loads(raw)
    assert message["content"] == [{"type": "text", "text": "ok"}] and message["stop_reason"] == "end_turn"
    second = model_server.agent_requests()[1]
    assert tool_results(second) == [{"id": tool_id, "name": None, "output": "out"}]

    _, _, raw = post(model_server, "/v1/messages", {"model": "m", "tools": ANTHROPIC_TOOLS, "messages": []})
    assert json.loads(raw)["content"][0]["text"] == "done"
    assert [e["turn"] for e in model_server.agent_requests()] == [0, 1, None]


def test_side_requests_get_schema_instances_and_keep_the_script(model_server: ModelServer) -> None:
    model_server.script({"text": "agent answer"})
    title_schema = {"type": "object", "properties": {"title": {"type": "string", "minLength": 1}},
                    "required": ["title"]}
    _, _, raw = post(model_server, "/v1/messages",
                     {"model": "m", "messages": [], "output_format": {"type": "json_schema", "schema": title_schema}})
    assert json.loads(json.loads(raw)["content"][0]["text"]) == {"title": "E2E"}
    router = {"type": "OBJECT", "properties": {"complexity_reasoning": {"type": "STRING"},
                                               "complexity_score": {"type": "INTEGER"}}}
    _, _, raw = post(model_server, "/v1beta/models/gemini-3.5-flash-lite:generateContent",
                     {"contents": [], "generationConfig": {"responseJsonSchema": router}})
    text = json.loads(raw)["candidates"][0]["content"]["parts"][0]["text"]
    assert json.loads(text) == {"complexity_reasoning": "E2E", "complexity_score": 1}
    assert model_server.turns_left == 1
    assert [e["kind"] for e in model_server.entries()] == ["side", "side"]


def test_gemini_stream_function_call_and_count_tokens(model_server: ModelServer) -> None:
    model_server.script({"tool": "run_shell_command", "input": {"command": "ls"}})
    tools = [{"functionDeclarations": [{"name": "run_shell_command"}]}]
    _, ctype, raw = post(model_server, "/v1beta/models/x:streamGenerateContent?alt=sse",
                         {"contents": [], "tools": tools})
    assert ctype == "text/event-stream"
    (_, chunk), = sse_events(raw)
    assert chunk["candidates"][0]["content"]["parts"] == [
        {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}}]
    _, _, raw = post(model_server, "/v1beta/models/x:countTokens", {"contents": []})
    assert json.loads(raw) == {"totalTokens": 10}
    assert [e["kind"] for e in model_server.entries()] == ["agent", "count_tokens"]
    assert tool_names(model_server.entries()[0]) == ["run_shell_command"]


def test_openai_responses_function_call_in_a_namespace(model_server: ModelServer) -> None:
    model_server.script({"tool": "mcp__exo__note", "input": {"text": "hi"}})
    tools = [{"type": "function", "name": "exec_command"},
             {"type": "namespace", "name": "mcp__exo", "tools": [{"type": "function", "name": "note"}]}]
    _, _, raw = post(model_server, "/v1/responses", {"model": "fake", "stream": True, "tools": tools, "input": []})
    events = sse_events(raw)
    assert [name for name, _ in events] == ["response.created", "response.output_item.added",
                                            "response.output_item.done", "response.completed"]
    item = events[2][1]["item"]
    assert (item["type"], item["namespace"], item["name"]) == ("function_call", "mcp__exo", "note")
    assert json.loads(item["arguments"]) == {"text": "hi"}
    assert item["call_id"] == model_server.agent_requests()[0]["tool_id"]
    assert events[3][1]["response"]["usage"]["total_tokens"] == 15
    assert tool_names(model_server.entries()[0]) == ["exec_command", "mcp__exo__note"]


def test_probes_log_and_wait_for(model_server: ModelServer, tmp_path: Path) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(urllib.request.Request(model_server.url + "/", method="HEAD"), timeout=10) as resp:
        assert resp.status == 200
    _, _, raw = post(model_server, "/v1/messages/count_tokens", {"messages": []})
    assert json.loads(raw)["input_tokens"] >= 1
    entry = model_server.wait_for(lambda e: e["kind"] == "count_tokens", timeout=60)
    assert entry["api"] == "anthropic"
    logged = [json.loads(line) for line in (tmp_path / "model-log.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in logged] == ["probe", "count_tokens"]
    with pytest.raises(TimeoutError):
        model_server.wait_agent_requests(1, timeout=0.2)


def test_egress_trap_refuses_connect_and_absolute_uri(model_server: ModelServer) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler(
        {"http": model_server.url, "https": model_server.url}))
    for target in ("https://example.invalid/x", "http://example.invalid/y"):
        with pytest.raises((urllib.error.HTTPError, urllib.error.URLError, OSError)) as info:
            opener.open(target, timeout=10)
        assert "403" in str(info.value)
    trapped = model_server.entries("proxy")
    assert [(e["method"], e["path"], e["status"]) for e in trapped] == [
        ("CONNECT", "example.invalid:443", 403), ("GET", "http://example.invalid/y", 403)]


def test_schema_instance_respects_enums_bounds_and_lengths() -> None:
    schema = {"type": "object", "properties": {
        "next_speaker": {"type": "string", "enum": ["user", "model"]},
        "score": {"type": "integer", "minimum": 5},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "note": {"type": ["string", "null"], "minLength": 6},
        "ok": {"type": "boolean"}}}
    assert schema_instance(schema) == {"next_speaker": "user", "score": 5, "tags": ["E2E"], "note": "E2Exxx",
                                       "ok": False}
    assert find_schema({"tools": [{"input_schema": {"type": "object"}}], "messages": []}) is None
    assert find_schema({"text": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}) == {
        "type": "object"}


# -- the real CLIs -------------------------------------------------------------------------------


def git_repo(path: Path) -> Path:
    """Create a git repository with one commit at path."""
    path.mkdir(parents=True)
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "initial"]):
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(path), "GIT_CONFIG_NOSYSTEM": "1",
                            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"})
    return path


def run_cli(argv: list[str], home: AgentHome, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a CLI non-interactively under home's env; fail with its output when it exits non-zero."""
    proc = subprocess.run(argv, cwd=cwd, env=home.env(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{argv[0]} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def assert_no_egress(server: ModelServer) -> None:
    """Every proxied attempt was refused; no request ever named a host other than 127.0.0.1."""
    assert all(e["status"] == 403 for e in server.entries("proxy"))
    for entry in server.entries():
        if entry["kind"] != "proxy":
            assert entry["headers"].get("host", "127.0.0.1").startswith("127.0.0.1"), entry


@pytest.mark.e2e
def test_claude_print_answers_with_the_scripted_text(require_cli: Callable[[str], Path], model_server: ModelServer,
                                                     agent_home: Callable[..., AgentHome], tmp_path: Path) -> None:
    claude = require_cli("claude")
    proj = git_repo(tmp_path / "proj")
    model_server.script({"text": "Hello from the script"})
    proc = run_cli([str(claude), "-p", "hello", "--output-format", "json"], agent_home("claude"), proj)
    assert json.loads(proc.stdout)["result"] == "Hello from the script"
    (request,) = model_server.agent_requests()
    assert request["path"] == "/v1/messages?beta=true" and request["body"]["stream"] is True
    assert "Bash" in tool_names(request)
    assert_no_egress(model_server)


@pytest.mark.e2e
def test_claude_runs_a_scripted_bash_call_and_returns_its_result(
        require_cli: Callable[[str], Path], model_server: ModelServer, agent_home: Callable[..., AgentHome],
        tmp_path: Path) -> None:
    claude = require_cli("claude")
    proj = git_repo(tmp_path / "proj")
    model_server.script({"tool": "Bash", "input": {"command": "echo hi > file", "description": "write a file"}},
                        {"text": "wrote it"})
    proc = run_cli([str(claude), "-p", "write the file", "--output-format", "json", "--allowedTools", "Bash"],
                   agent_home("claude"), proj)
    assert json.loads(proc.stdout)["result"] == "wrote it"
    assert (proj / "file").read_text() == "hi\n"
    first, second = model_server.agent_requests()
    assert [r["id"] for r in tool_results(second)] == [first["tool_id"]]
    assert_no_egress(model_server)


@pytest.mark.e2e
@pytest.mark.tmux
def test_claude_tui_in_tmux_starts_without_dialog_and_answers(
        require_cli: Callable[[str], Path], model_server: ModelServer, agent_home: Callable[..., AgentHome],
        tmux: Tmux, tmp_path: Path) -> None:
    claude = require_cli("claude")
    proj = git_repo(tmp_path / "proj")
    model_server.script({"text": "TUI-ANSWER-42"})
    home = agent_home("claude", trusted=[proj])
    tmux.new_session([str(claude), "--dangerously-skip-permissions", "say hello"], env=home.env(), cwd=proj)
    screen = tmux.wait_for_text("TUI-ANSWER-42", timeout=60)
    assert "trust" not in screen.lower() and "bypass permissions mode" not in screen.lower()
    (request,) = model_server.agent_requests()
    assert "say hello" in json.dumps(request["body"]["messages"])
    assert_no_egress(model_server)


@pytest.mark.e2e
def test_gemini_print_runs_a_scripted_shell_call(require_cli: Callable[[str], Path], model_server: ModelServer,
                                                 agent_home: Callable[..., AgentHome], tmp_path: Path) -> None:
    gemini = require_cli("gemini")
    proj = git_repo(tmp_path / "proj")
    model_server.script({"tool": "run_shell_command", "input": {"command": "echo hi > file"}}, {"text": "wrote it"})
    proc = run_cli([str(gemini), "-p", "write the file", "--output-format", "json", "--yolo"],
                   agent_home("gemini"), proj)
    assert json.loads(proc.stdout)["response"] == "wrote it"
    assert (proj / "file").read_text() == "hi\n"
    first, second = model_server.agent_requests()
    assert "run_shell_command" in tool_names(first)
    assert [r["name"] for r in tool_results(second)] == ["run_shell_command"]
    # the model router asks first, as a side request, and consumes no turn
    assert model_server.entries("side", api="gemini")
    assert [e["turn"] for e in model_server.agent_requests()] == [0, 1]
    assert_no_egress(model_server)


@pytest.mark.e2e
def test_codex_exec_runs_a_scripted_exec_command(require_cli: Callable[[str], Path], model_server: ModelServer,
                                                 agent_home: Callable[..., AgentHome], tmp_path: Path) -> None:
    codex = require_cli("codex")
    proj = git_repo(tmp_path / "proj")
    model_server.script({"tool": "exec_command", "input": {"cmd": "echo hi > file"}}, {"text": "wrote it"})
    proc = run_cli([str(codex), "exec", "write the file"], agent_home("codex", trusted=[proj]), proj)
    assert "wrote it" in proc.stdout
    assert (proj / "file").read_text() == "hi\n"
    first, second = model_server.agent_requests()
    assert "exec_command" in tool_names(first)
    assert [r["id"] for r in tool_results(second)] == [first["tool_id"]]
    assert_no_egress(model_server)


def mcp_spec(log: Path) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(MCP_ECHO)], "env": {"E2E_MCP_LOG": str(log)}}


@pytest.mark.e2e
@pytest.mark.parametrize(("cli", "tool"), [("claude", "mcp__fake__echo"), ("gemini", "mcp_fake_echo"),
                                           ("codex", "mcp__fake__echo")])
def test_scripted_call_reaches_a_stdio_mcp_server_and_the_result_comes_back(
        cli: str, tool: str, require_cli: Callable[[str], Path], model_server: ModelServer,
        agent_home: Callable[..., AgentHome], tmp_path: Path) -> None:
    binary = require_cli(cli)
    proj = git_repo(tmp_path / "proj")
    log = tmp_path / "mcp-calls.txt"
    marker = f"ping-{cli}"
    model_server.script({"tool": tool, "input": {"text": marker}}, {"text": "called it"})
    if cli == "claude":
        config = tmp_path / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {"fake": {"type": "stdio", **mcp_spec(log)}}}))
        argv = [str(binary), "-p", "call echo", "--output-format", "json", "--mcp-config", str(config),
                "--allowedTools", tool]
        home = agent_home(cli)
    elif cli == "gemini":
        argv = [str(binary), "-p", "call echo", "--output-format", "json", "--yolo"]
        home = agent_home(cli, mcp_servers={"fake": {**mcp_spec(log), "trust": True}})
    else:
        argv = [str(binary), "exec", "call echo"]
        # Codex gives a server 10 s to start by default, which a loaded machine can miss.
        home = agent_home(cli, trusted=[proj], mcp_servers={"fake": {**mcp_spec(log), "startup_timeout_sec": 60}})
    proc = run_cli(argv, home, proj)
    assert log.exists(), f"the MCP server never got the call\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert log.read_text() == marker + "\n"
    first, second = model_server.agent_requests()
    assert tool in tool_names(first)
    (result,) = tool_results(second)
    assert f"echo:{marker}" in result["output"]
    assert_no_egress(model_server)


@pytest.mark.e2e
@pytest.mark.tmux
def test_egress_trap_catches_what_the_codex_tui_attempts(
        require_cli: Callable[[str], Path], model_server: ModelServer, agent_home: Callable[..., AgentHome],
        tmux: Tmux, tmp_path: Path) -> None:
    """Codex's TUI fetches an announcement from GitHub on every start; the trap must refuse it."""
    codex = require_cli("codex")
    proj = git_repo(tmp_path / "proj")
    model_server.script({"text": "CODEX-TUI-ANSWER"})
    home = agent_home("codex", trusted=[proj])
    tmux.new_session([str(codex), "--dangerously-bypass-hook-trust", "say hello"], env=home.env(), cwd=proj)
    tmux.wait_for_text("CODEX-TUI-ANSWER", timeout=60)
    model_server.wait_for(lambda e: e["kind"] == "side", timeout=30)  # the title thread: a schema instance
    model_server.wait_for(lambda e: e["kind"] == "proxy", timeout=30)  # the announcement fetch, refused
    trapped = model_server.entries("proxy")
    assert {(e["method"], e["status"]) for e in trapped} == {("CONNECT", 403)}
    assert {e["path"] for e in trapped} <= {"raw.githubusercontent.com:443"}
    assert [e["turn"] for e in model_server.agent_requests()] == [0]
    assert_no_egress(model_server)
