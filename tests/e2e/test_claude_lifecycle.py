"""exo's whole lifecycle with the real Claude Code TUI (2.1.197) against the scripted model server, sandboxed.

The test is the human at the root: it runs the real ``exo`` commands as subprocesses in a real git
repository whose user's configuration says ``[sandbox] mode = "on"``. ``exo spawn --agent claude``
starts the real ``claude`` TUI in bubblewrap in exo's own tmux server, in its own clone, with a
private HOME, its network through exo's allow-list proxy (the model server on the host's 127.0.0.1
through the bridge's tunnel), exo's hooks (``--settings``) and exo's MCP server (``--mcp-config``);
the scripted model drives the agent through a Bash commit and exo's MCP tools; the assertions are
on exo's state and on what the model server received. Each test has its own HOME, TMPDIR, model
server and exo tmux server (killed in a finalizer); inside the sandbox, exo's proxy replaces the
egress trap, so nothing leaves 127.0.0.1. The unsandboxed path: tests/e2e/test_unsandboxed_lifecycle.py.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from e2e.agents import AgentHome
from e2e.lifecycle import (
    DialogWatch,
    Team,
    anthropic_is_error,
    assert_mcp_waits_in_the_runtime_folder,
    assert_no_egress,
    git,
    git_repo,
    result_for,
    runtime_vars,
    user_texts,
)
from e2e.lifecycle_more import assert_mcp_server_has_the_agents_proof, assert_through_the_proxy, sandbox_on
from e2e.model_server import ModelServer, tool_names
from e2e.usage_check import assert_usage_counted, turn_usage

pytestmark = [pytest.mark.e2e, pytest.mark.tmux,
              pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (under CI it must be: .ci/run installs it)")]

CLAUDE_VERSION = "2.1.197"
TASK = "LIFECYCLE-TASK-7f3: add hello.txt saying hello, commit it, note your parent and file a PR."


@pytest.fixture
def team(require_cli: Callable[[str], Path], model_server: ModelServer, agent_home: Callable[..., AgentHome],
         tmp_path: Path) -> Iterator[Team]:
    """A repository that sandboxes its agents, a Claude HOME (onboarding done, no trusted folder, a canary in
    ~/.ssh), and the root's env; kills exo's tmux."""
    require_cli("claude")
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    repo = git_repo(tmp_path / "repo")
    sandbox_on(repo)
    home = agent_home("claude")
    (home.home / ".ssh").mkdir()
    (home.home / ".ssh" / "id_ed25519").write_text("SSH-CANARY-31\n")
    # The user's HOME as it is after Claude's own onboarding (key approved), but without the bypass-warning
    # pre-emption or any trusted folder: exo itself must keep those dialogs away (--settings, .claude.json).
    (home.home / ".claude" / "settings.json").write_text("{}\n")
    team = Team.create(repo, home, extra_env=runtime_vars(tmp_path))
    try:
        yield team
    finally:
        print(team.trace())  # shown when the test fails: exo calls and model requests, in time order
        team.close()


def spawn_w1(team: Team, prompt: str) -> dict:
    """Run ``exo spawn --worker w1 --agent claude --skip-permissions --prompt PROMPT --json``; return its result.

    The repository's configuration sandboxes it: in its own clone, in bubblewrap."""
    result = team.exo_json("spawn", "--worker", "w1", "--agent", "claude", "--skip-permissions",
                           "--mux", "tmux", "--prompt", prompt)
    assert result["failed"] == [], result
    assert [(a["sandboxed"], a["layout"]) for a in result["agents"]] == [(True, "clone")], result
    return result


