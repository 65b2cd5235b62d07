"""``exo store migrate``: a team's state moves to PostgreSQL and back, every row and id kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, agent_vars, run_exo
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


def test_a_process_that_read_the_pointer_never_writes_it_back(repo: Path, url: str) -> None:
    """A process that found the state on PostgreSQL through the pointer, just before a migrate back to
    SQLite removed it, must not write the pointer again when it opens the store (it would send every
    later process to the rows the migrate left behind)."""
    seed(repo)
    state = repo / ".git" / "exo"
    proc = run_exo("store", "migrate", "--to", url, "--json", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    late = Env(cwd=repo, environ={**os.environ, **agent_vars(repo, "w1")})
    assert late.store_url == url  # read from the pointer
    (state / "store-url").unlink()  # the migrate back switched here
    late.store.agents()
    assert not (state / "store-url").exists()


def test_migrate_to_postgres_and_back_keeps_every_row_and_id(repo: Path, url: str, pg_cluster: Any) -> None:
    before = seed(repo)
    state = repo / ".git" / "exo"
    proc = run_exo("store", "migrate", "--to", url, "--json", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(proc.stdout)
    assert res["counts"] == {"agents": 3, "messages": 3, "events": 1, "prs": 1, "kv": 1, "usage": 0}
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


def _begin(repo: Path, url: str, direction: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """For ``postgres->...``: the state begins on PostgreSQL (the state folder points there), and every
    process afterwards follows the state folder's record, not the environment."""
    if direction.startswith("postgres"):
        monkeypatch.setenv("EXO_STORE_URL", url)
        Env(cwd=repo).store.agents()
        monkeypatch.delenv("EXO_STORE_URL")


def _drain(repo: Path) -> list[str]:
    """Every message still waiting for the human, taken by `exo wait` until none is left."""
    taken: list[str] = []
    while True:
        rest = run_exo("wait", "--timeout", "0", "--max", "1000", "--json", cwd=repo)
        assert rest.returncode == 0, rest.stdout + rest.stderr
        got = [e["message"] for e in json.loads(rest.stdout)["results"]]
        if not got:
            return taken
        taken += got


