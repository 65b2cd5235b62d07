"""The real Claude Code TUI, sandboxed (``exo spawn --sandbox --skip-permissions``), against the scripted model.

It runs in bubblewrap in exo's tmux server, in its own clone, with a private HOME (exo's copy of
the user's settings, the clone trusted, no dialog): its Bash tool commits in the clone and is
refused the main checkout and the user's ``~/.ssh``; its exo MCP tools reach exo through the
agent's socket (``note``, ``file_pr``), and its hooks mark it idle.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from e2e.agents import AgentHome
from e2e.lifecycle import Team, anthropic_is_error, assert_no_egress, git, git_repo, result_for, runtime_vars
from e2e.model_server import ModelServer

pytestmark = [pytest.mark.e2e, pytest.mark.tmux,
              pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (under CI it must be: .ci/run installs it)")]


@pytest.fixture
def team(require_cli: Callable[[str], Path], model_server: ModelServer, agent_home: Callable[..., AgentHome],
         tmp_path: Path) -> Iterator[Team]:
    require_cli("claude")
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    repo = git_repo(tmp_path / "repo")
    home = agent_home("claude")
    (home.home / ".claude" / "settings.json").write_text("{}\n")
    (home.home / ".ssh").mkdir()
    (home.home / ".ssh" / "id_ed25519").write_text("SSH-CANARY-31\n")
    team = Team.create(repo, home, extra_env=runtime_vars(tmp_path))
    try:
        yield team
    finally:
        print(team.trace())
        team.close()


def test_claude_sandboxed_commits_notes_files_a_pr_and_nothing_else(team: Team) -> None:
    server = team.server
    readme = team.repo / "README.md"
    before = readme.read_text()
    bash = ("printf 'hello\\n' > hello.txt && git add hello.txt && "
            "git -c user.name=W1 -c user.email=w1@example.invalid commit -q -m 'Add hello.txt' && echo COMMITTED; "
            f"(echo pwned >> {readme}) 2>/dev/null && echo WROTE-MAIN || echo DENIED-MAIN; "
            f"cat {team.home.home}/.ssh/id_ed25519 2>/dev/null || echo DENIED-SSH")
    server.script(
        {"tool": "Bash", "input": {"command": bash, "description": "commit, then try the walls"}},
        {"tool": "mcp__exo__note", "input": {"message": "NOTE-SANDBOXED"}},
        {"tool": "mcp__exo__file_pr", "input": {"title": "Add hello.txt", "body": "Says hello."}},
        {"text": "SANDBOXED-DONE"},
    )
    result = team.exo_json("spawn", "--worker", "w1", "--agent", "claude", "--skip-permissions", "--sandbox",
                           "--mux", "tmux", "--prompt", "commit hello.txt, note and file a PR")
    assert result["failed"] == [], result
    (spawned,) = result["agents"]
    assert (spawned["sandboxed"], spawned["layout"]) == (True, "clone")
    clone = Path(spawned["worktree"])
    # the user's own .claude.json got no trust entry: the clone is trusted in the agent's private HOME
    assert str(clone) not in json.loads((team.home.home / ".claude.json").read_text()).get("projects", {})

    first, bash_req, note_req, pr_req = (
        team.wait_request(lambda e, n=n: e["turn"] == n, what=f"agent request for turn {n}", agent="w1",
                          timeout=120) for n in range(4))
    idle = team.wait_agent("w1", lambda a: a.status == "idle" and a.turns >= 1, what="idle after turn 1",
                           timeout=120)
    assert idle.output == "SANDBOXED-DONE"
    out = result_for(bash_req, first["tool_id"])
    assert out is not None, bash_req
    text = json.dumps(out)
    assert "COMMITTED" in text and "DENIED-MAIN" in text and "DENIED-SSH" in text and "SSH-CANARY" not in text
    assert readme.read_text() == before
    assert git(clone, "log", "-1", "--format=%s") == "Add hello.txt"
    note = result_for(note_req, bash_req["tool_id"])
    assert note is not None and not anthropic_is_error(note_req, bash_req["tool_id"]), note
    pr = result_for(pr_req, note_req["tool_id"])
    assert pr is not None and not anthropic_is_error(pr_req, note_req["tool_id"]), pr
    assert json.loads(pr["output"])["pr"]["head"] == "main.w1"
    waited = team.exo_json("wait", "w1", "--timeout", "30")
    assert [(e["kind"], e["message"]) for e in waited["results"]] == [("note", "NOTE-SANDBOXED")]
    assert_no_egress(server)


def test_codex_sandboxed_commits_and_notes(require_cli: Callable[[str], Path], model_server: ModelServer,
                                          agent_home: Callable[..., AgentHome], tmp_path: Path) -> None:
    """Codex in the sandbox: its private CODEX_HOME holds the user's config, its login bound read-only."""
    from e2e.lifecycle_more import Lifecycle, lifecycle_env, make_repo
    from e2e.model_server import tool_results

    require_cli("codex")
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    repo = make_repo(tmp_path / "repo")
    (repo / ".exo").mkdir()  # the user's local config (never the repository's exo.toml, which may not widen it)
    (repo / ".exo" / "config.toml").write_text('[sandbox]\nenv = ["FAKE_API_KEY"]\n')  # the test provider's key
    home = agent_home("codex")
    lc = Lifecycle(repo, home, model_server, lifecycle_env(home, extra=runtime_vars(tmp_path)))
    try:
        readme = repo / "README.md"
        model_server.script(
            {"tool": "exec_command", "input": {"cmd": "printf 'hi\\n' > hello.txt && git add hello.txt && git commit -q "
                                               f"-m 'Add hello.txt' && echo COMMITTED; (echo x >> {readme}) 2>/dev/null"
                                               " && echo WROTE-MAIN || echo DENIED-MAIN"}},
            {"tool": "mcp__exo__note", "input": {"message": "NOTE-CODEX-SANDBOXED"}},
            {"text": "CODEX-SANDBOXED-DONE"},
        )
        spawned = lc.exo_json("spawn", "--worker", "w1", "--agent", "codex", "--skip-permissions", "--sandbox",
                              "--mux", "tmux", "--prompt", "commit and report")
        assert spawned["errors"] == [] and spawned["agents"][0]["sandboxed"] is True
        rec = lc.wait_status("w1", "idle", timeout=120, since_turns=0)
        assert rec["output"] == "CODEX-SANDBOXED-DONE"
        requests = model_server.agent_requests()
        out = tool_results(requests[1])[-1]["output"]
        assert "COMMITTED" in out and "DENIED-MAIN" in out, out
        assert git(Path(spawned["agents"][0]["worktree"]), "log", "-1", "--format=%s") == "Add hello.txt"
        waited = lc.exo_json("wait", "w1", "--timeout", "30")
        assert [(e["kind"], e["message"]) for e in waited["results"]] == [("note", "NOTE-CODEX-SANDBOXED")]
        assert_no_egress(model_server)
    finally:
        lc.close()


