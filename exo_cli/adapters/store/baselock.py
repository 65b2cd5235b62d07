"""Locks held in the store (``Store.named_lock``): what excludes exo processes on every host of a team.

One lock per name and repository (the merge queue takes ``merge:<base>`` around every move of a
base, plain merges included, and ``queue-run:<base>`` while a runner advances its queue):

- **PostgreSQL** (always, whether or not the team spans hosts): a session advisory lock
  (``pg_try_advisory_lock``) on a connection of its own, keyed by the repository and the name.
  The server lets go of it when that session ends: the process exits or is killed (its socket
  closes), or the connection is lost. The session's ``application_name`` names the holder
  (``exo lock <host>:<pid>``), so ``pg_stat_activity`` shows who holds what.
- **SQLite**: a row of ``kv`` (``lock:<name>``) naming its owner (host, pid, the process's start
  time, a random token) with a lease (``LEASE`` seconds) that a thread renews while the lock is
  held. Another process takes it over only when the owner is dead (same host: its pid is gone or
  is another process) or its lease expired (any host: a stopped or unreachable owner). Taking
  and renewing are compare-and-set in one write transaction. On one host the callers also hold a
  file lock first (``files.state_lock``), which the kernel frees at ``kill -9``; the row is what a
  process on another host sharing the database would see.

A wait polls (``POLL`` seconds); ``wait=0`` tries once, ``None`` waits for as long as it takes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exo_cli.adapters.store.pgconn import PgLink
    from exo_cli.adapters.store.sqlite import SqliteStore

LEASE = 30.0  # seconds a SQLite lock row stays its owner's without a renewal
RENEW = 5.0  # seconds between renewals
POLL = 0.2  # seconds between tries while waiting


def pg_key(repo: str, name: str) -> int:
    """The advisory lock of ``name`` in ``repo`` (a signed 64-bit number; never the migrate's hold key)."""
    return int.from_bytes(hashlib.sha1(f"exo-lock\0{repo}\0{name}".encode()).digest()[:8], "big", signed=True)


def _waiting(wait: float | None) -> Iterator[None]:
    """Yield once per try until ``wait`` seconds passed (at least one try)."""
    deadline = None if wait is None else time.monotonic() + wait
    while True:
        yield
        if deadline is not None and time.monotonic() >= deadline:
            return
        time.sleep(POLL if deadline is None else max(0.0, min(POLL, deadline - time.monotonic())))


@contextlib.contextmanager
def pg_lock(link: PgLink, name: str, *, host: str, wait: float | None) -> Iterator[bool]:
    key = pg_key(link.repo, name)
    conn = link.retrying(link.connect)  # a session of its own: the lock lives exactly as long as it
    try:
        def attempt() -> bool:
            conn.execute("SELECT set_config('application_name', %s, false)", (f"exo lock {host}:{os.getpid()}"[:63],))
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            return bool(row and row[0])

        held = False
        for _ in _waiting(wait):
            held = link.retrying(attempt)
            if held:
                break
        try:
            yield held
        finally:
            if held:
                with contextlib.suppress(Exception):  # a session already gone took its lock along
                    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def _owner(raw: str | None) -> dict[str, Any] | None:
    try:
        got = json.loads(raw) if raw else None
    except ValueError:
        return None
    return got if isinstance(got, dict) else None


def _free(owner: dict[str, Any] | None, host: str, now: float) -> bool:
    """Whether a lock row's ``owner`` no longer holds it: none, expired, or (this host) its process is gone."""
    if owner is None:
        return True
    try:
        until, pid, start = float(owner["until"]), int(owner["pid"]), owner.get("start")
    except (KeyError, TypeError, ValueError):
        return True  # a row nobody could have written: not a holder
    if until < now:
        return True
    if owner.get("host") == host:
        from exo_cli.adapters.proc import pid_alive

        return not pid_alive(pid, int(start) if isinstance(start, int) else None, reap_child=False)
    return False


@contextlib.contextmanager
def sqlite_lock(store: SqliteStore, name: str, *, host: str, wait: float | None) -> Iterator[bool]:
    from exo_cli.adapters.proc import proc_start_time

    key = f"lock:{name}"
    mine = {"host": host, "pid": os.getpid(), "start": proc_start_time(os.getpid()), "token": secrets.token_hex(8),
            "since": time.time()}
    upsert = "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value"

    def take(*, renewing: bool) -> bool:
        with store.write() as c:
            row = c.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
            owner = _owner(row[0] if row else None)
            ours = owner is not None and owner.get("token") == mine["token"]
            if renewing != ours or (not ours and not _free(owner, host, time.time())):
                return False
            c.execute(upsert, (key, json.dumps({**mine, "until": time.time() + LEASE})))
            return True

    held = False
    for _ in _waiting(wait):
        held = take(renewing=False)
        if held:
            break
    if not held:
        yield False
        return
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(RENEW):
            with contextlib.suppress(Exception):  # a store busy for a moment: the next renewal
                if not take(renewing=True):
                    return  # taken over (this process was stopped past its lease): nothing more to renew

    thread = threading.Thread(target=renew, name="exo-lock-lease", daemon=True)
    thread.start()
    try:
        yield True
    finally:
        stop.set()
        thread.join()
        with store.write() as c:
            row = c.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
            owner = _owner(row[0] if row else None)
            if owner is not None and owner.get("token") == mine["token"]:
                c.execute("DELETE FROM kv WHERE key = ?", (key,))
