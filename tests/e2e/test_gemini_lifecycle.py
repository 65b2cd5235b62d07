"""The whole exo lifecycle with the real Gemini CLI 0.61.0 in tmux, sandboxed (issue 8, item 3; issue 31).

The test process is the root team lead of a repository whose user's configuration says
``[sandbox] mode = "on"``. It spawns ``w1`` with ``--agent gemini``; exo starts
``gemini --approval-mode yolo -i <prompt>`` in bubblewrap (its own clone, a private HOME, its
network through exo's allow-list proxy) in its private tmux server with exo's hooks and MCP server
merged into the worktree's ``.gemini/settings.json`` (kept out of git) and trust given through
``GEMINI_CLI_TRUST_WORKSPACE`` (the test's own env does not set it). The scripted model then drives
the agent: a shell command that commits a file, exo's ``note`` and ``file_pr`` MCP tools
(``mcp_exo_*``), and after a message typed into the idle TUI, exo's ``question`` tool answered by the
parent. The AfterAgent hook marks the agent idle after each turn. The parent merges the PR and
completes the agent, which removes the worktree and branch and restores the project's settings file.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from e2e.agents import AgentHome
from e2e.lifecycle import assert_mcp_waits_in_the_runtime_folder, runtime_vars
from e2e.lifecycle_more import (
    Lifecycle,
    assert_mcp_server_has_the_agents_proof,
    assert_no_egress,
    assert_through_the_proxy,
    git,
    lifecycle_env,
    make_repo,
    sandbox_on,
)
from e2e.model_server import ModelServer, tool_names, tool_results
from e2e.usage_check import assert_usage_counted, turn_usage

pytestmark = [pytest.mark.e2e, pytest.mark.tmux,
              pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (under CI it must be: .ci/run installs it)")]

PROJECT_SETTINGS = {"ui": {"hideTips": True}}  # the project's own, tracked .gemini/settings.json
COMMIT = "printf 'hello from gemini\\n' > hello.txt && git add hello.txt && git commit -q -m 'Add hello.txt' && echo COMMITTED"

WALL = "; (echo x >> {readme}) 2>/dev/null && echo WROTE-MAIN || echo DENIED-MAIN"


@pytest.fixture
def lifecycle(require_cli: Callable[[str], Path], model_server: ModelServer,
              agent_home: Callable[..., AgentHome], tmp_path: Path) -> Iterator[Lifecycle]:
    """A repository whose project tracks .gemini/settings.json, a Gemini home, exo's tmux killed after."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    require_cli("gemini")
    repo = make_repo(tmp_path / "repo")
    (repo / ".gemini").mkdir()
    (repo / ".gemini" / "settings.json").write_text(json.dumps(PROJECT_SETTINGS, indent=2) + "\n")
    git(repo, "add", ".gemini/settings.json")
    git(repo, "commit", "-q", "-m", "Project Gemini settings")
    sandbox_on(repo)
    home = agent_home("gemini")
    # Trust comes from exo, so the test's env does not pre-trust the worktree. The commit identity is
    # only in ~/.gitconfig ("E2E Agent"), which Gemini's shell tool hides (GIT_CONFIG_GLOBAL=/dev/null):
    # exo passes it on as GIT_AUTHOR_*/GIT_COMMITTER_*.
    env = lifecycle_env(home, drop=["GEMINI_CLI_TRUST_WORKSPACE"], extra=runtime_vars(tmp_path))
    assert not any(k.startswith(("GIT_AUTHOR_", "GIT_COMMITTER_")) for k in env)
    lc = Lifecycle(repo, home, model_server, env)
    yield lc
    lc.close()


