"""The limits of what exo stores, as tests with their outcome: a 50 MB text (every kind, on the command line,
over MCP and through hooks) and a tree 30 deep in which each level spawns the next from its own process.

The limits are documented (docs/concepts.md#limits): a text over its kind's limit is an InvalidInput
that names the limit, before anything is stored or created; a hook never refuses (it fails open), so
what an agent's CLI reports is kept up to the limit and the hook says so. A tree deeper than
``limits.max_depth`` is refused with an InvalidInput naming it; without that limit the branch names of
the tree scheme grow until exo's branch limit (200 bytes, within git's file-name limit).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, Exo, agent_vars, git, run_exo, sandbox_reach, stop_repo_agents, write_trusted
from exo_cli.env import Env
from exo_cli.records import Agent

BIG = 50 * 1024 * 1024  # 50 MiB
# The limits docs/concepts.md documents, in bytes of UTF-8.
TEXT_LIMITS = {"message": 64 * 1024, "output": 1024 * 1024, "prompt": 100 * 1024, "title": 1024, "body": 64 * 1024}


def test_the_documented_limits_are_the_ones_exo_checks() -> None:
    from exo_cli import limits

    assert limits.TEXT_LIMITS == TEXT_LIMITS
    doc = (ROOT / "docs" / "concepts.md").read_text()
    for line in ("| a message (`note`, `question`, `answer`, `send`) | 64 KiB |", "| an output | 1 MiB |",
                 "| a prompt or task | 100 KiB |", "| a pull request title | 1 KiB |", "| a pull request body | 64 KiB |",
                 "| a branch name | 200 bytes |", "| the depth of the tree (`limits.max_depth`) | 10 levels |"):
        assert line in doc, line


def _agent(repo: Path, agent_id: str, parent: str = "root", role: str = "dev", **kw: Any) -> dict[str, str]:
    now = time.time()
    Env(cwd=repo).store.insert_agent(Agent(
        id=agent_id, name=agent_id, role=role, parent=parent, status="working", backend="custom", mux="headless",
        created_at=now, updated_at=now, status_at=now, repo=str(repo), **kw))
    return agent_vars(repo, agent_id)


@pytest.fixture
def team(repo: Path) -> dict[str, str]:
    """An initialised repository with a TL ``lead`` under the root and a worker ``w1`` under it."""
    assert run_exo("init", cwd=repo).returncode == 0
    _agent(repo, "lead", role="tl")
    return _agent(repo, "w1", parent="lead")


def _error(out: str) -> dict[str, Any]:
    return json.loads(out)["error"]  # type: ignore[no-any-return]


def _stored(repo: Path) -> str:
    """Everything the messages, agents and PRs hold (to check nothing over a limit got in)."""
    store = Env(cwd=repo).store
    return "".join(m.body for m in store.messages()) + "".join(a.output or "" for a in store.agents()) + "".join(
        p.title + p.body for p in store.prs())


def test_a_message_over_its_limit_is_refused_on_the_command_line(repo: Path, team: dict[str, str]) -> None:
    limit = TEXT_LIMITS["message"]
    text = "é" * (limit // 2 + 1)  # one byte over, in two-byte characters: bytes count, not characters
    lead = agent_vars(repo, "lead")
    for args, env in ((["note", text], team), (["question", text, "--timeout", "0"], team),
                      (["send", "lead", text], team), (["answer", "w1", text], lead)):
        proc = run_exo(*args, "--json", cwd=repo, env=env)
        assert proc.returncode == 4, (args[0], proc.stdout, proc.stderr)
        error = _error(proc.stdout)
        assert error["name"] == "InvalidInput" and "64 KiB" in error["message"] and "message" in error["message"]
        assert error["data"]["limit"] == limit and error["data"]["size"] == limit + 2
    assert "é" * 100 not in _stored(repo)
    at_limit = run_exo("note", "é" * (limit // 2), "--json", cwd=repo, env=team)  # exactly the limit is fine
    assert at_limit.returncode == 0, at_limit.stdout + at_limit.stderr


def test_a_50_mb_prompt_from_a_file_is_refused_before_anything_is_made(repo: Path, tmp_path: Path) -> None:
    assert run_exo("init", cwd=repo).returncode == 0
    big = tmp_path / "prompt.txt"
    big.write_bytes(b"y" * BIG)
    proc = run_exo("spawn", "--worker", "huge", "--prompt-file", str(big), "--agent", "custom", "--json", cwd=repo,
                   timeout=300)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    text = proc.stdout + proc.stderr
    assert "100 KiB" in text and "prompt" in text and "Traceback" not in proc.stderr
    assert Env(cwd=repo).store.agent("huge") is None and not (repo / ".exo" / "worktrees" / "huge").exists()
    assert "huge" not in git(repo, "branch", "--list")


def test_50_mb_texts_over_mcp_are_refused_naming_the_limit(repo: Path, team: dict[str, str]) -> None:
    """Every kind of text through the real MCP SDK over stdio: an error naming the limit, the server intact."""
    from mcp import Client, StdioServerParameters

    def params(env: dict[str, str]) -> Any:
        return StdioServerParameters(command=sys.executable, args=["-m", "exo_cli", "mcp"], cwd=str(repo),
                                     env={**os.environ, "PYTHONPATH": str(ROOT), **env})

    big = "z" * BIG
    calls = {
        "worker": [("note", {"message": big}, "a message"), ("question", {"message": big}, "a message"),
                   ("send", {"to": ["lead"], "message": big}, "a message"), ("done", {"output": big}, "an output"),
                   ("file_pr", {"title": big}, "a pull request title"),
                   ("file_pr", {"title": "t", "body": big}, "a pull request body")],
        "lead": [("answer_question", {"agent": "w1", "message": big}, "a message"),
                 ("spawn_workers", {"specs": [{"name": "huge", "prompt": big}]}, "a prompt"),
                 ("spawn_subtree", {"task": big, "branch_name": "huge"}, "a prompt")],
    }

    async def go(env: dict[str, str], todo: list[tuple[str, dict[str, Any], str]]) -> None:
        async with Client(params(env)) as c:
            for tool, args, kind in todo:
                got = await c.call_tool(tool, args)
                assert got.is_error, tool
                text = got.content[0].text  # type: ignore[union-attr]
                error = json.loads(text[text.index("{"):])["error"]
                assert error["code"] == -32002 and error["name"] == "InvalidInput", (tool, error)
                assert f"for {kind}" in error["message"] and "bytes, over exo's limit of" in error["message"], tool
            assert not (await c.call_tool("list_agents", {})).is_error  # the session goes on

    asyncio.run(go(team, calls["worker"]))
    asyncio.run(go(agent_vars(repo, "lead"), calls["lead"]))
    assert "zzzz" not in _stored(repo)
    assert Env(cwd=repo).store.agent("huge") is None


def test_a_50_mb_output_through_a_hook_is_kept_to_its_limit_and_said(repo: Path, team: dict[str, str]) -> None:
    payload = json.dumps({"hook_event_name": "Stop", "session_id": "s", "last_assistant_message": "o" * BIG})
    proc = run_exo("hook", "stop", "--cli", "claude", cwd=repo, env=team, input=payload, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr  # a hook fails open
    assert json.loads(proc.stdout) == {}
    assert "1 MiB" in proc.stderr and "output" in proc.stderr and "52,428,8" in proc.stderr
    agent = Env(cwd=repo).store.agent("w1")
    assert agent is not None and agent.status == "idle"  # the turn is recorded all the same
    assert agent.output is not None and len(agent.output.encode()) <= TEXT_LIMITS["output"]
    assert agent.output.startswith("o" * 1000) and agent.output.endswith("of 52,428,800 bytes]")
    events = [m for m in Env(cwd=repo).store.messages(recipient="lead") if m.kind == "event"]
    assert events and all(len(m.body.encode()) <= TEXT_LIMITS["message"] for m in events)
    notice = {"hook_event_name": "Notification", "notification_type": "permission_prompt", "message": "p" * BIG}
    proc = run_exo("hook", "notification", "--cli", "claude", cwd=repo, env=team, input=json.dumps(notice),
                   timeout=300)
    assert proc.returncode == 0, proc.stderr
    for m in Env(cwd=repo).store.messages(recipient="lead"):
        assert len(m.body.encode()) <= TEXT_LIMITS["message"] + 200
        assert all(len(str(v).encode()) <= TEXT_LIMITS["message"] for v in m.data.values())


def test_an_agent_whose_prompt_grows_over_the_limit_from_outputs_never_starts(repo: Path,
                                                                              team: dict[str, str]) -> None:
    """``{{w1.output}}`` made the prompt of the agent waiting --after w1 too long: it is ended, and its parent told."""
    spawn = run_exo("spawn", "--worker", "p", "--prompt", "Summarize: {{w1.output}}", "--after", "w1", "--agent",
                    "demo", "--mux", "headless", "--json", cwd=repo)
    assert spawn.returncode == 0, spawn.stdout + spawn.stderr
    done = run_exo("done", "--output", "r" * (120 * 1024), "--json", cwd=repo, env=team)  # fits an output, not a prompt
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["started"] == []
    p = Env(cwd=repo).store.agent("p")
    assert p is not None and p.status == "dead" and "100 KiB" in (p.status_reason or "")
    told = [m for m in Env(cwd=repo).store.messages(recipient="root") if m.data.get("event") == "after-failed"]
    assert told and "p will not start" in told[0].body and "for a prompt" in told[0].body
    again = run_exo("done", "--output", "short now", "--json", cwd=repo, env=team)  # it stays ended
    assert again.returncode == 0 and json.loads(again.stdout)["started"] == []


# -- a tree 30 deep ---------------------------------------------------------------------------------

# Each level, from its own process (the agent's shell), spawns the next level as a subtree child and
# records how that went; the last level spawns nothing.
LEVEL = r'''
import json, os, subprocess, sys, time
name = os.environ["EXO_AGENT"]
level = int(name.rsplit("l", 1)[1])
rec = {"child": None}
if level < int(os.environ["TREE_DEPTH"]):
    child = os.environ.get("TREE_PAD", "") + f"l{level + 1}"
    r = subprocess.run([sys.executable, "-m", "exo_cli", "spawn", "--subtree", "--task", f"level {level + 1}",
                        "--branch", child, "--agent", "custom", "--mux", "headless", "--json"],
                       capture_output=True, text=True)
    rec = {"child": child, "code": r.returncode, "out": r.stdout, "err": r.stderr}
out = os.path.join(os.environ["OUT_DIR"], name + ".json")
open(out + ".tmp", "w").write(json.dumps(rec))
os.replace(out + ".tmp", out)
time.sleep(600)
'''


@pytest.fixture
def grow(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``grow(depth=, pad=, max_depth=)``: the tree of ``_tree``; every agent of it stopped afterwards."""
    yield lambda **kw: _tree(repo, tmp_path, monkeypatch, **kw)
    stop_repo_agents(repo, tmux=False)


