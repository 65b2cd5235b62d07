"""Security (docs/security.md): no secret from the environment on disk, private modes, roles from records.

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
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    ROOT,
    Exo,
    agent_process_environ,
    agent_vars,
    live_agent_environ,
    run_exo,
    sandbox_reach,
    sandbox_works,
    stop_repo_agents,
    write_trusted,
)
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

OWN_KEY = {"claude": "ANTHROPIC_API_KEY", "codex": "OPENAI_API_KEY", "gemini": "GEMINI_API_KEY"}

CUSTOM = "import os, time; print('custom', os.environ['EXO_AGENT'], flush=True); time.sleep(600)"


def wait_until(fn: Any, timeout: float = 60.0, what: str = "condition") -> Any:
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
    write_trusted(repo, sandbox_reach(out, env=["OUT_DIR"])  # sandboxed (the default) the CLIs record into `out`
                  + f"[agent]\ncommand = {json.dumps([sys.executable, '-c', CUSTOM])}\n")
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
            if Env(cwd=team).store.agent(f"{backend}-{mux[0]}").spec.get("sandboxed"):  # the default: its own CLI's key alone
                own = OWN_KEY[backend]
                expected = {own: CANARIES[own]}
                assert not any(v in json.dumps(seen) for k, v in CANARIES.items() if k != own), seen
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
    _check_proofs(team, tmp_path, bases)


def _proofs(team: Path, tmp_path: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """Each spawned agent's proof and environment, as its own process has them."""
    out: dict[str, tuple[str, dict[str, str]]] = {}
    for rec in (tmp_path / "out").glob("*.json"):  # the fake agent CLIs recorded their environment
        seen = json.loads(rec.read_text())["env"]
        out[seen["EXO_AGENT"]] = (seen["EXO_AGENT_PROOF"], seen)
    for a in Env(cwd=team).store.agents():
        if a.id not in out and a.location.get("pid"):
            seen = agent_process_environ(int(a.location["pid"]))
            out[a.id] = (seen["EXO_AGENT_PROOF"], seen)
    return out


def _check_proofs(team: Path, tmp_path: Path, bases: list[Path]) -> None:
    """Each agent's proof is in its own environment only: no file, command line, tmux server, other agent."""
    import hashlib

    proofs = _proofs(team, tmp_path)
    env = Env(cwd=team)
    assert set(proofs) == {a.id for a in env.store.agents()} and len(proofs) == 10
    assert len({p for p, _ in proofs.values()}) == len(proofs)  # one secret per agent
    for agent_id, (proof, seen) in proofs.items():
        assert len(proof) == 64
        spec = env.store.agent(agent_id).spec  # type: ignore[union-attr]
        assert spec["proof_sha256"] == hashlib.sha256(proof.encode()).hexdigest()  # only a digest is stored
        others = [p for other, (p, _) in proofs.items() if other != agent_id]
        assert not any(p in json.dumps(seen) for p in others), f"another agent's proof in {agent_id}'s environment"
    needles = [p.encode() for p, _ in proofs.values()]
    for base in bases:  # state, runtime, worktrees (context files, MCP and hook wiring), HOME, .git
        for f in _files(base):
            try:
                data = f.read_bytes()
            except OSError:
                continue
            assert not any(n in data for n in needles), f"a proof written to {f}"
    for pid in filter(str.isdigit, os.listdir("/proc")):  # no command line anywhere carries one
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        assert not any(n in cmd for n in needles), f"a proof on the command line of pid {pid}"
    server = subprocess.run(["tmux", "-L", f"exo-{env.repo_id}", "show-environment", "-g"],
                            capture_output=True, text=True)
    assert server.returncode == 0 and "EXO_AGENT_PROOF" not in server.stdout
    assert not any(p in server.stdout for p, _ in proofs.values())
    # Codex gets exo's MCP server entry naming the agent's socket to the broker: no secret, not even by name.
    import tomllib

    codex_env = json.loads((tmp_path / "out" / "codex-codex-t.json").read_text())["env"]
    codex_cfg = tomllib.loads((Path(codex_env["CODEX_HOME"]) / "config.toml").read_text())
    entry = codex_cfg["mcp_servers"]["exo"]
    assert "env_vars" not in entry and entry["env"]["EXO_SOCKET"] == codex_env["EXO_SOCKET"], entry


