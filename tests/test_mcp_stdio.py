"""The real MCP SDK client over stdio against `exo mcp`."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from conftest import ROOT, Exo


def _params(cwd: Path, *args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    from mcp import StdioServerParameters

    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return StdioServerParameters(command=sys.executable, args=["-m", "exo_cli", "mcp", *args], env=full,
                                 cwd=str(cwd))


def test_stdio_list_and_call(repo: Path) -> None:
    from mcp import Client

    async def go() -> None:
        async with Client(_params(repo)) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            assert {"exo_status", "list_agents"} <= tools
            r = await c.call_tool("exo_status", {})
            assert not r.is_error
            assert r.structured_content["repo"] == str(repo)
            assert json.loads(r.content[0].text)["git"]["branch"] == "main"
            bad = await c.call_tool("exo_status", {"agent": "ghost"})
            assert bad.is_error
            text = bad.content[0].text
            err = json.loads(text[text.index("{"):])["error"]
            assert err["code"] == -32001 and err["name"] == "NotFound" and err["hint"]

    asyncio.run(go())


def test_stdio_outside_repo_fails_cleanly(tmp_path: Path) -> None:
    from mcp import Client

    async def go() -> None:
        async with Client(_params(tmp_path)) as c:
            try:
                await c.call_tool("exo_status", {})
            except Exception as exc:  # MCPError: a protocol error with exo's code
                assert getattr(exc, "code", None) == -32005, exc
            else:
                raise AssertionError("expected a protocol error outside a repository")

    asyncio.run(go())


def test_dev_role_server_and_human_only_tools_hidden(repo: Path) -> None:
    from mcp import Client

    Exo(repo)("init")

    async def go() -> set[str]:
        async with Client(_params(repo, "--role", "dev")) as c:
            return {t.name for t in (await c.list_tools()).tools}

    tools = asyncio.run(go())
    assert "exo_status" in tools
    assert not any(t.startswith("init") for t in tools)