def test_gemini_sandboxed_commits_and_notes(require_cli: Callable[[str], Path], model_server: ModelServer,
                                           agent_home: Callable[..., AgentHome], tmp_path: Path) -> None:
    """Gemini CLI in the sandbox: its settings in the clone, its private HOME, its shell walled in."""
    from e2e.lifecycle_more import Lifecycle, lifecycle_env, make_repo
    from e2e.model_server import tool_results

    require_cli("gemini")
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    repo = make_repo(tmp_path / "repo")
    home = agent_home("gemini")
    lc = Lifecycle(repo, home, model_server, lifecycle_env(home, drop=["GEMINI_CLI_TRUST_WORKSPACE"],
                                                          extra=runtime_vars(tmp_path)))
    try:
        readme = repo / "README.md"
        model_server.script(
            {"tool": "run_shell_command", "input": {"command": "printf 'hi\\n' > hello.txt && git add hello.txt && git "
                                                    f"commit -q -m 'Add hello.txt' && echo COMMITTED; (echo x >> {readme})"
                                                    " 2>/dev/null && echo WROTE-MAIN || echo DENIED-MAIN"}},
            {"tool": "mcp_exo_note", "input": {"message": "NOTE-GEMINI-SANDBOXED"}},
            {"text": "GEMINI-SANDBOXED-DONE"},
        )
        spawned = lc.exo_json("spawn", "--worker", "w1", "--agent", "gemini", "--skip-permissions", "--sandbox",
                              "--mux", "tmux", "--prompt", "commit and report")
        assert spawned["errors"] == [] and spawned["agents"][0]["sandboxed"] is True
        rec = lc.wait_status("w1", "idle", timeout=120, since_turns=0)
        assert rec["output"] == "GEMINI-SANDBOXED-DONE"
        requests = model_server.agent_requests()
        out = json.dumps(tool_results(requests[1]))
        assert "COMMITTED" in out and "DENIED-MAIN" in out, out
        assert git(Path(spawned["agents"][0]["worktree"]), "log", "-1", "--format=%s") == "Add hello.txt"
        waited = lc.exo_json("wait", "w1", "--timeout", "30")
        assert [(e["kind"], e["message"]) for e in waited["results"]] == [("note", "NOTE-GEMINI-SANDBOXED")]
        assert_no_egress(model_server)
    finally:
        lc.close()
