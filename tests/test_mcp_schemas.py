"""exo's argument check is exactly the JSON Schema each tool publishes (hypothesis, against jsonschema).

For every tool (exo's and the compatible sets'), hypothesis draws argument objects: the tool's own
argument names and strangers, with values of every JSON kind (null, booleans, big integers, floats,
strings, nested arrays and objects) and values shaped by the schema. ``schema.check_arguments``
accepts exactly what an independent validator (jsonschema, Draft 2020-12) accepts; everything it
rejects comes back from the server as a UsageError (-32602) naming an argument, and nothing runs.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exo_cli import registry, schema
from exo_cli.env import Env
from exo_cli.errors import UsageError
from exo_cli.records import MCP_COMPAT

OPS = registry.load_all()
ALL_TOOLS = [(op, t) for op in OPS.values() for t in op.all_tools()]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


def shaped(prop: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values near what ``prop`` admits (mostly valid, sometimes just off)."""
    if "anyOf" in prop:
        return st.one_of(*[shaped(o) for o in prop["anyOf"]])
    options: list[st.SearchStrategy[Any]] = [json_values]
    if "enum" in prop:
        options.append(st.sampled_from(prop["enum"]))
    kind = prop.get("type")
    if kind == "string":
        options.append(st.text(max_size=20))
    elif kind == "integer":
        low = prop.get("minimum")
        options += [st.integers(min_value=-5, max_value=2**40), st.floats(min_value=-3, max_value=3).map(round)
                    .map(float)]
        if low is not None:
            options.append(st.just(low))
    elif kind == "number":
        options += [st.floats(min_value=-5, max_value=1e6, allow_nan=False), st.integers(-5, 100)]
    elif kind == "boolean":
        options.append(st.booleans())
    elif kind == "array":
        options.append(st.lists(shaped(prop.get("items", {})), max_size=3))
    elif kind == "object":
        props = prop.get("properties", {})
        options.append(st.fixed_dictionaries({}, optional={k: shaped(v) for k, v in props.items()}))
        if prop.get("required"):
            options.append(st.fixed_dictionaries({k: shaped(props[k]) for k in prop["required"]},
                                                 optional={k: shaped(v) for k, v in props.items()
                                                           if k not in prop["required"]}))
    return st.one_of(*options)


def arguments(input_schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    props = input_schema["properties"]
    mine = st.fixed_dictionaries({}, optional={k: shaped(v) for k, v in props.items()})
    strangers = st.dictionaries(st.text(min_size=1, max_size=8), json_values, max_size=2)
    return st.one_of(mine, st.tuples(mine, strangers).map(lambda t: {**t[1], **t[0]}), json_values)


@pytest.mark.parametrize("pair", ALL_TOOLS, ids=lambda p: f"{p[1].name}/{p[1].compat or 'exo'}")
def test_check_accepts_exactly_what_the_schema_admits(pair: tuple[registry.Op, registry.Tool]) -> None:
    op, tool = pair
    input_schema = schema.input_schema(op.tool_args(tool))
    jsonschema.Draft202012Validator.check_schema(input_schema)
    validator = jsonschema.Draft202012Validator(input_schema)

    @settings(max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(args=arguments(input_schema))
    def run(args: Any) -> None:
        valid = validator.is_valid(args)
        try:
            checked = schema.check_arguments(tool.name, input_schema, args)
        except UsageError as exc:
            assert not valid, (args, exc.message)
            assert exc.rpc_code == -32602 and (exc.data.get("unknown") or exc.data.get("errors")
                                               or not isinstance(args, dict)), exc.data
            return
        assert valid, (args, "accepted but the schema rejects it")
        assert checked == args  # nothing coerced but an integral number into an int
        assert json.dumps(checked, sort_keys=True) == json.dumps(args, sort_keys=True) or any(
            isinstance(v, float) for v in _leaves(args))

    run()


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Any]:
    import subprocess

    from exo_cli.mcp_server import build_server

    repo = tmp_path_factory.mktemp("schemas") / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    return {False: build_server(Env(cwd=repo), "tl", ()), True: build_server(Env(cwd=repo), "tl", MCP_COMPAT),
            "repo": repo}  # type: ignore[dict-item]


@pytest.mark.parametrize("pair", ALL_TOOLS, ids=lambda p: f"{p[1].name}/{p[1].compat or 'exo'}")
def test_rejected_arguments_reach_nothing(servers: dict[Any, Any], pair: tuple[registry.Op, registry.Tool]) -> None:
    """Through the server: every argument object the schema rejects is a -32602 error object, and no call runs."""
    op, tool = pair
    input_schema = schema.input_schema(op.tool_args(tool))
    validator = jsonschema.Draft202012Validator(input_schema)
    server = servers[tool.compat is not None]
    repo: Path = servers["repo"]

    @settings(max_examples=15, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(args=arguments(input_schema).filter(lambda a: isinstance(a, dict) and not validator.is_valid(a)))
    def run(args: dict[str, Any]) -> None:
        res = asyncio.run(server.call_tool(tool.name, args))
        assert res.is_error
        err = json.loads(res.content[0].text)["error"]
        assert err["code"] == -32602 and err["name"] == "UsageError", err

    run()
    assert not (repo / ".git" / "exo").exists(), "a rejected call opened exo's state"