def test_a_tls_proof_never_reaches_its_children(team: Path, tmp_path: Path) -> None:
    """A TL's spawn passes its environment on, but never its own proof: not to the child, its
    post-create command or anything else; the child gets a proof of its own."""
    from conftest import live_agent_vars

    dump = "import json, os; json.dump(dict(os.environ), open('post-create-env.json', 'w'))"
    write_trusted(team, team.joinpath("exo.toml").read_text()
                                   + f"[worktree]\npost_create = {json.dumps([sys.executable, '-c', dump])}\n")
    r = Exo(team)("spawn", "--subtree", "--task", "lead", "--branch", "lead", "--agent", "custom", "--mux", "headless",
                  "--json")
    assert r.exit_code == 0, r.stdout
    lead = live_agent_vars(team, "lead")
    r = Exo(team)("spawn", "--worker", "kid", "--prompt", "x", "--agent", "claude", "--mux", "headless", "--json",
                  env={**lead, "EXO_STATE_DIR": str(team / ".git" / "exo"), "EXO_ROLE": "tl", "EXO_PARENT": "root"})
    assert r.exit_code == 0, r.stdout
    assert json.loads(r.stdout)["agents"][0]["parent"] == "lead"
    rec = tmp_path / "out" / "claude-kid.json"
    wait_until(rec.exists, 20, "the kid's CLI")
    kid_env = json.loads(rec.read_text())["env"]
    assert kid_env["EXO_AGENT"] == "kid" and kid_env["EXO_PARENT"] == "lead"
    assert kid_env["EXO_AGENT_PROOF"] != lead["EXO_AGENT_PROOF"]
    assert lead["EXO_AGENT_PROOF"] not in json.dumps(kid_env)
    for agent in ("lead", "kid"):
        post = json.loads((team / ".exo" / "worktrees" / agent / "post-create-env.json").read_text())
        assert post["EXO_AGENT"] == agent and "EXO_AGENT_PROOF" not in post
        assert lead["EXO_AGENT_PROOF"] not in json.dumps(post)


# --------------------------------------------------------------------------- roles


def record_agent(repo: Path, agent_id: str, role: str) -> None:
    """Insert an agent record the way spawn does, with no process to match."""
    from exo_cli.records import Agent

    Env(cwd=repo).store.insert_agent(
        Agent(id=agent_id, name=agent_id, role=role, parent="root", status="working", backend="custom",
              mux="headless", worktree=str(repo / ".exo" / "worktrees" / agent_id), branch=f"main.{agent_id}"))


def restricted_ops(role: str) -> list[str]:
    return sorted(n for n, o in registry.load_all().items() if not registry.allowed(o, role))


def _positional_names(op_name: str) -> set[str]:
    import click

    from exo_cli.main import cli

    operation = registry.get(op_name)
    cmd: click.Command | None = cli
    for part in (operation.cli or "").split():
        assert isinstance(cmd, click.Group)
        cmd = cmd.get_command(click.Context(cli), part)
    return {str(p.name) for p in (cmd.params if cmd is not None else []) if isinstance(p, click.Argument)}


def _args_for(op_name: str) -> list[str]:
    from test_bad_input import _cli_argv, benign

    operation = registry.get(op_name)
    # an optional positional argument is filled too: one left out would shift the next into its place
    # (`exo budget [AGENT] AMOUNT`), and the command line would be refused before the role is checked
    positional = _positional_names(op_name)
    kwargs = {p.name: benign(str(p.annotation), p.default is p.empty or p.name in positional)
              for p in operation.params()}
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
            r = exo(*_args_for(name), env=agent_vars(repo, agent, EXO_ROLE=claim, EXO_PARENT="root"))
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
        env = Env(cwd=repo, environ={**os.environ, **agent_vars(repo, "dev2"), "EXO_ROLE": "tl"})
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
            from exo_cli.schema import input_schema

            fn = make_tool(env, operation, tool)
            props = input_schema(operation.tool_args(tool))["properties"]
            kwargs = {a.name: _benign_tool_arg(props[a.name]) for a in operation.tool_args(tool) if a.required}
            res = asyncio.run(fn(**kwargs))
            assert isinstance(res, CallToolResult) and res.is_error, tool_name
            err = json.loads(res.content[0].text)["error"]  # type: ignore[union-attr]
            assert err["code"] == -32004 and err["data"]["caller"] == "dev2", (tool_name, err)


