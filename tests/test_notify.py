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
