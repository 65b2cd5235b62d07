"""The MCP tool arguments against the registry: every parameter reachable, precise types, strict checks, compat sets.

Everything here is derived from the registry (operations, their tools, their parameters' types)
and the CLI's own Click parameters, so a new option or tool is checked without editing this file.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import typing
from pathlib import Path
from typing import Any

import click
import pytest

from conftest import Exo, git, write_trusted
from exo_cli import registry, schema
from exo_cli.commands._options import VIEW_OPTIONS
from exo_cli.env import Env
from exo_cli.errors import ExoError
from exo_cli.records import MCP_COMPAT

OPS = registry.load_all()
ALL_TOOLS = [(op, t) for op in OPS.values() for t in op.all_tools()]
FIXTURES = Path(__file__).parent / "fixtures" / "beads" / "small"
# What each tool family's set adds to exo's default tool names (its other tools exist already and gain arguments).
FAMILY_NEW_TOOLS = {
    "claude-team": {"message_workers"},
    "termtile": {"spawn_agent", "send_to_agent", "wait_for_idle", "kill_agent"},
    "ikigai": {"fork"},
}
FAMILY_EXTENDED_TOOLS = {
    "claude-team": {"spawn_workers": {"workers", "layout"}},
    "termtile": {"read_from_agent": {"slot", "pattern", "clean"}, "get_artifact": {"slot"}, "list_agents": set()},
    "ikigai": {"send": set()},
}


def tool_id(pair: tuple[registry.Op, registry.Tool]) -> str:
    return f"{pair[1].name}/{pair[1].compat or 'exo'}"


def command_for(path: str) -> click.Command:
    from exo_cli.main import cli

    ctx = click.Context(cli)
    cmd: click.Command = cli
    for part in path.split():
        assert isinstance(cmd, click.Group)
        sub = cmd.get_command(ctx, part)
        assert sub is not None
        cmd = sub
    return cmd


# --------------------------------------------------------------------------- every parameter reachable


def sample(prop: dict[str, Any], *, default: Any = None) -> Any:
    """A value the schema admits and that differs from ``default``."""
    if "enum" in prop:
        return next(v for v in prop["enum"] if v != default)
    if "anyOf" in prop:
        return sample(next(o for o in prop["anyOf"] if o.get("type") != "null"), default=default)
    kind = prop.get("type")
    if kind == "string":
        return "sample"
    if kind == "integer":
        return max(int(prop.get("minimum", 1)), 1) + (1 if default == 1 else 0)
    if kind == "number":
        return float(prop.get("minimum", 0)) + 7.0
    if kind == "boolean":
        return not default
    if kind == "array":
        return [sample(prop.get("items", {"type": "string"}))]
    if kind == "object":
        return {k: sample(v) for k, v in prop.get("properties", {}).items()}
    raise AssertionError(f"no sample for {prop}")


def reached(op: registry.Op) -> dict[str, set[str]]:
    """Operation parameter -> the tools whose calls can set it (taken as is, or produced by the adapter)."""
    defaults = {p.name: p.default for p in op.params()}
    out: dict[str, set[str]] = {}
    for tool in op.all_tools():
        args = op.tool_args(tool)
        props = schema.input_schema(args)["properties"]
        for a in args:
            if a.param is not None:
                out.setdefault(a.param, set()).add(tool.name)
        own = [a for a in args if a.param is None]
        base = {a.name: sample(props[a.name]) for a in own if a.required}
        for a in own:  # each own argument alone (with the required ones): what reaches the operation
            try:
                calls = registry.tool_calls(op, tool, {**base, a.name: sample(props[a.name], default=a.default)})
            except ExoError:
                continue
            for kw in calls:
                for k, v in kw.items():
                    assert k in defaults, f"{tool.name}: its adapter produced {k!r}, not a parameter of {op.name}"
                    if v != defaults[k] and v not in (None, [], ()):
                        out.setdefault(k, set()).add(tool.name)
    return out


@pytest.mark.parametrize("name", sorted(n for n, o in OPS.items() if o.cli))
def test_every_cli_option_has_an_mcp_path_or_a_reason(name: str) -> None:
    op = OPS[name]
    cli_params = {p.name for p in command_for(op.cli or "").params} - set(VIEW_OPTIONS)
    assert cli_params == {p.name for p in op.params()}
    if not op.all_tools():
        assert op.roles == ("human",) or op.no_tools, f"{name} has a command but no tool, and no reason"
        return
    assert op.no_tools is None, f"{name} has tools but declares no_tools"
    paths = reached(op)
    for param in sorted(cli_params):
        if param in op.cli_only:
            assert op.cli_only[param].strip(), f"{name}.{param}: empty reason"
            assert param not in paths, f"{name}.{param} is declared CLI-only but {paths[param]} reach it"
        else:
            assert param in paths, f"exo {op.cli}: {param} has no MCP path and no cli_only reason"
    assert set(op.cli_only) <= cli_params, f"{name}: cli_only names unknown parameters"


def test_spawn_tools_take_the_options_the_issue_named() -> None:
    op = OPS["spawn"]
    for tool in op.tools:
        names = {a.name for a in op.tool_args(tool)}
        assert {"after", "mux", "from", "skip_permissions", "no_worktree", "repo"} <= names, tool.name
    assert "ready" in {a.name for a in op.tool_args(op.tools[0])}


# --------------------------------------------------------------------------- precise types


def _typed(prop: dict[str, Any], where: str) -> None:
    if "anyOf" in prop:
        for option in prop["anyOf"]:
            _typed(option, where)
        return
    assert "type" in prop or "enum" in prop, f"{where}: no JSON type: {prop}"
    if prop.get("type") == "array":
        assert "items" in prop, f"{where}: array without typed items"
        _typed(prop["items"], where + "[]")
    if prop.get("type") == "object":
        assert prop.get("additionalProperties") is False, f"{where}: an input object must be closed"
        for k, v in prop.get("properties", {}).items():
            _typed(v, f"{where}.{k}")


@pytest.mark.parametrize("pair", ALL_TOOLS, ids=tool_id)
def test_every_tool_argument_has_a_precise_json_type(pair: tuple[registry.Op, registry.Tool]) -> None:
    op, tool = pair
    s = schema.input_schema(op.tool_args(tool))
    assert s["additionalProperties"] is False
    for name, prop in s["properties"].items():
        _typed(prop, f"{tool.name}.{name}")
        assert prop["description"], f"{tool.name}.{name}: no description"


@pytest.mark.parametrize("name", sorted(n for n, o in OPS.items() if o.cli and o.all_tools()))
def test_cli_choices_and_ranges_are_the_tool_schemas(name: str) -> None:
    """A click.Choice is the schema's enum, an IntRange/FloatRange its minimum: one rule on both sides."""
    op = OPS[name]
    cmd = command_for(op.cli or "")
    args = {a.param: a for t in op.all_tools() for a in op.tool_args(t) if a.param}
    for p in cmd.params:
        if p.name not in args:
            continue
        prop = schema.type_schema(args[p.name].annotation)
        options = prop.get("anyOf", [prop])
        enum = next((o["enum"] for o in options if "enum" in o), None)
        minimum = next((o["minimum"] for o in options if "minimum" in o), None)
        if isinstance(p.type, click.Choice):
            assert enum == list(p.type.choices), f"exo {op.cli} {p.name}: choices differ from the tool's enum"
        else:
            assert enum is None, f"{name}.{p.name}: enum in the schema but no click.Choice"
        if isinstance(p.type, click.IntRange | click.FloatRange):
            assert minimum == p.type.min, f"exo {op.cli} {p.name}: range differs from the tool's minimum"
        else:
            assert minimum is None, f"exo {op.cli} {p.name}: the tool has a minimum, the command no range"
        if isinstance(p.type, click.types.IntParamType):
            kinds = {o.get("type") for o in options}
            assert "integer" in kinds, f"{name}.{p.name}: an integer option but not an integer argument"