def _benign_tool_arg(prop: dict[str, Any]) -> Any:
    """A value the argument's schema admits (so the call reaches the operation's role check)."""
    kind = prop.get("type") or prop.get("anyOf", [{}])[0].get("type")
    if "enum" in prop:
        return prop["enum"][0]
    if kind == "array":
        return ["nobody"] if prop.get("items", {}).get("type") == "string" else []
    if kind == "integer":
        return max(1, int(prop.get("minimum", 1)))
    if kind == "boolean":
        return False
    return "nobody"


def test_exo_mcp_role_tl_by_a_dev_agent_stays_dev(repo: Path) -> None:
    from mcp import StdioServerParameters
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    record_agent(repo, "dev3", "dev")
    env = {**os.environ, "PYTHONPATH": str(ROOT), **agent_vars(repo, "dev3"), "EXO_ROLE": "tl"}
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
    r = run_exo("kill", "dev3", "--json", cwd=repo, env={**agent_vars(repo, "dev3"), "EXO_ROLE": "tl"})
    assert r.returncode == 5 and "dev role cannot" in r.stdout


# --------------------------------------------------------------------------- text typed into panes

HOSTILE = "go \x1b[201~\x1b[Z\x03\r\x1b]52;c;cHduZWQ=\x07\x9b2J\x7f end"
HOSTILE_SHOWN = "go ^[[201~^[[Z^C^M^[]52;c;cHduZWQ=^GM-^[2J^? end"


@pytest.mark.skipif(__import__("shutil").which("tmux") is None, reason="tmux is not installed")
def test_send_and_notes_type_no_control_character_into_a_pane(repo: Path, tmp_path: Path) -> None:
    """`exo send` to an idle agent and a child's note to its idle TL reach a raw-mode reader as visible text."""
    from test_mux_tmux import RAW_READER

    reader = tmp_path / "raw.py"
    reader.write_text(__import__("textwrap").dedent(RAW_READER))
    out_dir = tmp_path / "raw"
    out_dir.mkdir()
    write_trusted(repo, sandbox_reach(out_dir)  # sandboxed (the default), the readers write there
                  + f"[agent]\ncommand = {json.dumps([sys.executable, str(reader), str(out_dir) + '/{name}.bin'])}\n")
    exo = Exo(repo)
    try:
        for args in (["--worker", "w1", "--prompt", "x"], ["--subtree", "--task", "t", "--branch", "lead"]):
            r = exo("spawn", *args, "--agent", "custom", "--mux", "tmux", "--json")
            assert r.exit_code == 0, r.stdout
        env = Env(cwd=repo)
        from exo_cli.ops import agentctl

        for name in ("w1", "lead"):
            rec = env.store.agent(name)
            assert rec is not None
            wait_until(lambda rec=rec: "READY" in agentctl.mux_for(env, "tmux").capture(agentctl.location(rec), 5),
                       what=f"{name} ready")
            env.store.update_agent(name, status="idle")
        # The human's send, through the real command line.
        r = exo("send", "w1", HOSTILE, "--json")
        assert r.exit_code == 0 and json.loads(r.stdout)["sent"][0]["delivery"] == "typed", r.stdout
        # A child's note to its idle TL, with the child's own identity.
        record_agent(repo, "kid", "dev")
        env.store.update_agent("kid", parent="lead")
        r = exo("note", HOSTILE, "--json", env=agent_vars(repo, "kid"))
        assert r.exit_code == 0 and json.loads(r.stdout)["delivery"] == "typed", r.stdout
        for name, label in (("w1", "[MESSAGE from root] "), ("lead", "[NOTE from kid] ")):
            path = out_dir / f"{name}.bin"
            got = wait_until(lambda path=path: path.exists() and path.read_bytes().endswith(b"\x1b[201~\r")
                             and path.read_bytes(), what=f"paste into {name}")
            assert got == b"\x1b[200~" + (label + HOSTILE_SHOWN).encode() + b"\x1b[201~\r", got
    finally:
        stop_repo_agents(repo)


# --------------------------------------------------------------------------- a dev agent that tries other ways

