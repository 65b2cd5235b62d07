"""The demo agent in a real tmux pane (private socket): note, send into an idle pane, question/answer, read_input."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_messages_helpers import ROOT, env_for, git, make_agent, proven, state_dir

from exo_cli.demo_agent import load_script, read_input
from exo_cli.ops import agentctl, messages


@pytest.fixture
def tmux_repo(repo: Path) -> Iterator[Path]:
    env = env_for(repo)
    env.store.agents()  # create the state
    yield repo
    agentctl.mux_for(env_for(repo), "tmux").kill_server()


def start_demo(repo: Path, tmp_path: Path, name: str, script: list[Any] | None = None) -> Path:
    wt = tmp_path / f"wt-{name}"
    git(repo, "worktree", "add", "-q", "-b", f"main.{name}", str(wt), "main")
    make_agent(repo, name, status="starting", worktree=str(wt), branch=f"main.{name}", base_branch="main",
               mux="tmux", task=f"demo task of {name}")
    argv = [sys.executable, "-m", "exo_cli.demo_agent"]
    if script is not None:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(script))
        argv += ["--script", str(path)]
    agent_env = {**os.environ, "PYTHONPATH": str(ROOT), **proven(repo, name), "EXO_PARENT": "root", "EXO_ROLE": "dev",
                 "EXO_STATE_DIR": str(state_dir(repo))}
    env = env_for(repo)
    loc = agentctl.mux_for(env, "tmux").start(name, argv, cwd=wt, env=agent_env)
    env.store.update_agent(name, location=loc.to_dict())
    return wt


def next_message(repo: Path, *, kind: str | None = None, timeout: float = 60) -> messages.WaitEntry:
    """The human's next message (of ``kind``), skipping others."""
    while True:
        res = messages.wait(env_for(repo), timeout=timeout, max_messages=1)  # one at a time: skip only others
        assert res.results, "no message in time"
        entry = res.results[0]
        if kind is None or entry.kind == kind:
            return entry


def wait_idle(repo: Path, name: str) -> None:
    res = messages.wait(env_for(repo), agents=[name], timeout=60)
    while res.results[0].status == "received":  # notes first; then the turn's end
        res = messages.wait(env_for(repo), agents=[name], timeout=60)
    assert res.results[0].status == "idle", res


TRICKY = "say \"hi\" & $(touch {p}) `touch {p}` \\ 'single' ; exit\nsecond line\twith tab"


def test_demo_agent_notes_then_answers_typed_messages(tmux_repo: Path, tmp_path: Path) -> None:
    repo = tmux_repo
    wt = start_demo(repo, tmp_path, "w1")
    note = next_message(repo, kind="note")
    assert (note.name, note.message) == ("w1", "w1: wrote and committed w1.txt")
    assert git(wt, "log", "-1", "--format=%s") == "w1: add w1.txt" and (wt / "w1.txt").exists()
    wait_idle(repo, "w1")
    a = env_for(repo).store.agent("w1")
    assert (a.status, a.output, a.turns, a.session_id is not None) == ("idle", "w1: wrote and committed w1.txt", 1,
                                                                       True)

    canary = tmp_path / "pwned"
    text = TRICKY.format(p=canary)
    sent = messages.send(env_for(repo), to=["w1"], message=text)
    assert sent.sent[0].delivery == "typed"
    got = next_message(repo, kind="note")
    assert got.message == f"w1 got: [MESSAGE from root] {text}"  # byte for byte, nothing ran
    assert not canary.exists()
    wait_idle(repo, "w1")
    assert env_for(repo).store.agent("w1").output == f"Read: [MESSAGE from root] {text}"  # nothing was asked
    messages.send(env_for(repo), to=["w1"], message="Are you done?")
    assert next_message(repo, kind="note").message == "w1 got: [MESSAGE from root] Are you done?"
    wait_idle(repo, "w1")
    assert env_for(repo).store.agent("w1").output == "Answered: [MESSAGE from root] Are you done?"


