"""``exo store migrate``: a team's state moves to PostgreSQL and back, every row and id kept."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import run_exo
from exo_cli.env import Env
from exo_cli.errors import StateError
from exo_cli.records import Agent


@pytest.fixture
def url(pg_cluster: Any) -> str:
    pg_cluster.psql("DROP DATABASE IF EXISTS migrate WITH (FORCE)")
    pg_cluster.psql("CREATE DATABASE migrate")
    return str(pg_cluster.url("migrate"))


def seed(repo: Path, status: str = "idle") -> dict[str, Any]:
    """A small team's state: agents, messages (a question and its answer), events, a PR, kv."""
    store = Env(cwd=repo).store
    now = time.time()
    for i, parent in enumerate(["root", "w0", "w0"]):
        store.insert_agent(Agent(id=f"w{i}", name=f"w{i}", role="tl" if i == 0 else "dev", parent=parent,
                                 status=status if i == 2 else "idle", backend="custom", mux="headless",
                                 created_at=now + i, updated_at=now, status_at=now, repo=str(repo),
                                 location={"pid": 4242 + i}, spec={"phase": "spawned"}, undo=[{"kind": "x"}]))
    q = store.post("question", "w1", "w0", "why?", state="pending")
    store.post("answer", "w0", "w1", "because", reply_to=q, data={"n": 1})
    store.post("note", "w2", "w0", "done")
    store.event("spawned", "w1", {"k": "v"})
    store.insert_pr(forge="local", title="t", body="b", head="main.w1", base="main", author="w1", state="open", draft=True)
    store.kv_set("hook:w1", '{"blocks": 1}')
    return {"agents": store.agents(), "messages": store.messages(),
            "prs": store.prs(), "kv": store.kv_get("hook:w1"), "events": store.events()}