ATTACK = r'''
import json, os, subprocess, sys, tempfile, time
out, me = sys.argv[1], sys.argv[2]
if me != "mallory":
    time.sleep(600)
    sys.exit(0)
exo = [sys.executable, "-m", "exo_cli"]
empty = tempfile.mkdtemp()


def direct(name, *args, env=None):
    r = subprocess.run([*exo, *args, "--json"], capture_output=True, text=True, env={**os.environ, **(env or {})})
    json.dump({"rc": r.returncode, "out": r.stdout, "err": r.stderr}, open(os.path.join(out, name + ".json"), "w"))


def detached(name, how, *args, env=None):
    """Run exo outside this process tree: setsid -f, nohup in a subshell, or `( cmd & )`."""
    target = os.path.join(out, name + ".json")
    inner = ("import json, os, subprocess, sys; r = subprocess.run(sys.argv[2:], capture_output=True, text=True, "
             "stdin=subprocess.DEVNULL, timeout=60); "
             "json.dump({'rc': r.returncode, 'out': r.stdout, 'err': r.stderr, 'ppid': os.getppid(), "
             "'attacker': int(os.environ['ATTACKER_PID'])}, "
             "open(sys.argv[1] + '.tmp', 'w')); os.replace(sys.argv[1] + '.tmp', sys.argv[1])")
    cmd = [sys.executable, "-c", inner, target, *exo, *args, *(["--json"] if args[0] != "mcp" else [])]
    environ = {**os.environ, **(env or {}), "ATTACKER_PID": str(os.getpid())}  # pids as seen where it runs
    for k, v in list(environ.items()):
        if v is None:
            del environ[k]
    import shlex
    line = shlex.join(cmd)
    if how == "setsid":
        subprocess.run(["setsid", "-f", *cmd], env=environ)
    elif how == "nohup":
        subprocess.run(["sh", "-c", f"(nohup {line} >/dev/null 2>&1 &)"], env=environ)
    else:
        subprocess.run(["sh", "-c", f"( {line} & )"], env=environ)


direct("direct-merge", "pr", "merge", "1")
direct("direct-spawn-repo", "spawn", "--worker", "x", "--prompt", "p", "--repo", sys.argv[3])
detached("setsid-claim-tl", "setsid", "kill", "sib", env={"EXO_AGENT": "lead"})
detached("nohup-claim-tl", "nohup", "spawn", "--worker", "x2", "--prompt", "p", env={"EXO_AGENT": "lead"})
detached("subshell-claim-root", "subshell", "pr", "merge", "1", env={"EXO_AGENT": "root"})
detached("setsid-empty-state", "setsid", "pr", "merge", "1", env={"EXO_STATE_DIR": empty})
detached("subshell-empty-state", "subshell", "kill", "sib", env={"EXO_STATE_DIR": empty, "EXO_AGENT": "lead"})
detached("setsid-role-tl", "setsid", "pr", "merge", "1", env={"EXO_ROLE": "tl"})
detached("setsid-no-agent", "setsid", "kill", "sib", env={"EXO_AGENT": ""})
detached("setsid-own-note", "setsid", "note", "from a detached process")
detached("setsid-mcp-empty-state", "setsid", "mcp", env={"EXO_STATE_DIR": empty})
detached("setsid-done-for-sib", "setsid", "done", "--output", "forged", env={"EXO_AGENT": "sib"})
time.sleep(600)
'''

EXPECTED = {  # what each attempt must end with: (exit code, a phrase of the error)
    "direct-merge": (5, "dev role cannot"),
    "direct-spawn-repo": (5, "dev role cannot"),
    "setsid-claim-tl": (5, "does not prove EXO_AGENT=lead"),
    "nohup-claim-tl": (5, "does not prove EXO_AGENT=lead"),
    "subshell-claim-root": (5, "EXO_AGENT=root names the human at the root"),
    "setsid-empty-state": (4, "EXO_STATE_DIR="),
    "subshell-empty-state": (4, "EXO_STATE_DIR="),
    "setsid-role-tl": (5, "dev role cannot"),
    "setsid-no-agent": (5, "without EXO_AGENT"),
    "setsid-own-note": (0, ""),
    "setsid-mcp-empty-state": (4, "EXO_STATE_DIR="),
    "setsid-done-for-sib": (5, "does not prove EXO_AGENT=sib"),
}
# With a socket to the broker the variables an attempt sets claim nothing: every call comes through
# mallory's own socket, so it acts as mallory (a dev), whatever EXO_AGENT, EXO_ROLE or EXO_STATE_DIR say.
EXPECTED_BROKER = {
    **{name: (5, "dev role cannot") for name in EXPECTED if EXPECTED[name][0]},
    "setsid-own-note": (0, ""),
    "setsid-mcp-empty-state": (0, ""),  # an MCP session as mallory: its stdin is closed, so it ends at once
    "setsid-done-for-sib": (0, '"agent_id": "mallory"'),  # done for itself, not for sib
}