@pytest.mark.parametrize("pair", ALL_TOOLS, ids=tool_id)
def test_output_schema_is_derived_from_the_result_class(pair: tuple[registry.Op, registry.Tool]) -> None:
    from exo_cli.mcp_server import tool_output_type

    op, tool = pair
    cls = tool_output_type(op, tool)
    out = schema.output_schema(cls)
    assert out["type"] == "object"
    classes = typing.get_args(cls) or (cls,)
    shapes = out.get("anyOf", [out])
    assert len(shapes) == len(classes)
    for c, shape in zip(classes, shapes, strict=True):
        if issubclass(c, tuple):  # a record (NamedTuple): every field
            assert set(shape["properties"]) == set(c._fields)
        else:
            assert set(shape["properties"]) == {f.name for f in dataclasses.fields(c) if f.repr}
        assert shape["required"] == list(shape["properties"])


# --------------------------------------------------------------------------- strict arguments, on every tool


def _server(repo: Path, compat: tuple[str, ...] = MCP_COMPAT) -> Any:
    from exo_cli.mcp_server import build_server

    return build_server(Env(cwd=repo), "tl", compat)


def _required(op: registry.Op, tool: registry.Tool) -> dict[str, Any]:
    props = schema.input_schema(op.tool_args(tool))["properties"]
    return {a.name: sample(props[a.name]) for a in op.tool_args(tool) if a.required}


