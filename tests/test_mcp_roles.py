"""Roles of `exo mcp` through the real MCP SDK client over stdio, and refusals behind the listing."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import mcp_extra_ops
import pytest

from conftest import ROOT, agent_vars
from exo_cli import registry
from exo_cli.env import Env
from exo_cli.errors import StateError
from exo_cli.records import Agent

TESTS = Path(__file__).resolve().parent
LAUNCH = [sys.executable, "-c", "import mcp_extra_ops; mcp_extra_ops.main()"]


@pytest.fixture
def extra_ops() -> Iterator[None]:
    mcp_extra_ops.register()
    yield
    mcp_extra_ops.unregister()


def server_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]), **extra}


def record_agent(repo: Path, agent_id: str, role: str) -> None:
    """Insert an agent record the way spawn does (through the Store), with no process to match."""
    Env(cwd=repo).store.insert_agent(
        Agent(id=agent_id, name=agent_id, role=role, parent="root", status="working", backend="demo",
              mux="headless", worktree=str(repo / ".exo" / "worktrees" / agent_id), branch=f"main.{agent_id}"))


def expected_tools(role: str) -> set[str]:
    """What a server for ``role`` must list, from the registry (with the test-only operations)."""
    ops = registry.load_all()
    names = set()
    for op in ops.values():
        for tool in op.tools:
            roles = op.tool_roles(tool)
            if role in roles or (role == "tl" and "dev" in roles):
                names.add(tool.name)
    return names


def list_over_stdio(repo: Path, *args: str, env: dict[str, str] | None = None) -> tuple[set[str], str]:
    """Tool names a real `exo mcp` (test operations included) lists over stdio, and its stderr."""
    from mcp import StdioServerParameters

    errlog = repo.parent / f"stderr-{os.getpid()}-{len(args)}.log"

    async def go() -> set[str]:
        with open(errlog, "w") as err:
            params = StdioServerParameters(command=LAUNCH[0], args=[*LAUNCH[1:], "mcp", *args],
                                           env=server_env(**(env or {})), cwd=str(repo))
            from mcp.client.session import ClientSession
            from mcp.client.stdio import stdio_client

            async with stdio_client(params, errlog=err) as (r, w), ClientSession(r, w) as s:
                await s.initialize()
                return {t.name for t in (await s.list_tools()).tools}

    names = asyncio.run(go())
    return names, errlog.read_text()


def test_tl_server_lists_tl_and_dev_tools(repo: Path, extra_ops: None) -> None:
    tools, _ = list_over_stdio(repo)  # the human's own session: the root TL
    assert tools == expected_tools("tl")
    assert "test_tl_only" in tools and "exo_status" in tools and "test_block" in tools
    assert tools >= expected_tools("dev")


def test_dev_server_lists_only_dev_tools(repo: Path, extra_ops: None) -> None:
    tools, _ = list_over_stdio(repo, "--role", "dev")
    assert tools == expected_tools("dev")
    assert "test_tl_only" not in tools and "exo_status" in tools


def test_recorded_dev_agent_cannot_raise_its_role(repo: Path, extra_ops: None) -> None:
    record_agent(repo, "w1", "dev")
    for role in ("tl", "auto"):
        tools, stderr = list_over_stdio(repo, "--role", role, env=agent_vars(repo, "w1"))
        assert tools == expected_tools("dev"), role
        assert "test_tl_only" not in tools
        if role == "tl":
            assert "--role tl ignored" in stderr and "w1" in stderr
    # a recorded TL (a subtree child) gets TL tools with auto
    record_agent(repo, "t1", "tl")
    assert list_over_stdio(repo, env=agent_vars(repo, "t1"))[0] == expected_tools("tl")


def test_hidden_tl_tool_is_refused_by_the_operation(repo: Path, extra_ops: None) -> None:
    """A dev server does not list a TL tool; reached anyway (internal path), the operation refuses it."""
    from mcp.types import CallToolResult

    from exo_cli.mcp_server import build_server, make_tool

    op = registry.get("test_tl_only")
    tool = op.tools[0]

    # 1. the human's server lowered to dev
    env = Env(cwd=repo)
    server = build_server(env, "dev")
    assert env.role == "dev"
    res = asyncio.run(make_tool(env, op, tool)(word="x"))
    assert isinstance(res, CallToolResult) and res.is_error
    err = json.loads(res.content[0].text)["error"]  # type: ignore[union-attr]
    assert err["code"] == -32004 and err["name"] == "StateError" and err["data"]["op"] == "test_tl_only"

    async def listed() -> set[str]:
        from mcp import Client

        async with Client(server) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            r = await c.call_tool("test_tl_only", {"word": "x"})  # not registered: the SDK refuses too
            assert r.is_error
            return names

    assert "test_tl_only" not in asyncio.run(listed())

    # 2. a recorded dev agent (EXO_AGENT), even with a server asked for tl
    record_agent(repo, "w2", "dev")
    denv = Env(cwd=repo, environ={**os.environ, **agent_vars(repo, "w2")})
    build_server(denv, "tl")
    assert denv.caller.agent_id == "w2" and denv.role == "dev"
    res = asyncio.run(make_tool(denv, op, tool)(word="x"))
    assert res.is_error and json.loads(res.content[0].text)["error"]["data"]["caller"] == "w2"
    with pytest.raises(StateError):
        registry.invoke("test_tl_only", Env(cwd=repo, environ={**os.environ, **agent_vars(repo, "w2")}), word="x")
    # the human at the root may
    assert registry.invoke("test_tl_only", Env(cwd=repo), word="ok")["word"] == "ok"


def test_cli_refuses_tl_operation_for_dev_agent(repo: Path, extra_ops: None) -> None:
    """The CLI front end goes through the same check: a dev agent's `exo` is refused with exit 5."""
    record_agent(repo, "w3", "dev")
    code = ("import mcp_extra_ops, click; from exo_cli import registry; from exo_cli.main import cli, main;"
            "mcp_extra_ops.register();"
            "cli.add_command(click.command('tl-only')(click.pass_obj("
            "lambda env: print(registry.invoke('test_tl_only', env, word='x')))));"
            "main()")
    p = subprocess.run([sys.executable, "-c", code, "tl-only"], cwd=repo, capture_output=True, text=True,
                       env=server_env(**agent_vars(repo, "w3")), timeout=60)
    assert p.returncode == 5, p.stderr
    assert "dev role cannot" in p.stderr
    ok = subprocess.run([sys.executable, "-c", code, "tl-only"], cwd=repo, capture_output=True, text=True,
                        env=server_env(), timeout=60)
    assert ok.returncode == 0 and "'word': 'x'" in ok.stdout, ok.stderr


