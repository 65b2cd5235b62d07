"""``exo spawn --sandbox``: an agent in bubblewrap, in its own clone, on tmux and headless.

The agent is a custom command (a shell) that commits in its clone, reaches exo through its
socket (``exo note``) and tries what a sandbox refuses: writing the main checkout, reading its
``.env`` and the user's ``~/.ssh``. Then the rules of ``decide``: flags that exclude each other,
``--skip-permissions`` where bubblewrap does not work.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, Exo, git, stop_repo_agents, trust, wait_for, write_trusted

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (under CI it must be: .ci/run installs it)")

AGENT = r"""
out=.exo/sandbox-result
{ echo work > agent.txt && git add agent.txt && git commit -qm 'agent work' && echo commit=ok || echo commit=refused
  echo pwned >> "$REPO/README.md" 2>/dev/null && echo write_main=ok || echo write_main=refused
  cat "$REPO/.env" >/dev/null 2>&1 && echo read_env=ok || echo read_env=refused
  cat "$HOME_REAL/.ssh/id_ed25519" >/dev/null 2>&1 && echo ssh=ok || echo ssh=refused
  test -z "$CANARY" && echo env=refused || echo env=ok
  exo note 'from the sandbox' >/dev/null 2>&1 && echo note=ok || echo note=refused
  exo pr file --title 'agent work' >/dev/null 2>&1 && echo pr=ok || echo pr=refused
  test -t 0 && echo tty=yes || echo tty=no
  curl -s -m 30 https://example.com/ >/dev/null 2>&1 && echo net=ok || echo net=refused
} > "$out.tmp" 2>/dev/null
mv "$out.tmp" "$out"
exec sleep 600
"""


# the post-create command runs what the repository holds: inside the agent's sandbox too
POST_CREATE = 'echo pwned >> "$REPO/README.md" && echo post_create=ok > post.txt || echo post_create=refused > post.txt'


@pytest.fixture
def team(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (repo / ".env").write_text("SECRET=1\n")
    (repo / "exo.toml").write_text(f'[agent]\ncommand = ["sh", "-c", {json.dumps(AGENT)}, "{{prompt}}"]\n'
                                   f'[worktree]\npost_create = ["sh", "-c", {json.dumps(POST_CREATE)}]\n')
    (repo / ".exo").mkdir()
    (repo / ".exo" / "config.toml").write_text('[sandbox]\nenv = ["REPO", "HOME_REAL"]\n')  # the user's, not the repo's
    git(repo, "add", "exo.toml")
    git(repo, "commit", "-q", "-m", "exo.toml")
    trust(repo)  # the user's own team settings
    home = Path(__import__("os").environ["HOME"])
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text("canary")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("REPO", str(repo))
    monkeypatch.setenv("HOME_REAL", str(home))
    monkeypatch.setenv("CANARY", "in-the-spawning-env")
    yield repo
    stop_repo_agents(repo)


def _result(clone: Path) -> dict[str, str]:
    path = clone / ".exo" / "sandbox-result"
    wait_for(path.exists, timeout=120, what="the sandboxed agent's report")
    return dict(line.split("=", 1) for line in path.read_text().split())


@needs_bwrap
@pytest.mark.parametrize(("mux", "store_kind"), [("headless", "sqlite"), ("tmux", "sqlite"), ("headless", "postgres")],
                         indirect=["store_kind"])
def test_a_sandboxed_agent_commits_and_reaches_exo_but_nothing_else(team: Path, exo: Exo, mux: str,
                                                                    store_kind: str) -> None:
    r = exo("spawn", "--worker", "w1", "--prompt", "go", "--agent", "custom", "--mux", mux, "--sandbox", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    spawned = r.json()["agents"][0]  # type: ignore[index]
    assert spawned["sandboxed"] is True and spawned["layout"] == "clone"
    clone = Path(spawned["worktree"])
    assert _result(clone) == {"commit": "ok", "note": "ok", "pr": "ok", "write_main": "refused", "read_env": "refused",
                              "ssh": "refused", "env": "refused", "tty": "yes" if mux == "tmux" else "no",
                              "net": "refused"}
    assert (clone / "post.txt").read_text() == "post_create=refused\n"
    assert git(clone, "log", "-1", "--format=%s") == "agent work"
    assert (team / "README.md").read_text() == "# demo\n"
    agents = exo("agents", "--json").json()["agents"]  # type: ignore[index]
    assert [(a["id"], a["sandboxed"], a["pr"]["number"]) for a in agents] == [("w1", True, 1)]
    assert "clone (sandboxed)" in exo("agents").stdout
    # its network is the allow-list proxy: a host off the list is refused there (never looked up) and counted
    wait_for(lambda: exo("agents", "--json").json()["agents"][0]["net_refused"] >= 1, 60,  # type: ignore[index]
             what="the proxy's refusal of example.com to be counted")
    if mux == "headless":  # the parent merges the agent's PR and completes it: its clone and HOME go
        merged = exo("pr", "merge", "1", "--json")
        assert merged.exit_code == 0, merged.stdout + merged.stderr
        assert (team / "agent.txt").read_text() == "work\n"
        (clone / "post.txt").unlink()  # the post-create command's report: complete would keep it as work
        done = exo("complete", "w1", "--json")  # it still sleeps: complete stops it (every process of its sandbox)
        assert done.exit_code == 0 and done.json()["stopped"] is True, done.stdout + done.stderr  # type: ignore[index]
        assert not clone.exists()
        assert exo("reap").exit_code == 0  # its private HOME and cache go with exo's folder for it
        assert not (team / ".git" / "exo" / "agents" / "w1").exists()
    else:
        assert exo("kill", "w1").exit_code == 0


def _tool(cwd: Path, tool: str, args: dict[str, object]) -> object:
    """One call of an MCP tool through the real SDK client, in process (so the test's PATH applies)."""
    import asyncio

    from mcp import Client

    from exo_cli.env import Env
    from exo_cli.mcp_server import build_server

    async def go() -> object:
        async with Client(build_server(Env(cwd=cwd), "tl")) as c:
            return await c.call_tool(tool, args)

    return asyncio.run(go())


def test_the_rules_of_the_sandbox_choice(team: Path, exo: Exo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = ("spawn", "--worker", "w1", "--prompt", "go", "--mux", "headless")
    r = exo(*base, "--agent", "custom", "--sandbox", "--no-worktree")
    assert r.exit_code == 2 and "excludes --no-worktree" in r.stderr
    r = exo(*base, "--agent", "custom", "--sandbox", "--layout", "worktree")
    assert r.exit_code == 2 and "excludes --layout worktree" in r.stderr
    # a machine without bubblewrap: PATH without bwrap
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("git", "tmux", "sh", "sleep"):
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    path = {"PATH": f"{bare}:{Path(sys.executable).parent}"}
    r = exo(*base, "--agent", "custom", "--sandbox", env=path)
    assert r.exit_code == 7 and "bubblewrap is not installed" in r.stderr
    # mode auto: never silently unsandboxed, for the CLI and the MCP spawn tools alike
    path["EXO_SANDBOX"] = "auto"
    for agent in ("custom", "demo"):
        r = exo(*base, "--agent", agent, "--skip-permissions", env=path)
        assert r.exit_code == 7 and "Refusing to let agents run tools without asking" in r.stderr, r.stderr
        assert "--no-sandbox" in r.stderr
    with monkeypatch.context() as patched:
        patched.setenv("PATH", path["PATH"])
        patched.setenv("EXO_SANDBOX", "auto")
        from mcp.shared.exceptions import MCPError

        with pytest.raises(BaseException) as refused:  # an EnvironmentError is a protocol error (in the client's task group)
            _tool(team, "spawn_workers", {"specs": [{"name": "m1", "prompt": "x", "agent": "custom"}],
                                          "skip_permissions": True, "mux": "headless"})
        errors, found = [refused.value], []
        while errors:
            e = errors.pop()
            errors += list(getattr(e, "exceptions", ()))
            found += [e] if isinstance(e, MCPError) else []
        assert [(e.error.code, "Refusing to let agents run tools without asking" in e.error.message) for e in found] == [
            (-32005, True)], refused.value
        assert exo("agents", "--json").json()["agents"] == []  # type: ignore[index]
        r = exo(*base, "--agent", "custom", "--json", env=path)  # no bubblewrap: unsandboxed
        assert r.exit_code == 0 and r.json()["agents"][0]["sandboxed"] is False, r.stderr  # type: ignore[index]
        r = exo("spawn", "--worker", "w2", "--prompt", "go", "--mux", "headless", "--agent", "custom", "--skip-permissions",
                "--no-sandbox", "--json", env=path)
        assert r.exit_code == 0, r.stderr
        assert r.json()["agents"][0]["sandboxed"] is False  # type: ignore[index]
    if shutil.which("bwrap") is not None:  # where bubblewrap works, auto refuses only an unsandboxed layout
        r = exo("spawn", "--worker", "w3", "--prompt", "go", "--mux", "headless", "--agent", "custom",
                "--skip-permissions", "--layout", "worktree", env={"EXO_SANDBOX": "auto"})
        assert r.exit_code == 7 and "outside a sandbox: they work in a worktree" in r.stderr
    # the broker off: a sandbox hides the state, so its agent could never reach exo (no socket)
    off = {"EXO_BROKER": "0"}
    r = exo("spawn", "--worker", "w6", "--prompt", "go", "--mux", "headless", "--agent", "custom", "--sandbox", env=off)
    assert r.exit_code == 2 and "only through the team broker" in r.stderr, r.stderr
    r = exo("spawn", "--worker", "w4", "--prompt", "go", "--mux", "headless", "--agent", "custom",
            "--skip-permissions", env={**off, "EXO_SANDBOX": "auto"})
    assert r.exit_code == 7 and "only with the team broker on" in r.stderr, r.stderr
    r = exo("spawn", "--worker", "w5", "--prompt", "go", "--mux", "headless", "--agent", "custom", "--json",
            env={**off, "EXO_SANDBOX": "auto"})
    assert r.exit_code == 0 and r.json()["agents"][0]["sandboxed"] is False, r.stderr  # type: ignore[index]


def test_the_repositorys_exo_toml_cannot_widen_the_sandbox(team: Path, exo: Exo) -> None:
    """[sandbox] paths, env or devices in the committed exo.toml are refused until trusted (a repository would open
    the walls)."""
    (team / "exo.toml").write_text((team / "exo.toml").read_text() + '[sandbox]\npaths = ["/etc"]\n')
    r = exo("spawn", "--worker", "w1", "--prompt", "go", "--agent", "custom", "--mux", "headless", "--sandbox")
    assert r.exit_code == 5 and "sets sandbox.paths, which exo uses only once you trust it" in r.stderr, r.stderr
    assert "exo trust" in r.stderr
    assert exo("agents", "--json").json()["agents"] == []  # type: ignore[index]


def test_the_board_marks_a_sandboxed_agent() -> None:
    from types import SimpleNamespace

    from exo_cli.render import teamboard

    def row(sandboxed: bool) -> SimpleNamespace:
        agent = SimpleNamespace(id="w1", name="w1", depth=0, status="idle", task="t", bead=None, last_message=None,
                                pr=None, turns=0, tool_calls=0, tokens=0, age_seconds=1.0, sandboxed=sandboxed)
        return SimpleNamespace(agent=agent, needs=None, conflicts=[])

    assert teamboard.line(row(True), 80).startswith("  w1* ") and teamboard.line(row(False), 80).startswith("  w1 ")


def test_exo_hosts_counts_the_sandboxed_agents_of_each_host(repo: Path, exo: Exo) -> None:
    """A host that cannot be reached (its ssh is `false`) still lists its agents and how many are sandboxed."""
    import time

    from exo_cli.env import Env
    from exo_cli.records import IDLE, Agent

    (repo / ".exo").mkdir()
    (repo / ".exo" / "config.toml").write_text('[ssh]\ncommand = ["false"]\n[hosts.gpu1]\nssh = "gpu1"\npath = "/srv/r"\n')
    env = Env(cwd=repo)
    now = time.time()
    for name, spec in (("w1", {"sandboxed": True, "host": "gpu1"}), ("w2", {"host": "gpu1"})):
        env.store.insert_agent(Agent(id=name, name=name, role="dev", parent="root", status=IDLE, backend="demo",
                                     mux="headless", worktree=None, branch=None, base_branch="main", repo=str(repo),
                                     location={}, created_at=now, updated_at=now, status_at=now, spec=spec))
    (host,) = exo("hosts", "--json").json()["hosts"]  # type: ignore[index]
    assert (host["agents"], host["sandboxed"]) == (2, 1)
    assert "2 (1 sandboxed)" in exo("hosts").stdout


TL_AGENT = r"""
if [ "$EXO_ROLE" = tl ]; then
  { exo spawn --worker c1 --prompt x --agent custom --mux headless --no-sandbox >/dev/null 2>&1 \
      && echo unsandboxed=ok || echo unsandboxed=refused
    exo spawn --worker c2 --prompt x --agent custom --mux headless >/dev/null 2>&1 && echo child=ok || echo child=failed
  } > .exo/tl.tmp 2>/dev/null
  mv .exo/tl.tmp .exo/tl-result
fi
exec sleep 600
"""


@needs_bwrap
def test_a_sandboxed_team_lead_spawns_only_sandboxed_children(team: Path, exo: Exo) -> None:
    write_trusted(team, f'[agent]\ncommand = ["sh", "-c", {json.dumps(TL_AGENT)}, "{{prompt}}"]\n')
    r = exo("spawn", "--subtree", "--task", "lead", "--branch", "lead", "--agent", "custom", "--mux", "headless",
            "--sandbox", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    clone = Path(r.json()["agents"][0]["worktree"])  # type: ignore[index]
    path = clone / ".exo" / "tl-result"
    wait_for(path.exists, timeout=120, what="the team lead's report")
    assert path.read_text().split() == ["unsandboxed=refused", "child=ok"]
    agents = {a["id"]: a for a in exo("agents", "--json").json()["agents"]}  # type: ignore[index]
    assert agents["c2"]["sandboxed"] is True and agents["c2"]["layout"] == "clone" and "c1" not in agents


@needs_bwrap
def test_a_sandboxed_subtree_forks_the_session_into_its_private_home(team: Path, exo: Exo, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """--fork-session of a sandboxed Claude subtree: the one transcript it forks is copied into its private HOME
    (under its clone's project folder), the user's ~/.claude gets nothing; `claude --resume ID --fork-session`."""
    from exo_cli.adapters.agents.claude import encode_project_dir

    home = Path(os.environ["HOME"])
    mine = home / ".claude" / "projects" / encode_project_dir(team)
    mine.mkdir(parents=True)
    (mine / "s1.jsonl").write_text('{"type":"user","message":"the parent\'s conversation"}\n')
    bindir = tmp_path / "bin"  # a stand-in for the claude CLI: spawn needs one on PATH (the sandbox cannot run it)
    bindir.mkdir()
    (bindir / "claude").write_text("#!/bin/sh\nexec sleep 600\n")
    (bindir / "claude").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    r = exo("spawn", "--subtree", "--task", "t", "--branch", "b1", "--agent", "claude", "--fork-session",
            "--parent-session-id", "s1", "--mux", "headless", "--sandbox", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    (agent,) = r.json()["agents"]  # type: ignore[index]
    assert agent["sandboxed"] is True and agent["layout"] == "clone"
    private = team / ".git" / "exo" / "agents" / "b1" / "home"
    forked = private / ".claude" / "projects" / encode_project_dir(agent["worktree"]) / "s1.jsonl"
    assert forked.read_text() == (mine / "s1.jsonl").read_text() and forked.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in (home / ".claude" / "projects").iterdir()) == [mine.name]
    assert exo("kill", "b1").exit_code == 0


def test_a_sandboxed_parents_transcript_is_read_without_following_its_links(tmp_path: Path) -> None:
    """A sandboxed parent writes its own HOME: a transcript (or a projects folder) it made a link to the user's
    secret is not copied into its child; its real transcript is."""
    from exo_cli.adapters.agents import LaunchContext
    from exo_cli.adapters.agents.claude import ClaudeBackend, encode_project_dir
    from exo_cli.errors import NotFound

    secret = tmp_path / "id_ed25519"
    secret.write_text("canary")
    parent_home, child_home = tmp_path / "parent-home", tmp_path / "child-home"
    projects = parent_home / ".claude" / "projects"
    (projects / encode_project_dir("/p/clone")).mkdir(parents=True)
    (projects / encode_project_dir("/p/clone") / "s1.jsonl").symlink_to(secret)
    (projects / "linked").symlink_to(tmp_path)  # a folder link: /p/linked/<id>.jsonl would be the secret's folder
    (tmp_path / "s2.jsonl").write_text("canary")
    child_home.mkdir()

    def fork(session: str) -> object:
        ctx = LaunchContext(name="c", role="dev", worktree=Path("/p/child"), repo_root=tmp_path, prompt="p",
                            agent_dir=tmp_path, state_dir=tmp_path, home=child_home, env={}, resume_session=session,
                            fork_session=True, parent_cwd=Path("/p/clone"), parent_config=parent_home / ".claude",
                            parent_confined=True)
        return ClaudeBackend()._copy_transcript(ctx)

    for session in ("s1", "s2"):
        with pytest.raises(NotFound):
            fork(session)
    assert not any(p.is_file() for p in child_home.rglob("*"))
    (projects / encode_project_dir("/p/clone") / "s1.jsonl").unlink()
    (projects / encode_project_dir("/p/clone") / "s1.jsonl").write_text("conversation")
    undo = fork("s1")
    copied = child_home / ".claude" / "projects" / encode_project_dir("/p/child") / "s1.jsonl"
    assert copied.read_text() == "conversation" and undo == {"kind": "remove-file", "path": str(copied)}


@needs_bwrap
def test_an_agent_recorded_before_sandboxing_was_on_starts_as_it_was_spawned(team: Path, exo: Exo,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A deferred start (--after) recorded by an exo that had no sandbox (no `sandbox` or `layout` in its record)
    starts unsandboxed in its worktree under mode auto, as it was asked for; a new one is sandboxed."""
    monkeypatch.setenv("EXO_SANDBOX", "auto")
    from exo_cli.env import Env
    from exo_cli.ops.spawn.pending import launch_pending

    assert exo("spawn", "--worker", "w1", "--prompt", "go", "--agent", "custom", "--mux", "headless").exit_code == 0
    for name in ("old", "new"):
        r = exo("spawn", "--worker", name, "--prompt", "later", "--agent", "custom", "--mux", "headless", "--after", "w1")
        assert r.exit_code == 0, r.stderr
    env = Env(cwd=team)
    old = env.store.agent("old")
    assert old is not None and old.spec["common"]["sandbox"] is True  # recorded under mode auto
    spec = {**old.spec, "common": {k: v for k, v in old.spec["common"].items() if k not in ("sandbox", "layout")}}
    env.store.update_agent("old", spec=spec)  # as an exo without a sandbox recorded it
    for name in ("old", "new"):
        assert launch_pending(env, name).errors == []
    agents = {a["id"]: a for a in exo("agents", "--json").json()["agents"]}  # type: ignore[index]
    assert (agents["old"]["sandboxed"], agents["old"]["layout"]) == (False, "worktree")
    assert (team / ".exo" / "worktrees" / "old" / ".git").is_file()  # a linked worktree, as before
    assert (agents["new"]["sandboxed"], agents["new"]["layout"]) == (True, "clone")
    doctor = exo("doctor", "--json").json()
    assert [p for p in doctor["problems"] if p["subject"] in ("old", "new")] == [], doctor  # type: ignore[index]
