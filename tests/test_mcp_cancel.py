"""Blocking tools honour the client's cancellation and hold no lock while they wait."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import mcp_extra_ops
import pytest

from conftest import ROOT
from exo_cli.env import Env

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def extra_ops() -> Iterator[None]:
    mcp_extra_ops.started.clear()
    mcp_extra_ops.observed.clear()
    mcp_extra_ops.register()
    yield
    mcp_extra_ops.unregister()


def test_in_process_client_cancels_blocking_tool(repo: Path, extra_ops: None) -> None:
    from mcp import Client

    from exo_cli.mcp_server import build_server

    env = Env(cwd=repo)
    server = build_server(env, "tl")

    async def go() -> None:
        async with Client(server) as c:
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:

                    async def blocked() -> None:
                        await c.call_tool("test_block", {"seconds": 60})
                        raise AssertionError("the blocking call returned instead of being cancelled")

                    tg.start_soon(blocked)
                    assert await anyio.to_thread.run_sync(mcp_extra_ops.started.wait, 30)
                    # while it waits: other calls are answered and the state DB is writable (no lock held)
                    r = await c.call_tool("exo_status", {})
                    assert not r.is_error and r.structured_content["repo"] == str(repo)
                    await anyio.to_thread.run_sync(lambda: Env(cwd=repo).store.kv_set("probe", "1"))
                    assert not mcp_extra_ops.observed.is_set()
                    scope.cancel()
            assert scope.cancelled_caught
            assert await anyio.to_thread.run_sync(mcp_extra_ops.observed.wait, 30), "op never saw the cancel"
            r = await c.call_tool("exo_status", {})  # the server still answers
            assert not r.is_error
            r = await c.call_tool("test_block", {"seconds": 0})  # and runs the blocking tool again
            assert r.structured_content == {"cancelled": False}

    anyio.run(go)


def test_stdio_client_timeout_cancels_blocking_tool(repo: Path, tmp_path: Path) -> None:
    """Over the wire: the client gives up (timeout), sends notifications/cancelled, the op stops."""
    from mcp import StdioServerParameters
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    mark = tmp_path / "cancelled.mark"
    begun = tmp_path / "started.mark"
    params = StdioServerParameters(
        command=sys.executable, args=["-c", "import mcp_extra_ops; mcp_extra_ops.main()", "mcp"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]), "EXO_TEST_MARK": str(mark),
             "EXO_TEST_STARTED": str(begun)},
        cwd=str(repo))

    async def go() -> None:
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()

            async def call() -> None:
                await s.call_tool("test_block", {"seconds": 120})

            # The client gives up once the server runs the tool (a cancellation sent before the
            # server has the request would test nothing, and could leave the tool running).
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    with anyio.fail_after(60):
                        while not begun.exists():
                            await anyio.sleep(0.05)
                    scope.cancel()
            assert scope.cancelled_caught
            with anyio.fail_after(60):
                while not mark.exists():
                    await anyio.sleep(0.05)
            assert mark.read_text() == "cancelled"
            res = await s.call_tool("exo_status", {})
            assert not res.is_error and res.structured_content["repo"] == str(repo)

    anyio.run(go)