def test_demo_agent_question_answer_and_busy_delivery(tmux_repo: Path, tmp_path: Path) -> None:
    repo = tmux_repo
    start_demo(repo, tmp_path, "w2", script=[
        {"write": {"path": "a.txt", "content": "a"}},
        {"commit": {"message": "w2: a"}},
        {"question": {"message": "Which port?"}},
        {"note": {"message": "after the answer"}},
    ])
    q = next_message(repo, kind="question")
    assert (q.name, q.message) == ("w2", "Which port?")
    # While w2 is blocked in its question, a message waits for its next hook.
    assert messages.send(env_for(repo), to=["w2"], message="queued while busy").sent[0].delivery == "queued"
    ans = messages.answer(env_for(repo), agent="w2", message="8080")
    assert ans.question == "Which port?"
    assert next_message(repo, kind="note").message == "after the answer"
    # The turn's stop hook hands over the queued message (block), the agent answers it, then idles.
    assert next_message(repo, kind="note").message == "w2 got: [MESSAGE from root] queued while busy"
    wait_idle(repo, "w2")
    assert env_for(repo).store.agent("w2").output == "Read: [MESSAGE from root] queued while busy"


def test_read_input_keeps_bracketed_paste_whole() -> None:
    stream = io.StringIO("plain line\n\x1b[200~first\nsecond\x1b[201~\nlast\n")
    assert read_input(stream) == "plain line"
    assert read_input(stream) == "first\nsecond"
    assert read_input(stream) == "last"
    assert read_input(stream) is None


def test_load_script_json_and_toml(tmp_path: Path) -> None:
    j = tmp_path / "s.json"
    j.write_text(json.dumps({"steps": [{"note": {"message": "hi"}}, "idle"]}))
    assert load_script(j) == [{"note": {"message": "hi"}}, "idle"]
    t = tmp_path / "s.toml"
    t.write_text('[[steps]]\nwrite = {path = "a", content = "b"}\n[[steps]]\nexit = {code = 0}\n')
    assert load_script(t) == [{"write": {"path": "a", "content": "b"}}, {"exit": {"code": 0}}]


def test_spawn_after_starts_with_the_latest_output(tmux_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                   ) -> None:
    """`exo spawn --after a --prompt "... {{a.output}}"` starts when a goes idle, with a's output of that turn."""
    from conftest import Exo

    repo = tmux_repo
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    make_agent(repo, "a", status="working")
    r = Exo(repo)("spawn", "--worker", "p", "--prompt", "Summarize: {{a.output}}", "--after", "a",
                  "--agent", "demo", "--mux", "tmux", "--json")
    assert r.exit_code == 0, r.stdout
    assert env_for(repo).store.agent("p").spec.get("phase") == "pending"
    stop = {"session_id": "s", "transcript_path": None, "cwd": str(repo), "hook_event_name": "Stop",
            "stop_hook_active": False}
    from test_messages_helpers import hook_json, run_hook

    env_for(repo).store.post("send", "root", "a", "one more thing")  # a's first stop continues (block) ...
    out = hook_json(run_hook(repo, "a", "stop", "claude", dict(stop, last_assistant_message="old")))
    assert out["decision"] == "block" and env_for(repo).store.agent("p").spec.get("phase") == "pending"
    # ... and its next stop ends the turn: p starts with this turn's output, not the stale one.
    hook_json(run_hook(repo, "a", "stop", "claude", dict(stop, stop_hook_active=True,
                                                         last_assistant_message="the final report")))
    p = env_for(repo).store.agent("p")
    assert p.spec.get("phase") != "pending" and p.task == "Summarize: the final report"
    # The started demo agent reports in like any other.
    note = next_message(repo, kind="note")
    assert (note.name, note.message) == ("p", "p: wrote and committed p.txt")


def test_only_a_question_is_answered() -> None:
    """The demo agent's reply says "Answered" only when it was asked something."""
    from exo_cli.demo_agent import asked

    assert asked("Which port?") and asked("[MESSAGE from root] are you done? ")
    assert not asked("do this") and not asked("[MESSAGE from root] hi") and not asked("[MESSAGE from root] rebase, then go")
    assert not asked("[QUESTION from w1] port?")  # a child's question is answered with `exo answer`, not in a reply
    assert not asked("[PR-MERGED from root] PR #1 was merged") and not asked("[EVENT] w2 is idle")
    assert not asked("[ANSWER from root] 8080?")