def _busy_team(repo: Path, url: str, direction: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``seed``'s team where ``direction`` begins, with history that makes the copy take a while."""
    _begin(repo, url, direction, monkeypatch)
    seed(repo)
    store = Env(cwd=repo).store
    for i in range(400):
        mid = store.post("note", "w1", "root", f"old {i} " + "x" * 200)
        store.consume([mid], delivered=True)
        store.event("idle", "w1", {"i": i, "pad": "y" * 200})


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("direction", ["sqlite->postgres", "postgres->sqlite"])
def test_writers_hammering_during_a_migrate_lose_nothing_and_repeat_nothing(
        repo: Path, url: str, tmp_path: Path, direction: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _busy_team(repo, url, direction, monkeypatch)  # w0 (a TL under root), w1 and w2 under w0: all idle
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
    taken += _drain(repo)
    expected = sorted(r["body"] for r in posted if r["body"].startswith("n1-"))
    assert sorted(b for b in taken if b.startswith("n1-")) == expected
    assert len(taken) == len(set(taken))


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("direction", ["sqlite->postgres", "postgres->sqlite"])
def test_messages_taken_during_a_migrate_are_never_delivered_again(
        repo: Path, url: str, tmp_path: Path, direction: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report: notes consumed while a migrate copied (no row added, so counts agreed) came back."""
    _busy_team(repo, url, direction, monkeypatch)
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
    taken += _drain(repo)
    assert sorted(b for b in taken if b in waiting) == sorted(waiting)  # each note to the human exactly once
    assert len(taken) == len(set(taken))


POINTS = ("migrate.held", "migrate.loaded", "migrate.marked", "migrate.committed", "migrate.settled",
          "migrate.pointed")


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("direction", ["sqlite->postgres", "postgres->sqlite"])
def test_a_migrate_killed_at_any_step_leaves_the_state_whole_and_runs_again(
        repo: Path, url: str, direction: str, point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _begin(repo, url, direction, monkeypatch)
    before = seed(repo)
    target = url if direction.startswith("sqlite") else "sqlite"
    killed = run_exo("store", "migrate", "--to", target, "--json", cwd=repo, env={"EXO_FAULT": point})
    assert killed.returncode == 137, killed.stdout + killed.stderr
    # Whatever the step, the state is whole in one store: served, or refused with where it went.
    look = run_exo("agents", "--json", cwd=repo)
    if look.returncode == 0:
        assert sorted(a["id"] for a in json.loads(look.stdout)["agents"]) == ["w0", "w1", "w2"]
    else:
        error = json.loads(look.stdout)["error"]
        assert look.returncode == 5 and "moved to" in error["message"], look.stdout
    note = run_exo("send", "w1", "after the kill", "--json", cwd=repo)
    assert note.returncode in (0, 5), note.stdout + note.stderr  # written where the state is, or refused
    again = run_exo("store", "migrate", "--to", target, "--json", cwd=repo)
    done = again.returncode == 0 or "already in" in json.loads(again.stdout)["error"]["message"]
    assert done, again.stdout + again.stderr
    final = Env(cwd=repo).store
    assert final.agents() == before["agents"] and final.prs() == before["prs"]
    bodies = [m.body for m in final.messages()]
    assert bodies[:3] == [m.body for m in before["messages"]]
    assert bodies[3:] == (["after the kill"] if note.returncode == 0 else [])  # once, or not at all
    assert (repo / ".git" / "exo" / "store-url").exists() == (target != "sqlite")
    assert run_exo("store", "migrate", "--to", target, cwd=repo).returncode == 5  # it is there now


# A writer or reader of the repository in a process of its own; the hold bound is shortened (argv[2]
# seconds instead of a minute) so the test need not wait that long.
HOLD_PROBE = r"""
import json, sys
import exo_cli.adapters.store.pgconn as pgconn, exo_cli.adapters.store.sqlite as sq
pgconn.HOLD_SECONDS = sq._LOCK_RETRY_SECONDS = float(sys.argv[2])
from exo_cli.env import Env
from exo_cli.errors import ExoError
env = Env()
try:
    got = env.store.post("note", "w1", "root", "during the hold") if sys.argv[1] == "write" else len(env.store.agents())
    print(json.dumps({"ok": True, "got": got}))
except ExoError as exc:
    print(json.dumps({"ok": False, "code": exc.exit_code, "message": exc.message, "data": exc.data}))
"""


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_writers_wait_for_the_hold_then_fail_naming_it_and_readers_go_on(
        repo: Path, url: str, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if kind == "postgres":
        monkeypatch.setenv("EXO_STORE_URL", url)
    seed(repo)
    base = {**os.environ, "PYTHONPATH": str(ROOT)}

    def probe(what: str, seconds: float) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-c", HOLD_PROBE, what, str(seconds)], cwd=repo, env=base,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def result(p: subprocess.Popen[str]) -> dict[str, Any]:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, out + err
        return json.loads(out)  # type: ignore[no-any-return]

    holder = "exo store migrate --to elsewhere (pid 1 on the test)"
    store = Env(cwd=repo).store
    with store.hold(holder):
        assert result(probe("read", 2)) == {"ok": True, "got": 3}  # reads go on
        refused = result(probe("write", 2))
        assert (refused["ok"], refused["code"]) == (False, 5)
        assert holder in refused["message"] and refused["data"]["held_by"] == holder
        late = probe("write", 120)  # starts during the hold, which ends well within its bound
        time.sleep(3)  # room to reach the held lock (the check is below: its note lands once, after the hold)
        assert late.poll() is None  # held back
    assert result(late)["ok"] is True
    assert [m.body for m in Env(cwd=repo).store.messages() if m.body == "during the hold"] == ["during the hold"]


def test_a_long_lived_forge_poller_follows_the_move(repo: Path, url: str) -> None:
    """The root TL's background poller calls no command: each of its rounds follows the state folder's record."""
    from exo_cli.ops.watch import poll_once

    seed(repo)
    env = Env(cwd=repo)  # the poller's Env, made before the move and kept
    assert env.store_url is None and poll_once(env).errors == []
    assert run_exo("store", "migrate", "--to", url, cwd=repo).returncode == 0
    assert poll_once(env).errors == [] and env.store_url == url
    assert [a.id for a in env.store.agents()] == ["w0", "w1", "w2"]


def test_the_broker_follows_the_state_folder_whatever_its_starter_named(repo: Path, url: str) -> None:
    """The broker's environment is its starter's (an agent's, or a keeper's, recorded at the agent's spawn, before
    any `exo store migrate`): it follows where the state folder holds the state, both ways, where the starter's
    own environment is refused; before any state, the URL it names still counts."""
    from exo_cli.ops import broker

    assert run_exo("init", cwd=repo).returncode == 0  # the state in SQLite
    starter = {**os.environ, "EXO_STORE_URL": url}  # a URL the SQLite state contradicts (a TL into a new repo)
    with pytest.raises(StateError):
        _ = Env(cwd=repo, environ=starter).store_url
    spawned = broker._environ(Env(cwd=repo, environ={**os.environ, "EXO_STORE_URL": ""}))
    assert Env(cwd=repo, environ={**spawned, "EXO_STORE_URL": url}).store_url is None  # SQLite, where the state is
    r = run_exo("store", "migrate", "--to", url, "--json", cwd=repo)
    assert r.returncode == 0, r.stdout + r.stderr
    assert Env(cwd=repo, environ=spawned).store_url == url  # the move is followed (spawned says "" for SQLite)
    with pytest.raises(StateError):
        _ = Env(cwd=repo, environ={**os.environ, "EXO_STORE_URL": ""}).store_url  # a human's "" is refused
    empty = repo.parent / "fresh"
    empty.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(empty)], check=True)
    assert Env(cwd=empty, environ={**spawned, "EXO_STORE_URL": url}).store_url == url  # no state yet: the URL