def _state(repo: Path) -> tuple[str, list[str], list[Any]]:
    env = Env(cwd=repo)
    agents = [a.id for a in env.store.agents()] if env.has_state() else []
    messages = env.store.messages(recipient="root") if env.has_state() else []
    return git(repo, "status", "--porcelain", "--ignored"), agents, [m.id for m in messages]


def test_unknown_and_mistyped_arguments_are_usage_errors_on_every_tool(repo: Path) -> None:
    """-32602 naming the arguments; nothing started, nothing written."""
    servers = {False: _server(repo, ()), True: _server(repo)}
    before = _state(repo)
    for op, tool in ALL_TOOLS:
        server = servers[tool.compat is not None]
        good = _required(op, tool)
        res = asyncio.run(server.call_tool(tool.name, {**good, "zz_unknown": 1, "aa_other": None}))
        assert res.is_error, tool.name
        err = json.loads(res.content[0].text)["error"]
        assert err["code"] == -32602 and err["name"] == "UsageError", (tool.name, err)
        assert err["data"]["unknown"] == ["aa_other", "zz_unknown"] and "zz_unknown" in err["message"]
        props = schema.input_schema(op.tool_args(tool))["properties"]
        for name, prop in props.items():
            kind = prop.get("type") or prop.get("anyOf", [{}])[0].get("type")
            wrong = {"string": 12, "integer": True, "number": "1", "boolean": "true", "array": {"no": "way"}}[kind]
            res = asyncio.run(server.call_tool(tool.name, {**good, name: wrong}))
            assert res.is_error, (tool.name, name, wrong)
            err = json.loads(res.content[0].text)["error"]
            assert err["code"] == -32602 and err["data"]["errors"][0]["argument"].startswith(name), (tool.name, err)
    assert _state(repo) == before


def test_a_pr_number_must_be_an_integer(repo: Path) -> None:
    server = _server(repo, ())
    for bad in (True, "3", 0, -1, 1.5, None):
        res = asyncio.run(server.call_tool("merge_pr", {"pr_number": bad}))
        err = json.loads(res.content[0].text)["error"]
        assert res.is_error and err["code"] == -32602 and err["data"]["errors"][0]["argument"] == "pr_number", bad
    res = asyncio.run(server.call_tool("merge_pr", {"pr_number": 3.0}))  # JSON's 3.0 is the integer 3
    assert json.loads(res.content[0].text)["error"]["name"] == "NotFound"


# --------------------------------------------------------------------------- the compatible sets


def _names(repo: Path, compat: tuple[str, ...], role: str = "tl") -> dict[str, Any]:
    from mcp import Client

    from exo_cli.mcp_server import build_server

    async def go() -> dict[str, Any]:
        async with Client(build_server(Env(cwd=repo), role, compat)) as c:
            return {t.name: t for t in (await c.list_tools()).tools}

    return asyncio.run(go())


