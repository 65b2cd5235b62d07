"""The state store: WAL, migrations, concurrent writers from many processes, doorbell wake-ups."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from exo_cli.adapters.bell import Doorbell
from exo_cli.adapters.store import open_store
from exo_cli.adapters.store.sqlite import SCHEMA_VERSION, SqliteStore
from exo_cli.errors import StateError
from exo_cli.records import Agent


def make_store(tmp_path: Path) -> Any:
    """The store of the state folder ``tmp_path``: SQLite, or PostgreSQL when EXO_STORE_URL is set."""
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    return open_store(tmp_path, run, os.environ.get("EXO_STORE_URL"))


def integrity_error() -> tuple[type[Exception], ...]:
    if os.environ.get("EXO_STORE_URL"):
        import psycopg

        return (psycopg.IntegrityError,)
    return (sqlite3.IntegrityError,)


def agent(i: int | str) -> Agent:
    now = time.time()
    return Agent(id=f"a{i}", name=f"a{i}", role="dev", parent="root", status="starting", backend="demo",
                 mux="headless", created_at=now, updated_at=now, status_at=now, location={"pid": 123})


@pytest.mark.sqlite_only
def test_schema_wal_and_version(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.insert_agent(agent(1))
    conn = sqlite3.connect(tmp_path / "state.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"agents", "messages", "events", "prs"} <= tables
    assert (tmp_path / "state.db").stat().st_mode & 0o777 == 0o600


def test_agent_roundtrip_and_update(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.insert_agent(agent(1))
    store.update_agent("a1", status="working", location={"pane": "%1", "pid": 9})
    store.bump_agent("a1", turns=1, tool_calls=3)
    a = store.agent("a1")
    assert a is not None
    assert a.status == "working" and a.location == {"pane": "%1", "pid": 9}
    assert (a.turns, a.tool_calls) == (1, 3)
    assert store.agent("nope") is None


@pytest.mark.sqlite_only
def test_newer_schema_is_refused(tmp_path: Path) -> None:
    make_store(tmp_path).agents()
    conn = sqlite3.connect(tmp_path / "state.db")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StateError, match="newer than this exo"):
        make_store(tmp_path).agents()


@pytest.mark.sqlite_only
def test_corrupt_database_is_a_clear_state_error(tmp_path: Path) -> None:
    (tmp_path / "state.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StateError) as info:
        make_store(tmp_path).agents()
    assert "unreadable" in info.value.message
    assert "exo doctor" in (info.value.hint or "")


def _writer(db: str, run: str, n: int, worker: int) -> None:
    store = _open(db, run)
    store.insert_agent(agent(f"w{worker}"))
    for i in range(n):
        store.post("note", f"aw{worker}", "root", f"{worker}:{i}")
        store.bump_agent(f"aw{worker}", tool_calls=1)
        if not isinstance(store, SqliteStore):
            store._exec("INSERT INTO exo.kv (repo, key, value) VALUES (%s, 'counter', '1') ON CONFLICT (repo, key)"
                        " DO UPDATE SET value = (exo.kv.value::int + 1)::text", (store.repo,))
            continue
        with store.write() as c:  # a read-modify-write under one transaction
            row = c.execute("SELECT value FROM kv WHERE key = 'counter'").fetchone()
            value = int(row[0]) + 1 if row else 1
            c.execute("INSERT INTO kv (key, value) VALUES ('counter', ?) "
                      "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (str(value),))


def test_parallel_processes_never_lose_a_write(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.agents()  # create the schema first, as `exo init` would
    workers, n = 8, 40
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path / "state.db"), str(tmp_path / "run"), n, w))
             for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0, "a writer failed (database is locked?)"
    msgs = store.messages(recipient="root")
    assert len(msgs) == workers * n
    assert len({m.body for m in msgs}) == workers * n
    assert store.kv_get("counter") == str(workers * n)
    for w in range(workers):
        a = store.agent(f"aw{w}")
        assert a is not None and a.tool_calls == n


def test_parallel_first_open_migrates_once(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path / "state.db"), str(tmp_path / "run"), 5, w))
             for w in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert len(make_store(tmp_path).messages()) == 30


def test_consume_is_exactly_once(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    ids = [store.post("note", "a", "root", str(i)) for i in range(20)]
    got: list[int] = []
    lock = threading.Lock()

    def take() -> None:
        mine = store.consume(ids)
        with lock:
            got.extend(mine)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == ids
    assert store.messages(recipient="root", unconsumed=True) == []


def _ring_later(run: str, key: str, ready_path: str) -> None:
    while not Path(ready_path).exists():
        time.sleep(0.01)
    Doorbell(Path(run)).ring(key)


@pytest.mark.sqlite_only
def test_doorbell_wakes_a_waiter_from_another_process(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    bell = Doorbell(run)
    ctx = mp.get_context("spawn")
    ready = tmp_path / "ready"
    with bell.listen(["root"]) as waiter:
        p = ctx.Process(target=_ring_later, args=(str(run), "root", str(ready)))
        p.start()
        ready.touch()
        # A long timeout: returning True proves the ring woke us, not the clock.
        assert waiter.wait(60) is True
        p.join(30)
    assert list((run / "bell").iterdir()) == []  # sockets removed on exit


@pytest.mark.sqlite_only
def test_doorbell_rings_only_its_key_and_skips_dead_sockets(tmp_path: Path) -> None:
    run = tmp_path / "run"
    bell = Doorbell(run)
    with bell.listen(["a1"]) as w1, bell.listen(["a2"]) as w2:
        (run / "bell" / "a1.99999.0").write_text("stale")  # not a socket: cleaned up
        assert bell.ring("a1") == 1
        assert w1.wait(60) is True
        assert w2.wait(0) is False
    assert not (run / "bell" / "a1.99999.0").exists()


def test_post_rings_recipient(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.agents()
    with store.bell.listen(["root"]) as waiter:
        threading.Timer(0.05, lambda: make_store(tmp_path).post("note", "x", "root", "hi")).start()
        assert waiter.wait(60) is True
    assert [m.body for m in store.messages(recipient="root")] == ["hi"]


# -- the named methods operations call (one short transaction each) -------------------------


def test_update_agent_if_status_sets_only_from_that_status(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.insert_agent(agent(1))
    assert store.update_agent("a1", if_status="idle", status="working") is False
    assert store.agent("a1").status == "starting"  # type: ignore[union-attr]
    assert store.update_agent("a1", if_status="starting", status="working", status_reason="go") is True
    a = store.agent("a1")
    assert a is not None and (a.status, a.status_reason) == ("working", "go")
    assert a.status_at >= a.created_at
    assert store.update_agent("nope", status="idle") is False
    with pytest.raises(KeyError):
        store.update_agent("a1", colour="red")


def test_record_tool_call_counts_and_ends_a_permission_wait(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.insert_agent(agent(1))
    store.update_agent("a1", status="waiting-permission")
    store.record_tool_call("a1")
    a = store.agent("a1")
    assert a is not None and (a.tool_calls, a.status) == (1, "working")
    store.update_agent("a1", status="idle")
    store.record_tool_call("a1")
    a = store.agent("a1")
    assert a is not None and (a.tool_calls, a.status) == (2, "idle")  # only a permission wait ends


def test_record_turn_writes_record_counters_and_kv_together(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.insert_agent(agent(1))
    store.record_turn("a1", {"output": "hello", "status": "idle"}, turns=1, tokens=120, kv=("hook:a1", '{"n":1}'))
    a = store.agent("a1")
    assert a is not None and (a.output, a.status, a.turns, a.tokens) == ("hello", "idle", 1, 120)
    assert store.kv_get("hook:a1") == '{"n":1}'
    store.record_turn("a1", {}, turns=0, tokens=5, kv=("hook:a1", '{"n":2}'))
    a = store.agent("a1")
    assert a is not None and (a.turns, a.tokens) == (1, 125)
    assert store.kv_get("hook:a1") == '{"n":2}'
    # A failure in the last statement rolls back the first two: never one without the others.
    with pytest.raises(integrity_error()):
        store.record_turn("a1", {"output": "lost"}, turns=1, tokens=1, kv=("hook:a1", None))  # type: ignore[arg-type]
    a = store.agent("a1")
    assert a is not None and (a.output, a.turns, a.tokens) == ("hello", 1, 125)
    assert store.kv_get("hook:a1") == '{"n":2}'


def test_pending_agent_ids_lists_starting_agents_waiting_to_start(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    for i, (status, spec) in enumerate([("starting", {"phase": "pending"}), ("starting", {}),
                                        ("idle", {"phase": "pending"}), ("starting", {"phase": "pending"})]):
        store.insert_agent(agent(i)._replace(status=status, spec=spec))
    assert store.pending_agent_ids() == ["a0", "a3"]


def test_claim_pending_takes_undelivered_messages_once_oldest_first(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    first, second, third = (store.post("note", "x", "a1", str(i)) for i in range(3))
    store.post("note", "x", "a2", "not mine")
    store.mark_messages([second], delivered_at=1.0)  # typed into its pane already: not handed over again
    taken = store.claim_pending("a1")
    assert [m.id for m in taken] == [first, third]
    assert store.claim_pending("a1") == []
    for msg_id in (first, third):
        m = store.message(msg_id)
        assert m is not None and m.delivered_at is not None and m.consumed_at == m.delivered_at
    assert store.messages(recipient="a2", unconsumed=True, undelivered=True) != []


def test_claim_delivery_is_once_and_can_be_undone(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    msg_id = store.post("note", "x", "a1", "hi")
    assert store.claim_delivery(msg_id) is True
    assert store.claim_delivery(msg_id) is False
    assert store.mark_messages([msg_id], delivered_at=None) == 1  # typing failed: it waits for a hook
    assert store.claim_delivery(msg_id) is True
    consumed = store.post("note", "x", "a1", "read")
    store.consume([consumed])
    assert store.claim_delivery(consumed) is False
    assert store.claim_delivery(99999) is False


def test_consume_delivered_keeps_an_earlier_delivery_time(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    typed, queued, plain = (store.post("note", "x", "root", str(i)) for i in range(3))
    store.mark_messages([typed], delivered_at=5.0)
    assert store.consume([typed, queued], delivered=True) == [typed, queued]
    assert store.consume([typed, queued, plain]) == [plain]
    got = {i: store.message(i) for i in (typed, queued, plain)}
    assert got[typed] is not None and got[typed].delivered_at == 5.0
    assert got[queued] is not None and got[queued].delivered_at == got[queued].consumed_at
    assert got[plain] is not None and got[plain].delivered_at is None and got[plain].consumed_at is not None


def test_last_message_by_sender(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    assert store.last_message_by_sender() == {}
    for sender, body in [("a1", "one"), ("a2", "two"), ("a1", "three"), ("root", "four")]:
        store.post("note", sender, "x", body)
    assert store.last_message_by_sender() == {"a1": "three", "a2": "two", "root": "four"}
    # a notice posted from a1's process to a2 (a foreseen conflict, a merged PR) is nobody's words
    store.post("event", "a1", "a2", "Heads-up: your branch conflicts", data={"notice": True})
    store.post("event", "a3", "a3", "told about itself", data={"notice": True})
    store.post("note", "a2", "x", "five", data={"notice": False, "paths": ['"notice": true']})
    assert store.last_message_by_sender() == {"a1": "three", "a2": "five", "root": "four"}


def test_kv_claim_sets_only_an_absent_key(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    assert store.kv_claim("launch:a1", "11") is True
    assert store.kv_claim("launch:a1", "22") is False
    assert store.kv_get("launch:a1") == "11"
    store.kv_set("launch:a1", "33")
    assert store.kv_get("launch:a1") == "33"


# -- the same methods from many processes at once (no lost write, exactly one winner) -------


def _open(db: str, run: str) -> Any:
    return open_store(Path(db).parent, Path(run), os.environ.get("EXO_STORE_URL"))


def _hook_worker(db: str, run: str, go: Any, worker: int, n: int) -> None:
    """What twenty agents' hooks do at once: tool calls and turn ends, on a shared record and their own."""
    store = _open(db, run)
    go.wait(60)
    for i in range(n):
        store.record_tool_call("shared")
        store.record_turn(f"aw{worker}", {"output": f"{worker}:{i}", "status": "idle"}, turns=1, tokens=10,
                          kv=(f"hook:aw{worker}", str(i)))
        store.record_turn("shared", {}, turns=1, tokens=3, kv=("hook:shared", f"{worker}:{i}"))


