"""One code path: every operation has a command and tools with the same parameters, help and result."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import click
import pytest

from conftest import Exo
from exo_cli import registry
from exo_cli.cli import cli
from exo_cli.commands import COMMANDS
from exo_cli.commands._options import VIEW_OPTIONS

OPS = registry.load_all()


def command_for(path: str) -> click.Command:
    ctx = click.Context(cli)
    cmd: click.Command = cli
    for part in path.split():
        assert isinstance(cmd, click.Group), f"{path}: {part} is not under a group"
        sub = cmd.get_command(ctx, part)
        assert sub is not None, f"no CLI command for `exo {path}`"
        cmd = sub
    return cmd


@pytest.mark.parametrize("name", sorted(n for n, o in OPS.items() if o.cli))
def test_cli_command_matches_operation(name: str) -> None:
    op = OPS[name]
    cmd = command_for(op.cli or "")
    params = {p.name: p for p in cmd.params if p.name not in VIEW_OPTIONS}
    assert set(params) == {p.name for p in op.params()}, f"exo {op.cli} parameters differ from {name}"
    for pname, p in params.items():
        if isinstance(p, click.Option):
            assert p.help == op.cli_text(op.help[pname]), f"exo {op.cli} --{pname}: help differs from the registry"
    assert (cmd.help or "").startswith(op.cli_text(op.doc)), f"exo {op.cli}: help is not the operation's docstring"
    assert any(p.name == "as_json" for p in cmd.params), f"exo {op.cli} has no --json"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help_and_honest_summary(name: str, repo: Path) -> None:
    cmd = command_for(name)
    first = (cmd.help or "").strip().splitlines()[0]
    assert COMMANDS[name].summary == first, f"commands table summary of {name} is stale"
    r = Exo(repo)(name, "--help")
    assert r.exit_code == 0 and "Usage: exo" in r.stdout


def test_groups_subcommands_have_help(repo: Path) -> None:
    ctx = click.Context(cli)
    for name in COMMANDS:
        cmd = cli.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            for sub in cmd.list_commands(ctx):
                r = Exo(repo)(name, sub, "--help")
                assert r.exit_code == 0, f"exo {name} {sub} --help failed"


def test_every_parameter_has_help() -> None:
    for op in OPS.values():
        for p in op.params():
            assert op.help.get(p.name), f"{op.name}.{p.name} has no help"
        for tool in op.tools:
            if tool.adapt:
                import inspect

                for p in inspect.signature(tool.adapt).parameters.values():
                    assert {**op.help, **tool.help}.get(p.name), f"tool {tool.name}.{p.name} has no help"


def _tools(role: str, cwd: Path) -> dict[str, object]:
    from mcp import Client

    from exo_cli.env import Env
    from exo_cli.mcp_server import build_server

    server = build_server(Env(cwd=cwd), role)

    async def go() -> dict[str, object]:
        async with Client(server) as c:
            return {t.name: t for t in (await c.list_tools()).tools}

    return asyncio.run(go())


def test_mcp_tools_match_operations(repo: Path) -> None:
    tools = _tools("tl", repo)
    for op in OPS.values():
        for tool in op.tools:
            assert tool.name in tools, f"{tool.name} missing from MCP"
            t = tools[tool.name]
            schema = t.input_schema  # type: ignore[attr-defined]
            props = schema.get("properties", {})
            assert set(props) == {a.name for a in op.tool_args(tool)}
            for a in op.tool_args(tool):
                assert props[a.name]["description"] == a.help
            if tool.adapt is None:
                assert set(props) == {op.public(p.name) for p in op.params() if p.name not in op.cli_only}
            assert t.annotations.read_only_hint == op.read_only  # type: ignore[attr-defined]
            assert t.annotations.destructive_hint == op.destructive  # type: ignore[attr-defined]
            assert (t.description or "").startswith(op.tool_text(tool.description or op.doc, tool)[:40])  # type: ignore[attr-defined]
    human_only = [t.name for o in OPS.values() if o.roles == ("human",) for t in o.tools]
    assert not human_only, "human-only operations must not have MCP tools"


def _call(cwd: Path, tool: str, args: dict[str, object]) -> object:
    from mcp import Client

    from exo_cli.env import Env
    from exo_cli.mcp_server import build_server

    server = build_server(Env(cwd=cwd), "tl")

    async def go() -> object:
        async with Client(server) as c:
            r = await c.call_tool(tool, args)
            assert not r.is_error, r.content
            return r.structured_content

    return asyncio.run(go())


@pytest.mark.parametrize(("tool", "args", "cli_args"), [
    ("exo_status", {}, ["status", "--json"]),
    ("list_agents", {}, ["agents", "--json"]),
])
def test_cli_json_equals_structured_content(repo: Path, tool: str, args: dict[str, object],
                                            cli_args: list[str]) -> None:
    (repo / "dirty.txt").write_text("x")
    r = Exo(repo)(*cli_args)
    assert r.exit_code == 0, r.stderr
    cli_obj = json.loads(r.stdout)
    mcp_obj = _call(repo, tool, args)

    def scrub(o: object) -> object:  # the role differs: the CLI's human vs the MCP server's root TL
        if isinstance(o, dict):
            return {k: scrub(v) for k, v in o.items() if k not in ("role", "age_seconds", "status_age_seconds")}
        return o

    assert scrub(cli_obj) == scrub(mcp_obj)
    assert os.path.exists(repo / "dirty.txt")