def test_gemini_lifecycle_spawn_note_pr_wait_send_question_merge_complete(lifecycle: Lifecycle) -> None:
    lc, server, repo = lifecycle, lifecycle.server, lifecycle.repo
    server.script(*({**turn, "usage": turn_usage(n, cache_write=False)} for n, turn in enumerate((
        {"tool": "run_shell_command", "input": {"command": COMMIT + WALL.format(readme=repo / "README.md")}},
        {"tool": "mcp_exo_note", "input": {"message": "NOTE-42: hello.txt is committed"}},
        {"tool": "mcp_exo_file_pr", "input": {"title": "Add hello.txt", "body": "From the Gemini e2e test"}},
        {"text": "TURN-ONE-DONE"},
        # second turn, after the parent's message: a question the parent answers
        {"tool": "mcp_exo_question", "input": {"message": "QUESTION-7: which colour?"}},
        {"text": "TURN-TWO-DONE"},
        # the stop hook hands over a message that arrived while it was busy: the turn goes on
        {"text": "TURN-THREE-DONE"},
    ))))

    spawned = lc.exo_json("spawn", "--worker", "w1", "--agent", "gemini", "--skip-permissions", "--mux", "tmux",
                          "--prompt", "Write hello.txt and report")
    assert spawned["errors"] == [] and spawned["worktrees"][0][0] == "w1"
    assert [(a["sandboxed"], a["layout"]) for a in spawned["agents"]] == [(True, "clone")]
    agent = lc.agent("w1")
    worktree = Path(agent["worktree"])
    assert agent["backend"] == "gemini" and agent["branch"] == "main.w1"

    # The TUI started in the worktree with no dialog, and exo's SessionStart context reached the model.
    first = server.wait_agent_requests(1, timeout=60)[0]
    lc.mark("first agent request")
    text = lc.request_text(first)
    assert "<hook_context># Task: Write hello.txt and report" in text, text[:3000]
    assert "**Agent:** w1 (dev)" in text and "**Branch:** main.w1" in text
    assert str(worktree) in text  # Gemini's workspace is the worktree
    names = tool_names(first)
    assert {"run_shell_command", "mcp_exo_note", "mcp_exo_file_pr", "mcp_exo_question"} <= set(names), names
    assert first["headers"]["user-agent"].startswith("GeminiCLI-tui/0.61.0")

    # Turn one: commit, note, PR; AfterAgent marks it idle.
    rec = lc.wait_status("w1", "idle", timeout=60, since_turns=0)
    assert rec["session_id"] and rec["output"] == "TURN-ONE-DONE"
    assert_mcp_server_has_the_agents_proof(json.loads(rec["location"])["pid"])
    assert_through_the_proxy(json.loads(rec["location"])["pid"], server, "gemini", lc.exo_json)
    requests = server.agent_requests()
    assert [e["turn"] for e in requests] == [0, 1, 2, 3]
    assert_usage_counted(lc.exo_json, repo, server)  # every kind of token of turn one, to the token
    shell = tool_results(requests[1])[-1]["output"]
    assert "COMMITTED" in shell and "DENIED-MAIN" in shell, shell  # its shell cannot write the main checkout
    assert (repo / "README.md").read_text() == "# e2e\n"
    assert git(worktree, "log", "-1", "--format=%s|%an") == "Add hello.txt|E2E Agent"
    assert (worktree / "hello.txt").read_text() == "hello from gemini\n"
    # exo's settings file never shows in git: tracked + skip-worktree, the project's keys kept.
    assert git(worktree, "status", "--porcelain") == ""
    merged = json.loads((worktree / ".gemini" / "settings.json").read_text())
    assert merged["ui"] == PROJECT_SETTINGS["ui"] and "exo" in merged["mcpServers"]
    assert "AfterAgent" in merged["hooks"] and merged["hooksConfig"] == {"enabled": True}
    assert json.loads((repo / ".gemini" / "settings.json").read_text()) == PROJECT_SETTINGS
    screen = lc.screen("w1")
    assert "TURN-ONE-DONE" in screen and "Do you trust" not in screen

    waited = lc.exo_json("wait", "w1", "--timeout", "30")
    assert waited["timed_out"] is False
    (entry,) = waited["results"]
    assert (entry["status"], entry["kind"], entry["message"]) == ("received", "note", "NOTE-42: hello.txt is committed")
    prs = lc.exo_json("pr", "list")["prs"]
    assert [(p["number"], p["head"], p["base"], p["state"]) for p in prs] == [(1, "main.w1", "main", "open")]

    # A message typed into the idle TUI arrives as a new user turn (Enter 0.5 s after the text).
    sent = lc.exo_json("send", "w1", "SEND-99: now ask me a question")
    assert sent["sent"][0]["delivery"] == "typed"
    ask = server.wait_for(lambda e: e["kind"] == "agent" and e["turn"] == 4, timeout=45)
    last_user = ask["body"]["contents"][-1]
    assert last_user["role"] == "user"
    assert "[MESSAGE from root] SEND-99: now ask me a question" in json.dumps(last_user)

    # The child's question blocks its MCP call until the parent answers.
    lc.wait_until("question pending", lambda: lc.query(
        "SELECT id FROM messages WHERE kind = 'question' AND state = 'pending' AND recipient = 'root'"))
    assert lc.agent("w1")["status"] == "asking"
    assert_mcp_waits_in_the_runtime_folder(lc.env, repo, "w1")  # Gemini's MCP server environment too
    queued = lc.exo_json("send", "w1", "QUEUED-8: also mind the tests")  # busy asking: waits for a hook
    assert queued["sent"][0]["delivery"] == "queued"
    answered = lc.exo_json("answer", "w1", "ANSWER-3: blue")
    assert answered["question"] == "QUESTION-7: which colour?"
    after = server.wait_for(lambda e: e["kind"] == "agent" and e["turn"] == 5, timeout=45)
    (result,) = [r for r in tool_results(after) if r["name"] == "mcp_exo_question"]
    assert "ANSWER-3: blue" in result["output"] and "answered" in result["output"]
    # The stop hook keeps it going with the queued message (its "block"/"deny" answer), then it goes idle.
    resumed = server.wait_for(lambda e: e["kind"] == "agent" and e["turn"] == 6, timeout=45)
    assert "[MESSAGE from root] QUEUED-8: also mind the tests" in lc.request_text(resumed)
    rec = lc.wait_status("w1", "idle", timeout=45, since_turns=1)
    # Gemini's AfterAgent prompt_response holds the whole continued turn's text
    assert rec["output"].splitlines() == ["TURN-TWO-DONE", "TURN-THREE-DONE"]

    assert [e["kind"] for e in lc.events("w1")].count("idle") == 2  # a kept-going stop is not idle

    # The parent merges the PR, then completes the agent: worktree, branch and exo's settings gone.
    merge = lc.exo_json("pr", "merge", "1")
    assert merge["pr"]["state"] == "merged"
    assert (repo / "hello.txt").read_text() == "hello from gemini\n"
    done = lc.exo_json("complete", "w1", timeout=60)
    assert (done["status"], done["removal"], done["worktree_removed"], done["branch_deleted"]) == (
        "done", "removed", True, True)
    assert not worktree.exists()
    assert git(repo, "branch", "--list", "main.w1") == ""
    assert git(repo, "status", "--porcelain") == ""
    assert json.loads((repo / ".gemini" / "settings.json").read_text()) == PROJECT_SETTINGS
    assert lc.agent("w1")["status"] == "done"
    assert_no_egress(server)
    print(f"gemini lifecycle timings (s since start): {lc.marks}")