def _sentences(text: str) -> int:
    return len([s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if len(s.split()) >= 3])


def test_every_tool_description_has_decision_sentences(repo: Path) -> None:
    from mcp import Client

    from exo_cli.mcp_server import build_server, tool_description

    async def go() -> dict[str, str]:
        async with Client(build_server(Env(cwd=repo), "tl")) as c:
            return {t.name: t.description or "" for t in (await c.list_tools()).tools}

    listed = asyncio.run(go())
    for op in registry.load_all().values():
        for tool in op.tools:
            desc = listed[tool.name]
            assert desc == tool_description(op, tool)
            if tool.description:
                assert desc == tool.description, f"{tool.name}: Tool.description is not used"
            assert _sentences(desc) >= 2, f"{tool.name}: description needs 2+ sentences: {desc!r}"


def test_tool_description_prefers_tool_then_op() -> None:
    from exo_cli.mcp_server import tool_description
    from exo_cli.registry import Op, Tool

    def f(env: object) -> None:
        """Do a thing.

        More about it."""

    base = Op("x", f, None, (), ("tl",), False, False, False, {})
    assert tool_description(base, Tool("x")) == "Do a thing.\n\nMore about it."
    assert tool_description(base._replace(description="Op words. Two."), Tool("x")) == "Op words. Two."
    assert tool_description(base, Tool("x", description="Seed words. Decide here.")) == "Seed words. Decide here."


def test_background_tasks_start_only_for_the_root_tl(repo: Path) -> None:
    import threading

    from exo_cli import mcp_server

    ran: list[str] = []
    done = threading.Event()

    def starter(env: Env) -> None:
        ran.append(env.caller.agent_id)
        done.set()

    def broken(env: Env) -> None:
        raise RuntimeError("a failing starter is logged, never raised")

    from exo_cli.ops.watch import background_poller

    assert background_poller in mcp_server.BACKGROUND  # the root TL's server runs the forge poller
    registered = len(mcp_server.BACKGROUND)
    mcp_server.BACKGROUND.extend([broken, starter])
    try:
        assert mcp_server.start_background_tasks(Env(cwd=repo), "dev") == []
        record_agent(repo, "t5", "tl")
        child_tl = Env(cwd=repo, environ={**os.environ, **agent_vars(repo, "t5")})
        assert mcp_server.start_background_tasks(child_tl, "tl") == []  # a subtree TL is not the root
        threads = mcp_server.start_background_tasks(Env(cwd=repo), "tl")
        assert len(threads) == registered + 2 and all(t.daemon for t in threads)
        for t in threads:
            t.join(60)
        assert done.is_set() and ran == ["root"]
    finally:
        del mcp_server.BACKGROUND[-2:]
