"""The unsandboxed path, kept working: one lifecycle per real CLI spawned ``--no-sandbox``.

Every other real-CLI e2e test runs its agents sandboxed (``[sandbox] mode = "on"`` in the user's
local configuration, whatever exo's default). Here the same configuration holds and the human
opts out for one spawn: the real Claude Code, Codex CLI and Gemini CLI start in a worktree of the
repository, in the host's network (the egress trap in their environment, no bridge, no proxy),
commit, note and file a PR through exo's MCP tools, go idle; the parent waits, merges and
completes them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from e2e.agents import AgentHome
from e2e.lifecycle_more import (
    Lifecycle,
    assert_no_egress,
    assert_through_the_proxy,
    descendants,
    git,
    lifecycle_env,
    make_repo,
    sandbox_on,
)
from e2e.model_server import ModelServer, tool_results

pytestmark = [pytest.mark.e2e, pytest.mark.tmux]

COMMIT = "printf 'hi\\n' > hello.txt && git add hello.txt && git commit -q -m 'Add hello.txt' && echo COMMITTED"
SCRIPTS = {
    "claude": ({"tool": "Bash", "input": {"command": COMMIT, "description": "commit"}},
               {"tool": "mcp__exo__note", "input": {"message": "NOTE-UNSANDBOXED"}},
               {"tool": "mcp__exo__file_pr", "input": {"title": "Add hello.txt", "body": "Says hi."}}),
    "codex": ({"tool": "exec_command", "input": {"cmd": COMMIT}},
              {"tool": "mcp__exo__note", "input": {"message": "NOTE-UNSANDBOXED"}},
              {"tool": "mcp__exo__file_pr", "input": {"title": "Add hello.txt", "body": "Says hi."}}),
    "gemini": ({"tool": "run_shell_command", "input": {"command": COMMIT}},
               {"tool": "mcp_exo_note", "input": {"message": "NOTE-UNSANDBOXED"}},
               {"tool": "mcp_exo_file_pr", "input": {"title": "Add hello.txt", "body": "Says hi."}}),
}


@pytest.fixture
def world(require_cli: Callable[[str], Path], model_server: ModelServer, agent_home: Callable[..., AgentHome],
          tmp_path: Path) -> Iterator[Callable[[str], Lifecycle]]:
    """make(cli) -> a Lifecycle of a repository whose user's configuration sandboxes every agent."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    made: list[Lifecycle] = []

    def make(cli: str) -> Lifecycle:
        require_cli(cli)
        repo = make_repo(tmp_path / "repo")
        sandbox_on(repo)
        home = agent_home(cli)
        drop = ["GEMINI_CLI_TRUST_WORKSPACE"] if cli == "gemini" else []  # exo's own trust, as in the lifecycle
        made.append(Lifecycle(repo, home, model_server, lifecycle_env(home, drop=drop)))
        return made[-1]

    yield make
    for lc in made:
        lc.close()


@pytest.mark.parametrize("cli", ["claude", "codex", "gemini"])
def test_an_unsandboxed_agent_commits_notes_files_a_pr_and_is_merged(world: Callable[[str], Lifecycle],
                                                                    cli: str) -> None:
    lc = world(cli)
    server = lc.server
    server.script(*SCRIPTS[cli], {"text": f"UNSANDBOXED-{cli}"})
    spawned = lc.exo_json("spawn", "--worker", "w1", "--agent", cli, "--skip-permissions", "--no-sandbox",
                          "--mux", "tmux", "--prompt", "commit hello.txt, note and file a PR", timeout=120)
    assert spawned["errors"] == [], spawned
    assert [(a["sandboxed"], a["layout"]) for a in spawned["agents"]] == [(False, "worktree")]
    worktree = Path(spawned["agents"][0]["worktree"])
    if cli == "claude":  # the user's own HOME got the worktree's trust entry (undone by complete)
        assert str(worktree) in json.loads((lc.home.home / ".claude.json").read_text())["projects"]
    rec = lc.wait_status("w1", "idle", timeout=120, since_turns=0)
    assert rec["output"] == f"UNSANDBOXED-{cli}"
    # the CLI runs in the host's network: no bridge, no namespace of its own (what the sandboxed tests check fails)
    pid = json.loads(rec["location"])["pid"]
    assert descendants(pid) and Path(f"/proc/{pid}/ns/net").readlink() == Path("/proc/self/ns/net").readlink()
    with pytest.raises(AssertionError, match="no exo network bridge"):
        assert_through_the_proxy(pid, server, cli, lc.exo_json)
    requests = server.agent_requests()
    assert "COMMITTED" in json.dumps(tool_results(requests[1])), requests[1]
    assert git(worktree, "log", "-1", "--format=%s") == "Add hello.txt"
    waited = lc.exo_json("wait", "w1", "--timeout", "30")
    assert [(e["kind"], e["message"]) for e in waited["results"]] == [("note", "NOTE-UNSANDBOXED")]
    assert [(p["number"], p["head"], p["state"]) for p in lc.exo_json("pr", "list")["prs"]] == [(1, "main.w1", "open")]
    assert lc.exo_json("pr", "merge", "1")["pr"]["state"] == "merged"
    assert (lc.repo / "hello.txt").read_text() == "hi\n"
    done = lc.exo_json("complete", "w1", timeout=60)
    assert (done["status"], done["worktree_removed"], done["branch_deleted"]) == ("done", True, True), done
    if cli == "claude":
        assert done["undone"] >= 1
        assert str(worktree) not in json.loads((lc.home.home / ".claude.json").read_text()).get("projects", {})
    assert not worktree.exists()
    assert_no_egress(server)
