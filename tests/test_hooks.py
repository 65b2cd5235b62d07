"""`exo hook`: real subprocess hooks with Claude, Gemini, Codex and exo payloads; fail-open; rebase; loop bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_messages_helpers import env_for, git, hook_json, make_agent, run_hook, state_dir


def _msgs(repo: Path, **kw: object) -> list:
    return env_for(repo).store.messages(**kw)  # type: ignore[arg-type]


def _agent(repo: Path, agent_id: str):  # noqa: ANN202
    a = env_for(repo).store.agent(agent_id)
    assert a is not None
    return a


@pytest.fixture
def team(repo: Path) -> Path:
    make_agent(repo, "w1", task="Add a --verbose flag", status="starting")
    return repo


# Payloads as the CLIs send them (their hook documentation; docs/agents.md lists the hooks).
START = {
    "claude": {"session_id": "c-sess", "transcript_path": "/nonexistent/c.jsonl", "cwd": "/x",
               "hook_event_name": "SessionStart", "source": "startup", "model": "claude-sonnet-5"},
    "gemini": {"session_id": "g-sess", "transcript_path": "/nonexistent/g.json", "cwd": "/x",
               "hook_event_name": "SessionStart", "timestamp": "2026-01-01T00:00:00Z", "source": "startup"},
    "codex": {"session_id": "x-sess", "transcript_path": None, "cwd": "/x", "hook_event_name": "SessionStart",
              "model": "fake-model", "source": "startup"},
}
PROMPT = {
    "claude": {"session_id": "c-sess", "transcript_path": "/nonexistent", "cwd": "/x",
               "hook_event_name": "UserPromptSubmit", "prompt": "go on", "permission_mode": "default"},
    "gemini": {"session_id": "g-sess", "transcript_path": "/nonexistent", "cwd": "/x", "hook_event_name": "BeforeAgent",
               "timestamp": "2026-01-01T00:00:00Z", "prompt": "go on"},
    "codex": {"session_id": "x-sess", "transcript_path": None, "cwd": "/x", "hook_event_name": "UserPromptSubmit",
              "model": "fake-model", "turn_id": "t0", "prompt": "go on"},
}
STOP = {
    "claude": {"session_id": "c-sess", "transcript_path": "/nonexistent", "cwd": "/x", "hook_event_name": "Stop",
               "stop_hook_active": False, "last_assistant_message": "Done: added --verbose.",
               "permission_mode": "default", "background_tasks": [], "session_crons": []},
    "gemini": {"session_id": "g-sess", "transcript_path": "/nonexistent", "cwd": "/x", "hook_event_name": "AfterAgent",
               "timestamp": "2026-01-01T00:00:00Z", "prompt": "go on", "prompt_response": "Done: added --verbose.",
               "stop_hook_active": False},
    "codex": {"session_id": "x-sess", "transcript_path": None, "cwd": "/x", "hook_event_name": "Stop",
              "last_assistant_message": "Done: added --verbose.", "model": "fake-model",
              "permission_mode": "default", "stop_hook_active": False, "turn_id": "t1"},
}
END = {
    "claude": {"session_id": "c-sess", "transcript_path": "/nonexistent", "cwd": "/x", "hook_event_name": "SessionEnd",
               "reason": "prompt_input_exit"},
    "gemini": {"session_id": "g-sess", "transcript_path": "/nonexistent", "cwd": "/x", "hook_event_name": "SessionEnd",
               "timestamp": "2026-01-01T00:00:00Z", "reason": "exit"},
    "codex": {"session_id": "x-sess", "transcript_path": None, "cwd": "/x", "hook_event_name": "SessionEnd",
              "reason": "other"},
}
NOTIFICATION = {
    "claude": {"session_id": "c-sess", "transcript_path": "/nonexistent", "cwd": "/x",
               "hook_event_name": "Notification", "message": "Claude needs your permission to use Bash",
               "title": "Permission needed", "notification_type": "permission_prompt"},
    "gemini": {"session_id": "g-sess", "transcript_path": "/nonexistent", "cwd": "/x",
               "hook_event_name": "Notification", "timestamp": "2026-01-01T00:00:00Z",
               "notification_type": "ToolPermission", "message": "Allow run_shell_command?", "details": {}},
}
TOOL = {
    "claude": {"session_id": "c-sess", "transcript_path": "/nonexistent", "cwd": "/x", "hook_event_name": "PostToolUse",
               "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "tu1",
               "tool_response": {"stdout": "a\n", "stderr": "", "interrupted": False, "isImage": False}},
    "gemini": {"session_id": "g-sess", "transcript_path": "/nonexistent", "cwd": "/x", "hook_event_name": "AfterTool",
               "timestamp": "2026-01-01T00:00:00Z", "tool_name": "run_shell_command", "tool_input": {"command": "ls"},
               "tool_response": {"llmContent": "a", "returnDisplay": "a"}},
    "codex": {"session_id": "x-sess", "transcript_path": None, "cwd": "/x", "hook_event_name": "PostToolUse",
              "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_response": "a", "turn_id": "t1",
              "model": "fake-model"},
}
PROMPT_EVENT = {"claude": "UserPromptSubmit", "gemini": "BeforeAgent", "codex": "UserPromptSubmit"}


@pytest.mark.parametrize("cli", ["claude", "gemini", "codex"])
def test_full_session_in_each_cli_format(team: Path, cli: str) -> None:
    repo = team
    env = env_for(repo)
    env.store.post("send", "root", "w1", "check the README too", data={"from_name": "root"})

    out = hook_json(run_hook(repo, "w1", "session-start", cli, START[cli]))
    ctx = out["hookSpecificOutput"]["additionalContext"]
    assert out == {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": ctx}}
    assert "Your task: Add a --verbose flag" in ctx
    assert "[MESSAGE from root] check the README too" in ctx
    a = _agent(repo, "w1")
    assert (a.status, a.session_id) == ("working", START[cli]["session_id"])

    env.store.post("note", "root", "w1", "second thought", data={"from_name": "root"})
    out = hook_json(run_hook(repo, "w1", "prompt", cli, PROMPT[cli]))
    assert out == {"hookSpecificOutput": {"hookEventName": PROMPT_EVENT[cli],
                                          "additionalContext": "[NOTE from root] second thought"}}
    assert hook_json(run_hook(repo, "w1", "prompt", cli, PROMPT[cli])) == {}  # delivered once

    assert hook_json(run_hook(repo, "w1", "tool", cli, TOOL[cli])) == {}
    assert _agent(repo, "w1").tool_calls == 1

    env.store.post("send", "root", "w1", "also update the docs", data={"from_name": "root"})
    out = hook_json(run_hook(repo, "w1", "stop", cli, STOP[cli]))
    verb = "deny" if cli == "gemini" else "block"
    assert out == {"decision": verb, "reason": "[MESSAGE from root] also update the docs"}
    a = _agent(repo, "w1")
    assert (a.status, a.output, a.turns) == ("working", "Done: added --verbose.", 1)

    again = dict(STOP[cli], stop_hook_active=True)
    if cli == "claude":
        again["last_assistant_message"] = "Docs updated."
    elif cli == "gemini":
        again["prompt_response"] = "Docs updated."
    else:
        again.update(last_assistant_message="Docs updated.", turn_id="t2")
    assert hook_json(run_hook(repo, "w1", "stop", cli, again)) == {}
    a = _agent(repo, "w1")
    assert (a.status, a.output, a.turns) == ("idle", "Docs updated.", 2)  # output replaced, never stale
    idle = [m for m in _msgs(repo, recipient="root", kinds=["event"]) if m.data.get("event") == "idle"]
    assert len(idle) == 1 and idle[0].sender == "w1" and idle[0].data["output"] == "Docs updated."

    if cli in NOTIFICATION:
        assert hook_json(run_hook(repo, "w1", "notification", cli, NOTIFICATION[cli])) == {}
        assert _agent(repo, "w1").status == "waiting-permission"
        ev = [m for m in _msgs(repo, recipient="root", kinds=["event"]) if m.data.get("event") == "waiting-permission"]
        assert len(ev) == 1 and "waiting for permission" in ev[0].body
        hook_json(run_hook(repo, "w1", "tool", cli, TOOL[cli]))  # approved: the tool ran
        assert _agent(repo, "w1").status == "working"

    for _ in range(3 if cli == "gemini" else 1):  # Gemini runs SessionEnd three times on /quit
        assert hook_json(run_hook(repo, "w1", "session-end", cli, END[cli])) == {}
    assert _agent(repo, "w1").status == "dead"
    dead = [m for m in _msgs(repo, recipient="root", kinds=["event"]) if m.data.get("event") == "dead"]
    assert len(dead) == 1


def test_exo_format_is_claude_shaped(team: Path) -> None:
    payload = dict(START["claude"], transcript_path=None)
    out = hook_json(run_hook(team, "w1", "session-start", "exo", payload))
    assert out["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    team_env = env_for(team)
    team_env.store.post("send", "root", "w1", "hi", data={"from_name": "root"})
    out = hook_json(run_hook(team, "w1", "stop", "exo", dict(STOP["claude"], transcript_path=None)))
    assert out == {"decision": "block", "reason": "[MESSAGE from root] hi"}


def test_codex_notify_own_thread_only(team: Path) -> None:
    hook_json(run_hook(team, "w1", "session-start", "codex", START["codex"]))
    title = {"type": "agent-turn-complete", "thread-id": "title-thread", "turn-id": "9",
             "cwd": "/x", "input-messages": ["Generate a concise title for this task"],
             "last-assistant-message": '{"title": "Verbose flag"}'}
    other = dict(title, **{"thread-id": "someone-else", "input-messages": ["do it"], "last-assistant-message": "x"})
    own = dict(title, **{"thread-id": "x-sess", "turn-id": "12", "input-messages": ["Add --verbose"],
                         "last-assistant-message": "Rename complete."})
    for payload in (title, other):
        proc = run_hook(team, "w1", "notify", "codex", payload, argv_payload=True)
        assert proc.returncode == 0 and proc.stdout == ""
        assert _agent(team, "w1").status == "working"
    proc = run_hook(team, "w1", "notify", "codex", own, argv_payload=True)
    assert proc.returncode == 0 and proc.stdout == ""
    a = _agent(team, "w1")
    assert (a.status, a.output, a.turns) == ("idle", "Rename complete.", 1)
    # The Stop hook of the same turn does not count it twice.
    hook_json(run_hook(team, "w1", "stop", "codex", dict(STOP["codex"], turn_id="12")))
    assert _agent(team, "w1").turns == 1


def test_claude_transcript_tokens(team: Path, tmp_path: Path) -> None:
    tr = tmp_path / "t.jsonl"
    lines = [
        {"type": "user", "message": {"role": "user", "content": "hi"}},
        {"type": "assistant", "message": {"id": "m1", "usage": {"input_tokens": 100, "output_tokens": 20,
                                                                 "cache_read_input_tokens": 1000}}},
        {"type": "assistant", "message": {"id": "m1", "usage": {"input_tokens": 100, "output_tokens": 20,
                                                                 "cache_read_input_tokens": 1000}}},
    ]
    tr.write_text("".join(json.dumps(x) + "\n" for x in lines))
    payload = dict(STOP["claude"], transcript_path=str(tr))
    hook_json(run_hook(team, "w1", "stop", "claude", payload))
    assert _agent(team, "w1").tokens == 1120
    with open(tr, "a") as fh:
        fh.write(json.dumps({"type": "assistant", "message": {"id": "m2", "usage": {"input_tokens": 5,
                                                                                     "output_tokens": 5}}}) + "\n")
    hook_json(run_hook(team, "w1", "stop", "claude", payload))
    assert _agent(team, "w1").tokens == 1130  # only what was added since


def test_stop_hook_loop_is_bounded(team: Path) -> None:
    env = env_for(team)
    decisions = []
    for i in range(7):
        env.store.post("send", "root", "w1", f"message {i}", data={"from_name": "root"})
        payload = dict(STOP["claude"], stop_hook_active=i > 0)
        decisions.append(hook_json(run_hook(team, "w1", "stop", "claude", payload)).get("decision"))
    assert decisions[:5] == ["block"] * 5
    assert decisions[5] is None  # the sixth consecutive stop lets the agent go idle
    idle = [m for m in _msgs(team, recipient="root", kinds=["event"]) if m.data.get("event") == "idle"]
    assert len(idle) == 1
    assert decisions[6] == "block"  # after a real idle the counter starts again


# ------------------------------------------------------------------------------------------ fail open


def test_fail_open_without_state(repo: Path, tmp_path: Path) -> None:
    empty = tmp_path / "nostate"
    for cli in ("claude", "gemini", "codex"):
        proc = run_hook(repo, "w1", "stop", cli, STOP[cli], extra_env={"EXO_STATE_DIR": str(empty)})
        assert proc.returncode == 0
        assert json.loads(proc.stdout) == {}
        assert "warning" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (empty / "state.db").exists()
    assert not (repo / ".git" / "exo" / "state.db").exists()


def test_fail_open_with_corrupt_state(repo: Path) -> None:
    sd = state_dir(repo)
    sd.mkdir(parents=True)
    (sd / "state.db").write_bytes(b"this is not a sqlite database" * 100)
    for event, cli in (("session-start", "claude"), ("stop", "gemini"), ("prompt", "codex"), ("tool", "claude")):
        proc = run_hook(repo, "w1", event, cli, START["claude"])
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == {}
        assert "warning" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = run_hook(repo, "w1", "notify", "codex", '{"type":"agent-turn-complete"}', argv_payload=True)
    assert proc.returncode == 0 and proc.stdout == ""


def test_fail_open_on_bad_input(team: Path) -> None:
    before = _agent(team, "w1")
    for garbage in ("{not json", "[1, 2]", "\x00\x01 binary"):
        proc = run_hook(team, "w1", "stop", "claude", garbage)
        assert proc.returncode == 0 and json.loads(proc.stdout) == {} and "warning" in proc.stderr
        proc = run_hook(team, "w1", "tool", "claude", garbage)
        assert proc.returncode == 0 and "warning" in proc.stderr
    after = _agent(team, "w1")  # garbage counts nothing and changes nothing
    assert (after.turns, after.tool_calls, after.status, after.output) == (
        before.turns, before.tool_calls, before.status, before.output)
    proc = run_hook(team, "w1", "no-such-event", "claude", {})
    assert proc.returncode == 0 and "warning" in proc.stderr
    proc = run_hook(team, None, "stop", "claude", STOP["claude"])  # the human's own session: neutral
    assert proc.returncode == 0 and json.loads(proc.stdout) == {}


# ------------------------------------------------------------------------------------------ rebase


def _worktree(repo: Path, tmp_path: Path, agent_id: str = "w1") -> Path:
    wt = tmp_path / f"wt-{agent_id}"
    git(repo, "worktree", "add", "-q", "-b", f"main.{agent_id}", str(wt), "main")
    make_agent(repo, agent_id, worktree=str(wt), branch=f"main.{agent_id}", base_branch="main", status="working")
    return wt


def test_stop_hook_rebases_cleanly(repo: Path, tmp_path: Path) -> None:
    wt = _worktree(repo, tmp_path)
    (wt / "mine.txt").write_text("child work\n")
    git(wt, "add", "mine.txt")
    git(wt, "commit", "-q", "-m", "child")
    (repo / "theirs.txt").write_text("parent work\n")
    git(repo, "add", "theirs.txt")
    git(repo, "commit", "-q", "-m", "parent moved")
    out = hook_json(run_hook(repo, "w1", "stop", "claude", STOP["claude"], cwd=wt))
    assert out == {}
    assert git(wt, "merge-base", "--is-ancestor", "main", "HEAD") == ""
    assert (wt / "theirs.txt").exists() and (wt / "mine.txt").exists()
    assert git(wt, "log", "-1", "--format=%s") == "child"
    assert _agent(repo, "w1").status == "idle"


def test_stop_hook_rebase_conflict_leaves_tree_and_asks_parent(repo: Path, tmp_path: Path) -> None:
    wt = _worktree(repo, tmp_path)
    (wt / "README.md").write_text("child version\n")
    git(wt, "commit", "-q", "-am", "child edit")
    (wt / "scratch.txt").write_text("untracked, must survive\n")
    (repo / "README.md").write_text("parent version\n")
    git(repo, "commit", "-q", "-am", "parent edit")
    before = (git(wt, "rev-parse", "HEAD"), git(wt, "status", "--porcelain"), (wt / "README.md").read_text())

    out = hook_json(run_hook(repo, "w1", "stop", "claude", STOP["claude"], cwd=wt))
    assert out["decision"] == "block"
    assert "conflicts in: README.md" in out["reason"] and "git rebase main" in out["reason"]
    after = (git(wt, "rev-parse", "HEAD"), git(wt, "status", "--porcelain"), (wt / "README.md").read_text())
    assert after == before
    gitdir = Path(git(wt, "rev-parse", "--absolute-git-dir"))
    assert not (gitdir / "rebase-merge").exists() and not (gitdir / "rebase-apply").exists()
    assert not _msgs(repo, sender="w1", kinds=["question"])

    # The agent could not resolve it: the second failure becomes a question to its parent.
    out = hook_json(run_hook(repo, "w1", "stop", "claude", STOP["claude"], cwd=wt))
    assert out == {}
    qs = _msgs(repo, sender="w1", kinds=["question"])
    assert len(qs) == 1 and qs[0].recipient == "root" and qs[0].state == "pending"
    assert "cannot be rebased onto main" in qs[0].body
    assert (git(wt, "rev-parse", "HEAD"), git(wt, "status", "--porcelain")) == before[:2]
    hook_json(run_hook(repo, "w1", "stop", "claude", STOP["claude"], cwd=wt))
    assert len(_msgs(repo, sender="w1", kinds=["question"])) == 1  # asked once per parent tip


@pytest.mark.parametrize("where", [".env", "cfg/local.toml", "cache"])
def test_stop_hook_rebase_never_overwrites_ignored_files(repo: Path, tmp_path: Path, where: str) -> None:
    """The parent now tracks a path where the agent has an ignored file (or folder): no rebase, and it is told why."""
    (repo / ".git" / "info" / "exclude").write_text(".env\ncfg/\ncache\n")
    wt = _worktree(repo, tmp_path)
    (wt / "mine.txt").write_text("child work\n")
    git(wt, "add", "mine.txt")
    git(wt, "commit", "-q", "-m", "child")
    mine = wt / where
    mine.parent.mkdir(parents=True, exist_ok=True)
    if where == "cache":  # the agent's ignored folder where the parent now has a file
        mine.mkdir()
        (mine / "data.bin").write_bytes(b"\x00agent's own\n")
    else:
        mine.write_text("SECRET=the agent's own\n")
    theirs = "cache" if where == "cache" else where
    (repo / theirs).parent.mkdir(parents=True, exist_ok=True)
    (repo / theirs).write_text("from the parent\n")
    git(repo, "add", "-f", theirs)
    git(repo, "commit", "-q", "-m", "parent tracks it now")
    before = (git(wt, "rev-parse", "HEAD"), git(wt, "status", "--porcelain", "--ignored"))
    out = hook_json(run_hook(repo, "w1", "stop", "claude", STOP["claude"], cwd=wt))
    assert out["decision"] == "block"
    assert "did not rebase" in out["reason"] and where.split("/")[0] in out["reason"] and "git rebase main" in out["reason"]
    assert (git(wt, "rev-parse", "HEAD"), git(wt, "status", "--porcelain", "--ignored")) == before
    if where == "cache":
        assert (mine / "data.bin").read_bytes() == b"\x00agent's own\n"
    else:
        assert mine.read_text() == "SECRET=the agent's own\n"
    assert hook_json(run_hook(repo, "w1", "stop", "claude", STOP["claude"], cwd=wt)) == {}  # told once per tip
    mine.rename(tmp_path / "moved-away")  # once it is out of the way, the next parent tip rebases cleanly
    commit_repo = repo / "later.txt"
    commit_repo.write_text("x\n")
    git(repo, "add", "later.txt")
    git(repo, "commit", "-q", "-m", "parent again")
    assert hook_json(run_hook(repo, "w1", "stop", "claude", STOP["claude"], cwd=wt)) == {}
    assert git(wt, "merge-base", "--is-ancestor", "main", "HEAD") == ""


def test_hook_imports_stay_light(team: Path) -> None:
    """The hot path never imports GitPython, rich, yaml, mcp, pydantic or the other operations."""
    import os
    import subprocess
    import sys

    from test_messages_helpers import ROOT, agent_vars

    probe = (
        "import sys, json\nfrom exo_cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'mcp','git','rich','yaml','tomli_w','pydantic'}"
        " or m in ('exo_cli.ops.spawn', 'exo_cli.ops.messages', 'exo_cli.adapters.mux.tmux')"
        " or (m in LIGHT and m not in BEFORE))\n"
        "sys.stderr.write('\\nHEAVY=' + json.dumps(bad) + '\\n')\n"
    )
    # What keeps a hook near Python's own start (bench/hooks.py): no Click, and none of the stdlib
    # modules that cost a hook a large share of it (each has a light stand-in on this path).
    light = ("click", "typing", "dataclasses", "inspect", "hashlib", "socket", "sqlite3", "threading")
    probe = f"import sys\nLIGHT = {light!r}\nBEFORE = set(sys.modules)\n" + probe
    env = {**os.environ, **agent_vars(team, "w1"), "PYTHONPATH": str(ROOT)}
    for event, payload in (("stop", STOP["claude"]), ("tool", TOOL["claude"])):
        proc = subprocess.run([sys.executable, "-c", probe, "hook", event, "--cli", "claude"], cwd=team, env=env,
                              input=json.dumps(payload), capture_output=True, text=True)
        assert proc.stdout.strip() == "{}", proc.stderr
        line = [x for x in proc.stderr.splitlines() if x.startswith("HEAVY=")][-1]
        assert json.loads(line[6:]) == [], event


# Argument lists the agent CLIs send, and ones only Click must answer (help, errors).
FAST_ARGV = [
    ["stop", "--cli", "claude"], ["tool", "--cli=gemini"], ["notify", "--cli", "codex", '{"type":"x"}'],
    ["prompt"], ["stop", "--json", "--cli", "exo"], ["--cli", "codex", "stop"], ["stop", "--", "--odd-payload"],
    ["session-start", "-"], ["no-such-event", "--cli", "nobody"],
]
CLICK_ARGV = [
    [], ["--help"], ["stop", "-h"], ["stop", "--cli"], ["stop", "--cli", "--json"], ["stop", "--cli", "a", "--cli", "b"],
    ["stop", "--bogus"], ["a", "b", "c"], ["stop", "--json", "--json"], ["stop", "-x"],
]


@pytest.mark.parametrize("argv", FAST_ARGV + CLICK_ARGV)
def test_hook_fast_path_parses_as_click_does(argv: list[str]) -> None:
    """``main`` answers a hook without Click; it must read every argv exactly as the Click command would."""
    import click

    from exo_cli.commands.hook import hook
    from exo_cli.hookrun import parse

    fast = parse(argv)
    assert (fast is not None) == (argv in FAST_ARGV)
    if fast is None:
        return  # Click answers it, as before
    ctx = hook.make_context("hook", list(argv))
    assert isinstance(ctx, click.Context)
    p = ctx.params
    assert fast == (p["event"], p["payload"], p["cli"], p["as_json"])


def test_hook_help_and_usage_errors_still_come_from_click(repo: Path) -> None:
    from test_messages_helpers import run_exo_as

    proc = run_exo_as(repo, None, "hook", "--help")
    assert proc.returncode == 0 and "Handle an agent CLI's hook event" in proc.stdout and "--cli" in proc.stdout
    proc = run_exo_as(repo, None, "hook", "stop", "--bogus")
    assert proc.returncode == 2 and "No such option" in proc.stderr
    proc = run_exo_as(repo, None, "hook")
    assert proc.returncode == 2 and "Missing argument" in proc.stderr


def test_stop_hook_never_touches_the_network(repo: Path, tmp_path: Path) -> None:
    """The rebase check uses local refs only: a remote whose every access would leave a canary is never used."""
    canary = tmp_path / "network-was-used"
    git(repo, "config", "protocol.ext.allow", "always")
    git(repo, "remote", "add", "origin", f"ext::sh -c touch% {canary}")
    git(repo, "config", "branch.main.remote", "origin")
    git(repo, "config", "branch.main.merge", "refs/heads/main")
    wt = _worktree(repo, tmp_path)
    git(wt, "config", "branch.main.w1.remote", "origin")
    (wt / "mine.txt").write_text("child\n")
    git(wt, "add", "mine.txt")
    git(wt, "commit", "-q", "-m", "child")
    (repo / "theirs.txt").write_text("parent\n")
    git(repo, "add", "theirs.txt")
    git(repo, "commit", "-q", "-m", "parent moved")
    # the canary works: any fetch through this remote would create it
    import subprocess

    subprocess.run(["git", "fetch", "-q", "origin"], cwd=tmp_path / "wt-w1", capture_output=True)
    assert canary.exists()
    canary.unlink()
    out = hook_json(run_hook(repo, "w1", "stop", "claude", STOP["claude"], cwd=wt))
    assert out == {}
    assert (wt / "theirs.txt").exists()  # rebased onto the local parent branch
    assert not canary.exists()


# ------------------------------------------------------------------------------------------ failed turns


def _root_events(repo: Path, kind: str) -> list:
    return [m for m in _msgs(repo, recipient="root", kinds=["event"]) if m.data.get("event") == kind]


def test_claude_stop_failure_is_a_failed_turn_and_the_parent_is_told(team: Path) -> None:
    payload = {"session_id": "c-sess", "transcript_path": "/nonexistent", "cwd": "/x",
               "hook_event_name": "StopFailure", "error": "rate_limit",
               "last_assistant_message": "API Error: 429 rate limited"}
    assert hook_json(run_hook(team, "w1", "stop-failure", "claude", payload)) == {}
    a = _agent(team, "w1")
    assert a.status == "failed-turn" and a.status_reason == "turn failed: API Error: 429 rate limited"
    assert a.output == "API Error: 429 rate limited" and a.turns == 1
    (event,) = _root_events(team, "failed-turn")
    assert "API Error: 429" in event.body and event.data["error_kind"] == "rate_limit"
    assert not _root_events(team, "idle")
    # Its next turn (a message, then the prompt hook) makes it work again; a repeat changes nothing.
    assert hook_json(run_hook(team, "w1", "stop-failure", "claude", payload)) == {}
    assert len(_root_events(team, "failed-turn")) == 1
    hook_json(run_hook(team, "w1", "prompt", "claude", PROMPT["claude"]))
    assert _agent(team, "w1").status == "working"


def test_gemini_after_agent_after_an_api_error_is_a_failed_turn(team: Path, tmp_path: Path) -> None:
    transcript = tmp_path / "session.jsonl"
    transcript.write_text("\n".join(json.dumps(e) for e in [
        {"sessionId": "g-sess", "kind": "main"},
        {"id": "1", "type": "user", "content": [{"text": "go on"}]},
        {"id": "2", "type": "error", "content": '[API Error: {"error":{"code":400,"message":"bad request"}}]'},
        {"id": "3", "type": "info", "content": "This request failed."},
    ]) + "\n")
    payload = dict(STOP["gemini"], transcript_path=str(transcript), prompt_response="[no response text]")
    hook_json(run_hook(team, "w1", "stop", "gemini", payload))
    a = _agent(team, "w1")
    assert a.status == "failed-turn" and "bad request" in a.output
    assert _root_events(team, "failed-turn") and not _root_events(team, "idle")
    # A turn that answered normally is idle as before.
    transcript.write_text(transcript.read_text() + json.dumps({"id": "4", "type": "user"}) + "\n"
                          + json.dumps({"id": "5", "type": "gemini", "content": "fine"}) + "\n")
    hook_json(run_hook(team, "w1", "stop", "gemini", dict(STOP["gemini"], transcript_path=str(transcript))))
    assert _agent(team, "w1").status == "idle"


def test_codex_failed_turn_is_read_from_its_rollout(team: Path, tmp_path: Path) -> None:
    import time as _time

    from exo_cli.ops import agentctl

    rollout = tmp_path / "rollout.jsonl"
    stamp = _time.strftime("%Y-%m-%dT%H:%M:%S.000Z", _time.gmtime(_time.time() + 1))
    rollout.write_text("\n".join(json.dumps(e) for e in [
        {"type": "event_msg", "payload": {"type": "task_started", "turn_id": "t1"}},
        {"timestamp": stamp, "type": "event_msg",
         "payload": {"type": "task_complete", "turn_id": "t1", "last_agent_message": None,
                     "error": {"message": "unexpected status 400: fake bad request"}}},
    ]) + "\n")
    hook_json(run_hook(team, "w1", "session-start", "codex", dict(START["codex"], transcript_path=str(rollout))))
    env = env_for(team)
    a = agentctl.watch_codex_turn(env, env.store.agent("w1"))
    assert a.status == "failed-turn" and "fake bad request" in a.output
    assert _root_events(team, "failed-turn")


def test_session_end_fails_the_agents_waiting_after_it(team: Path) -> None:
    make_agent(team, "next", status="starting", status_reason="waiting for w1",
               spec={"phase": "pending", "after": ["w1"], "request": {"prompt": "after w1"}})
    hook_json(run_hook(team, "w1", "session-end", "claude", END["claude"]))
    assert _agent(team, "w1").status == "dead"
    nxt = _agent(team, "next")
    assert nxt.status == "dead" and nxt.status_reason.startswith("not started: w1 ended its session")
    (event,) = _root_events(team, "after-failed")
    assert event.sender == "next" and "will not start" in event.body


def test_headless_cli_session_end_is_the_end_of_a_turn_only(repo: Path) -> None:
    make_agent(repo, "h1", backend="claude", mux="headless", status="idle")
    hook_json(run_hook(repo, "h1", "session-end", "claude", END["claude"]))
    assert _agent(repo, "h1").status == "idle"  # its runner lives on and continues the session


def test_a_permission_wait_is_recorded_even_when_the_status_changed_under_the_hook(team: Path) -> None:
    """The notification hook records the wait by compare-and-set: a status another process set after the hook
    read the record (a message typed, a tool counted) is no reason to drop the wait, and the human is told once."""
    from exo_cli.ops import hooks

    env = env_for(team)
    stale = _agent(team, "w1")  # read as "starting"; then the agent's prompt hook marks it working
    env.store.update_agent("w1", status="working", status_reason=None)
    out = hooks.on_notification(env, stale, "claude", {"notification_type": "permission_prompt", "message": "Bash"})
    assert out.actions == ["waiting-permission"] and _agent(team, "w1").status == "waiting-permission"
    told = [m for m in _msgs(team, recipient="root") if m.data.get("event") == "waiting-permission"]
    out = hooks.on_notification(env, _agent(team, "w1"), "claude", {"notification_type": "permission_prompt",
                                                                    "message": "Bash"})
    assert out.actions == ["waiting-permission"] and len(told) == 1
    assert len([m for m in _msgs(team, recipient="root") if m.data.get("event") == "waiting-permission"]) == 1
