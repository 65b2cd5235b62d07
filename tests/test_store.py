"""The state store: WAL, migrations, concurrent writers from many processes, doorbell wake-ups."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from exo_cli.adapters.bell import Doorbell
from exo_cli.adapters.store.sqlite import SCHEMA_VERSION, Store
from exo_cli.errors import StateError
from exo_cli.records import Agent


def make_store(tmp_path: Path) -> Store:
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    return Store(tmp_path / "state.db", run)


def agent(i: int | str) -> Agent:
    now = time.time()
    return Agent(id=f"a{i}", name=f"a{i}", role="dev", parent="root", status="starting", backend="demo",
                 mux="headless", created_at=now, updated_at=now, status_at=now, location={"pid": 123})


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


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    make_store(tmp_path).agents()
    conn = sqlite3.connect(tmp_path / "state.db")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StateError, match="newer than this exo"):
        make_store(tmp_path).agents()


def test_corrupt_database_is_a_clear_state_error(tmp_path: Path) -> None:
    (tmp_path / "state.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StateError) as info:
        make_store(tmp_path).agents()
    assert "unreadable" in info.value.message
    assert "exo doctor" in (info.value.hint or "")


def _writer(db: str, run: str, n: int, worker: int) -> None:
    store = Store(Path(db), Path(run))
    store.insert_agent(agent(f"w{worker}"))
    for i in range(n):
        store.post("note", f"aw{worker}", "root", f"{worker}:{i}")
        store.bump_agent(f"aw{worker}", tool_calls=1)
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


def test_doorbell_rings_only_its_key_and_skips_dead_sockets(tmp_path: Path) -> None:
    run = tmp_path / "run"
    bell = Doorbell(run)
    with bell.listen(["a1"]) as w1, bell.listen(["a2"]) as w2:
        (run / "bell" / "a1.99999.0").write_text("stale")  # not a socket: cleaned up
        assert bell.ring("a1") == 1
        assert w1.wait(5) is True
        assert w2.wait(0) is False
    assert not (run / "bell" / "a1.99999.0").exists()


def test_post_rings_recipient(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.agents()
    with store.bell.listen(["root"]) as waiter:
        threading.Timer(0.05, lambda: Store(tmp_path / "state.db", tmp_path / "run").post("note", "x", "root", "hi")).start()
        assert waiter.wait(60) is True
    assert [m.body for m in store.messages(recipient="root")] == ["hi"]
