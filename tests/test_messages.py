"""note / question / answer / send / wait / output / done, roles, --after templating (real store, real processes)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
from test_messages_helpers import EXO, agent_vars, env_for, hook_json, make_agent, run_exo_as, run_hook

from conftest import Exo
from exo_cli import cancel
from exo_cli.errors import InvalidInput
from exo_cli.ops import messages
from exo_cli.ops.delivery import ready_dependents, substitute_outputs

STOP = {"session_id": "s", "transcript_path": None, "cwd": "/x", "hook_event_name": "Stop",
        "stop_hook_active": False, "last_assistant_message": "finished"}


def as_agent(repo: Path, agent_id: str | None, *args: str):  # noqa: ANN201
    env = agent_vars(repo, agent_id)
    env.pop("PYTHONPATH")
    if agent_id is None:
        env["EXO_AGENT"] = ""
    return Exo(repo)(*args, env=env)


@pytest.fixture
def team(repo: Path) -> Path:
    """root -> lead (tl) -> w1, w2 (dev); root -> other (dev)."""
    make_agent(repo, "lead", role="tl", status="working")
    make_agent(repo, "w1", parent="lead")
    make_agent(repo, "w2", parent="lead")
    make_agent(repo, "other", parent="root")
    return repo


def test_note_reaches_parent_wait(team: Path) -> None:
    r = as_agent(team, "w1", "note", "tests pass", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert r.json()["to"] == "lead"
    r = as_agent(team, "lead", "wait", "--timeout", "0", "--json")
    assert r.json() == {"results": [{"agent_id": "w1", "name": "w1", "status": "received", "message": "tests pass",
                                     "kind": "note"}], "timed_out": False, "cancelled": False, "more": False}
    r = as_agent(team, "lead", "wait", "--timeout", "0", "--json")  # consumed
    assert r.json() == {"results": [], "timed_out": True, "cancelled": False, "more": False}
    as_agent(team, "other", "note", "hello root")
    r = as_agent(team, None, "wait", "--timeout", "0")
    assert r.stdout.strip() == "[NOTE from other] hello root"


def test_wait_returns_every_pending_message_at_once_bounded(team: Path) -> None:
    env = env_for(team)
    for i in range(7):
        env.store.post("note", "w1" if i % 2 else "w2", "lead", f"n{i}", data={"from_name": "w1" if i % 2 else "w2"})
    env.store.post("event", "w1", "lead", "w1 is idle", data={"event": "idle", "from_name": "w1"})
    r = as_agent(team, "lead", "wait", "--timeout", "0", "--max", "5", "--json").json()
    assert [(e["name"], e["kind"], e["message"], e["status"]) for e in r["results"]] == [
        ("w2", "note", "n0", "received"), ("w1", "note", "n1", "received"), ("w2", "note", "n2", "received"),
        ("w1", "note", "n3", "received"), ("w2", "note", "n4", "received")]  # oldest first, with sender and kind
    assert (r["more"], r["timed_out"]) == (True, False)
    r = as_agent(team, "lead", "wait", "--timeout", "0", "--json").json()  # the rest, default bound 50
    assert [(e["agent_id"], e["kind"], e["message"]) for e in r["results"]] == [
        ("w1", "note", "n5"), ("w2", "note", "n6"), ("w1", "event", "w1 is idle")]
    assert r["more"] is False
    assert as_agent(team, "lead", "wait", "--timeout", "0", "--json").json()["results"] == []  # consumed, once
    human = as_agent(team, None, "wait", "--timeout", "0")
    assert human.stdout.strip() == "No message."
    for bad in ("0", "1001", "x"):
        assert as_agent(team, "lead", "wait", "--timeout", "0", "--max", bad).exit_code == 2
    with pytest.raises(InvalidInput):
        messages.wait(env_for(team, "lead"), timeout=0, max_messages=0)


def test_concurrent_waiters_never_receive_a_message_twice(team: Path) -> None:
    """Several waiters of one agent (its CLI and its MCP server, say) share its messages: each exactly once."""
    total, writers, waiters = 120, 4, 3
    got: list[list[str]] = [[] for _ in range(waiters)]
    errors: list[BaseException] = []
    done = threading.Event()

    def waiter(i: int) -> None:
        try:
            env = env_for(team, "lead")
            while not done.is_set():
                res = messages.wait(env, timeout=0.5, max_messages=7)
                got[i].extend(e.message or "" for e in res.results)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def writer(w: int) -> None:
        env = env_for(team, "w1")
        for k in range(total // writers):
            env.store.post("note", "w1", "lead", f"{w}:{k}", data={"from_name": "w1"})

    threads = [threading.Thread(target=waiter, args=(i,)) for i in range(waiters)]
    for t in threads:
        t.start()
    posts = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in posts:
        t.start()
    for t in posts:
        t.join()
    deadline = time.monotonic() + 60
    while sum(len(g) for g in got) < total and time.monotonic() < deadline and not errors:
        time.sleep(0.05)
    done.set()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    everything = [m for g in got for m in g]
    assert len(everything) == len(set(everything)) == total  # none twice, none lost
    for g in got:  # each waiter saw each writer's notes in order (oldest first)
        for w in range(writers):
            mine = [int(m.split(":")[1]) for m in g if m.startswith(f"{w}:")]
            assert mine == sorted(mine)


def test_waiting_parent_wakes_on_note_from_another_process(team: Path) -> None:
    env = {**agent_vars(team, "lead")}
    waiter = subprocess.Popen([*EXO, "wait", "--timeout", "30", "--json"], cwd=team, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**__import__("os").environ, **env})
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not _waiting(team, "lead"):
        time.sleep(0.02)
    assert run_exo_as(team, "w2", "note", "done with part 2").returncode == 0
    out, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 0, err
    res = json.loads(out)
    assert res["timed_out"] is False and res["results"][0]["message"] == "done with part 2"


def _waiting(team: Path, agent: str) -> bool:
    """Whether a waiter of ``agent`` listens for its doorbell: a socket in the bell folder (SQLite), or a
    connection of the PostgreSQL store whose last statement was a LISTEN."""
    import os

    url = os.environ.get("EXO_STORE_URL")
    if not url:
        return any(n.startswith(f"{agent}.") for n in _ls(env_for(team).runtime_dir / "bell"))
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN%'").fetchone()
    return bool(row and row[0])


def _ls(path: Path) -> list[str]:
    try:
        return [p.name for p in path.iterdir()]
    except FileNotFoundError:
        return []


def test_question_answer_timeout_and_same_ticket(team: Path) -> None:
    r = as_agent(team, "w1", "question", "Which port?", "--timeout", "0.2", "--json")
    first = r.json()
    assert first["status"] == "timeout" and first["answer"] is None
    assert env_for(team).store.agent("w1").status == "working"  # back from asking
    r = as_agent(team, "w1", "question", "Which port?", "--timeout", "0.2", "--json")
    assert r.json()["ticket"] == first["ticket"]  # same ticket, no second question
    qs = env_for(team).store.messages(sender="w1", kinds=["question"])
    assert len(qs) == 1 and qs[0].state == "pending"

    # The lead sees the question, answers; a child blocked in `question` wakes with it.
    seen = as_agent(team, "lead", "wait", "--timeout", "0", "--json").json()["results"][0]
    assert (seen["kind"], seen["message"]) == ("question", "Which port?")
    box: dict[str, object] = {}

    def ask() -> None:
        box["r"] = messages.question(env_for(team, "w1"), message="Which port?", timeout=30)

    t = threading.Thread(target=ask)
    t.start()
    deadline = time.monotonic() + 20
    while env_for(team).store.agent("w1").status != "asking" and time.monotonic() < deadline:
        time.sleep(0.02)
    r = as_agent(team, "lead", "answer", "w1", "8080", "--json")
    assert r.exit_code == 0, r.stdout
    t.join(30)
    res = box["r"]
    assert isinstance(res, messages.QuestionResult)
    assert (res.status, res.answer, res.ticket, res.answered_by) == ("answered", "8080", first["ticket"], "lead")
    r = as_agent(team, "lead", "answer", "w1", "again")
    assert r.exit_code == 5 and "no pending question" in r.stderr


def test_answer_arriving_while_nobody_waits_is_returned_on_recall(team: Path) -> None:
    assert as_agent(team, "w2", "question", "Squash?", "--timeout", "0", "--json").json()["status"] == "timeout"
    assert as_agent(team, "lead", "answer", "w2", "yes, squash").exit_code == 0
    r = as_agent(team, "w2", "question", "Squash?", "--timeout", "0", "--json")
    assert (r.json()["status"], r.json()["answer"]) == ("answered", "yes, squash")


def test_question_reports_parent_death(team: Path) -> None:
    env_for(team).store.update_agent("lead", status="dead")
    r = as_agent(team, "w1", "question", "anyone there?", "--timeout", "5", "--json")
    assert r.json()["status"] == "parent-dead"


def test_fan_in_wait_all_four_statuses(team: Path) -> None:
    for name, status in (("a", "working"), ("b", "working"), ("c", "working"), ("d", "working")):
        make_agent(team, name, parent="lead", status=status)
    assert run_exo_as(team, "a", "note", "a's result").returncode == 0
    hook_json(run_hook(team, "c", "stop", "claude", STOP))  # c's turn ended without a message
    env_for(team).store.update_agent("d", status="dead")
    r = as_agent(team, "lead", "wait", "a", "b", "c", "d", "--timeout", "0.3", "--json")
    res = r.json()
    assert res["timed_out"] is True
    got = {e["name"]: (e["status"], e["message"]) for e in res["results"]}
    assert got == {"a": ("received", "a's result"), "b": ("running", None), "c": ("idle", "finished"),
                   "d": ("dead", None)}
    assert [e["name"] for e in res["results"]] == ["a", "b", "c", "d"]

    # Fan-in returns as soon as every agent settled: b goes idle while the lead waits.
    box: dict[str, object] = {}
    t = threading.Thread(target=lambda: box.update(r=messages.wait(env_for(team, "lead"), agents=["b", "c"],
                                                                   timeout=30)))
    t.start()
    hook_json(run_hook(team, "b", "stop", "claude", dict(STOP, last_assistant_message="b finished")))
    t.join(30)
    res2 = box["r"]
    assert isinstance(res2, messages.WaitResult) and not res2.timed_out
    assert [(e.name, e.status) for e in res2.results] == [("b", "idle"), ("c", "idle")]


def test_wait_honours_cancellation(team: Path) -> None:
    ev = threading.Event()
    box: dict[str, object] = {}

    def run() -> None:
        with cancel.scope(ev):
            box["r"] = messages.wait(env_for(team, "lead"), agents=["w1"], timeout=None)

    t = threading.Thread(target=run)
    t.start()
    ev.set()
    t.join(60)
    assert not t.is_alive()
    res = box["r"]
    assert isinstance(res, messages.WaitResult) and res.cancelled and res.results[0].status == "running"


def test_roles_and_send_scope(team: Path) -> None:
    assert as_agent(team, "w1", "answer", "w2", "x").exit_code == 5
    assert as_agent(team, "w1", "wait", "--timeout", "0").exit_code == 5
    r = as_agent(team, "w1", "send", "lead,w2", "hi both", "--json")
    assert r.exit_code == 0, r.stdout
    assert [p["name"] for p in r.json()["sent"]] == ["lead", "w2"]
    r = as_agent(team, "w1", "send", "other", "psst")
    assert r.exit_code == 5 and "parent and siblings" in r.stderr
    assert as_agent(team, "lead", "send", "other", "tl may").exit_code == 0
    # The sender is the caller's record, whatever the message claims.
    m = env_for(team).store.messages(recipient="w2", kinds=["send"])[0]
    assert (m.sender, m.body) == ("w1", "hi both")
    # A busy agent gets it at its next hook.
    out = hook_json(run_hook(team, "w2", "prompt", "claude", {"session_id": "s", "prompt": "x"}))
    assert out["hookSpecificOutput"]["additionalContext"] == "[MESSAGE from w1] hi both"
    assert as_agent(team, None, "note", "x").exit_code == 5  # the human has no parent


def test_output_and_done(team: Path) -> None:
    hook_json(run_hook(team, "w1", "stop", "claude", dict(STOP, last_assistant_message="v1")))
    hook_json(run_hook(team, "w1", "stop", "claude", dict(STOP, last_assistant_message="v2")))
    r = as_agent(team, "lead", "output", "w1", "--json")
    assert (r.json()["output"], r.json()["turns"]) == ("v2", 2)
    r = as_agent(team, "w2", "done", "--output", "final answer", "--json")
    assert r.exit_code == 0 and r.json()["status"] == "done"
    r = as_agent(team, "lead", "wait", "w2", "--timeout", "0", "--json")
    assert r.json()["results"] == [{"agent_id": "w2", "name": "w2", "status": "received", "message": "final answer",
                                    "kind": "done"}]
    hook_json(run_hook(team, "w2", "session-end", "claude", {"reason": "other"}))
    assert env_for(team).store.agent("w2").status == "done"
    assert as_agent(team, "lead", "output", "w2").stdout.strip() == "final answer"


def test_after_templating(team: Path) -> None:
    assert substitute_outputs("use {{a.output}} and {{ b.x.output }}; {{z.output}}",
                              {"a": "A!", "b.x": "B"}) == "use A! and B; {{z.output}}"
    make_agent(team, "a", parent="lead")
    make_agent(team, "p", parent="lead", status="starting",
               spec={"phase": "pending", "after": ["a"], "common": {"after": ["a"]},
                     "request": {"kind": "worker", "prompt": "Summarize: {{a.output}}"}})
    assert ready_dependents(env_for(team), "a") == []  # a is still working: p stays pending
    assert env_for(team).store.agent("p").spec["phase"] == "pending"


def test_done_starts_the_agents_spawned_after_it(team: Path) -> None:
    """`exo done` ends w1's task and starts the agent spawned --after w1, with w1's output in its prompt."""
    r = as_agent(team, None, "spawn", "--worker", "p", "--prompt", "Summarize: {{w1.output}}", "--after", "w1",
                 "--agent", "demo", "--mux", "headless", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert env_for(team).store.agent("p").spec["phase"] == "pending"
    try:
        r = as_agent(team, "w1", "done", "--output", "the report", "--json")
        assert r.exit_code == 0 and r.json()["started"] == ["p"], r.stdout + r.stderr
        assert env_for(team).store.agent("p").task == "Summarize: the report"
    finally:
        as_agent(team, None, "kill", "p")


def test_mcp_tools(team: Path) -> None:
    from mcp import Client

    from exo_cli.mcp_server import build_server

    async def go() -> tuple[set[str], set[str], object]:
        async with Client(build_server(env_for(team, "w1"), "auto")) as c:
            dev = {t.name for t in (await c.list_tools()).tools}
            r = await c.call_tool("note", {"message": "via mcp"})
            assert not r.is_error, r.content
        async with Client(build_server(env_for(team, "lead"), "auto")) as c:
            tl = {t.name for t in (await c.list_tools()).tools}
            r = await c.call_tool("wait", {"timeout": 5, "from_agents": ["w1"]})
            assert not r.is_error, r.content
            return dev, tl, r.structured_content

    dev, tl, res = asyncio.run(go())
    assert {"note", "question", "send", "done"} <= dev and not {"wait", "answer_question", "get_artifact"} & dev
    assert {"wait", "answer_question", "get_artifact", "note", "send"} <= tl
    assert "hook" not in dev | tl
    assert res["results"][0]["message"] == "via mcp"  # type: ignore[index]
