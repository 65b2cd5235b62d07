"""Security (DESIGN.md "Security"): no secret from the environment on disk, private modes, roles from records.

- Canary API keys in the spawning environment never appear in any file exo writes (state
  dir, runtime dir, worktrees, HOME), after spawning Claude, Gemini and Codex (fake binaries
  on PATH that record argv/env and sleep), a custom agent and the demo agent.
- Files that may hold secrets are 0600, their folders 0700.
- A dev agent is refused every TL and human operation through the CLI and through MCP
  (not listed, and refused when called anyway), whatever it claims in EXO_ROLE; `exo mcp
  --role tl` run by a dev agent stays dev.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, Exo, run_exo, stop_repo_agents
from exo_cli import registry
from exo_cli.env import Env

CANARIES = {
    "ANTHROPIC_API_KEY": "sk-canary-anthropic-7f3a9c",
    "OPENAI_API_KEY": "sk-canary-openai-51b2e8",
    "GEMINI_API_KEY": "canary-gemini-key-0d4e61",
}

FAKE_CLI = r'''#!{python}
import json, os, sys, time
out = os.path.join(os.environ["OUT_DIR"], "{name}-" + os.environ.get("EXO_AGENT", "?") + ".json")
json.dump({{"argv": sys.argv, "env": dict(os.environ)}}, open(out + ".tmp", "w"))
os.replace(out + ".tmp", out)
print("{name} started", flush=True)
time.sleep(600)
'''

CUSTOM = "import os, time; print('custom', os.environ['EXO_AGENT'], flush=True); time.sleep(600)"


def wait_until(fn: Any, timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def team(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The repo with fake agent CLIs first on PATH, canary keys in the env; tmux and headless cleaned up."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("claude", "gemini", "codex"):
        path = bindir / name
        path.write_text(FAKE_CLI.format(python=sys.executable, name=name))
        path.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("OUT_DIR", str(out))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    for key, value in CANARIES.items():
        monkeypatch.setenv(key, value)
    (repo / "exo.toml").write_text(f"[agent]\ncommand = {json.dumps([sys.executable, '-c', CUSTOM])}\n")
    yield repo
    stop_repo_agents(repo)


def _files(base: Path) -> Iterator[Path]:
    for dirpath, _dirs, files in os.walk(base):
        for f in files:
            p = Path(dirpath) / f
            if p.is_file() and not p.is_symlink():
                yield p


def test_no_secret_on_disk_and_private_modes(team: Path, tmp_path: Path, isolate: Path) -> None:
    exo = Exo(team)
    for backend in ("claude", "gemini", "codex", "custom", "demo"):
        for mux in ("tmux", "headless"):
            name = f"{backend}-{mux[0]}"
            r = exo("spawn", "--worker", name, "--prompt", "Fix it", "--agent", backend, "--mux", mux, "--json")
            assert r.exit_code == 0, r.stdout + r.stderr
    for backend in ("claude", "gemini", "codex"):
        for mux in ("tmux", "headless"):
            rec = tmp_path / "out" / f"{backend}-{backend}-{mux[0]}.json"
            wait_until(rec.exists, 20, f"fake {backend} in {mux}")
            seen = json.loads(rec.read_text())["env"]
            expected = dict(CANARIES)
            if backend == "claude":  # under another name, printed by exo's apiKeyHelper (no API-key dialog)
                expected["EXO_ANTHROPIC_API_KEY"] = expected.pop("ANTHROPIC_API_KEY")
                assert "ANTHROPIC_API_KEY" not in seen
            assert all(seen.get(k) == v for k, v in expected.items())  # the agent does get the user's env
    env = Env(cwd=team)
    bases = [env.state_dir, env.runtime_dir, team / ".exo", isolate, team / ".git"]
    needles = [v.encode() for v in CANARIES.values()]
    scanned = 0
    for base in bases:
        for f in _files(base):
            try:
                data = f.read_bytes()
            except OSError:
                continue
            scanned += 1
            for needle in needles:
                assert needle not in data, f"secret written to {f}"
    assert scanned > 20
    # Private modes: exo's folders 0700, and its state files 0600.
    for d in (env.state_dir, env.runtime_dir):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    for base in (env.state_dir, env.runtime_dir):
        for f in _files(base):
            mode = stat.S_IMODE(f.stat().st_mode)
            assert mode & 0o077 == 0, f"{f} is {oct(mode)}"
        for dirpath, dirs, _ in os.walk(base):
            for d in dirs:
                mode = stat.S_IMODE((Path(dirpath) / d).stat().st_mode)
                assert mode & 0o077 == 0, f"{Path(dirpath) / d} is {oct(mode)}"
    # Per-agent files that carry the agent's identity or its MCP wiring stay private too.
    for f in _files(team / ".exo"):
        if f.name.endswith((".json", ".toml")) and "worktrees" in f.parts and ".exo" in f.parts[-3:]:
            assert stat.S_IMODE(f.stat().st_mode) & 0o077 == 0, f"{f} is {oct(stat.S_IMODE(f.stat().st_mode))}"


# --------------------------------------------------------------------------- roles


def record_agent(repo: Path, agent_id: str, role: str) -> None:
    """Insert an agent record the way spawn does, with no process to match."""
    from exo_cli.records import Agent

    Env(cwd=repo).store.insert_agent(
        Agent(id=agent_id, name=agent_id, role=role, parent="root", status="working", backend="custom",
              mux="headless", worktree=str(repo / ".exo" / "worktrees" / agent_id), branch=f"main.{agent_id}"))


def restricted_ops(role: str) -> list[str]:
    return sorted(n for n, o in registry.load_all().items() if not registry.allowed(o, role))


def _args_for(op_name: str) -> list[str]:
    from test_bad_input import _cli_argv, benign

    operation = registry.get(op_name)
    kwargs = {p.name: benign(str(p.annotation), p.default is p.empty) for p in operation.params()}
    argv = _cli_argv(op_name, kwargs)
    assert argv is not None
    return argv


def test_there_are_restricted_ops() -> None:
    dev = restricted_ops("dev")
    assert {"spawn", "kill", "answer", "pr_merge", "doctor", "init"} <= set(dev)
    assert {"doctor", "init", "reap", "attach", "watch"} <= set(restricted_ops("tl"))


@pytest.mark.parametrize("claim", ["tl", "human", "root"])
def test_dev_agent_refused_every_tl_and_human_op_on_the_cli(repo: Path, claim: str) -> None:
    record_agent(repo, "dev1", "dev")
    record_agent(repo, "lead1", "tl")
    exo = Exo(repo)
    for agent, role in (("dev1", "dev"), ("lead1", "tl")):
        for name in restricted_ops(role):
            r = exo(*_args_for(name), env={"EXO_AGENT": agent, "EXO_ROLE": claim, "EXO_PARENT": "root"})
            assert r.exit_code == 5, (agent, name, r.exit_code, r.stdout, r.stderr)
            err = json.loads(r.stdout)["error"]
            assert err["code"] == -32004 and err["data"]["role"] == role and err["data"]["caller"] == agent, err
            assert f"{role} role cannot" in err["message"]
    # The same command by the human at the root passes the role check (whatever it then says).
    r = exo("kill", "dev1", "--json")
    assert r.exit_code != 5 or "role cannot" not in r.stdout


def test_dev_agent_refused_tl_tools_over_mcp(repo: Path) -> None:
    from mcp import Client
    from mcp.types import CallToolResult

    from exo_cli.mcp_server import build_server, make_tool

    record_agent(repo, "dev2", "dev")
    ops = registry.load_all()
    tl_tools = {t.name: (o, t) for o in ops.values() for t in o.tools if "dev" not in o.tool_roles(t)}
    assert {"kill", "answer_question", "merge_pr", "spawn_workers"} <= set(tl_tools)
    for asked in ("tl", "auto", "dev"):
        env = Env(cwd=repo, environ={**os.environ, "EXO_AGENT": "dev2", "EXO_ROLE": "tl"})
        server = build_server(env, asked)
        assert env.role == "dev"

        async def listed(server: Any = server) -> tuple[set[str], list[bool]]:
            async with Client(server) as c:
                names = {t.name for t in (await c.list_tools()).tools}
                refused = [(await c.call_tool(n, {})).is_error for n in sorted(tl_tools)]
                return names, refused

        names, refused = asyncio.run(listed())
        assert not names & set(tl_tools), names & set(tl_tools)
        assert all(refused)
        # Reached anyway behind the listing (a TL tool wired to this server's env): the op refuses it.
        for tool_name, (operation, tool) in tl_tools.items():
            import inspect

            fn = make_tool(env, operation, tool)
            sig = inspect.signature(fn)
            kwargs = {p.name: _benign_tool_arg(p) for p in sig.parameters.values() if p.default is p.empty}
            res = asyncio.run(fn(**kwargs))
            assert isinstance(res, CallToolResult) and res.is_error, tool_name
            err = json.loads(res.content[0].text)["error"]  # type: ignore[union-attr]
            assert err["code"] == -32004 and err["data"]["caller"] == "dev2", (tool_name, err)


def _benign_tool_arg(p: Any) -> Any:
    ann = str(p.annotation)
    if "list" in ann:
        return ["nobody"] if "list[str]" in ann else []
    if "int" in ann:
        return 1
    if "bool" in ann:
        return False
    return "nobody"


def test_exo_mcp_role_tl_by_a_dev_agent_stays_dev(repo: Path) -> None:
    from mcp import StdioServerParameters
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    record_agent(repo, "dev3", "dev")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EXO_AGENT": "dev3", "EXO_ROLE": "tl"}
    errlog = repo.parent / "mcp-stderr.log"

    async def go() -> set[str]:
        with open(errlog, "w") as err:
            params = StdioServerParameters(command=sys.executable, args=["-m", "exo_cli", "mcp", "--role", "tl"],
                                           env=env, cwd=str(repo))
            async with stdio_client(params, errlog=err) as (r, w), ClientSession(r, w) as s:
                await s.initialize()
                names = {t.name for t in (await s.list_tools()).tools}
                res = await s.call_tool("kill", {"agent": "dev3"})
                assert res.is_error
                return names

    names = asyncio.run(go())
    ops = registry.load_all()
    dev_tools = {t.name for o in ops.values() for t in o.tools if "dev" in o.tool_roles(t)}
    assert names == dev_tools
    assert "--role tl ignored" in errlog.read_text()
    # and the CLI agrees: the dev agent's `exo kill` is refused
    r = run_exo("kill", "dev3", "--json", cwd=repo, env={"EXO_AGENT": "dev3", "EXO_ROLE": "tl"})
    assert r.returncode == 5 and "dev role cannot" in r.stdout
