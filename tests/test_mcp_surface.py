"""The public MCP tool surface, as a client of the real `exo mcp` sees it over stdio.

- Every ``@op`` anywhere in ``exo_cli`` (found by importing every module of the package, not
  through the registry's own discovery of ``ops/``) has each of its tools served to every
  role it names, and nothing else is served. A tl server also serves the dev tools.
- The tool list of each role (names, descriptions, input and output schemas, annotations, as
  JSON on the wire) equals the snapshot checked in under ``tests/snapshots/``, so any change to
  the public tool surface shows in review. After a deliberate change, regenerate with:

      EXO_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest -q tests/test_mcp_surface.py
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from exo_cli import registry
from exo_cli.env import ROLE_RANK

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
ROLES = ("tl", "dev")  # what `exo mcp --role` serves (the human's own session is served as tl)
UPDATE = os.environ.get("EXO_UPDATE_SNAPSHOTS") == "1"


def exo_command() -> list[str]:
    """The installed `exo` script next to this interpreter, else `python -m exo_cli`."""
    script = Path(sys.executable).with_name("exo")
    return [str(script)] if script.exists() else [sys.executable, "-m", "exo_cli"]


def list_tools(cwd: Path, role: str) -> list[dict[str, Any]]:
    """tools/list of a real `exo mcp --role ROLE` over stdio, as the JSON on the wire."""
    from mcp import Client, StdioServerParameters

    command = exo_command()
    params = StdioServerParameters(command=command[0], args=[*command[1:], "mcp", "--role", role],
                                   env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=str(cwd))

    async def go() -> list[dict[str, Any]]:
        async with Client(params) as client:
            listed = await client.list_tools()
            tools: list[dict[str, Any]] = listed.model_dump(mode="json", by_alias=True, exclude_none=True)["tools"]
            return tools

    return asyncio.run(go())


@cache
def every_op() -> dict[str, registry.Op]:
    """Every operation declared anywhere in exo_cli: import each module of the package."""
    package = ROOT / "exo_cli"
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__main__":
            continue  # running it would run the CLI
        importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return {name: op for name, op in registry.OPS.items() if op.func.__module__.startswith("exo_cli.")}


def expected_tools(role: str) -> set[str]:
    """The tools a server for ``role`` must list: those naming it, or a role it outranks."""
    return {tool.name for op in every_op().values() for tool in op.tools
            if any(ROLE_RANK[r] <= ROLE_RANK[role] for r in op.tool_roles(tool))}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    from conftest import git

    repo = tmp_path_factory.mktemp("surface") / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "-c", "user.name=Exo Test", "-c", "user.email=exo@example.invalid", "commit", "-q",
        "--allow-empty", "-m", "initial")
    return {role: list_tools(repo, role) for role in ROLES}


def test_every_op_is_discovered_by_the_registry() -> None:
    discovered = {name for name, op in registry.load_all().items() if op.func.__module__.startswith("exo_cli.")}
    assert discovered == set(every_op())
    assert any(op.tools for op in every_op().values())


@pytest.mark.parametrize("role", ROLES)
def test_exo_mcp_serves_exactly_the_tools_of_the_role(served: dict[str, list[dict[str, Any]]], role: str) -> None:
    names = [t["name"] for t in served[role]]
    assert len(names) == len(set(names)), "a tool is listed twice"
    want = expected_tools(role)
    assert set(names) == want, (f"missing: {sorted(want - set(names))}; "
                                f"not in the registry for {role}: {sorted(set(names) - want)}")


def test_tl_serves_every_dev_tool(served: dict[str, list[dict[str, Any]]]) -> None:
    tl = {t["name"]: t for t in served["tl"]}
    for tool in served["dev"]:
        assert tl.get(tool["name"]) == tool


@pytest.mark.parametrize("role", ROLES)
def test_tool_list_matches_snapshot(served: dict[str, list[dict[str, Any]]], role: str) -> None:
    path = SNAPSHOTS / f"list_tools.{role}.json"
    current = {"tools": served[role]}
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(current, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    assert path.exists(), f"no snapshot {path.name}: run EXO_UPDATE_SNAPSHOTS=1 pytest {Path(__file__).name}"
    snapshot = json.loads(path.read_text(encoding="utf-8"))
    if current != snapshot:
        was = {t["name"]: t for t in snapshot["tools"]}
        now = {t["name"]: t for t in current["tools"]}
        changed = sorted(n for n in was.keys() & now.keys() if was[n] != now[n])
        pytest.fail(f"the {role} MCP tool list changed: added {sorted(now.keys() - was.keys())}, "
                    f"removed {sorted(was.keys() - now.keys())}, changed {changed}"
                    f"{' (order only)' if not changed and was.keys() == now.keys() else ''}.\n"
                    "If this is deliberate, regenerate the snapshot and review its diff:\n"
                    "  EXO_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest -q tests/test_mcp_surface.py")