def test_claude_worker_lifecycle(team: Team) -> None:
    server = team.server
    note_text = "NOTE-W1: hello.txt is committed"
    send_text = "SEND-W1-5c2: please also say goodbye, then stop."
    readme = team.repo / "README.md"
    bash = ("printf 'hello\\n' > hello.txt && git add hello.txt && "
            "git -c user.name=W1 -c user.email=w1@example.invalid commit -q -m 'Add hello.txt' && echo COMMITTED; "
            f"(echo pwned >> {readme}) 2>/dev/null && echo WROTE-MAIN || echo DENIED-MAIN; "
            f"cat {team.home.home}/.ssh/id_ed25519 2>/dev/null || echo DENIED-SSH; "
            # a host off its allow-list: refused by exo's proxy (logged, counted); no name is looked up inside
            "curl -sS -m 30 -o /dev/null https://exfil.example/ 2>&1 | tail -1; "
            "getent hosts exfil.example >/dev/null 2>&1 && echo DNS-LEAK || echo NO-DNS")
    server.script(*({**turn, "usage": turn_usage(n)} for n, turn in enumerate((
        {"tool": "Bash", "input": {"command": bash, "description": "write and commit hello.txt"}},
        {"tool": "mcp__exo__note", "input": {"message": note_text}},
        {"tool": "mcp__exo__file_pr", "input": {"title": "Add hello.txt", "body": "Says hello."}},
        {"text": "TURN-1-DONE: committed, noted and filed the PR."},
        {"text": "TURN-2-DONE: got your message."},
        {"text": "TURN-3-DONE: over budget now."},
        {"text": "TURN-4-DONE: released."},
        {"text": "TURN-5-DONE: the team is over its budget."},
        {"text": "TURN-6-DONE: the team's budget was raised."},
    ))))

    # 1. The human spawns w1: the real claude TUI starts sandboxed in its own clone, with no dialog.
    result = spawn_w1(team, TASK)
    (spawned,) = result["agents"]
    worktree = Path(spawned["worktree"])
    assert (spawned["branch"], spawned["backend"], spawned["mux"]) == ("main.w1", "claude", "tmux")
    assert worktree.is_dir() and worktree.parent == team.repo / ".exo" / "worktrees"
    # the clone is trusted in the agent's private HOME; the user's own .claude.json got no entry
    claude_json = team.home.home / ".claude.json"
    private = Path(team.agent("w1").spec["sandbox_home"])
    assert json.loads((private / ".claude.json").read_text())["projects"][str(worktree)]["hasTrustDialogAccepted"]
    assert str(worktree) not in json.loads(claude_json.read_text()).get("projects", {})

    with DialogWatch(team, "w1") as watch:
        team.wait_status("w1", "working", "idle")  # exo's SessionStart hook ran
        first, bash_req, note_req, pr_req = (
            team.wait_request(lambda e, n=n: e["turn"] == n, what=f"agent request for turn {n}", agent="w1")
            for n in range(4))
        # 2. The Stop hook marks it idle with its last message as output.
        idle = team.wait_agent("w1", lambda a: a.status == "idle" and a.turns >= 1, what="idle after turn 1")
    assert watch.samples > 0 and not watch.hits, f"dialog on screen: {watch.hits[0][1] if watch.hits else ''}"
    assert idle.output == "TURN-1-DONE: committed, noted and filed the PR."
    assert idle.session_id  # recorded from the SessionStart payload
    assert_mcp_server_has_the_agents_proof(idle.location["pid"])
    assert_through_the_proxy(idle.location["pid"], server, "claude", team.exo_json)

    # The task arrives in the first model request as the SessionStart hook's additional context.
    contexts = [m["content"] for m in first["body"]["messages"]
                if m.get("role") == "system" and "SessionStart hook additional context" in str(m.get("content"))]
    assert contexts and TASK in contexts[0] and "**Branch:** main.w1" in contexts[0]
    assert TASK in user_texts(first)  # the prompt exo put on claude's command line
    assert first["headers"]["user-agent"].startswith(f"claude-cli/{CLAUDE_VERSION} ")  # the real, pinned CLI
    # exo's MCP tools are listed from the very first request (the hook waited for exo's MCP server).
    assert {"mcp__exo__note", "mcp__exo__file_pr", "mcp__exo__question"} <= set(tool_names(first))

    # 3. The Bash call edited and committed the file in the worktree, on the agent's branch.
    bash_result = result_for(bash_req, first["tool_id"])
    assert bash_result is not None and not anthropic_is_error(bash_req, first["tool_id"]), bash_result
    walls = json.dumps(bash_result)  # its shell commits in its clone and reaches neither the checkout nor ~/.ssh
    assert "COMMITTED" in walls and "DENIED-MAIN" in walls and "DENIED-SSH" in walls and "SSH-CANARY" not in walls
    assert "CONNECT tunnel failed, response 403" in walls and "NO-DNS" in walls, walls
    from exo_cli.adapters import netlog

    log = netlog.folder(team.repo / ".git" / "exo")
    refused = netlog.refusals(log, netlog.stem(team.agent("w1").spec["socket_key"]))
    assert [(e["agent"], e["host"], e["port"]) for e in refused] == [("w1", "exfil.example", 443)]
    assert readme.read_text() == "# e2e\n"
    assert (worktree / "hello.txt").read_text() == "hello\n"
    assert git(team.repo, "log", "-1", "--format=%s", "main.w1") == "Add hello.txt"
    assert git(worktree, "status", "--porcelain") == ""

    # 4. mcp__exo__note and mcp__exo__file_pr ran in exo's MCP server, without error.
    note_result = result_for(note_req, bash_req["tool_id"])
    assert note_result is not None and not anthropic_is_error(note_req, bash_req["tool_id"]), note_result
    assert json.loads(note_result["output"])["to"] == "root"
    pr_result = result_for(pr_req, note_req["tool_id"])
    assert pr_result is not None and not anthropic_is_error(pr_req, note_req["tool_id"]), pr_result
    filed = json.loads(pr_result["output"])
    assert filed["created"] is True and filed["commits"] == 1
    assert (filed["pr"]["head"], filed["pr"]["base"], filed["pr"]["author"]) == ("main.w1", "main", "w1")
    number = filed["pr"]["number"]

    # 5. The parent's fan-in wait returns the note.
    waited = team.exo_json("wait", "w1", "--timeout", "30")
    assert waited["timed_out"] is False
    (entry,) = waited["results"]
    assert (entry["name"], entry["status"], entry["kind"], entry["message"]) == ("w1", "received", "note", note_text)

    # 6. `exo send` is typed into the idle TUI and arrives as a new user turn.
    sent = team.exo_json("send", "w1", send_text)
    assert [s["delivery"] for s in sent["sent"]] == ["typed"], sent
    typed = team.wait_request(lambda e: e["turn"] == 4, what="the typed message's turn", agent="w1")
    assert user_texts(typed)[-1] == f"[MESSAGE from root] {send_text}"  # the last entry: a new user turn
    assert json.dumps(typed["body"]["messages"]).count(send_text) == 1  # typed once, not re-injected by a hook
    team.wait_agent("w1", lambda a: a.status == "idle" and a.output == "TURN-2-DONE: got your message.",
                    what="idle after the typed turn")
    assert_usage_counted(team.exo_json, team.repo, server)  # every kind of token of both turns, to the token

    # A token budget stops it after the turn that reaches it; raising it resumes it with the held message.
    used = team.exo_json("cost", "w1")["agents"][0]["total"]["tokens"]
    team.exo_json("budget", "w1", str(used + 1), "--tokens")
    assert [s["delivery"] for s in team.exo_json("send", "w1", "OVER-1")["sent"]] == ["typed"]
    team.wait_request(lambda e: e["turn"] == 5, what="the turn that reaches the budget", agent="w1")
    over = team.wait_agent("w1", lambda a: a.status == "over-budget", what="over budget after that turn")
    assert over.output == "TURN-3-DONE: over budget now." and over.status_reason.startswith("over budget: ")
    assert [s["delivery"] for s in team.exo_json("send", "w1", "HELD-2")["sent"]] == ["held"]
    assert team.exo_json("wait", "w1", "--until-idle", "--timeout", "30")["timed_out"] is False
    raised = team.exo_json("budget", "w1", "+100000", "--tokens")
    assert raised["released"] is True and len(raised["delivered"]) == 1, raised
    resumed = team.wait_request(lambda e: e["turn"] == 6, what="the turn after the raise", agent="w1")
    assert user_texts(resumed)[-1] == "[MESSAGE from root] HELD-2"
    team.wait_agent("w1", lambda a: a.status == "idle" and a.output == "TURN-4-DONE: released.",
                    what="idle after the released turn")
    # The team's budget stops it the same way at the end of the turn that reaches it; the human's raise resumes it.
    team_used = team.exo_json("cost")["team"]["tokens"]
    assert team.exo_json("budget", "--team", str(team_used + 1), "--tokens")["status"] == "ok"
    assert [s["delivery"] for s in team.exo_json("send", "w1", "TEAM-1")["sent"]] == ["typed"]
    team.wait_request(lambda e: e["turn"] == 7, what="the turn that reaches the team's budget", agent="w1")
    over = team.wait_agent("w1", lambda a: a.status == "over-budget", what="over the team's budget after that turn")
    assert over.output == "TURN-5-DONE: the team is over its budget."
    assert over.status_reason.startswith("over budget: the team used ")
    assert [s["delivery"] for s in team.exo_json("send", "w1", "TEAM-HELD")["sent"]] == ["held"]
    raised = team.exo_json("budget", "--team", "+100000", "--tokens")
    assert raised["agents"] == ["w1"], raised
    resumed = team.wait_request(lambda e: e["turn"] == 8, what="the turn after the team's raise", agent="w1")
    assert user_texts(resumed)[-1] == "[MESSAGE from root] TEAM-HELD"
    team.wait_agent("w1", lambda a: a.status == "idle" and a.output == "TURN-6-DONE: the team's budget was raised.",
                    what="idle after the team's released turn")

    # 7. The parent merges the PR and completes w1: the agent stops and every trace is removed.
    merged = team.exo_json("pr", "merge", str(number))
    assert merged["pr"]["state"] == "merged" and merged["strategy"] == "squash"
    assert (team.repo / "hello.txt").read_text() == "hello\n"  # the base checkout got the change
    done = team.exo_json("complete", "w1")
    assert (done["status"], done["removal"], done["worktree_removed"], done["branch_deleted"]) == (
        "done", "removed", True, True), done
    # nothing of the user's to undo: its trust entry is in its private HOME, which goes with exo's folder for it
    assert done["stopped"] is True and done["undone"] == 0
    assert not worktree.exists()
    assert git(team.repo, "branch", "--list", "main.w1") == ""
    assert str(worktree) not in json.loads(claude_json.read_text()).get("projects", {})
    assert team.agent("w1").status == "done"
    assert team.exo_json("agents", "--all")["agents"][0]["net_refused"] == 1  # the one host off its list it tried
    assert_no_egress(server)