def test_default_list_is_exos_own_and_each_set_adds_exactly_its_familys_tools(repo: Path) -> None:
    default = _names(repo, ())
    assert set(default) == {t.name for op in OPS.values() for t in op.tools if op.tool_roles(t)}
    assert not set(default) & set().union(*FAMILY_NEW_TOOLS.values())
    for family in MCP_COMPAT:
        tools = _names(repo, (family,))
        assert set(tools) - set(default) == FAMILY_NEW_TOOLS[family], family
        for name, args in FAMILY_EXTENDED_TOOLS[family].items():
            old, new = default[name].input_schema["properties"], tools[name].input_schema["properties"]
            assert set(old) <= set(new), (family, name, "a compatible tool must take exo's arguments too")
            assert args <= set(new), (family, name)
    both = _names(repo, MCP_COMPAT)
    assert set(both) == set(default).union(*FAMILY_NEW_TOOLS.values())
    assert "is_idle" in json.dumps(both["list_agents"].output_schema)
    assert {"sessions", "count", "coordinator_guidance"} <= set(both["spawn_workers"].output_schema["properties"])
    to = both["send"].input_schema["properties"]["to"]
    assert {o["type"] for o in to["anyOf"]} == {"string", "array"}


def test_compat_sets_from_the_config_key_and_the_flag(repo: Path) -> None:
    (repo / "exo.toml").write_text('[mcp]\ncompat = ["termtile"]\n')
    assert "spawn_agent" in _names(repo, ()) and "fork" not in _names(repo, ())
    assert "fork" in _names(repo, ("ikigai",)) and "spawn_agent" not in _names(repo, ("ikigai",))
    (repo / "exo.toml").write_text('[mcp]\ncompat = ["nope"]\n')
    r = Exo(repo)("mcp", "--compat", "nope")
    assert r.exit_code == 2 and "nope" in r.stderr
    with pytest.raises(ExoError, match=r"mcp.compat"):
        Env(cwd=repo).config.get("mcp.compat")


def test_dev_server_gets_only_the_dev_tools_of_a_set(repo: Path) -> None:
    dev = _names(repo, MCP_COMPAT, role="dev")
    roles = {t.name: op.tool_roles(t) for op in OPS.values() for t in registry.served_tools(op, MCP_COMPAT)}
    assert set(dev) == {n for n, r in roles.items() if "dev" in r}
    assert "fork" not in dev and "spawn_agent" not in dev and "send" in dev


# --------------------------------------------------------------------------- the issue's regressions


@pytest.fixture
def team(repo: Path) -> Path:
    shutil = __import__("shutil")
    shutil.copytree(FIXTURES, repo / ".beads", ignore=shutil.ignore_patterns("README.md"))
    write_trusted(repo, '[agent]\ndefault = "custom"\ncommand = ["sleep", "600"]\n[mux]\ndefault = "headless"\n')
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "team")
    return repo


def _call(repo: Path, tool: str, args: dict[str, Any], compat: tuple[str, ...] = ()) -> Any:
    from mcp import Client

    from exo_cli.mcp_server import build_server

    async def go() -> Any:
        async with Client(build_server(Env(cwd=repo), "tl", compat)) as c:
            return await c.call_tool(tool, args)

    return asyncio.run(go())


def test_spawn_tool_with_after_waits_and_ready_spawns(team: Path) -> None:
    from conftest import stop_repo_agents

    try:
        r = _call(team, "spawn_workers", {"specs": [{"name": "later", "prompt": "use {{first.output}}"}],
                                          "after": ["first"]})
        assert r.structured_content["errors"][0]["name"] == "NotFound"  # no such agent yet: nothing recorded
        assert Env(cwd=team).store.agents() == []
        r = _call(team, "spawn_workers", {"specs": [{"name": "first", "prompt": "go"}]})
        assert not r.is_error and r.structured_content["errors"] == []
        r = _call(team, "spawn_workers", {"specs": [{"name": "later", "prompt": "use {{first.output}}"}],
                                          "after": ["first"]})
        agent = r.structured_content["agents"][0]
        assert agent["status"] == "starting" and agent["status_reason"] == "waiting for first" and not agent["location"]
        r = _call(team, "spawn_agents", {"ready": 1})
        assert not r.is_error and len(r.structured_content["agents"]) == 1, r.structured_content
        assert r.structured_content["agents"][0]["bead"]
    finally:
        stop_repo_agents(team)


