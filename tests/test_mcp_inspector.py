"""The MCP Inspector CLI (npm `@modelcontextprotocol/inspector`, pinned in tests/node) against `exo mcp`.

Install it with `tests/node/install.sh` (`.ci/run` does). Skipped, with the reason, only
when node or the package is missing; under CI=true a missing package with node present fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT

NODE_DIR = ROOT / "tests" / "node"
INSPECTOR = NODE_DIR / "node_modules" / ".bin" / "mcp-inspector"


def _inspector() -> Path:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the MCP Inspector check needs node and tests/node/install.sh")
    if not INSPECTOR.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{INSPECTOR} is missing: .ci/run must run tests/node/install.sh")
        pytest.skip(f"the MCP Inspector is not installed: run {NODE_DIR / 'install.sh'}")
    return INSPECTOR


def _run(repo: Path, *method: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([str(_inspector()), "--cli", sys.executable, "-m", "exo_cli", "mcp", *method],
                       cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (p.stdout, p.stderr)
    return json.loads(p.stdout)  # type: ignore[no-any-return]


def test_inspector_lists_tools(repo: Path) -> None:
    from exo_cli import registry

    out = _run(repo, "--method", "tools/list")
    tools = {t["name"]: t for t in out["tools"]}
    expected = {t.name for op in registry.load_all().values() for t in op.tools
                if {"tl", "dev"} & set(op.tool_roles(t))}
    assert set(tools) == expected
    status = tools["exo_status"]
    assert status["annotations"]["readOnlyHint"] is True and status["annotations"]["openWorldHint"] is False
    assert status["inputSchema"]["properties"]["agent"]["description"]


def test_inspector_calls_exo_status(repo: Path) -> None:
    out = _run(repo, "--method", "tools/call", "--tool-name", "exo_status")
    assert not out.get("isError")
    assert out["structuredContent"]["repo"] == str(repo)
    assert out["structuredContent"]["git"]["branch"] == "main"
    err = _run(repo, "--method", "tools/call", "--tool-name", "exo_status", "--tool-arg", "agent=ghost")
    assert err["isError"] is True
    assert json.loads(err["content"][0]["text"])["error"]["code"] == -32001
