"""Every operation, called through the CLI and through every MCP tool that serves it, returns the same object.

Derived from the registry: one test per operation that has tools, and each must exercise every
tool of that operation (exo's default ones and the compatible sets' ones); an operation or a tool
without a case here fails. The CLI runs in-process (`exo ... --json`); the tools are called with
the real MCP SDK client over stdio against real `exo mcp` processes (exo's default set, and one
with every --compat set), on one real git repository whose demo agents run in a real tmux server.

A mutating operation acts on two equivalent targets (the CLI on one, the tool on the other); the
comparison maps each call's target names to the same placeholders and drops what differs by
nature (times, process ids, pane ids, commit ids, message ids). A tool of a compatible set may
return more fields than the operation: the operation's fields must be equal, and the extra ones
exactly those its result class adds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import jsonschema
import pytest

from conftest import ROOT, Exo, agent_vars, git, stop_repo_agents
from exo_cli import registry
from exo_cli.records import MCP_COMPAT

pytestmark = [pytest.mark.tmux, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

OPS = registry.load_all()
FIXTURES = Path(__file__).parent / "fixtures" / "beads" / "small"
VOLATILE = {"age_seconds", "status_age_seconds", "created_at", "updated_at", "merged_at", "status_at", "message_id",
            "pid", "pgid", "start_time", "pane", "window", "merge_commit", "ticket", "number"}


# --------------------------------------------------------------------------- a real exo mcp, held open


class Session:
    """A real `exo mcp` over stdio with the MCP SDK client, kept open on a background event loop."""

    def __init__(self, cwd: Path, env: dict[str, str], *args: str) -> None:
        from mcp import Client, StdioServerParameters

        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.failed: BaseException | None = None
        params = StdioServerParameters(command=sys.executable, args=["-m", "exo_cli", "mcp", *args], env=env,
                                       cwd=str(cwd))

        async def hold() -> None:
            self.stop = asyncio.Event()
            try:
                async with Client(params) as client:
                    self.client = client
                    self.ready.set()
                    await self.stop.wait()
            except BaseException as exc:  # noqa: BLE001 - reported to the test
                self.failed = exc
                self.ready.set()

        self.thread = threading.Thread(target=lambda: self.loop.run_until_complete(hold()), daemon=True)
        self.thread.start()
        assert self.ready.wait(120) and self.failed is None, self.failed

    def call(self, name: str, args: dict[str, Any]) -> Any:
        fut = asyncio.run_coroutine_threadsafe(self.client.call_tool(name, args), self.loop)
        return fut.result(timeout=180)

    def tools(self) -> list[Any]:
        return asyncio.run_coroutine_threadsafe(self.client.list_tools(), self.loop).result(timeout=60).tools

    def output_schema(self, name: str) -> dict[str, Any]:
        if not hasattr(self, "schemas"):
            self.schemas = {t.name: t.output_schema for t in self.tools()}
        return self.schemas[name]  # type: ignore[no-any-return]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(30)


class World:
    """One repository, its agents, and the `exo mcp` servers (by caller and tool set) of this module."""

    def __init__(self, repo: Path, env: dict[str, str]) -> None:
        self.repo = repo
        self.env = env
        self.sessions: dict[tuple[str | None, bool], Session] = {}
        self.seen: set[tuple[str, str]] = set()
        self.validated: set[str] = set()

    def environ(self, agent: str | None) -> dict[str, str]:
        env = {**self.env, "PYTHONPATH": str(ROOT)}
        if agent:
            env.update(agent_vars(self.repo, agent))
        return env

    def cli(self, *args: str, agent: str | None = None) -> tuple[dict[str, Any], bool]:
        env = {k: v for k, v in self.environ(agent).items() if k != "PYTHONPATH"}
        env.setdefault("EXO_AGENT", "")
        r = Exo(self.repo)(*args, "--json", env=env)
        assert "Traceback" not in r.stderr, r.stderr
        obj = json.loads(r.stdout)
        assert ("error" in obj) <= (r.exit_code != 0), r.stdout
        return obj, r.exit_code != 0  # an error object, or a result that says it failed (a spawn's failed tasks)

    def tool(self, name: str, args: dict[str, Any], *, agent: str | None = None,
             compat: bool = False) -> tuple[dict[str, Any], bool]:
        key = (agent, compat)
        if key not in self.sessions:
            flags = [x for s in MCP_COMPAT for x in ("--compat", s)] if compat else []
            self.sessions[key] = Session(self.repo, self.environ(agent), *flags)
        session = self.sessions[key]
        res = session.call(name, args)
        if res.is_error and res.structured_content is None:  # an error object
            return json.loads(res.content[0].text), True
        assert json.loads(res.content[0].text) == res.structured_content
        # the real result against the output schema the tool declares (an independent validator)
        jsonschema.Draft202012Validator(session.output_schema(name)).validate(res.structured_content)
        self.validated.add(name)
        return res.structured_content, bool(res.is_error)  # is_error: a result that says it failed

    # -- agents ------------------------------------------------------------------------------------
    def record(self, name: str, *, status: str = "idle", output: str | None = None, worktree: bool = False,
               parent: str = "root", role: str = "dev", backend: str = "demo", session_id: str | None = None) -> None:
        """An agent record with no process (messages to it are queued), optionally with a real worktree."""
        from exo_cli.env import Env
        from exo_cli.records import Agent

        path = branch = None
        if worktree:
            path = self.repo / ".exo" / "worktrees" / name
            branch = f"main.{name}"
            git(self.repo, "worktree", "add", "-q", "-b", branch, str(path), "main")
            (path / f"{name}.txt").write_text(name)
            git(path, "add", f"{name}.txt")
            git(path, "commit", "-q", "-m", f"{name}: add {name}.txt")
        now = time.time()
        Env(cwd=self.repo, environ=self.environ(None)).store.insert_agent(Agent(
            id=name, name=name, role=role, parent=parent, status=status, backend=backend, mux="headless",
            session_id=session_id,
            worktree=str(path) if path else None, branch=branch, base_branch="main" if branch else None,
            output=output, created_at=now, updated_at=now, status_at=now,
            spec={"worktree_created": True, "creates_worktree": True} if worktree else {}))

    def spawn(self, *names: str) -> None:
        """Real demo agents in tmux, started by the CLI, each settled (idle) before the test goes on."""
        args = [x for n in names for x in ("--worker", n)]
        obj, err = self.cli("spawn", *args, "--prompt", "work")
        assert not err and not obj["errors"], obj
        self.settle()

    def settle(self, timeout: float = 90) -> None:
        """Wait until no agent is starting or working (a spawn waiting for --after counts as settled)."""
        deadline = time.monotonic() + timeout
        while True:
            obj, _ = self.cli("agents")
            busy = [a["id"] for a in obj["agents"] if a["location"] and (a["status"] == "working"
                    or (a["status"] == "starting" and not _waiting(self, a["id"])))]
            if not busy:
                return
            assert time.monotonic() < deadline, f"agents never settled: {busy}"
            time.sleep(0.3)

    def close(self) -> None:
        for s in self.sessions.values():
            s.close()


def _waiting(world: World, agent_id: str) -> bool:
    from exo_cli.env import Env

    rec = Env(cwd=world.repo, environ=world.environ(None)).store.agent(agent_id)
    return rec is not None and (rec.status_reason or "").startswith("waiting for")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    home = tmp_path_factory.mktemp("parity-home")
    repo = tmp_path_factory.mktemp("parity") / "repo"
    repo.mkdir()
    (home / ".gitconfig").write_text("[init]\n\tdefaultBranch = main\n")
    # The run's environment, the user's shell already taken out of it (tests/leftovers.py). Its TMUX_TMPDIR
    # stays: the in-process CLI and the `exo mcp` processes must find the same tmux server.
    env = dict(os.environ)
    env.update({"HOME": str(home), "EXO_CONFIG_DIR": str(home / "exo"), "XDG_CONFIG_HOME": str(home / ".config"),
                "NO_COLOR": "1", "COLUMNS": "80", "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
                "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "Exo Test", "GIT_AUTHOR_EMAIL": "exo@example.invalid",
                "GIT_COMMITTER_NAME": "Exo Test", "GIT_COMMITTER_EMAIL": "exo@example.invalid"})
    run = {"env": env, "check": True, "capture_output": True}
    import subprocess

    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], **run)
    (repo / "README.md").write_text("# parity\n")
    bindir = home / "bin"  # a claude that exits at once: the fork's child is started, then dead
    bindir.mkdir()
    (bindir / "claude").write_text("#!/bin/sh\nexit 0\n")
    (bindir / "claude").chmod(0o755)
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    (repo / "exo.toml").write_text('[agent]\ndefault = "demo"\n[mux]\ndefault = "tmux"\n[forge]\nkind = "local"\n')
    shutil.copytree(FIXTURES, repo / ".beads", ignore=shutil.ignore_patterns("README.md"))
    subprocess.run(["git", "add", "-A"], cwd=repo, **run)
    subprocess.run(["git", "commit", "-q", "-m", "initial"], cwd=repo, **run)
    w = World(repo, env)
    saved = dict(os.environ)
    os.environ.update({k: env[k] for k in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME",
                                           "GIT_COMMITTER_EMAIL")})
    try:
        yield w
    finally:
        w.close()
        stop_repo_agents(repo)
        os.environ.clear()
        os.environ.update(saved)


# --------------------------------------------------------------------------- comparing


class Pair(NamedTuple):
    """One comparison: the CLI call and the tool call that must return the same object."""

    cli: list[str]
    tool: str
    args: dict[str, Any]
    compat: bool = False
    names: dict[str, str] = {}  # noqa: RUF012 - CLI target name -> tool target name
    cli_agent: str | None = None
    tool_agent: str | None = None


def scrub(value: Any, names: dict[str, str]) -> Any:
    """``value`` with target names as placeholders and what differs by nature dropped or masked."""
    if isinstance(value, dict):
        return {scrub(k, names): scrub(v, names) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        items = [scrub(v, names) for v in value]
        return sorted(items) if all(isinstance(i, str) for i in items) else items
    if isinstance(value, str):
        for name, placeholder in sorted(names.items(), key=lambda kv: -len(kv[0])):
            value = re.sub(rf"(?<!\w){re.escape(name)}(?!\w)", placeholder, value)
        value = re.sub(r"\b[0-9a-f]{40}\b|\b[0-9a-f]{12}\b", "<sha>", value)
        value = re.sub(r"%\d+", "%N", value)
        return re.sub(r"#\d+", "#N", value)
    return value


def extra_fields(op: registry.Op, tool: registry.Tool) -> set[str]:
    """The fields a tool's result class adds to the operation's."""
    mine = tool.result_type
    if mine is None:
        return set()
    base = op.result_type()

    def names(cls: Any) -> set[str]:
        if dataclasses.is_dataclass(cls):
            return {f.name for f in dataclasses.fields(cls) if f.repr}
        if isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields"):  # a record (NamedTuple)
            return set(cls._fields)
        return set()

    return names(mine) - names(base)


def compare(world: World, op: registry.Op, pair: Pair) -> None:
    tool = next((t for t in registry.served_tools(op, MCP_COMPAT if pair.compat else ())
                 if t.name == pair.tool), None)
    assert tool is not None, f"{pair.tool} does not serve {op.name}"
    world.seen.add((op.name, f"{tool.name}/{tool.compat}"))
    cli, cli_err = world.cli(*pair.cli, agent=pair.cli_agent)
    got, tool_err = world.tool(pair.tool, pair.args, agent=pair.tool_agent, compat=pair.compat)
    assert cli_err == tool_err, (pair, cli, got)
    ids = {n: f"<T{i}>" for i, n in enumerate(pair.names)}
    left = scrub(cli, ids)
    right = scrub(got, {t: ids[c] for c, t in pair.names.items()})
    if cli_err and "error" in cli:
        assert left == right, (pair.tool, left, right)
        return
    if op.name == "status":  # the CLI's caller is the human; the server serves the human's session as the root TL
        left.pop("role"), right.pop("role")
    extra = extra_fields(op, tool)
    assert set(right) - set(left) == extra, (pair.tool, set(right) - set(left), extra)
    common = {k: right[k] for k in left}
    if op.name == "agents" and tool.compat:  # is_idle is termtile's extra field on every row
        common["agents"] = [{k: v for k, v in a.items() if k != "is_idle"} for a in common["agents"]]
    assert left == common, (pair.tool, left, common)


# --------------------------------------------------------------------------- the cases, one per operation


def case_beads_ready(w: World) -> list[Pair]:
    return [Pair(["beads", "ready", "--limit", "2"], "beads_ready", {"limit": 2})]


def case_beads_list(w: World) -> list[Pair]:
    return [Pair(["beads", "list", "--all", "--status", "open"], "beads_list", {"show_all": True, "status": "open"})]


def case_beads_show(w: World) -> list[Pair]:
    return [Pair(["beads", "show", "a2"], "beads_show", {"bead_id": "a2"})]


def case_reconstitute(w: World) -> list[Pair]:
    return [Pair(["reconstitute"], "exo_reconstitute", {})]


def case_complete(w: World) -> list[Pair]:
    w.record("c1", worktree=True)
    w.record("c2", worktree=True)
    return [Pair(["complete", "c1", "--force"], "exo_complete", {"target": "c2", "force": True}, names={"c1": "c2"})]


def case_kill(w: World) -> list[Pair]:
    w.spawn("k1", "k2", "k3", "k4")
    return [Pair(["kill", "k1"], "kill", {"agent": "k2"}, names={"k1": "k2"}),
            Pair(["kill", "k3"], "kill_agent", {"slot": "k4"}, compat=True, names={"k3": "k4"})]


def case_read(w: World) -> list[Pair]:
    w.spawn("r1", "r2")
    for r in ("r1", "r2"):  # the screens stop changing once each demo agent waits for input
        obj, _ = w.cli("read", r, "--wait-for", "waiting for input", "--timeout", "60")
        assert obj["matched"], obj
    return [
        Pair(["read", "r1", "--lines", "8"], "read_from_agent", {"agent": "r1", "lines": 8}),
        Pair(["read", "r1", "r2", "--clean", "--wait-for", "committed", "--timeout", "5"], "read_from_agent",
             {"agent": ["r1", "r2"], "clean": True, "wait_for": "committed", "timeout": 5}),
        Pair(["read", "r2", "--lines", "3", "--clean", "--wait-for", "demo"], "read_from_agent",
             {"slot": "r2", "lines": 3, "clean": True, "pattern": "demo"}, compat=True),
    ]


def case_note(w: World) -> list[Pair]:
    w.record("n1")
    return [Pair(["note", "halfway"], "note", {"message": "halfway"}, cli_agent="n1", tool_agent="n1")]


def case_question(w: World) -> list[Pair]:
    w.record("q1")
    return [Pair(["question", "Which port?", "--timeout", "0"], "question", {"message": "Which port?", "timeout": 0},
                 cli_agent="q1", tool_agent="q1")]


def case_answer(w: World) -> list[Pair]:
    w.record("an1")
    w.record("an2")
    for a in ("an1", "an2"):
        w.cli("question", "Squash or merge?", "--timeout", "0", agent=a)
    return [Pair(["answer", "an1", "squash"], "answer_question", {"agent": "an2", "message": "squash"},
                 names={"an1": "an2"})]


def case_send(w: World) -> list[Pair]:
    for n in ("s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10"):
        w.record(n, status="working")
    return [
        Pair(["send", "s1,s2", "hello"], "send", {"to": ["s3", "s4"], "message": "hello"}, names={"s1": "s3", "s2": "s4"}),
        Pair(["send", "s5", "hello"], "send", {"to": "s6", "message": "hello"}, compat=True, names={"s5": "s6"}),
        Pair(["send", "s7", "task"], "message_workers", {"session_ids": ["s8"], "message": "task"}, compat=True,
             names={"s7": "s8"}),
        Pair(["send", "s9", "more"], "send_to_agent", {"slot": "s10", "text": "more"}, compat=True,
             names={"s9": "s10"}),
    ]


def case_wait(w: World) -> list[Pair]:
    for n in ("x1", "x2"):
        w.record(n, status="working")
        w.cli("note", f"from {n}", agent=n)
    w.record("x3", output="all done")
    w.record("x4", output="all done")
    return [Pair(["wait", "x1", "--timeout", "0"], "wait", {"from_agents": ["x2"], "timeout": 0}, names={"x1": "x2"}),
            Pair(["wait", "x3", "--timeout", "5", "--until-idle"], "wait_for_idle", {"slot": "x4", "timeout": 5}, compat=True,
                 names={"x3": "x4"})]


def case_output(w: World) -> list[Pair]:
    w.record("o1", output="the result")
    return [Pair(["output", "o1"], "get_artifact", {"agent": "o1"}),
            Pair(["output", "o1"], "get_artifact", {"slot": "o1"}, compat=True)]


def case_done(w: World) -> list[Pair]:
    w.record("d1", status="working")
    w.record("d2", status="working")
    return [Pair(["done", "--output", "finished"], "done", {"output": "finished"}, names={"d1": "d2"},
                 cli_agent="d1", tool_agent="d2")]


def case_pr_file(w: World) -> list[Pair]:
    w.record("f1", worktree=True)
    w.record("f2", worktree=True)
    return [Pair(["pr", "file", "--title", "Add it", "--draft"], "file_pr", {"title": "Add it", "draft": True},
                 names={"f1": "f2"}, cli_agent="f1", tool_agent="f2")]


def case_pr_merge(w: World) -> list[Pair]:
    numbers = []
    for m in ("m1", "m2"):
        w.record(m, worktree=True)
        obj, err = w.cli("pr", "file", "--title", "Merge me", agent=m)
        assert not err, obj
        numbers.append(obj["pr"]["number"])
    return [Pair(["pr", "merge", str(numbers[0]), "--strategy", "squash"], "merge_pr",
                 {"pr_number": numbers[1], "strategy": "squash"}, names={"m1": "m2", "m2": "m1"})]


def case_pr_queue(w: World) -> list[Pair]:
    return [Pair(["pr", "queue"], "merge_queue", {}),
            Pair(["pr", "queue", "--base", "main"], "merge_queue", {"base": "main"})]


def case_diff(w: World) -> list[Pair]:
    w.record("df1", worktree=True)
    return [Pair(["diff", "df1"], "diff_agent", {"agent": "df1"}),
            Pair(["diff", "df1", "--stat"], "diff_agent", {"agent": "df1", "stat": True})]


def case_conflicts(w: World) -> list[Pair]:
    w.record("cf1", worktree=True)
    return [Pair(["conflicts"], "list_conflicts", {}),
            Pair(["conflicts", "cf1", "--check"], "list_conflicts", {"agent": "cf1", "check": True})]


def case_checkpoints(w: World) -> list[Pair]:
    w.record("ck1", worktree=True)
    (w.repo / ".exo" / "worktrees" / "ck1" / "notes.md").write_text("kept\n")
    obj, err = w.cli("checkpoint", "ck1")
    assert not err and obj["taken"], obj
    return [Pair(["checkpoints", "ck1"], "list_checkpoints", {"agent": "ck1"})]


def case_undo(w: World) -> list[Pair]:
    for name in ("u1", "u2"):
        w.record(name, worktree=True)
        obj, err = w.cli("checkpoint", name)
        assert not err and obj["taken"], obj
        (w.repo / ".exo" / "worktrees" / name / f"{name}.txt").write_text("overwritten\n")
    return [Pair(["undo", "u1", "--to", "1"], "undo", {"agent": "u2", "to": 1}, names={"u1": "u2"})]


def case_hosts(w: World) -> list[Pair]:
    return [Pair(["hosts"], "list_hosts", {})]


def case_pr_list(w: World) -> list[Pair]:
    return [Pair(["pr", "list", "--state", "open"], "list_prs", {"state": "open"})]


def case_spawn(w: World) -> list[Pair]:
    w.record("dep")
    from exo_cli.adapters.agents.claude import encode_project_dir

    for n, sid in (("fp1", "sid-1"), ("fp2", "sid-2")):  # claude team leads whose conversation a fork starts from
        w.record(n, role="tl", backend="claude", session_id=sid, worktree=True)
        folder = Path(w.env["HOME"]) / ".claude" / "projects" / encode_project_dir(w.repo / ".exo" / "worktrees" / n)
        folder.mkdir(parents=True)
        (folder / f"{sid}.jsonl").write_text('{"type":"user"}\n')
    return [
        Pair(["spawn", "--worker", "sw1", "--prompt", "Do X", "--mux", "tmux", "--skip-permissions"], "spawn_workers",
             {"specs": [{"name": "sw2", "prompt": "Do X"}], "mux": "tmux", "skip_permissions": True},
             names={"sw1": "sw2"}),
        Pair(["spawn", "--worker", "sw3", "--prompt", "Do Y", "--no-worktree"], "spawn_workers",
             {"workers": [{"project_path": "auto", "name": "sw4", "prompt": "Do Y", "use_worktree": False}]},
             compat=True, names={"sw3": "sw4"}),
        Pair(["spawn", "--subtree", "--task", "Own auth", "--branch", "st1", "--from", "main"], "spawn_subtree",
             {"task": "Own auth", "branch_name": "st2", "from": "main"}, names={"st1": "st2"}),
        Pair(["spawn", "a1", "--prompt", "Be careful"], "spawn_agents", {"bead_ids": ["a3"], "prompt": "Be careful"},
             names={"a1": "a3", "add-a-verbose-flag": "crash-on-start", "Add a --verbose flag": "Crash on start"}),
        Pair(["spawn", "--worker", "sa1", "--prompt", "Then: {{dep.output}}", "--after", "dep", "--agent", "demo"],
             "spawn_agent", {"agent_type": "demo", "name": "sa2", "task": "Then: {{dep.output}}", "depends_on": ["dep"]},
             compat=True, names={"sa1": "sa2"}),
        Pair(["spawn", "--worker", "sf1", "--prompt", "p", "--after", "nobody"], "spawn_workers",
             {"specs": [{"name": "sf2", "prompt": "p"}], "after": ["nobody"]}, names={"sf1": "sf2"}),  # all failed
        Pair(["spawn", "--subtree", "--task", "Fork me", "--branch", "fk1", "--fork-session"], "fork",
             {"name": "fk2", "prompt": "Fork me"}, compat=True, names={"fk1": "fk2"}),  # demo cannot fork: an error
        Pair(["spawn", "--subtree", "--task", "Fork me", "--branch", "fk3", "--fork-session"], "fork",
             {"name": "fk4", "prompt": "Fork me"}, compat=True, names={"fk3": "fk4", "fp1": "fp2", "sid-1": "sid-2"},
             cli_agent="fp1", tool_agent="fp2"),
    ]


def case_agents(w: World) -> list[Pair]:
    w.settle()
    return [Pair(["agents"], "list_agents", {}), Pair(["agents"], "list_agents", {}, compat=True)]


def case_cost(w: World) -> list[Pair]:
    from exo_cli.env import Env
    from exo_cli.records import Usage

    w.record("co-lead", role="tl")
    w.record("co-kid", parent="co-lead")
    store = Env(cwd=w.repo, environ=w.environ(None)).store
    store.record_usage("co-kid", 1, [Usage("claude-haiku-4-5", 100, 20, 3, 400), Usage("no-price", 5)])
    return [Pair(["cost"], "cost", {}), Pair(["cost", "co-lead", "--tree"], "cost", {"agent": "co-lead", "tree": True}),
            Pair(["cost", "--tree"], "cost", {"tree": True})]  # the same error both ways


def case_budget(w: World) -> list[Pair]:
    w.record("bu1")
    w.record("bu2")
    return [Pair(["budget", "bu1", "5"], "budget", {"agent": "bu2", "amount": "5"}, names={"bu1": "bu2"}),
            Pair(["budget", "bu1", "+100", "--tokens"], "budget", {"agent": "bu2", "amount": "+100", "tokens": True},
                 names={"bu1": "bu2"}),
            Pair(["budget", "bu1", "lots"], "budget", {"agent": "bu2", "amount": "lots"}, names={"bu1": "bu2"})]


def case_report_usage(w: World) -> list[Pair]:
    w.record("ru1", backend="custom")
    w.record("ru2", backend="custom")
    w.record("ru3", backend="codex")
    w.record("ru4", backend="codex")
    return [Pair(["usage", "--model", "m", "--input", "3", "--cache-read", "4"], "report_usage",
                 {"model": "m", "input": 3, "cache_read": 4}, names={"ru1": "ru2"}, cli_agent="ru1", tool_agent="ru2"),
            Pair(["usage", "--model", "m", "--input", "3"], "report_usage", {"model": "m", "input": 3},
                 names={"ru3": "ru4"}, cli_agent="ru3", tool_agent="ru4")]  # refused alike


def case_status(w: World) -> list[Pair]:
    w.record("st-view", output="x")
    w.settle()
    return [Pair(["status"], "exo_status", {}), Pair(["status", "st-view"], "exo_status", {"agent": "st-view"})]


CASES: dict[str, Callable[[World], list[Pair]]] = {
    name.removeprefix("case_"): fn for name, fn in globals().items() if name.startswith("case_")
}
SERVED = sorted(name for name, op in OPS.items() if op.all_tools())


def test_every_operation_with_tools_has_a_case() -> None:
    assert set(CASES) == set(SERVED), (set(SERVED) - set(CASES), set(CASES) - set(SERVED))


@pytest.mark.parametrize("op_name", SERVED)
def test_cli_and_every_tool_return_the_same_object(world: World, op_name: str) -> None:
    op = OPS[op_name]
    for pair in CASES[op_name](world):
        compare(world, op, pair)
    want = {(op_name, f"{t.name}/{t.compat}") for t in op.all_tools()}
    assert want <= world.seen, f"tools of {op_name} without a comparison: {sorted(want - world.seen)}"


def test_every_tool_result_was_checked_against_its_output_schema(world: World) -> None:
    """Every tool returned a real result above, and each validated against its declared output schema."""
    for session in world.sessions.values():
        for t in session.tools():
            jsonschema.Draft202012Validator.check_schema(t.output_schema)
    every = {t.name for op in OPS.values() for t in op.all_tools()}
    assert every <= world.validated, f"tools never returned a result here: {sorted(every - world.validated)}"
