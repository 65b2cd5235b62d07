"""The whole exo lifecycle with the real Codex CLI 0.169.0 in tmux, sandboxed (issue 8, item 3; issue 31).

The test process is the root team lead of a repository whose user's configuration says
``[sandbox] mode = "on"``. It spawns ``w1`` with ``--agent codex``; exo starts
``codex --dangerously-bypass-hook-trust --dangerously-bypass-approvals-and-sandbox -c ... -- <prompt>``
in bubblewrap (its own clone, a private HOME and ``CODEX_HOME``, its network through exo's
allow-list proxy, which keeps the key variable its provider names) in its private tmux server. Everything exo needs goes through ``-c`` overrides: exo's MCP server
(``required = true``), the worktree's trust, exo's hooks and ``notify``; the test's
``$CODEX_HOME/config.toml`` only names the fake model provider and trusts nothing. The scripted model
then drives the agent: ``exec_command`` commits a file, exo's ``note`` and ``file_pr`` MCP tools (the
``mcp__exo`` namespace), and after a message typed into the idle TUI, exo's ``question`` tool answered
by the parent. The Stop hook and ``notify`` (its own thread only, never the title thread) mark the
agent idle. The parent merges the PR and completes the agent, which removes the worktree and branch.
"""

from __future__ import annotations

import json
import os
import shutil
import time
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
from exo_cli.env import Env