def test_spawn_failure_of_one_unknown_argument_starts_nothing(team: Path) -> None:
    r = _call(team, "spawn_workers", {"specs": [{"name": "w", "prompt": "p", "colour": "red"}]})
    err = json.loads(r.content[0].text)["error"]
    assert err["code"] == -32602 and err["data"]["errors"][0]["argument"] == "specs[0].colour"
    assert not Env(cwd=team).has_state() or Env(cwd=team).store.agents() == []


def test_fork_by_a_cli_that_cannot_fork_is_a_clear_error(team: Path) -> None:
    r = Exo(team)("spawn", "--subtree", "--task", "t", "--branch", "b", "--fork-session", "--agent", "gemini", "--json")
    err = json.loads(r.stdout)["error"]
    assert r.exit_code == 2 and err["name"] == "UsageError" and "cannot start from its parent's conversation" in err["message"]
    res = _call(team, "fork", {"name": "b", "prompt": "t"}, ("ikigai",))
    assert json.loads(res.content[0].text)["error"]["message"] == err["message"].replace("gemini", "custom")
    assert git(team, "branch", "--list", "main.b") == ""


def test_wait_has_one_default_timeout_on_both_sides(repo: Path) -> None:
    """No timeout: timeouts.wait seconds, for `exo wait` and the wait tool alike (0 here: return at once)."""
    (repo / "exo.toml").write_text("[timeouts]\nwait = 0\n")
    r = Exo(repo)("wait", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout) == {"results": [], "timed_out": True, "cancelled": False,
                                                        "more": False}
    res = _call(repo, "wait", {})
    assert res.structured_content == json.loads(r.stdout)
    wait_tool = next(t for t in OPS["wait"].tools if t.name == "wait")
    timeout = next(a for a in OPS["wait"].tool_args(wait_tool) if a.name == "timeout")
    assert timeout.default is None and "timeouts.wait" in timeout.help
    assert "timeouts.wait" in command_for("wait").params[1].help  # type: ignore[operator]


def test_no_tool_argument_is_accepted_and_ignored() -> None:
    """Each argument a tool lists changes the operation calls it makes, or (fields only its family has) its result."""
    for op, tool in ALL_TOOLS:
        args = op.tool_args(tool)
        props = schema.input_schema(args)["properties"]
        base = _required(op, tool)
        for a in args:
            if a.required:
                continue
            try:
                calls = registry.tool_calls(op, tool, {**base, a.name: sample(props[a.name], default=a.default)})
                plain = registry.tool_calls(op, tool, base)
            except ExoError:
                continue
            assert calls != plain or tool.result is not None, f"{tool.name}.{a.name} changes nothing"