def test_migrate_to_postgres_and_back_keeps_every_row_and_id(repo: Path, url: str, pg_cluster: Any) -> None:
    before = seed(repo)
    state = repo / ".git" / "exo"
    proc = run_exo("store", "migrate", "--to", url, "--json", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(proc.stdout)
    assert res["counts"] == {"agents": 3, "messages": 3, "events": 1, "prs": 1, "kv": 1}
    assert (res["source"], res["target"]) == ("sqlite", url)
    assert not (state / "state.db").exists() and Path(res["kept"]).exists()
    assert (state / "store-url").read_text().strip() == url
    env = Env(cwd=repo)
    assert env.store_url == url
    assert env.store.messages() == before["messages"] and env.store.prs() == before["prs"]
    assert env.store.kv_get("hook:w1") == before["kv"] and env.store.events() == before["events"]
    assert env.store.agents() == before["agents"]
    # an agent's process (its environment predates the move) follows the state folder's record
    agent_env = Env(cwd=repo, environ={"EXO_STATE_DIR": str(state), "EXO_AGENT": "w1", "HOME": os.environ["HOME"]})
    assert agent_env.store_url == url and agent_env.store.agent("w1") == before["agents"][1]
    new = env.store.post("note", "w1", "w0", "after the move")
    assert new > max(m.id for m in before["messages"])
    assert env.store.insert_pr(forge="local", title="t2", body="", head="h", base="main", author="w1",
                               state="open") == 2
    proc = run_exo("store", "migrate", "--to", "sqlite", "--json", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["counts"]["messages"] == 4
    assert not (state / "store-url").exists() and (state / "state.db").exists()
    back = Env(cwd=repo)
    assert back.store_url is None and back.store.messages()[:3] == before["messages"]
    assert back.store.agents() == before["agents"]
    local = Env(cwd=repo).store  # the old rows stay in the database, marked with where the state went
    from exo_cli.adapters.store import open_store
    from exo_cli.adapters.store.postgres import PostgresStore

    old = open_store(state, state, url)
    assert isinstance(old, PostgresStore)
    assert pg_cluster.psql(f"SELECT count(*) FROM exo.messages WHERE repo = '{old.repo}'", "migrate") == "4"
    with pytest.raises(StateError, match="moved to SQLite") as moved:  # a late writer is told, never served
        old.post("note", "w1", "w0", "too late")
    assert moved.value.data["moved_to"] == f"sqlite:{Env(cwd=repo).host_name}:{state.resolve() / 'state.db'}"
    with pytest.raises(StateError, match="moved to SQLite"):  # and so is a late hook (the state "exists" no more)
        open_store(state, state, url).exists()
    assert local.counts()["messages"] == 4
    # and back again: the kept rows are replaced by the state as it is now
    assert local.post("note", "w1", "w0", "in sqlite") > 0
    proc = run_exo("store", "migrate", "--to", url, "--json", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [m.body for m in Env(cwd=repo).store.messages()][-2:] == ["after the move", "in sqlite"]


def test_migrate_is_refused_while_an_agent_is_mid_operation(repo: Path, url: str) -> None:
    seed(repo, status="working")
    proc = run_exo("store", "migrate", "--to", url, "--json", cwd=repo)
    assert proc.returncode == 5
    err = json.loads(proc.stdout)["error"]
    assert "w2 (working)" in err["message"] and err["data"]["agents"] == ["w2 (working)"]
    assert (repo / ".git" / "exo" / "state.db").exists() and not (repo / ".git" / "exo" / "store-url").exists()


def test_migrate_refuses_what_it_cannot_do(repo: Path, url: str) -> None:
    assert run_exo("store", "migrate", "--to", url, cwd=repo).returncode == 5  # no state yet
    seed(repo)
    assert run_exo("store", "migrate", "--to", "sqlite", cwd=repo).returncode == 5  # already there
    assert run_exo("store", "migrate", "--to", "mysql://x", cwd=repo).returncode == 4
    assert run_exo("store", "migrate", "--to", "postgresql://u:pw@/x?host=/x", cwd=repo).returncode == 4
    unreachable = run_exo("store", "migrate", "--to", "postgresql://u@/x?host=/nonexistent", "--json", cwd=repo)
    assert unreachable.returncode == 7 and "Traceback" not in unreachable.stderr
    assert (repo / ".git" / "exo" / "state.db").exists() and not (repo / ".git" / "exo" / "store-url").exists()
    other = Env(cwd=repo)  # a database already holding this repository's state is refused
    from exo_cli.adapters.store import open_store

    open_store(other.state_path, other.state_path, url).insert_agent(other.store.agents()[0])
    proc = run_exo("store", "migrate", "--to", url, "--json", cwd=repo)
    assert proc.returncode == 5 and "already holds state" in json.loads(proc.stdout)["error"]["message"]


# -- writers hammering during a migrate ---------------------------------------------------------------

# A long-lived exo process (as an MCP server is): one Env, one operation after another through the
# registry, each outcome a JSON line. ``note`` posts numbered notes as its agent; ``wait`` takes the
# human's messages (``timeout`` 0) and lists what it got.
WORKER = r"""
import json, os, sys
from exo_cli.env import Env
from exo_cli.errors import ExoError
from exo_cli.registry import invoke
role, name, out, stop = sys.argv[1:5]
most = int(sys.argv[5]) if len(sys.argv) > 5 else 7
env = Env()
n = 0
with open(out, "a") as fh:
    while not os.path.exists(stop):
        body = f"{name}-{n}"
        try:
            if role == "note":
                n += 1
                rec = {"ok": True, "body": body, "id": invoke("note", env, message=body).message_id}
            else:
                rec = {"ok": True, "got": [e.message for e in invoke("wait", env, timeout=0, max_messages=most).results]}
        except ExoError as exc:
            rec = {"ok": False, "body": body if role == "note" else None, "code": exc.exit_code,
                   "message": exc.message}
        fh.write(json.dumps(rec) + "\n")
        fh.flush()
"""

# A shell's exo: a new process for every note.
CLI_WRITER = r"""
import json, os, subprocess, sys
exo, name, out, stop = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
n = 0
with open(out, "a") as fh:
    while not os.path.exists(stop):
        body = f"{name}-{n}"
        n += 1
        p = subprocess.run([sys.executable, "-m", "exo_cli", "note", body, "--json"], capture_output=True, text=True)
        rec = {"ok": p.returncode == 0, "body": body, "code": p.returncode, "out": p.stdout[-2000:],
               "err": p.stderr[-2000:]}
        fh.write(json.dumps(rec) + "\n")
        fh.flush()
"""


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def _ballast(repo: Path) -> None:
    """History that makes the copy take a while: consumed messages and events."""
    store = Env(cwd=repo).store
    for i in range(400):
        mid = store.post("note", "w1", "root", f"old {i} " + "x" * 200)
        store.consume([mid], delivered=True)
        store.event("idle", "w1", {"i": i, "pad": "y" * 200})


@pytest.mark.slow
@pytest.mark.parametrize("direction", ["sqlite->postgres", "postgres->sqlite"])
def test_writers_hammering_during_a_migrate_lose_nothing_and_repeat_nothing(
        repo: Path, url: str, tmp_path: Path, direction: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    from conftest import ROOT, agent_vars

    if direction.startswith("postgres"):
        monkeypatch.setenv("EXO_STORE_URL", url)
        Env(cwd=repo).store.agents()  # the state begins on PostgreSQL (the state folder points there)
        monkeypatch.delenv("EXO_STORE_URL")  # every process follows the state folder's record
    seed(repo)  # w0 (a TL under root), w1 and w2 under w0: all idle
    _ballast(repo)
    target = url if direction.startswith("sqlite") else "sqlite"
    base = {**os.environ, "PYTHONPATH": str(ROOT)}
    stop = tmp_path / "stop"
    outs = {name: tmp_path / f"{name}.jsonl" for name in ("n0", "n1", "cli", "taker")}
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, "note", "n0", str(outs["n0"]), str(stop)], cwd=repo,
                         env={**base, **agent_vars(repo, "w1")}),
        subprocess.Popen([sys.executable, "-c", WORKER, "note", "n1", str(outs["n1"]), str(stop)], cwd=repo,
                         env={**base, **agent_vars(repo, "w0")}),
        subprocess.Popen([sys.executable, "-c", CLI_WRITER, "exo", "cli", str(outs["cli"]), str(stop)], cwd=repo,
                         env={**base, **agent_vars(repo, "w2")}),
        subprocess.Popen([sys.executable, "-c", WORKER, "wait", "taker", str(outs["taker"]), str(stop)], cwd=repo,
                         env=base),
    ]
    try:
        def done(name: str, n: int) -> bool:
            return sum(r["ok"] for r in _records(outs[name])) >= n

        deadline = time.monotonic() + 300
        while not all(done(k, 5) for k in ("n0", "n1", "cli")) and time.monotonic() < deadline:
            time.sleep(0.1)
        moved = run_exo("store", "migrate", "--to", target, "--json", cwd=repo, timeout=300)
        assert moved.returncode == 0, moved.stdout + moved.stderr
        after = {k: len(_records(outs[k])) for k in outs}
        while not all(len(_records(outs[k])) >= after[k] + 5 for k in outs) and time.monotonic() < deadline + 300:
            time.sleep(0.1)  # every writer goes on, in the new store
    finally:
        stop.touch()
        for p in procs:
            p.wait(120)
    state = repo / ".git" / "exo"
    assert ((state / "store-url").exists()) == (target != "sqlite")
    posted, failed = [], []
    for name in ("n0", "n1", "cli"):
        for r in _records(outs[name]):
            (posted if r["ok"] else failed).append(r)
    for r in failed:  # a write that did not happen says why: the migrate held it, or the state moved
        assert r["code"] == 5, r
        assert "exo store migrate" in r.get("message", r.get("out", "")), r
    assert len(failed) < len(posted)
    # nothing lost, nothing extra: the new store holds exactly the notes whose writers were told "done"
    final = Env(cwd=repo).store
    mine = sorted(m.body for m in final.messages(kinds=["note"]) if m.body.startswith(("n0-", "n1-", "cli-")))
    assert mine == sorted(r["body"] for r in posted)
    # nothing repeated: every note to the human is taken exactly once, during the run or after it
    taken = [b for r in _records(outs["taker"]) if r["ok"] for b in r["got"]]
    for r in _records(outs["taker"]):
        if not r["ok"]:
            assert r["code"] == 5 and "exo store migrate" in r["message"], r
    while True:
        rest = run_exo("wait", "--timeout", "0", "--max", "1000", "--json", cwd=repo)
        assert rest.returncode == 0, rest.stdout + rest.stderr
        got = [e["message"] for e in json.loads(rest.stdout)["results"]]
        if not got:
            break
        taken += got
    expected = sorted(r["body"] for r in posted if r["body"].startswith("n1-"))
    assert sorted(b for b in taken if b.startswith("n1-")) == expected
    assert len(taken) == len(set(taken))


@pytest.mark.slow
@pytest.mark.parametrize("direction", ["sqlite->postgres", "postgres->sqlite"])
def test_messages_taken_during_a_migrate_are_never_delivered_again(
        repo: Path, url: str, tmp_path: Path, direction: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report: notes consumed while a migrate copied (no row added, so counts agreed) came back."""
    import subprocess
    import sys

    from conftest import ROOT

    if direction.startswith("postgres"):
        monkeypatch.setenv("EXO_STORE_URL", url)
        Env(cwd=repo).store.agents()
        monkeypatch.delenv("EXO_STORE_URL")
    seed(repo)
    _ballast(repo)
    store = Env(cwd=repo).store
    waiting = {f"note {i}" for i in range(2000)}
    for body in sorted(waiting):
        store.post("note", "w0", "root", body)
    stop = tmp_path / "stop"
    outs = [tmp_path / f"taker{i}.jsonl" for i in range(2)]
    base = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, "wait", f"t{i}", str(out), str(stop), "1"], cwd=repo,
                              env=base) for i, out in enumerate(outs)]
    try:
        deadline = time.monotonic() + 300
        while sum(len(r.get("got", ())) for o in outs for r in _records(o)) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        target = url if direction.startswith("sqlite") else "sqlite"
        moved = run_exo("store", "migrate", "--to", target, "--json", cwd=repo, timeout=300)
        assert moved.returncode == 0, moved.stdout + moved.stderr
    finally:
        stop.touch()
        for p in procs:
            p.wait(120)
    taken = [b for o in outs for r in _records(o) if r["ok"] for b in r["got"]]
    while True:
        rest = run_exo("wait", "--timeout", "0", "--max", "1000", "--json", cwd=repo)
        assert rest.returncode == 0, rest.stdout + rest.stderr
        got = [e["message"] for e in json.loads(rest.stdout)["results"]]
        if not got:
            break
        taken += got
    assert sorted(b for b in taken if b in waiting) == sorted(waiting)  # each note to the human exactly once
    assert len(taken) == len(set(taken))