def _tree(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, depth: int, pad: str = "",
          max_depth: int | None = None) -> dict[str, dict[str, Any]]:
    """Start level 1 from the human; each level spawns the next; return every level's record once a level
    spawned nothing or failed to spawn."""
    script = tmp_path / "level.py"
    script.write_text(LEVEL)
    out = tmp_path / "out"
    out.mkdir()
    limits = f"\n[limits]\nmax_depth = {max_depth}\n" if max_depth is not None else ""
    write_trusted(repo, sandbox_reach(out, env=["OUT_DIR", "TREE_DEPTH", "TREE_PAD"])  # sandboxed: the default
                  + f'[agent]\ncommand = [{json.dumps(sys.executable)}, {json.dumps(str(script))}, "{{prompt}}"]\n'
                  + limits)
    for k, v in {"PYTHONPATH": str(ROOT), "OUT_DIR": str(out), "TREE_DEPTH": str(depth), "TREE_PAD": pad}.items():
        monkeypatch.setenv(k, v)
    first = Exo(repo)("spawn", "--subtree", "--task", "level 1", "--branch", f"{pad}l1", "--agent", "custom",
                      "--mux", "headless", "--json")
    assert first.exit_code == 0, first.stdout + first.stderr
    records: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 900
    name = f"{pad}l1"
    while time.monotonic() < deadline:
        path = out / f"{name}.json"
        if not path.exists():
            time.sleep(0.2)
            continue
        rec = records[name] = json.loads(path.read_text())
        if rec["child"] is None or rec["code"] != 0:
            return records
        name = rec["child"]
    raise AssertionError(f"the tree stopped growing at {name}: {records}")


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_tree_30_deep_grows_to_the_depth_limit_and_the_next_level_is_refused(repo: Path, grow: Any) -> None:
    records = grow(depth=30)
    assert [r["code"] for r in records.values()] == [0] * 9 + [4]  # levels 2..10 spawned by their parents
    refused = records["l10"]
    error = _error(refused["out"])
    assert error["name"] == "InvalidInput" and "limits.max_depth is 10" in error["message"]
    assert error["data"] == {"field": "depth", "depth": 11, "limit": 10}
    store = Env(cwd=repo).store
    assert store.agent("l10") is not None and store.agent("l11") is None
    assert not (repo / ".exo" / "worktrees" / "l11").exists()
    assert git(repo, "branch", "--list", "*.l11") == ""
    assert git(repo, "rev-parse", "--verify", "refs/heads/main." + ".".join(f"l{i}" for i in range(1, 11)))


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_without_a_depth_limit_a_tree_30_deep_spawns(repo: Path, grow: Any) -> None:
    records = grow(depth=30, max_depth=0)
    assert [r.get("code") for r in records.values()] == [0] * 29 + [None]  # l30 spawns nothing
    assert list(records) == [f"l{i}" for i in range(1, 31)]
    branch = "main." + ".".join(f"l{i}" for i in range(1, 31))
    assert git(repo, "rev-parse", "--verify", f"refs/heads/{branch}")
    assert (repo / ".exo" / "worktrees" / "l30").is_dir()
    assert Env(cwd=repo).store.agent("l30").branch == branch  # type: ignore[union-attr]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_long_names_reach_the_branch_limit_before_git_does(repo: Path, grow: Any) -> None:
    pad = "x" * 37  # names of 39-40 characters: each level adds 41 bytes to the branch
    records = grow(depth=30, pad=pad, max_depth=0)
    codes = [r["code"] for r in records.values()]
    assert codes == [0] * (len(codes) - 1) + [4] and len(codes) == 4  # main + 4 levels fit in 200 bytes
    result = json.loads(records[f"{pad}l4"]["out"])  # a task of the spawn failed: the spawn's own result
    assert result["worktrees"] == [] and [f[0] for f in result["failed"]] == [f"{pad}l5"]
    error = result["errors"][0]
    assert error["name"] == "InvalidInput" and "204 bytes, longer than exo's limit of 200 for a branch name" in \
        error["message"]
    assert Env(cwd=repo).store.agent(f"{pad}l5") is None
    assert git(repo, "branch", "--list", f"*{pad}l5") == ""