def test_docs_show_every_reason_and_every_tool() -> None:
    """docs/agents.md lists each tool, each compatible set's tool, and each recorded cli_only/no_tools reason."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "agents.md").read_text()
    for op in OPS.values():
        for param, reason in op.cli_only.items():
            assert reason in text, f"docs/agents.md does not give the reason {op.name}.{param} is CLI-only"
        if op.no_tools:
            assert op.no_tools.rstrip(".") in text, f"docs/agents.md does not say why {op.name} has no tool"
        for tool in op.all_tools():
            row = f"| `{tool.compat}` | `{tool.name}` |" if tool.compat else f"| `{tool.name}` |"
            assert row in text, f"docs/agents.md has no row for {tool.name} ({tool.compat or 'exo'})"


def test_claude_team_workers_one_group_failing_does_not_stop_the_others(team: Path, tmp_path: Path) -> None:
    from conftest import stop_repo_agents

    try:
        r = _call(team, "spawn_workers", {"workers": [
            {"project_path": "auto", "name": "here", "prompt": "p"},
            {"project_path": str(tmp_path / "nowhere"), "name": "there", "prompt": "p"},
            {"project_path": "auto"},  # unnamed, no prompt: a memorable name, awaiting a task
        ], "layout": "new"}, ("claude-team",))
        res = r.structured_content
        assert not r.is_error, r.content
        assert [a["id"] for a in res["agents"]][0] == "here" and len(res["agents"]) == 2
        assert res["failed"] == [["*", f"Repository {tmp_path / 'nowhere'} does not exist"]]
        awaiting = res["workers_awaiting_task"]
        assert len(awaiting) == 1 and awaiting[0] in res["sessions"] and res["count"] == 2
        assert f"- {awaiting[0]} " in res["coordinator_guidance"] and "AWAITING TASK" in res["coordinator_guidance"]
        assert res["layout"] == "new"
    finally:
        stop_repo_agents(team)


def test_a_bug_in_an_operation_is_an_error_object_too(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    def broken(env: Any, *, agent: str | None = None) -> Any:
        raise TypeError("'<' not supported between instances of 'str' and 'int'")

    broken.__signature__ = __import__("inspect").signature(OPS["status"].func)  # type: ignore[attr-defined]
    broken.__module__ = OPS["status"].func.__module__
    monkeypatch.setitem(registry.OPS, "status", OPS["status"]._replace(func=broken))
    res = asyncio.run(_server(repo, ()).call_tool("exo_status", {}))
    err = json.loads(res.content[0].text)["error"]
    assert res.is_error and err["code"] == -32603 and err["message"].startswith("internal error: TypeError")
    assert "Traceback" not in caplog.text and "internal error" in caplog.text


# --------------------------------------------------------------------------- a result that says it failed


def test_a_spawn_whose_every_task_failed_is_a_tool_error_carrying_its_result(team: Path) -> None:
    """The CLI exits with the failure's code; the tool answers isError with the same object as structured content.
    A spawn of which one task spawned is no error (the result says which failed), on both sides."""
    from conftest import stop_repo_agents

    cases = [
        (["spawn", "zz-nope", "--json"], "spawn_agents", {"bead_ids": ["zz-nope"]}, (), 3),
        (["spawn", "--worker", "w1", "--prompt", "p", "--after", "ghost", "--json"], "spawn_workers",
         {"specs": [{"name": "w1", "prompt": "p"}], "after": ["ghost"]}, (), 3),
        (["spawn", "--subtree", "--task", "t", "--branch", "taken", "--json"], "spawn_subtree",
         {"task": "t", "branch_name": "taken"}, (), 5),  # exo never reuses a branch
        (["spawn", "--worker", "w2", "--prompt", "p", "--after", "ghost", "--json"], "spawn_agent",
         {"agent_type": "custom", "name": "w2", "task": "p", "depends_on": ["ghost"]}, ("termtile",), 3),
        (["spawn", "--worker", "w3", "--prompt", "p", "--after", "ghost", "--json"], "spawn_workers",
         {"workers": [{"project_path": "auto", "name": "w3", "prompt": "p"}], "after": ["ghost"]}, ("claude-team",), 3),
    ]
    git(team, "branch", "main.taken", "main")
    try:
        for argv, tool, args, compat, code in cases:
            r = Exo(team)(*argv)
            cli = json.loads(r.stdout)
            assert r.exit_code != 0 and cli["errors"] and not cli["agents"], (argv, r.stdout)
            assert r.exit_code == code, (argv, r.exit_code)
            res = _call(team, tool, args, compat)
            assert res.is_error, (tool, res.content)
            got = res.structured_content
            assert got is not None and json.loads(res.content[0].text) == got
            assert got["errors"][0]["name"] == cli["errors"][0]["name"] and got["agents"] == [], got
        assert Env(cwd=team).store.agents() == []
        # one task spawned, one failed: the CLI still exits non-zero, the tool is no error
        r = Exo(team)("spawn", "zz-nope", "ex-a1", "--json")
        assert r.exit_code == 3 and len(json.loads(r.stdout)["agents"]) == 1, r.stdout
        res = _call(team, "spawn_agents", {"bead_ids": ["zz-nope", "ex-a2"]})
        assert not res.is_error and len(res.structured_content["agents"]) == 1, res.structured_content
    finally:
        stop_repo_agents(team)


def test_a_read_whose_pattern_never_appeared_is_a_tool_error_carrying_its_result(team: Path) -> None:
    from conftest import stop_repo_agents

    try:
        assert Exo(team)("spawn", "--worker", "r1", "--worker", "r2", "--prompt", "p", "--json").exit_code == 0
        r = Exo(team)("read", "r1", "--wait-for", "never printed", "--timeout", "0.5", "--json")
        assert r.exit_code == 5 and json.loads(r.stdout)["matched"] is False, r.stdout
        res = _call(team, "read_from_agent", {"agent": "r1", "wait_for": "never printed", "timeout": 0.5})
        assert res.is_error and res.structured_content["matched"] is False, res.content
        res = _call(team, "read_from_agent", {"agent": ["r1", "r2"], "wait_for": "never printed", "timeout": 0.5})
        assert res.is_error and [x["matched"] for x in res.structured_content["results"]] == [False, False]
        res = _call(team, "read_from_agent", {"agent": "r1", "lines": 5})  # no pattern: nothing to miss
        assert not res.is_error and res.structured_content["matched"] is None
    finally:
        stop_repo_agents(team)


def test_every_command_that_exits_non_zero_on_a_result_says_so_to_its_tools_too() -> None:
    """The class: a command exits non-zero on a returned result only through the result's exit_code, and every
    such result of an operation with tools also says when its tool answers isError (tool_error)."""
    import inspect
    import re

    from exo_cli import commands

    folder = Path(commands.__file__).parent
    exits = {m: re.findall(r"ctx\.exit\(([^)]*)\)", (folder / m).read_text()) for m in sorted(
        p.name for p in folder.glob("*.py"))}
    assert {m: e for m, e in exits.items() if e} == {"deinit.py": ["result.exit_code"],
                                                      "lifecycle.py": ["result.exit_code", "result.exit_code"],
                                                      "spawn.py": ["result.exit_code"]}
    for op in OPS.values():
        result = op.result_type()
        kinds = typing.get_args(result) if typing.get_origin(result) else (result,)
        for cls in kinds:
            if isinstance(getattr(cls, "exit_code", None), property) and op.all_tools():
                assert isinstance(getattr(cls, "tool_error", None), property), f"{cls.__name__} has no tool_error"
    assert inspect.isfunction(registry.tool_error)


def test_termtile_wait_for_idle_waits_through_a_note_until_the_agent_is_idle(repo: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """wait_for_idle (termtile) returns when the agent is idle, not at the note it sends on the way; the note
    stays for wait. `exo wait AGENT --until-idle` is the same call."""
    from conftest import ROOT, stop_repo_agents

    script = tmp_path / "steps.json"
    script.write_text(json.dumps([{"note": {"message": "halfway"}}, {"sleep": {"seconds": 3}},
                                  {"turn": {"message": "all done"}}]))
    (repo / "exo.toml").write_text('[agent]\ndefault = "demo"\n[mux]\ndefault = "headless"\n')
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    try:
        for name, call in (("t1", "tool"), ("t2", "cli")):
            r = Exo(repo)("spawn", "--worker", name, "--prompt", "go", "--demo-script", str(script), "--json")
            assert r.exit_code == 0, r.stdout
            if call == "tool":
                res = _call(repo, "wait_for_idle", {"slot": name, "timeout": 120}, ("termtile",))
                got = res.structured_content
                assert not res.is_error and got["is_idle"] and got["output"] == "all done", got
                assert got["results"][0]["status"] == "idle" and not got["timed_out"], got
            else:
                r = Exo(repo)("wait", name, "--until-idle", "--timeout", "120", "--json")
                got = json.loads(r.stdout)["results"][0]
                assert r.exit_code == 0 and (got["status"], got["message"]) == ("idle", "all done"), r.stdout
            r = Exo(repo)("wait", name, "--timeout", "0", "--json")  # the note was left for wait
            assert json.loads(r.stdout)["results"][0]["message"] == "halfway", r.stdout
        r = Exo(repo)("wait", "--until-idle", "--json")
        assert r.exit_code == 2 and json.loads(r.stdout)["error"]["name"] == "UsageError", r.stdout
    finally:
        stop_repo_agents(repo)