@pytest.mark.skipif(__import__("shutil").which("setsid") is None, reason="setsid is not installed")
@pytest.mark.parametrize("broker", [True, False], ids=["broker", "direct"])
def test_a_dev_that_leaves_its_process_tree_gets_no_other_identity(repo: Path, tmp_path: Path, broker: bool,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A dev agent (a real process exo spawned) tries the plausible ways around its role: direct calls,
    then `setsid -f`, `nohup` and `( cmd & )` children claiming its TL, the root or a sibling, an
    empty EXO_STATE_DIR, EXO_ROLE=tl, no EXO_AGENT. Every one is refused; its own detached
    process is still itself (its proof, or its socket to the broker), and nothing changed. Both
    ways an agent reaches exo: through its socket (the broker decides who it is) and directly (an
    agent spawned without one)."""
    if not broker:
        monkeypatch.setenv("EXO_BROKER", "0")
    expected = EXPECTED_BROKER if broker else EXPECTED
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(other)], check=True)
    script = tmp_path / "attack.py"
    script.write_text(ATTACK)
    out = tmp_path / "attempts"
    out.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    write_trusted(repo, sandbox_reach(out)  # sandboxed (with the broker, by default), the attempts are written there
                  + f"[agent]\ncommand = {json.dumps([sys.executable, str(script), str(out), '{name}', str(other)])}\n")
    exo = Exo(repo)
    try:
        from conftest import live_agent_vars

        r = exo("spawn", "--subtree", "--task", "t", "--branch", "lead", "--agent", "custom", "--mux", "headless",
                "--json")
        assert r.exit_code == 0, r.stdout
        # sib is the TL's own child: what a forged TL identity could kill or complete.
        r = exo("spawn", "--worker", "sib", "--prompt", "x", "--agent", "custom", "--mux", "headless", "--json",
                env=live_agent_vars(repo, "lead"))
        assert r.exit_code == 0 and json.loads(r.stdout)["agents"][0]["parent"] == "lead", r.stdout
        env = Env(cwd=repo)
        env.store.insert_pr(forge="local", title="sib's work", body="", head="main.lead.sib", base="main",
                            author="sib", state="open")
        r = exo("spawn", "--worker", "mallory", "--prompt", "x", "--agent", "custom", "--mux", "headless", "--json")
        assert r.exit_code == 0, r.stdout
        assert ("EXO_SOCKET" in live_agent_environ(repo, "mallory")) is broker
        if broker and sandbox_works():  # the default: sandboxed wherever bubblewrap works (no broker: unsandboxed)
            assert Env(cwd=repo).store.agent("mallory").spec.get("sandboxed")  # type: ignore[union-attr]
        got = wait_until(lambda: len(list(out.glob("*.json"))) == len(expected) and list(out.glob("*.json")),
                         60, "every attempt")
        results = {p.stem: json.loads(p.read_text()) for p in got}
        for name, (code, phrase) in expected.items():
            res = results[name]
            assert res["rc"] == code, (name, res)
            assert phrase in res["out"] + res["err"], (name, res)
            if name.startswith(("setsid", "nohup", "subshell")):
                assert res["ppid"] != res["attacker"], name  # really detached (both pids seen in its sandbox)
        # Nothing happened: sib runs and is not done, the PR is open, nobody else was spawned, the note is mallory's.
        sib = env.store.agent("sib")
        assert sib is not None and sib.status != "done" and sib.output is None
        if broker:  # mallory's "done for sib" was mallory's own
            assert env.store.agent("mallory").output == "forged"  # type: ignore[union-attr]
        assert env.store.pr(1).state == "open"  # type: ignore[union-attr]
        assert {a.id for a in env.store.agents()} == {"lead", "sib", "mallory"}
        assert not (other / ".git" / "exo").exists()
        notes = [m for m in env.store.messages(recipient="root") if m.kind == "note"]
        assert [(m.sender, m.body) for m in notes] == [("mallory", "from a detached process")]
    finally:
        stop_repo_agents(repo)
