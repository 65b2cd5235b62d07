"""`exo mcp` writes nothing but JSON-RPC on stdout, whatever the calls and errors (raw subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from conftest import ROOT

TESTS = Path(__file__).resolve().parent
PROTOCOL = "2025-11-25"


def _req(i: int, method: str, params: dict[str, Any] | None = None) -> str:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": i, "method": method}
    if params is not None:
        msg["params"] = params
    return json.dumps(msg)


def _session(cwd: Path, lines: list[str], *argv: str, extra_ops: bool = False,
             ) -> tuple[list[dict[str, Any]], str, int]:
    """Feed ``lines`` to a real server process, wait for every answer, close stdin.

    Returns (stdout messages, stderr, exit code); asserts that each stdout line is one
    JSON-RPC message and nothing else.
    """
    launch = ([sys.executable, "-c", "import mcp_extra_ops; mcp_extra_ops.main()"] if extra_ops
              else [sys.executable, "-m", "exo_cli"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
    init = [
        _req(0, "initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                               "clientInfo": {"name": "raw-test", "version": "0"}}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ]
    wanted = {json.loads(x)["id"] for x in init + lines if x.startswith("{") and "id" in json.loads(x)}
    proc = subprocess.Popen([*launch, "mcp", *argv], cwd=cwd, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stderr_chunks: list[str] = []
    reader = threading.Thread(target=lambda: stderr_chunks.append(proc.stderr.read()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("\n".join(init + lines) + "\n")
    proc.stdin.flush()
    raw: list[str] = []
    seen: set[int] = set()
    timer = threading.Timer(60, proc.kill)  # a hung server fails the test instead of hanging it
    timer.start()
    try:
        while not wanted <= seen:
            line = proc.stdout.readline()
            if not line:
                break
            raw.append(line)
            msg = json.loads(line)
            if "id" in msg and "method" not in msg:
                seen.add(msg["id"])
        proc.stdin.close()
        raw.extend(proc.stdout.readlines())  # anything written after the last answer
        rc = proc.wait()
    finally:
        timer.cancel()
    reader.join(60)
    messages = []
    for line in raw:
        msg = json.loads(line)  # every stdout line is one JSON-RPC message, nothing else
        assert msg.get("jsonrpc") == "2.0", line
        assert ("id" in msg and ("result" in msg or "error" in msg)) or "method" in msg, line
        messages.append(msg)
    return messages, "".join(stderr_chunks), rc


def _by_id(messages: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {m["id"]: m for m in messages if "id" in m}


def test_stdout_is_only_protocol_for_every_kind_of_call(repo: Path) -> None:
    calls = [
        _req(1, "tools/list"),
        _req(2, "tools/call", {"name": "exo_status", "arguments": {}}),
        _req(3, "tools/call", {"name": "exo_status", "arguments": {"agent": "ghost"}}),  # exo's NotFound
        _req(4, "tools/call", {"name": "no_such_tool", "arguments": {}}),
        _req(5, "tools/call", {"name": "exo_status", "arguments": {"agent": 12}}),  # wrong type
        _req(6, "no/such/method"),
        "this is not json",
        _req(7, "ping"),
        _req(8, "tools/call", {"name": "list_agents", "arguments": {}}),
        _req(9, "tools/call", {"name": "merge_pr", "arguments": {"pr_number": "3"}}),  # a string for a number
        _req(10, "tools/call", {"name": "merge_pr", "arguments": {"pr_number": True}}),  # true is no PR number
        _req(11, "tools/call", {"name": "exo_status", "arguments": {"agnet": "w1"}}),  # a misspelled argument
        _req(12, "tools/call", {"name": "spawn_workers", "arguments": {"specs": "w1"}}),
    ]
    messages, stderr, rc = _session(repo, calls)
    got = _by_id(messages)
    assert set(got) >= set(range(13)), (messages, stderr)
    for i in (5, 9, 10, 11, 12):  # each an error object with exo's code for a bad call, named
        res = got[i]["result"]
        err = json.loads(res["content"][0]["text"])["error"]
        assert res["isError"] is True and err["code"] == -32602 and err["name"] == "UsageError", (i, err)
    assert json.loads(got[11]["result"]["content"][0]["text"])["error"]["data"]["unknown"] == ["agnet"]
    assert "Traceback" not in stderr and "Error executing tool" not in stderr, stderr
    assert got[0]["result"]["serverInfo"]["name"] == "exo"
    assert {"exo_status", "list_agents"} <= {t["name"] for t in got[1]["result"]["tools"]}
    ok = got[2]["result"]
    assert not ok.get("isError") and ok["structuredContent"]["repo"] == str(repo)
    assert json.loads(ok["content"][0]["text"]) == ok["structuredContent"]
    err = got[3]["result"]
    assert err["isError"] is True
    obj = json.loads(err["content"][0]["text"])  # exactly the CLI's --json error object
    assert obj["error"]["code"] == -32001 and obj["error"]["name"] == "NotFound" and obj["error"]["hint"]
    assert got[4]["result"]["isError"] is True
    assert got[5]["result"]["isError"] is True
    assert got[6]["error"]["code"] == -32601
    assert got[7]["result"] is not None
    assert not got[8]["result"].get("isError")


def test_protocol_error_outside_a_repository(tmp_path: Path) -> None:
    messages, _, _ = _session(tmp_path, [_req(1, "tools/call", {"name": "exo_status", "arguments": {}})])
    err = _by_id(messages)[1]["error"]
    assert err["code"] == -32005
    assert err["data"]["name"] == "EnvironmentError" and err["data"]["hint"]


def test_stray_output_of_a_tool_and_its_children_misses_the_wire(repo: Path) -> None:
    messages, stderr, _ = _session(repo, [_req(1, "tools/call", {"name": "test_noisy", "arguments": {}}),
                                          _req(2, "ping")], extra_ops=True)
    got = _by_id(messages)
    assert got[1]["result"]["structuredContent"] == {"ok": True}
    assert 2 in got
    for noise in ("noise from print()", "noise from fd 1", "noise from a child process"):
        assert noise in stderr

