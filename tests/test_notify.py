"""Attention signals: the ``[notify] command`` gets every event kind exactly once, as JSON on stdin."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from pr_helpers import commit, env_for, make_agent

from conftest import wait_for
from exo_cli import registry
from exo_cli.ops import agentctl
from exo_cli.ops.attention import KINDS


def recorder(repo: Path, out: Path, *, extra: str = "") -> None:
    """Configure a notify command that appends what it reads to ``out`` (one JSON line per event)."""
    code = f"import sys; data = sys.stdin.buffer.read(); open({str(out)!r}, 'ab').write(data)"
    cmd = json.dumps([sys.executable, "-c", code])
    (repo / "exo.toml").write_text(f"[notify]\ncommand = {cmd}\n{extra}")


def events(out: Path) -> list[dict]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def hook(wt: str, agent: str, event: str, payload: dict) -> None:
    registry.invoke("hook", env_for(wt, agent), event=event, cli="claude", payload=json.dumps(payload))


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_every_event_kind_reaches_the_command_exactly_once(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    a = make_agent(repo, "w1")
    # off by default: nothing is run
    registry.invoke("question", env_for(a.worktree, "w1"), message="Anyone there?", timeout=0.05)
    recorder(repo, out, extra="[agent]\nstart_timeout = 0\n")

    # a question to the root (asked twice: the same ticket, one event)
    registry.invoke("question", env_for(a.worktree, "w1"), message="Which port?", timeout=0.05)
    registry.invoke("question", env_for(a.worktree, "w1"), message="Which port?", timeout=0.05)
    # waiting for a permission
    hook(a.worktree, "w1", "notification", {"notification_type": "permission_prompt", "message": "Bash: rm x"})
    # a failed turn (told twice: one event)
    hook(a.worktree, "w1", "stop-failure", {"error": "rate_limit", "last_assistant_message": "API Error: 429"})
    hook(a.worktree, "w1", "stop-failure", {"error": "rate_limit", "last_assistant_message": "API Error: 429"})
    # a PR filed to the root (filed again: an update, no new event)
    commit(a.worktree, "a.txt", "a\n", "add a")
    registry.invoke("pr_file", env_for(a.worktree, "w1"), title="Add a")
    registry.invoke("pr_file", env_for(a.worktree, "w1"), title="Add a, v2")
    # a startup dialog (an agent still starting, its pane showing a trust prompt)
    env = env_for(repo)
    b = make_agent(repo, "w2")
    loc = agentctl.mux_for(env, "tmux").start(
        "w2", ["sh", "-c", "echo 'Do you trust the contents of this directory?'; sleep 600"], cwd=b.worktree,
        env=dict(os.environ))
    env.store.update_agent("w2", status="starting", location=loc.to_dict(), mux="tmux",
                           spec={"phase": "spawned", "worktree_created": True})
    try:
        wait_for(lambda: "trust" in agentctl.mux_for(env, "tmux").capture(loc, 10), what="the dialog on screen")
        registry.invoke("agents", env_for(repo))
        registry.invoke("agents", env_for(repo))  # seen again: no second event
        # dead: its process is gone, found by the next listing (twice: one event)
        c = make_agent(repo, "w3", start=["sleep", "600"])
        pid = env_for(repo).store.agent("w3").location["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: registry.invoke("agents", env_for(repo)).by_status.get("dead") == 1, what="w3 dead")
        registry.invoke("agents", env_for(repo))
        assert c.id == "w3"
        # done
        registry.invoke("done", env_for(a.worktree, "w1"), output="all done")
        wait_for(lambda: len(events(out)) >= len(KINDS), what="every event recorded")
        time.sleep(0.5)  # a duplicate would have arrived by now
    finally:
        agentctl.mux_for(env_for(repo), "tmux").kill_server()
    got = events(out)
    assert sorted(e["event"] for e in got) == sorted(KINDS), got
    by = {e["event"]: e for e in got}
    assert by["question"]["agent"] == "w1" and by["question"]["text"] == "Which port?"
    assert by["waiting-permission"]["text"] == "Bash: rm x"
    assert by["failed-turn"]["text"] == "API Error: 429" and by["failed-turn"]["error_kind"] == "rate_limit"
    assert by["pr-filed"]["pr"] == 1 and "Add a" in by["pr-filed"]["text"]
    assert by["blocked-on-dialog"]["agent"] == "w2" and by["dead"]["agent"] == "w3"
    assert by["done"]["text"] == "all done" and by["done"]["branch"] == "main.w1"


def test_a_broken_notifier_never_breaks_the_operation(repo: Path, tmp_path: Path) -> None:
    (repo / "exo.toml").write_text('[notify]\ncommand = ["/nonexistent/notifier"]\ndesktop = true\n')
    a = make_agent(repo, "w1")
    r = registry.invoke("question", env_for(a.worktree, "w1"), message="Still fine?", timeout=0.05)
    assert r.status == "timeout"


def test_bad_notify_config_is_an_error_naming_the_key(repo: Path) -> None:
    from exo_cli.errors import InvalidInput

    (repo / "exo.toml").write_text('[notify]\ncommand = "notify-me"\n')
    with pytest.raises(InvalidInput, match="notify.command"):
        env_for(repo).config  # noqa: B018


def test_an_agent_with_a_huge_task_still_reaches_the_notifier(repo: Path, tmp_path: Path) -> None:
    """The payload is written to the notifier's pipe at once: every long field (the task too) is cut, so a
    70 KB task of wide characters cannot make the event too big to send (it was lost without a word)."""
    out = tmp_path / "events.jsonl"
    a = make_agent(repo, "w1")
    env_for(repo).store.update_agent("w1", task="任务" * 35000)
    recorder(repo, out)
    registry.invoke("done", env_for(a.worktree, "w1"), output="finished")
    got = wait_for(lambda: events(out), what="the done event")
    assert [e["event"] for e in got] == ["done"] and got[0]["task"].startswith("任务任务")
    assert len(json.dumps(got[0], ensure_ascii=False).encode()) < 60000


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_board_flags_exactly_the_agents_that_raised_one_attention_event(repo: Path, tmp_path: Path) -> None:
    """Every status that needs the human (``attention.NEEDS_HUMAN``, the rule the board reads), entered by each
    real path that sets it, raises exactly one event, and told again raises none; an agent the board does not
    flag raised none (a question to a TL parent is the TL's to answer)."""
    import threading
    from collections import Counter

    from exo_cli.errors import StateError
    from exo_cli.ops.attention import NEEDS_HUMAN
    from exo_cli.records import Agent

    out = tmp_path / "events.jsonl"
    recorder(repo, out, extra="[agent]\nstart_timeout = 0\n")
    env = env_for(repo)
    tmux = agentctl.mux_for(env, "tmux")
    entered: dict[str, str] = {}  # agent -> the status a path drove it into
    asking: list[threading.Thread] = []

    def ask(agent: Agent) -> None:
        t = threading.Thread(target=registry.invoke, args=("question", env_for(agent.worktree, agent.id)),
                             kwargs={"message": f"{agent.id}: which port?", "timeout": 120}, daemon=True)
        t.start()
        asking.append(t)
        wait_for(lambda: env.store.agent(agent.id).status == "asking", what=f"{agent.id} asking")

    try:
        # dead, found by exo doctor (before anything else looks at the team)
        z = make_agent(repo, "zombie", start=["sleep", "600"])
        os.kill(env.store.agent("zombie").location["pid"], signal.SIGKILL)
        wait_for(lambda: not agentctl.mux_for(env, "headless").alive(agentctl.location(env.store.agent("zombie"))),
                 what="zombie's process gone")
        registry.invoke("doctor", env_for(repo))
        registry.invoke("doctor", env_for(repo))
        entered[z.id] = "dead"
        # asking: a question to the root; and one to a TL parent (not the human's)
        ask(make_agent(repo, "asker"))
        entered["asker"] = "asking"
        make_agent(repo, "lead", role="tl")
        ask(make_agent(repo, "kid", parent="lead", base="main.lead"))
        entered["kid"] = "asking"
        # waiting for a permission, told twice
        p = make_agent(repo, "perm")
        for _ in range(2):
            hook(p.worktree, "perm", "notification", {"notification_type": "permission_prompt", "message": "Bash"})
        entered["perm"] = "waiting-permission"
        # a failed turn (Claude's StopFailure), told twice, then another error of the same failed turn
        f = make_agent(repo, "failer")
        for error in ("rate_limit", "rate_limit", "overloaded"):
            hook(f.worktree, "failer", "stop-failure", {"error": error, "last_assistant_message": f"API {error}"})
        entered["failer"] = "failed-turn"
        # a startup dialog
        d = make_agent(repo, "dialog")
        loc = tmux.start("dialog", ["sh", "-c", "echo 'Do you trust the contents of this directory?'; sleep 600"],
                         cwd=d.worktree, env=dict(os.environ))
        env.store.update_agent("dialog", status="starting", location=loc.to_dict(), mux="tmux",
                               spec={"phase": "spawned", "worktree_created": True})
        wait_for(lambda: "trust" in tmux.capture(loc, 10), what="the dialog on screen")
        entered["dialog"] = "blocked-on-dialog"
        # dead: its process gone (seen by a watcher); an agent waiting --after it will never start
        make_agent(repo, "gone", start=["sleep", "600"])
        w = make_agent(repo, "waiter")
        env.store.update_agent("waiter", status="starting", spec={"phase": "pending", "after": ["gone"]})
        os.kill(env.store.agent("gone").location["pid"], signal.SIGKILL)
        entered["gone"] = entered[w.id] = "dead"
        # dead: its session ended; killed; stopped by a complete that then refused
        e = make_agent(repo, "ender")
        hook(e.worktree, "ender", "session-end", {"reason": "exit"})
        hook(e.worktree, "ender", "session-end", {"reason": "exit"})
        make_agent(repo, "killed", start=["sleep", "600"])
        registry.invoke("kill", env_for(repo), agent="killed")
        ready = tmp_path / "trap-set"
        c = make_agent(repo, "refused", start=["sh", "-c", f"trap 'echo late > late.txt; exit 0' TERM; touch {ready}; "
                                                             "while :; do sleep 0.1; done"])
        wait_for(ready.exists, what="refused's trap set")
        with pytest.raises(StateError, match="would lose work"):
            registry.invoke("complete", env_for(repo), target="refused")
        assert Path(c.worktree, "late.txt").exists()
        entered["ender"] = entered["killed"] = entered["refused"] = "dead"
        # a PR filed to the root: ready for the human to merge
        pr = make_agent(repo, "filer")
        commit(pr.worktree, "a.txt", "a\n", "add a")
        registry.invoke("pr_file", env_for(pr.worktree, "filer"), title="Add a")
        wait_for(lambda: registry.invoke("agents", env_for(repo)).by_status.get("dead") == 6, what="6 dead agents")
        board = registry.invoke("board", env_for(repo))
        board_again = registry.invoke("board", env_for(repo))
        flagged = {r.agent.id: r.needs for r in board.rows if r.needs}
        statuses = {a: env.store.agent(a).status for a in entered}
        assert flagged == {r.agent.id: r.needs for r in board_again.rows if r.needs}
        deadline = time.monotonic() + 30
        while len(events(out)) < len(flagged) and time.monotonic() < deadline:  # the comparison below says what lacks
            time.sleep(0.05)
        time.sleep(0.5)  # a duplicate would have arrived by now
    finally:
        for a in ("asker", "kid"):
            if env.store.agent(a) and env.store.agent(a).status == "asking":
                registry.invoke("answer", env_for(repo) if a == "asker" else env_for(repo, "lead"), agent=a,
                                message="8080")
        for t in asking:
            t.join(60)
        tmux.kill_server()
        for a in env.store.agents():
            if a.location.get("mux") == "headless":
                agentctl.stop_agent(env, a)
    got = Counter((e["agent"], e["event"]) for e in events(out))
    assert set(entered.values()) >= set(NEEDS_HUMAN), "a status that needs the human has no scenario here"
    board_kind = {"asking": "question", "permission": "waiting-permission", "dialog": "blocked-on-dialog",
                  "failed": "failed-turn", "dead": "dead", "pr-ready": "pr-filed"}
    assert got == Counter({(a, board_kind[n]): 1 for a, n in flagged.items()}), (got, flagged)
    assert flagged == {"zombie": "dead", "asker": "asking", "perm": "permission", "failer": "failed",
                       "dialog": "dialog", "gone": "dead", "waiter": "dead", "ender": "dead", "killed": "dead",
                       "refused": "dead", "filer": "pr-ready"}, flagged
    assert statuses == entered
