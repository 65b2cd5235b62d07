"""The state store: one SQLite database (WAL) plus doorbell sockets for wake-ups.

Many exo processes (twenty agents' hooks, MCP servers, the human's shell) share one
database. Writes are short ``BEGIN IMMEDIATE`` transactions with a long busy timeout
and a bounded retry, so no write is lost and nobody sees "database is locked".

Wake-ups never poll the database in a loop: a waiter binds a Unix datagram socket in
the short runtime folder (``bell/<key>.<pid>.<n>``) and a writer sends one byte to every
socket of that key after its commit. The waiter re-reads the database when woken,
with a slow timed fallback in case a ring is missed.

``Store`` is the interface operations use; a PostgreSQL backend (LISTEN/NOTIFY) can
implement the same methods without any operation changing.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exo_cli.errors import StateError
from exo_cli.records import AGENT_JSON_FIELDS, Agent, Message, PullRequest, dumps

if TYPE_CHECKING:
    from exo_cli.adapters.bell import Doorbell

SCHEMA_VERSION = 1

MIGRATIONS: dict[int, Sequence[str]] = {
    1: (
        """CREATE TABLE agents (
            id TEXT PRIMARY KEY, name TEXT NOT NULL, role TEXT NOT NULL, parent TEXT,
            status TEXT NOT NULL, backend TEXT NOT NULL, mux TEXT NOT NULL,
            task TEXT, bead TEXT, worktree TEXT, branch TEXT, base_branch TEXT, repo TEXT,
            location TEXT NOT NULL DEFAULT '{}', session_id TEXT, output TEXT, status_reason TEXT,
            turns INTEGER NOT NULL DEFAULT 0, tool_calls INTEGER NOT NULL DEFAULT 0,
            tokens INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL, updated_at REAL NOT NULL, status_at REAL NOT NULL,
            completed_at REAL, spec TEXT NOT NULL DEFAULT '{}', undo TEXT NOT NULL DEFAULT '[]')""",
        "CREATE INDEX agents_parent ON agents(parent)",
        """CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, sender TEXT NOT NULL,
            recipient TEXT NOT NULL, body TEXT NOT NULL, data TEXT NOT NULL DEFAULT '{}',
            created_at REAL NOT NULL, delivered_at REAL, consumed_at REAL, reply_to INTEGER,
            state TEXT)""",
        "CREATE INDEX messages_recipient ON messages(recipient, consumed_at)",
        "CREATE INDEX messages_reply ON messages(reply_to)",
        """CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, agent TEXT,
            data TEXT NOT NULL DEFAULT '{}', created_at REAL NOT NULL)""",
        "CREATE INDEX events_agent ON events(agent)",
        """CREATE TABLE prs (
            number INTEGER PRIMARY KEY AUTOINCREMENT, forge TEXT NOT NULL, title TEXT NOT NULL,
            body TEXT NOT NULL, head TEXT NOT NULL, base TEXT NOT NULL, author TEXT NOT NULL,
            state TEXT NOT NULL, draft INTEGER NOT NULL DEFAULT 0, url TEXT, remote_number INTEGER,
            strategy TEXT, merge_commit TEXT, review_state TEXT, checks_state TEXT,
            created_at REAL NOT NULL, updated_at REAL NOT NULL, merged_at REAL,
            data TEXT NOT NULL DEFAULT '{}')""",
        "CREATE INDEX prs_head ON prs(head)",
        "CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ),
}

_AGENT_COLS = Agent._fields
_MSG_COLS = Message._fields
_PR_COLS = PullRequest._fields
_LOCK_RETRY_SECONDS = 60.0


def _is_locked(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class Store:
    """SQLite-backed state: agents, messages, events, pull requests."""

    def __init__(self, path: Path, runtime_dir: Path | Callable[[], Path]) -> None:
        self.path = path
        self._runtime_dir = runtime_dir
        self._local = threading.local()

    @cached_property
    def bell(self) -> Doorbell:
        from exo_cli.adapters.bell import Doorbell

        rd = self._runtime_dir
        return Doorbell(rd if isinstance(rd, Path) else rd())

    # -- connection and transactions -------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._open()
            self._local.conn = conn
        return conn

    def _open(self) -> sqlite3.Connection:
        fresh = not self.path.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            if fresh:
                with contextlib.suppress(OSError):
                    os.chmod(self.path, 0o600)
            conn.execute("PRAGMA busy_timeout = 30000")
            self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL"))
            conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate(conn)
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and _is_locked(exc):
                raise
            raise StateError(
                f"exo's state database is unreadable: {self.path} ({exc})",
                hint=f"Move {self.path} aside (mv {self.path} {self.path}.broken) and run `exo doctor` "
                "to rebuild what can be rebuilt from git and the multiplexer.",
                path=str(self.path),
            ) from exc
        return conn

    def _retry(self, fn: Any) -> Any:
        deadline = time.monotonic() + _LOCK_RETRY_SECONDS
        delay = 0.005
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not _is_locked(exc) or time.monotonic() > deadline:
                    raise
                # jitter from the clock: `random` costs ~2 ms to import on every hook
                time.sleep(delay * (1 + (time.perf_counter_ns() % 1000) / 1000))
                delay = min(delay * 2, 0.2)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise StateError(
                f"exo's state database {self.path} has schema {version}, newer than this exo ({SCHEMA_VERSION})",
                hint="Upgrade exo.",
            )

        def apply() -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                current = conn.execute("PRAGMA user_version").fetchone()[0]
                for v in range(current + 1, SCHEMA_VERSION + 1):
                    for stmt in MIGRATIONS[v]:
                        conn.execute(stmt)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        self._retry(apply)

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A short write transaction (BEGIN IMMEDIATE), retried while another writer holds the lock."""
        conn = self._conn()
        self._retry(lambda: conn.execute("BEGIN IMMEDIATE"))
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        else:
            self._retry(lambda: conn.execute("COMMIT"))

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        conn = self._conn()
        conn.row_factory = sqlite3.Row
        try:
            return list(self._retry(lambda: conn.execute(sql, args).fetchall()))
        finally:
            conn.row_factory = None

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- agents ------------------------------------------------------------------------
    @staticmethod
    def _agent(row: sqlite3.Row) -> Agent:
        kw = {k: row[k] for k in _AGENT_COLS}
        for k in AGENT_JSON_FIELDS:
            kw[k] = json.loads(kw[k] or ("[]" if k == "undo" else "{}"))
        return Agent(**kw)

    def agent(self, agent_id: str) -> Agent | None:
        rows = self.query("SELECT * FROM agents WHERE id = ?", (agent_id,))
        return self._agent(rows[0]) if rows else None

    def agents(self) -> list[Agent]:
        return [self._agent(r) for r in self.query("SELECT * FROM agents ORDER BY created_at, id")]

    def insert_agent(self, agent: Agent, conn: sqlite3.Connection | None = None) -> None:
        values = [getattr(agent, c) for c in _AGENT_COLS]
        values = [dumps(v) if c in AGENT_JSON_FIELDS else v for c, v in zip(_AGENT_COLS, values, strict=True)]
        sql = f"INSERT INTO agents ({', '.join(_AGENT_COLS)}) VALUES ({', '.join('?' * len(_AGENT_COLS))})"
        if conn is not None:
            conn.execute(sql, values)
            return
        with self.write() as c:
            c.execute(sql, values)

    def update_agent(self, agent_id: str, conn: sqlite3.Connection | None = None, **changes: Any) -> None:
        """Set columns of one agent; ``updated_at`` follows, ``status_at`` when status changes."""
        now = time.time()
        changes.setdefault("updated_at", now)
        if "status" in changes:
            changes.setdefault("status_at", now)
        for k in changes:
            if k not in _AGENT_COLS:
                raise KeyError(k)
        cols = ", ".join(f"{k} = ?" for k in changes)
        vals = [dumps(v) if k in AGENT_JSON_FIELDS else v for k, v in changes.items()]
        sql = f"UPDATE agents SET {cols} WHERE id = ?"
        if conn is not None:
            conn.execute(sql, [*vals, agent_id])
            return
        with self.write() as c:
            c.execute(sql, [*vals, agent_id])

    def bump_agent(self, agent_id: str, **deltas: int) -> None:
        """Add to counters (turns, tool_calls, tokens) atomically."""
        cols = ", ".join(f"{k} = {k} + ?" for k in deltas)
        with self.write() as c:
            c.execute(f"UPDATE agents SET {cols} WHERE id = ?", [*deltas.values(), agent_id])

    def delete_agent(self, agent_id: str) -> None:
        with self.write() as c:
            c.execute("DELETE FROM agents WHERE id = ?", (agent_id,))

    # -- messages and events -------------------------------------------------------------
    @staticmethod
    def _message(row: sqlite3.Row) -> Message:
        kw = {k: row[k] for k in _MSG_COLS}
        kw["data"] = json.loads(kw["data"] or "{}")
        return Message(**kw)

    def post(
        self,
        kind: str,
        sender: str,
        recipient: str,
        body: str,
        *,
        data: dict[str, Any] | None = None,
        reply_to: int | None = None,
        state: str | None = None,
    ) -> int:
        """Store a message durably, then ring the recipient's doorbell; return its id."""
        with self.write() as c:
            cur = c.execute(
                "INSERT INTO messages (kind, sender, recipient, body, data, created_at, reply_to, state)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (kind, sender, recipient, body, dumps(data or {}), time.time(), reply_to, state),
            )
            msg_id = int(cur.lastrowid or 0)
        self.bell.ring(recipient)
        return msg_id

    def message(self, msg_id: int) -> Message | None:
        rows = self.query("SELECT * FROM messages WHERE id = ?", (msg_id,))
        return self._message(rows[0]) if rows else None

    def messages(
        self,
        *,
        recipient: str | None = None,
        sender: str | None = None,
        kinds: Sequence[str] | None = None,
        unconsumed: bool = False,
        undelivered: bool = False,
        reply_to: int | None = None,
        limit: int | None = None,
    ) -> list[Message]:
        where: list[str] = []
        args: list[Any] = []
        if recipient is not None:
            where.append("recipient = ?")
            args.append(recipient)
        if sender is not None:
            where.append("sender = ?")
            args.append(sender)
        if kinds:
            where.append(f"kind IN ({', '.join('?' * len(kinds))})")
            args.extend(kinds)
        if unconsumed:
            where.append("consumed_at IS NULL")
        if undelivered:
            where.append("delivered_at IS NULL")
        if reply_to is not None:
            where.append("reply_to = ?")
            args.append(reply_to)
        sql = "SELECT * FROM messages"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [self._message(r) for r in self.query(sql, args)]

    def mark_messages(self, ids: Iterable[int], **changes: Any) -> int:
        """Set delivered_at / consumed_at / state on messages; return how many changed."""
        ids = list(ids)
        if not ids:
            return 0
        cols = ", ".join(f"{k} = ?" for k in changes)
        with self.write() as c:
            cur = c.execute(
                f"UPDATE messages SET {cols} WHERE id IN ({', '.join('?' * len(ids))})",
                [*changes.values(), *ids],
            )
            return cur.rowcount

    def consume(self, ids: Iterable[int]) -> list[int]:
        """Mark unconsumed messages consumed; return the ids this call consumed (no double pops)."""
        ids = list(ids)
        if not ids:
            return []
        now = time.time()
        taken: list[int] = []
        with self.write() as c:
            for i in ids:
                cur = c.execute("UPDATE messages SET consumed_at = ? WHERE id = ? AND consumed_at IS NULL", (now, i))
                if cur.rowcount:
                    taken.append(i)
        return taken

    def event(self, kind: str, agent: str | None, data: dict[str, Any] | None = None) -> int:
        with self.write() as c:
            cur = c.execute(
                "INSERT INTO events (kind, agent, data, created_at) VALUES (?, ?, ?, ?)",
                (kind, agent, dumps(data or {}), time.time()),
            )
            return int(cur.lastrowid or 0)

    def events(self, agent: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        sql = "SELECT * FROM events"
        args: list[Any] = []
        if agent is not None:
            sql += " WHERE agent = ?"
            args.append(agent)
        sql += f" ORDER BY id DESC LIMIT {int(limit)}"
        return [
            {"id": r["id"], "kind": r["kind"], "agent": r["agent"], "data": json.loads(r["data"]),
             "created_at": r["created_at"]}
            for r in self.query(sql, args)
        ]

    # -- pull requests ---------------------------------------------------------------------
    @staticmethod
    def _pr(row: sqlite3.Row) -> PullRequest:
        kw = {k: row[k] for k in _PR_COLS}
        kw["data"] = json.loads(kw["data"] or "{}")
        kw["draft"] = bool(kw["draft"])
        return PullRequest(**kw)

    def insert_pr(self, **values: Any) -> int:
        now = time.time()
        values.setdefault("created_at", now)
        values.setdefault("updated_at", now)
        if "data" in values:
            values["data"] = dumps(values["data"])
        cols = list(values)
        with self.write() as c:
            cur = c.execute(
                f"INSERT INTO prs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                [values[k] for k in cols],
            )
            return int(cur.lastrowid or 0)

    def update_pr(self, number: int, **changes: Any) -> None:
        changes.setdefault("updated_at", time.time())
        if "data" in changes:
            changes["data"] = dumps(changes["data"])
        cols = ", ".join(f"{k} = ?" for k in changes)
        with self.write() as c:
            c.execute(f"UPDATE prs SET {cols} WHERE number = ?", [*changes.values(), number])

    def pr(self, number: int) -> PullRequest | None:
        rows = self.query("SELECT * FROM prs WHERE number = ?", (number,))
        return self._pr(rows[0]) if rows else None

    def prs(self, *, head: str | None = None, state: str | None = None) -> list[PullRequest]:
        where, args = [], []
        if head is not None:
            where.append("head = ?")
            args.append(head)
        if state is not None:
            where.append("state = ?")
            args.append(state)
        sql = "SELECT * FROM prs" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY number"
        return [self._pr(r) for r in self.query(sql, args)]

    # -- small key/value --------------------------------------------------------------------
    def kv_get(self, key: str) -> str | None:
        rows = self.query("SELECT value FROM kv WHERE key = ?", (key,))
        return rows[0]["value"] if rows else None

    def kv_set(self, key: str, value: str) -> None:
        with self.write() as c:
            c.execute("INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                      (key, value))