pytestmark = [pytest.mark.e2e, pytest.mark.tmux,
              pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (under CI it must be: .ci/run installs it)")]

COMMIT = "printf 'hello from codex\\n' > hello.txt && git add hello.txt && git commit -q -m 'Add hello.txt' && echo COMMITTED"

WALL = "; (echo x >> {readme}) 2>/dev/null && echo WROTE-MAIN || echo DENIED-MAIN"


@pytest.fixture
def lifecycle(require_cli: Callable[[str], Path], model_server: ModelServer,
              agent_home: Callable[..., AgentHome], tmp_path: Path) -> Iterator[Lifecycle]:
    """A repository that sandboxes its agents, a Codex home that trusts no project, and exo's tmux server killed after."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    require_cli("codex")
    repo = make_repo(tmp_path / "repo")
    sandbox_on(repo)
    home = agent_home("codex")
    # the user's XDG_RUNTIME_DIR and TMUX_TMPDIR, which Codex drops from its MCP servers' environment
    lc = Lifecycle(repo, home, model_server, lifecycle_env(home, extra=runtime_vars(tmp_path)))
    yield lc
    lc.close()


def test_codex_lifecycle_spawn_note_pr_wait_send_question_merge_complete(lifecycle: Lifecycle) -> None:
    lc, server, repo = lifecycle, lifecycle.server, lifecycle.repo
    server.script(*({**turn, "usage": turn_usage(n, cache_write=False)} for n, turn in enumerate((
        {"tool": "exec_command", "input": {"cmd": COMMIT + WALL.format(readme=repo / "README.md")}},
        {"tool": "mcp__exo__note", "input": {"message": "NOTE-42: hello.txt is committed"}},
        {"tool": "mcp__exo__file_pr", "input": {"title": "Add hello.txt", "body": "From the Codex e2e test"}},
        {"text": "TURN-ONE-DONE"},
        {"tool": "mcp__exo__question", "input": {"message": "QUESTION-7: which colour?"}},
        {"text": "TURN-TWO-DONE"},
        # the stop hook hands over a message that arrived while it was busy: the turn goes on
        {"text": "TURN-THREE-DONE"},
    ))))

    spawned = lc.exo_json("spawn", "--worker", "w1", "--agent", "codex", "--skip-permissions", "--mux", "tmux",
                          "--prompt", "Write hello.txt and report")
    assert spawned["errors"] == [] and spawned["worktrees"][0][0] == "w1"
    assert [(a["sandboxed"], a["layout"]) for a in spawned["agents"]] == [(True, "clone")]
    agent = lc.agent("w1")
    worktree = Path(agent["worktree"])
    assert agent["backend"] == "codex" and agent["branch"] == "main.w1"

    # The TUI started in the worktree with no dialog; exo's SessionStart context is a developer message.
    first = server.wait_agent_requests(1, timeout=60)[0]
    lc.mark("first agent request")
    developer = [json.dumps(item) for item in first["body"]["input"] if item.get("role") == "developer"]
    assert any("# Task: Write hello.txt and report" in d and "**Branch:** main.w1" in d for d in developer), developer
    users = [json.dumps(item) for item in first["body"]["input"] if item.get("role") == "user"]
    assert any("Write hello.txt and report" in u for u in users)
    names = tool_names(first)
    assert {"exec_command", "mcp__exo__note", "mcp__exo__file_pr", "mcp__exo__question"} <= set(names), names
    assert "0.169.0" in first["headers"]["user-agent"]

    # Turn one: commit, note, PR; the Stop hook marks it idle, and notify of the same turn changes nothing.
    rec = lc.wait_status("w1", "idle", timeout=60, since_turns=0)
    assert rec["session_id"] and rec["output"] == "TURN-ONE-DONE"
    assert_mcp_server_has_the_agents_proof(json.loads(rec["location"])["pid"])  # a relay on its socket (no proof)
    assert_through_the_proxy(json.loads(rec["location"])["pid"], server, "codex", lc.exo_json)
    requests = server.agent_requests()
    assert [e["turn"] for e in requests] == [0, 1, 2, 3]
    assert_usage_counted(lc.exo_json, repo, server)  # every kind of token of turn one, to the token
    shell = tool_results(requests[1])[-1]["output"]
    assert "COMMITTED" in shell and "DENIED-MAIN" in shell, shell  # its shell cannot write the main checkout
    assert (repo / "README.md").read_text() == "# e2e\n"
    assert git(worktree, "log", "-1", "--format=%s") == "Add hello.txt"
    assert (worktree / "hello.txt").read_text() == "hello from codex\n"
    assert git(worktree, "status", "--porcelain") == ""  # exo wrote nothing into the worktree for Codex
    assert not (worktree / ".codex").exists()
    screen = lc.screen("w1")
    assert "TURN-ONE-DONE" in screen and "Hooks need review" not in screen and "trust" not in screen.lower()
    assert lc.hook_state("w1").get("thread") == rec["session_id"]  # notify listens to this thread only

    waited = lc.exo_json("wait", "w1", "--timeout", "30")
    assert waited["timed_out"] is False
    (entry,) = waited["results"]
    assert (entry["status"], entry["kind"], entry["message"]) == ("received", "note", "NOTE-42: hello.txt is committed")
    prs = lc.exo_json("pr", "list")["prs"]
    assert [(p["number"], p["head"], p["base"], p["state"]) for p in prs] == [(1, "main.w1", "main", "open")]

    # A message typed into the idle TUI arrives as a new user turn.
    sent = lc.exo_json("send", "w1", "SEND-99: now ask me a question")
    assert sent["sent"][0]["delivery"] == "typed"
    ask = server.wait_for(lambda e: e["kind"] == "agent" and e["turn"] == 4, timeout=45)
    last_user = [item for item in ask["body"]["input"] if item.get("role") == "user"][-1]
    assert "[MESSAGE from root] SEND-99: now ask me a question" in json.dumps(last_user)

    # The child's question blocks its MCP call until the parent answers.
    lc.wait_until("question pending", lambda: lc.query(
        "SELECT id FROM messages WHERE kind = 'question' AND state = 'pending' AND recipient = 'root'"))
    assert lc.agent("w1")["status"] == "asking"
    assert_mcp_waits_in_the_runtime_folder(lc.env, repo, "w1")  # where `exo answer` rings it
    queued = lc.exo_json("send", "w1", "QUEUED-8: also mind the tests")  # busy asking: waits for a hook
    assert queued["sent"][0]["delivery"] == "queued"
    answered = lc.exo_json("answer", "w1", "ANSWER-3: blue")
    assert answered["question"] == "QUESTION-7: which colour?"
    after = server.wait_for(lambda e: e["kind"] == "agent" and e["turn"] == 5, timeout=45)
    (result,) = [r for r in tool_results(after) if r["id"] == ask["tool_id"]]
    assert "ANSWER-3: blue" in result["output"] and "answered" in result["output"]
    # The stop hook keeps it going with the queued message (its "block"/"deny" answer), then it goes idle.
    resumed = server.wait_for(lambda e: e["kind"] == "agent" and e["turn"] == 6, timeout=45)
    assert "[MESSAGE from root] QUEUED-8: also mind the tests" in lc.request_text(resumed)
    rec = lc.wait_status("w1", "idle", timeout=45, since_turns=1)
    assert rec["output"] == "TURN-THREE-DONE" and rec["turns"] == 2  # the continued turn keeps its turn_id

    assert [e["kind"] for e in lc.events("w1")].count("idle") == 2  # a kept-going stop is not idle

    # The parent merges the PR, then completes the agent: worktree and branch gone.
    merge = lc.exo_json("pr", "merge", "1")
    assert merge["pr"]["state"] == "merged"
    assert (repo / "hello.txt").read_text() == "hello from codex\n"
    done = lc.exo_json("complete", "w1", timeout=60)
    assert (done["status"], done["removal"], done["worktree_removed"], done["branch_deleted"]) == (
        "done", "removed", True, True)
    assert not worktree.exists()
    assert git(repo, "branch", "--list", "main.w1") == ""
    assert git(repo, "status", "--porcelain") == ""
    assert lc.agent("w1")["status"] == "done"
    # the last agent is gone: so is the runtime folder, wherever a reduced environment would have put it
    # (the team broker removes it as it leaves, broker.idle_exit seconds after its last agent)
    runtime = Env(cwd=repo, environ=lc.env).runtime_dir
    digest = runtime.name.rsplit("-", 1)[-1]
    fallback = Path(f"/tmp/exo-{os.getuid()}-{digest}")
    deadline = time.monotonic() + 60
    while (runtime.exists() or fallback.exists()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not runtime.exists() and not fallback.exists(), sorted(p.name for p in runtime.glob("*"))
    assert not list(Path(lc.env["XDG_RUNTIME_DIR"]).iterdir())
    # the TUI's announcement fetch is the only egress attempt, and exo's proxy refused it (the trap saw none)
    assert server.entries("proxy") == []
    refused = {(e["host"], e["port"]) for e in lc.net_refusals("w1")}
    assert refused <= {("raw.githubusercontent.com", 443)}, refused
    assert_no_egress(server)
    print(f"codex lifecycle timings (s since start): {lc.marks}")


def test_codex_notify_alone_marks_the_agent_idle(lifecycle: Lifecycle) -> None:
    """With exo's Stop hook replaced (``agent.args``: ``-c hooks.Stop=[]``), notify of its own thread marks it idle."""
    lc, server, repo = lifecycle, lifecycle.server, lifecycle.repo
    sandbox_on(repo, '[agent.args]\ncodex = ["-c", "hooks.Stop=[]"]\n')
    server.script({"text": "NOTIFY-ONLY-DONE"}, {"text": "NOTIFY-ONLY-AGAIN"})
    spawned = lc.exo_json("spawn", "--worker", "w1", "--agent", "codex", "--skip-permissions", "--mux", "tmux",
                          "--prompt", "Say something")
    assert spawned["agents"][0]["sandboxed"] is True
    rec = lc.wait_status("w1", "idle", timeout=60, since_turns=0)
    assert rec["output"] == "NOTIFY-ONLY-DONE"
    assert_through_the_proxy(json.loads(rec["location"])["pid"], server, "codex", lc.exo_json)
    state = lc.hook_state("w1")
    assert state["thread"] == rec["session_id"] and state.get("last_turn")
    sent = lc.exo_json("send", "w1", "SEND-5: once more")
    assert sent["sent"][0]["delivery"] == "typed"
    rec = lc.wait_status("w1", "idle", timeout=45, since_turns=1)
    assert rec["output"] == "NOTIFY-ONLY-AGAIN" and rec["turns"] == 2
    # the second turn's idle event can be read a moment after its status (a loaded machine): wait for it
    deadline = time.monotonic() + 30
    while [e["kind"] for e in lc.events("w1")].count("idle") < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [e["kind"] for e in lc.events("w1")].count("idle") == 2
    assert lc.hook_state("w1")["last_turn"] != state["last_turn"]
    assert_no_egress(server)
