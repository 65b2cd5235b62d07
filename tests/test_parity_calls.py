"""The CLI and every MCP tool reach the same core call with equivalent values (issue 10, item 1).

Operations are replaced by recorders in the registry (so nothing runs); spawn is observed one
level deeper, at the planned requests, because its CLI flags (--worker/--prompt) and its tools
named after other tool families (specs, bead_ids, branch_name) are different spellings of the same tasks.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import Exo, git
from exo_cli import registry
from exo_cli.env import Env

FIXTURES = Path(__file__).parent / "fixtures" / "beads" / "small"


@dataclass(frozen=True)
class Recorded:
    ok: bool = True

    def __getattr__(self, name: str) -> Any:  # commands may look at their result's fields
        return None


def _tool(cwd: Path, name: str, args: dict[str, Any]) -> None:
    """Call the tool on the server itself (the recorders' results are not the tools' real results)."""
    from exo_cli.mcp_server import build_server

    server = build_server(Env(cwd=cwd), "tl")
    r = asyncio.run(server.call_tool(name, args))
    assert not r.is_error, r.content


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    calls: list[tuple[str, dict[str, Any]]] = []
    registry.load_all()
    for name, op in list(registry.OPS.items()):
        def fake(env: Env, /, _name: str = name, **kwargs: Any) -> Recorded:
            calls.append((_name, kwargs))
            return Recorded()

        fake.__signature__ = __import__("inspect").signature(op.func)  # type: ignore[attr-defined]
        fake.__module__ = op.func.__module__  # its annotations are read in the operation's module
        monkeypatch.setitem(registry.OPS, name, op._replace(func=fake))
    return calls


CASES = [
    # (CLI args, tool, tool args)
    (["pr", "merge", "3", "--strategy", "squash"], "merge_pr", {"pr_number": 3, "strategy": "squash"}),
    (["pr", "merge", "7"], "merge_pr", {"pr_number": 7}),
    (["answer", "w1", "use the v2 API"], "answer_question", {"agent": "w1", "message": "use the v2 API"}),
    (["wait", "w1", "w2", "--timeout", "5"], "wait", {"timeout": 5, "from_agents": ["w1", "w2"]}),
    (["wait", "w1", "--until-idle"], "wait", {"from_agents": ["w1"], "until_idle": True}),
    (["note", "halfway there"], "note", {"message": "halfway there"}),
    (["question", "which db?", "--timeout", "30"], "question", {"message": "which db?", "timeout": 30}),
    (["pr", "file", "--title", "T", "--body", "B", "--draft"], "file_pr", {"title": "T", "body": "B", "draft": True}),
    (["send", "w1,w2", "hello"], "send", {"to": ["w1", "w2"], "message": "hello"}),
    (["kill", "w1"], "kill", {"agent": "w1"}),
    (["output", "w1"], "get_artifact", {"agent": "w1"}),
    (["complete", "w1"], "exo_complete", {"target": "w1"}),
    (["read", "w1", "--lines", "20"], "read_from_agent", {"agent": "w1", "lines": 20}),
    (["status", "w1"], "exo_status", {"agent": "w1"}),
]


def _norm(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Drop arguments left at their default None/False/empty, so only the values given compare."""
    return {k: (float(v) if isinstance(v, int) and not isinstance(v, bool) and k == "timeout" else v)
            for k, v in kwargs.items() if v not in (None, False, [], ())}


@pytest.mark.parametrize(("cli_args", "tool", "tool_args"), CASES, ids=[c[1] + "-" + c[0][0] for c in CASES])
def test_cli_and_tool_reach_the_same_call(repo: Path, recorder: list[tuple[str, dict[str, Any]]],
                                          cli_args: list[str], tool: str, tool_args: dict[str, Any]) -> None:
    r = Exo(repo)(*cli_args, "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    _tool(repo, tool, tool_args)
    assert len(recorder) == 2, recorder
    (cli_op, cli_kw), (tool_op, tool_kw) = recorder
    assert cli_op == tool_op
    defaults = {p.name: p.default for p in registry.get(cli_op).params()}
    for kw in (cli_kw, tool_kw):
        for k, v in list(kw.items()):
            if defaults.get(k, object()) == v:
                del kw[k]
    assert _norm(cli_kw) == _norm(tool_kw)


# -- spawn: compare the planned tasks -----------------------------------------------------------------


@pytest.fixture
def planned(monkeypatch: pytest.MonkeyPatch) -> list[list[dict[str, Any]]]:
    from exo_cli.ops.spawn import op as spawn_mod

    plans: list[list[dict[str, Any]]] = []

    def fake_execute(call: Any, reqs: list[Any], **_: Any) -> Any:
        from dataclasses import asdict

        plans.append([{**asdict(r), "common_skip": call.common.skip_permissions} for r in reqs])
        return spawn_mod.SpawnResult([], [], [], [], [], [], [])

    monkeypatch.setattr(spawn_mod, "execute", fake_execute)
    return plans


@pytest.fixture
def beads_repo(repo: Path) -> Path:
    shutil.copytree(FIXTURES, repo / ".beads", ignore=shutil.ignore_patterns("README.md"))
    git(repo, "add", ".beads")
    git(repo, "commit", "-q", "-m", "beads")
    return repo


SPAWN_CASES = [
    (["spawn", "--worker", "w1", "--prompt", "P1", "--worker", "w2", "--prompt", "P2", "--agent", "demo"],
     "spawn_workers", {"specs": [{"name": "w1", "prompt": "P1", "agent": "demo"},
                                 {"name": "w2", "prompt": "P2", "agent": "demo"}]}),
    (["spawn", "--subtree", "--task", "Own the auth module", "--branch", "auth", "--agent", "claude"],
     "spawn_subtree", {"task": "Own the auth module", "branch_name": "auth"}),
    (["spawn", "a1", "a2", "--agent", "gemini"], "spawn_agents", {"bead_ids": ["a1", "a2"], "backend": "gemini"}),
]


@pytest.mark.parametrize(("cli_args", "tool", "tool_args"), SPAWN_CASES, ids=[c[1] for c in SPAWN_CASES])
def test_spawn_cli_and_its_tools_plan_the_same_tasks(beads_repo: Path, planned: list[list[dict[str, Any]]],
                                                      cli_args: list[str], tool: str,
                                                      tool_args: dict[str, Any]) -> None:
    r = Exo(beads_repo)(*cli_args, "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    _tool(beads_repo, tool, tool_args)
    assert len(planned) == 2
    assert planned[0] == planned[1]
    assert planned[0], "nothing was planned"