def test_claude_question_answered_by_the_parent_and_a_queued_message(team: Team) -> None:
    server = team.server
    question = "QUESTION-W1-9d1: which greeting should hello.txt hold?"
    answer = "ANSWER-ROOT-4e8: say 'hi there'"
    queued = "QUEUED-W1-b71: and keep it short."
    server.script(
        {"tool": "mcp__exo__question", "input": {"message": question}},
        {"text": "ANSWERED: will say hi there."},
        {"text": "GOT-QUEUED: keeping it short."},
    )
    spawn_w1(team, "Ask your parent which greeting to use, then stop.")

    # The question blocks w1 in `asking`; the parent sees it as a pending message.
    asked = team.wait_request(lambda e: e["turn"] == 0, what="the question call", agent="w1")
    team.wait_status("w1", "asking", timeout=30)
    assert_mcp_waits_in_the_runtime_folder(team.env, team.repo, "w1")  # Claude's MCP server environment too
    waited = team.exo_json("wait", "w1", "--timeout", "30")
    (entry,) = waited["results"]
    assert (entry["status"], entry["kind"], entry["message"]) == ("received", "question", question)
    # A message sent while w1 is busy waits for its next hook (here the Stop hook, which keeps it going).
    sent = team.exo_json("send", "w1", queued)
    assert [s["delivery"] for s in sent["sent"]] == ["queued"], sent
    answered = team.exo_json("answer", "w1", answer)
    assert answered["question"] == question

    # The tool result the model receives is the answer.
    after = team.wait_request(lambda e: e["turn"] == 1, what="the request after the answer", agent="w1")
    result = result_for(after, asked["tool_id"])
    assert result is not None and not anthropic_is_error(after, asked["tool_id"]), result
    got = json.loads(result["output"])
    assert (got["status"], got["answer"], got["question"], got["answered_by"]) == ("answered", answer, question, "root")
    assert queued not in json.dumps(after["body"]["messages"])

    # The turn ends; exo's Stop hook blocks it with the queued message, which Claude passes to the model.
    kept = team.wait_request(lambda e: e["turn"] == 2, what="the turn the Stop hook asked for", agent="w1")
    assert f"[MESSAGE from root] {queued}" in "\n".join(user_texts(kept))
    idle = team.wait_agent("w1", lambda a: a.status == "idle" and a.output == "GOT-QUEUED: keeping it short.",
                           what="idle after the queued message")
    assert idle.turns >= 1
    assert_through_the_proxy(idle.location["pid"], server, "claude", team.exo_json)
    assert_no_egress(server)