def _run_all(target: Any, args: list[tuple[Any, ...]]) -> None:
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=target, args=a) for a in args]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
        assert p.exitcode == 0, "a worker failed (database is locked?)"


def test_parallel_hook_writes_lose_no_count(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    workers, n = 6, 25
    store.insert_agent(agent("shared")._replace(id="shared", status="waiting-permission"))
    for w in range(workers):
        store.insert_agent(agent(f"w{w}"))
    go = mp.get_context("spawn").Event()
    threading.Timer(0.5, go.set).start()
    _run_all(_hook_worker, [(str(tmp_path / "state.db"), str(tmp_path / "run"), go, w, n) for w in range(workers)])
    shared = store.agent("shared")
    assert shared is not None
    assert (shared.tool_calls, shared.turns, shared.tokens, shared.status) == (workers * n, workers * n,
                                                                               3 * workers * n, "working")
    for w in range(workers):
        a = store.agent(f"aw{w}")
        assert a is not None and (a.turns, a.tokens, a.output) == (n, 10 * n, f"{w}:{n - 1}")
        assert store.kv_get(f"hook:aw{w}") == str(n - 1)


def _poster(db: str, run: str, go: Any, worker: int, n: int) -> None:
    store = _open(db, run)
    go.wait(60)
    for i in range(n):
        store.post("note", f"p{worker}", "root", f"{worker}:{i}")


def _claimer(db: str, run: str, go: Any, posted: Any, out: str, way: str) -> None:
    """Take root's messages one of three ways until the posters are done and nothing is left."""
    store = _open(db, run)
    go.wait(60)
    taken: list[int] = []
    while True:
        done = posted.is_set()  # read before the last pass, so a message posted meanwhile is still seen
        if way == "claim_pending":
            got = [m.id for m in store.claim_pending("root")]
        else:
            ids = [m.id for m in store.messages(recipient="root", unconsumed=True, undelivered=True)]
            if way == "consume":
                got = store.consume(ids, delivered=True)
            else:
                got = [i for i in ids if store.claim_delivery(i)]
                store.consume(got)
        taken.extend(got)
        if done and not got:
            break
        if not got:
            time.sleep(0.002)  # leave the CPU to the posters on a loaded machine (not a timing assumption)
    Path(out).write_text(json.dumps(taken))


@pytest.mark.parametrize("way", ["claim_pending", "consume", "claim_delivery"])
def test_parallel_claims_take_each_message_exactly_once(tmp_path: Path, way: str) -> None:
    store = make_store(tmp_path)
    store.agents()
    posters, claimers, n = 3, 4, 40
    ctx = mp.get_context("spawn")
    go, posted = ctx.Event(), ctx.Event()
    db, run = str(tmp_path / "state.db"), str(tmp_path / "run")
    procs = [ctx.Process(target=_poster, args=(db, run, go, w, n)) for w in range(posters)]
    procs += [ctx.Process(target=_claimer, args=(db, run, go, posted, str(tmp_path / f"out{c}.json"), way))
              for c in range(claimers)]
    for p in procs:
        p.start()
    go.set()
    for p in procs[:posters]:
        p.join(180)
        assert p.exitcode == 0
    posted.set()
    for p in procs[posters:]:
        p.join(180)
        assert p.exitcode == 0
    taken = [i for c in range(claimers) for i in json.loads((tmp_path / f"out{c}.json").read_text())]
    every = [m.id for m in store.messages(recipient="root")]
    assert len(every) == posters * n
    assert sorted(taken) == every  # each message taken once, none twice, none left behind
    assert store.messages(recipient="root", unconsumed=True) == []


def _racer(db: str, run: str, go: Any, keys: int, out: str) -> None:
    """Race for launch claims and idle -> working transitions; record what this process won."""
    store = _open(db, run)
    go.wait(60)
    won = {"kv": [k for k in range(keys) if store.kv_claim(f"launch:{k}", str(os.getpid()))],
           "status": [k for k in range(keys) if store.update_agent(f"a{k}", if_status="idle", status="working")]}
    Path(out).write_text(json.dumps(won))


def test_parallel_claims_have_exactly_one_winner(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    keys, racers = 30, 5
    for k in range(keys):
        store.insert_agent(agent(k)._replace(status="idle"))
    go = mp.get_context("spawn").Event()
    threading.Timer(0.5, go.set).start()
    _run_all(_racer, [(str(tmp_path / "state.db"), str(tmp_path / "run"), go, keys, str(tmp_path / f"r{r}.json"))
                      for r in range(racers)])
    won = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(racers)]
    assert sorted(k for w in won for k in w["kv"]) == list(range(keys))
    assert sorted(k for w in won for k in w["status"]) == list(range(keys))
    assert all(a.status == "working" for a in store.agents())


# -- the interface ---------------------------------------------------------------------------


@pytest.mark.sqlite_only
def test_sqlite_store_implements_the_interface_with_its_signatures() -> None:
    import inspect

    from exo_cli.adapters.store import base

    names = [n for n, v in vars(base.Store).items() if not n.startswith("_") and callable(v)]
    assert {"record_turn", "record_tool_call", "claim_pending", "claim_delivery", "kv_claim"} <= set(names)
    for name in names:
        want = inspect.signature(getattr(base.Store, name))
        got = inspect.signature(getattr(SqliteStore, name))
        assert [(p.name, p.kind) for p in got.parameters.values()] == [
            (p.name, p.kind) for p in want.parameters.values()], name
    assert isinstance(vars(base.Store)["bell"], property) and "bell" in dir(SqliteStore)


@pytest.mark.sqlite_only
def test_the_store_adds_no_import_to_the_hot_paths() -> None:
    """Hooks and status build the SQLite store; the interface module is for type checking only."""
    code = ("import sys; from pathlib import Path; from exo_cli.adapters.store import open_store; "
            "open_store(Path('/nonexistent'), Path('/nonexistent')); import exo_cli.adapters.store.sqlite; "
            "print(sorted(m for m in sys.modules if m.startswith('exo_cli.adapters')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ("['exo_cli.adapters', 'exo_cli.adapters.store', 'exo_cli.adapters.store.sqlite', "
                           "'exo_cli.adapters.store.usage']")  # usage: its usage table's methods (stdlib only)
