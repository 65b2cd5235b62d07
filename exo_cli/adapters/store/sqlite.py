"""The state store: one SQLite database (WAL) plus doorbell sockets for wake-ups.

Many exo processes (twenty agents' hooks, MCP servers, the human's shell) share one
database. Writes are short ``BEGIN IMMEDIATE`` transactions with a long busy timeout
and a bounded retry, so no write is lost and nobody sees "database is locked".

Wake-ups never poll the database in a loop: a waiter binds a Unix datagram socket in
the short runtime folder (``bell/<key>.<pid>.<n>``) and a writer sends one byte to every
socket of that key after its commit. The waiter re-reads the database when woken,
with a slow timed fallback in case a ring is missed.

``SqliteStore`` implements ``base.Store``, the interface operations use: each named
method is one short transaction (or one read), so no operation holds a connection or
writes SQL. ``write`` and ``query`` stay for the methods here and for tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from _thread import RLock as _RLock
from _thread import _local as _thread_local  # threading's classes, without importing threading (hooks)
from functools import cached_property
from pathlib import Path

from exo_cli.adapters.store import DB_FILE, HOLD_SECONDS, MOVED_APP_ID, SCHEMA_VERSION, pointed_url
from exo_cli.adapters.store.usage import SqliteUsage
from exo_cli.errors import InvalidInput, StateError
from exo_cli.records import (
    AGENT_JSON_FIELDS,
    STARTING,
    TEAM_BELL,
    WAITING_PERMISSION,
    WORKING,
    Agent,
    AgentKey,
    Message,
    PullRequest,
    dumps,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
    from typing import Any

    from exo_cli.adapters.bell import Doorbell
    from exo_cli.adapters.store.base import Store
    from exo_cli.adapters.store.sqlmove import SqliteMoving
    from exo_cli.records import Usage
else:
    # mypy checks SqliteStore against the interface; at run time the Protocol classes
    # would only cost every hook ~1.4 ms to build.
    Store = object
    try:
        # The sqlite3 package is this C module plus datetime adapters exo never uses; importing
        # the package (and datetime) costs every hook about a tenth of Python's whole start.
        import _sqlite3 as sqlite3
    except ImportError:  # an interpreter without it
        import sqlite3

__all__ = ["SCHEMA_VERSION", "SqliteStore"]

_AGENT_COLS = Agent._fields
_AGENT_SELECT = f"SELECT {', '.join(_AGENT_COLS)} FROM agents"  # tuple rows in Agent's order: no Row lookups
_AGENT_JSON_AT = tuple((_AGENT_COLS.index(k), "[]" if k == "undo" else "{}") for k in AGENT_JSON_FIELDS)
_MSG_COLS = Message._fields
_PR_COLS = PullRequest._fields
_LOCK_RETRY_SECONDS = HOLD_SECONDS  # a writer's whole wait for the lock (a migrate's hold above all)
_KV_UPSERT = "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value"


def _is_locked(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc).lower() or "busy" in str(exc).lower()


class SqliteStore(SqliteUsage, Store):
    """SQLite-backed state: agents, messages, events, pull requests."""

    def __init__(self, path: Path, runtime_dir: Path | Callable[[], Path]) -> None:
        self.path = path
        self._runtime_dir = runtime_dir
        self._local = _thread_local()
        self._write_turn = _RLock()

    @cached_property
    def bell(self) -> Doorbell:
        from exo_cli.adapters.bell import Doorbell

        rd = self._runtime_dir
        return Doorbell(rd if isinstance(rd, Path) else rd())

    # -- connection and transactions -------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and not conn.in_transaction and self._file_id() != getattr(self._local, "file_id", None):
            # the database file was removed or replaced since (state lost, `exo doctor` rebuilt it): a
            # long-lived process (the team broker, an MCP server) opens the one every new exo process opens
            conn.close()
            conn = self._local.conn = None
        if conn is None:
            conn = self._open()
            self._local.conn = conn
            self._local.file_id = self._file_id()
        return conn

    def _file_id(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def _open(self) -> sqlite3.Connection:
        fresh = not self.path.exists()
        if fresh and self.path.name == DB_FILE:
            pointed = pointed_url(self.path.parent)
            if pointed:  # the state moved to PostgreSQL: never start a second one here
                from exo_cli.adapters.store.moving import moved_error

                raise moved_error(pointed)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            busy = min(30.0, _LOCK_RETRY_SECONDS)  # one wait of SQLite's busy handler, within the whole bound
            conn = sqlite3.connect(self.path, timeout=busy, isolation_level=None, check_same_thread=False)
            if fresh:
                with contextlib.suppress(OSError):
                    os.chmod(self.path, 0o600)
            conn.execute(f"PRAGMA busy_timeout = {int(busy * 1000)}")
            self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL"))
            conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate(conn)
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and _is_locked(exc):
                raise
            from exo_cli.adapters.store.full import raise_if_full  # only then: hooks stay light
            raise_if_full(self.path, exc)  # a full disk is no broken database: never "move it aside"
            raise StateError(
                f"exo's state database is unreadable: {self.path} ({exc})",
                hint=f"Move {self.path} aside (mv {self.path} {self.path}.broken) and run `exo doctor`: it rebuilds "
                "the records of the agents it finds (live windows on exo's tmux server, live headless agents, and "
                "worktrees named the way exo names them) and removes nothing that runs or holds work; messages, "
                "questions, PRs and tasks of the old records are not recovered.",
                path=str(self.path),
            ) from exc
        return conn

    def _retry(self, fn: Any) -> Any:
        deadline = time.monotonic() + _LOCK_RETRY_SECONDS
        delay = 0.005
        while True:
            try:
                return fn()
            except UnicodeEncodeError as exc:  # a value with lone surrogates (bytes that were not UTF-8)
                raise InvalidInput(f"Invalid value {exc.object[:80]!r}: it is not valid UTF-8 text") from exc
            except sqlite3.OperationalError as exc:
                if not _is_locked(exc):
                    from exo_cli.adapters.store.full import raise_if_full  # only then: hooks stay light
                    raise_if_full(self.path, exc)
                    raise
                if time.monotonic() > deadline:
                    raise self._locked_error() from exc
                # jitter from the clock: `random` costs ~2 ms to import on every hook
                time.sleep(delay * (1 + (time.perf_counter_ns() % 1000) / 1000))
                delay = min(delay * 2, 0.2)

    def _locked_error(self) -> StateError:
        """A writer that waited ``HOLD_SECONDS`` for the lock: who holds it, when a migrate says so."""
        from exo_cli.adapters.store.moving import held_error
        from exo_cli.adapters.store.sqlmove import held_note

        try:
            holder: str | None = held_note(self.path).read_text().strip() or None
        except OSError:
            holder = None
        return held_error(holder, _LOCK_RETRY_SECONDS)

    def refuse_if_moved(self, conn: sqlite3.Connection) -> None:
        """StateError naming the new location when this database's state moved away (`exo store migrate`)."""
        if conn.execute("PRAGMA application_id").fetchone()[0] == MOVED_APP_ID:
            from exo_cli.adapters.store.moving import moved_error
            from exo_cli.adapters.store.sqlmove import marker

            raise moved_error(marker(conn) or "another store")

    def patience(self, seconds: float | None) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # a file: nothing to reconnect to

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise StateError(
                f"exo's state database {self.path} has schema {version}, newer than this exo ({SCHEMA_VERSION})",
                hint="Upgrade exo.",
            )
        from exo_cli.adapters.store.sqlschema import bring_up_to_date

        self._retry(lambda: bring_up_to_date(conn))

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A short write transaction (BEGIN IMMEDIATE), retried while another writer holds the lock.

        For this class's methods and tests only: not part of ``Store``, so operations
        never hold a connection.

        The threads of one process (a spawn's tasks) take turns on a lock first: SQLite's own
        busy handler would make a thread that finds the database locked sleep 1, 2, 5, 10 ms
        and more, while the lock hands over the moment the other thread commits. Other
        processes still wait through the busy handler.
        """
        with self._write_turn:
            conn = self._conn()
            if getattr(self._local, "held", None) is conn:  # this thread holds the state: its transaction
                yield conn
                return
            self._retry(lambda: conn.execute("BEGIN IMMEDIATE"))
            try:
                self.refuse_if_moved(conn)  # a process that outlived a migrate never writes the old file
                yield conn
                self._retry(lambda: conn.execute("COMMIT"))
            except UnicodeEncodeError as exc:  # nothing half-written: the transaction is rolled back
                conn.execute("ROLLBACK")
                raise InvalidInput(f"Invalid value {exc.object[:80]!r}: it is not valid UTF-8 text") from exc
            except BaseException as exc:
                if conn.in_transaction:  # a full disk may have rolled it back (or the COMMIT failed: not yet)
                    conn.execute("ROLLBACK")
                from exo_cli.adapters.store.full import raise_if_full  # only then: hooks stay light
                raise_if_full(self.path, exc)
                raise

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Rows of one read (for this class's methods and tests; not part of ``Store``)."""
        conn = self._conn()
        conn.row_factory = sqlite3.Row
        try:
            return list(self._retry(lambda: conn.execute(sql, args).fetchall()))
        finally:
            conn.row_factory = None

    def exists(self) -> bool:
        """True when the database file exists (creates nothing)."""
        return self.path.exists()

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- agents ------------------------------------------------------------------------
    @staticmethod
    def _agent(row: Sequence[Any]) -> Agent:
        """An agent from a row of ``_AGENT_SELECT`` (columns in ``Agent``'s order)."""
        values = list(row)
        for i, empty in _AGENT_JSON_AT:
            values[i] = json.loads(values[i] or empty)
        return Agent._make(values)

    def _agents(self, where: str, args: Sequence[Any] = ()) -> list[Agent]:
        conn = self._conn()
        rows = self._retry(lambda: conn.execute(f"{_AGENT_SELECT} {where}", args).fetchall())
        return [self._agent(r) for r in rows]

    def agent(self, agent_id: str) -> Agent | None:
        found = self._agents("WHERE id = ?", (agent_id,))
        return found[0] if found else None

    def agents(self) -> list[Agent]:
        return self._agents("ORDER BY created_at, id")

    def agent_keys(self, *, pids: Sequence[int] | None = None, ids: Sequence[str] | None = None) -> list[AgentKey]:
        where = ""
        args: list[Any] = []
        if pids is not None:
            if not pids:
                return []
            marks = ", ".join("?" * len(pids))
            where = f"WHERE json_extract(location, '$.pid') IN ({marks}) OR json_extract(location, '$.pgid') IN ({marks})"
            args = [*pids, *pids]
        elif ids is not None:
            if not ids:
                return []
            where, args = f"WHERE id IN ({', '.join('?' * len(ids))})", list(ids)
        # SQLite reads the two numbers out of each location (its JSON functions are built in
        # since 3.38, and in most builds before); reading whole records in Python cost more.
        conn = self._conn()
        try:
            rows = self._retry(lambda: conn.execute(
                "SELECT id, role, status, worktree, json_extract(location, '$.pid'), json_extract(location, '$.pgid')"
                f" FROM agents {where} ORDER BY created_at, id", args).fetchall())
        except sqlite3.OperationalError as exc:
            if "json" not in str(exc).lower():
                raise
            keys = [AgentKey(a.id, a.role, a.status, a.worktree, a.location.get("pid"), a.location.get("pgid"))
                    for a in self.agents()]
            if pids is not None:
                return [k for k in keys if k.pid in pids or k.pgid in pids]
            return [k for k in keys if ids is None or k.id in ids]
        return [AgentKey(*row) for row in rows]

    def insert_agent(self, agent: Agent) -> None:
        values = [getattr(agent, c) for c in _AGENT_COLS]
        values = [dumps(v) if c in AGENT_JSON_FIELDS else v for c, v in zip(_AGENT_COLS, values, strict=True)]
        with self.write() as c:
            c.execute(f"INSERT INTO agents ({', '.join(_AGENT_COLS)}) VALUES ({', '.join('?' * len(_AGENT_COLS))})",
                      values)
        self.bell.ring(TEAM_BELL)

    @staticmethod
    def _set_agent(c: sqlite3.Connection, agent_id: str, changes: Mapping[str, Any], if_status: str | None) -> bool:
        """The UPDATE of ``update_agent`` inside the caller's transaction."""
        changes = dict(changes)
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
        args = [*vals, agent_id]
        if if_status is not None:
            sql += " AND status = ?"
            args.append(if_status)
        return c.execute(sql, args).rowcount > 0

    def update_agent(self, agent_id: str, *, if_status: str | None = None, **changes: Any) -> bool:
        """Set columns of one agent; ``updated_at`` follows, ``status_at`` when status changes."""
        with self.write() as c:
            changed = self._set_agent(c, agent_id, changes, if_status)
        if changed:
            self.bell.ring(TEAM_BELL)
        return changed

    def bump_agent(self, agent_id: str, **deltas: int) -> None:
        """Add to counters (turns, tool_calls, tokens) atomically."""
        for k in deltas:
            if k not in _AGENT_COLS:
                raise KeyError(k)
        cols = ", ".join(f"{k} = {k} + ?" for k in deltas)
        with self.write() as c:
            c.execute(f"UPDATE agents SET {cols} WHERE id = ?", [*deltas.values(), agent_id])

    def record_tool_call(self, agent_id: str) -> None:
        with self.write() as c:
            c.execute(
                "UPDATE agents SET tool_calls = tool_calls + 1,"
                " status = CASE WHEN status = ? THEN ? ELSE status END WHERE id = ?",
                (WAITING_PERMISSION, WORKING, agent_id),
            )

    def record_turn(self, agent_id: str, changes: Mapping[str, Any], *, turns: int, tokens: int,
                    kv: tuple[str, str], turn: int = 0, usage: Sequence[Usage] = ()) -> None:
        with self.write() as c:
            self._set_agent(c, agent_id, changes, None)
            c.execute("UPDATE agents SET turns = turns + ?, tokens = tokens + ? WHERE id = ?",
                      (turns, tokens, agent_id))
            c.execute(_KV_UPSERT, kv)
            self._insert_usage(c, agent_id, turn, usage)
        self.bell.ring(TEAM_BELL)

    def delete_agent(self, agent_id: str) -> None:
        with self.write() as c:
            c.execute("DELETE FROM agents WHERE id = ?", (agent_id,))
            c.execute("DELETE FROM usage WHERE agent = ?", (agent_id,))
        self.bell.ring(TEAM_BELL)

    def retire_agent(self, agent_id: str, new_id: str, *, forget_keys: Sequence[str] = (),
                     forget_prefixes: Sequence[str] = (), created_at: float | None = None) -> bool:
        with self.write() as c:
            if c.execute("SELECT 1 FROM agents WHERE id = ?", (new_id,)).fetchone():
                return False
            if c.execute("UPDATE agents SET id = ? WHERE id = ? AND (? IS NULL OR created_at = ?)",
                         (new_id, agent_id, created_at, created_at)).rowcount == 0:
                return False
            c.execute("UPDATE agents SET parent = ? WHERE parent = ?", (new_id, agent_id))
            c.execute("UPDATE messages SET sender = ? WHERE sender = ?", (new_id, agent_id))
            c.execute("UPDATE messages SET recipient = ? WHERE recipient = ?", (new_id, agent_id))
            c.execute("UPDATE events SET agent = ? WHERE agent = ?", (new_id, agent_id))
            c.execute("UPDATE prs SET author = ? WHERE author = ?", (new_id, agent_id))
            c.execute("UPDATE usage SET agent = ? WHERE agent = ?", (new_id, agent_id))
            for key in forget_keys:
                c.execute("DELETE FROM kv WHERE key = ?", (key,))
            for prefix in forget_prefixes:
                c.execute("DELETE FROM kv WHERE substr(key, 1, ?) = ?", (len(prefix), prefix))
            return True

    def pending_agent_ids(self) -> list[str]:
        rows = self.query("SELECT id FROM agents WHERE status = ? AND spec LIKE '%\"pending\"%' ORDER BY created_at, id",
                          (STARTING,))
        return [r["id"] for r in rows]

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
        self.bell.ring(TEAM_BELL)
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

    def last_message_by_sender(self) -> dict[str, str]:
        rows = self.query(
            "SELECT sender, body FROM messages WHERE id IN (SELECT MAX(id) FROM messages"
            " WHERE json_extract(data, '$.notice') IS NOT 1 GROUP BY sender)"
        )
        return {r["sender"]: r["body"] for r in rows}

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

    def consume(self, ids: Iterable[int], *, delivered: bool = False) -> list[int]:
        """Mark unconsumed messages consumed; return the ids this call consumed (no double pops)."""
        ids = list(ids)
        if not ids:
            return []
        also = ", delivered_at = COALESCE(delivered_at, :now)" if delivered else ""
        return self._take(f"UPDATE messages SET consumed_at = :now{also} WHERE id = :id AND consumed_at IS NULL", ids)

    def claim_pending(self, recipient: str) -> list[Message]:
        pending = self.messages(recipient=recipient, unconsumed=True, undelivered=True)
        if not pending:
            return []
        taken = set(self._take(
            "UPDATE messages SET delivered_at = :now, consumed_at = :now WHERE id = :id"
            " AND consumed_at IS NULL AND delivered_at IS NULL",
            [m.id for m in pending],
        ))
        return [m for m in pending if m.id in taken]

    def _take(self, sql: str, ids: list[int]) -> list[int]:
        """Run ``sql`` (parameters ``:now`` and ``:id``) per id in one write; the ids it changed."""
        now = time.time()
        taken: list[int] = []
        with self.write() as c:
            for i in ids:
                if c.execute(sql, {"now": now, "id": i}).rowcount:
                    taken.append(i)
        return taken

    def claim_delivery(self, msg_id: int) -> bool:
        with self.write() as c:
            cur = c.execute(
                "UPDATE messages SET delivered_at = ? WHERE id = ? AND delivered_at IS NULL AND consumed_at IS NULL",
                (time.time(), msg_id),
            )
            return cur.rowcount == 1

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
            c.execute(_KV_UPSERT, (key, value))

    def kv_claim(self, key: str, value: str) -> bool:
        with self.write() as c:
            cur = c.execute("INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT(key) DO NOTHING", (key, value))
            return cur.rowcount == 1

    def named_lock(self, name: str, *, host: str, wait: float | None) -> contextlib.AbstractContextManager[bool]:
        from exo_cli.adapters.store.baselock import sqlite_lock

        return sqlite_lock(self, name, host=host, wait=wait)

    # -- moving the state between stores (`exo store migrate`: sqlmove.py, loaded only then) ----------
    def _moving(self) -> SqliteMoving:
        from exo_cli.adapters.store.sqlmove import SqliteMoving

        return SqliteMoving(self)

    def counts(self) -> dict[str, int]:
        return self._moving().counts()

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        return self._moving().dump()

    def hold(self, holder: str) -> contextlib.AbstractContextManager[None]:
        return self._moving().hold(holder)

    def mark_moved(self, location: str) -> None:
        self._moving().mark_moved(location)

    def moved_to(self) -> str | None:
        return self._moving().moved_to()

    def set_aside(self) -> str | None:
        return self._moving().set_aside()

    def forget(self) -> None:
        self._moving().forget()

    def load(self, rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        self._moving().load(rows)

    def settle(self) -> None:
        self._moving().settle()

    def discard(self) -> None:
        self._moving().discard()
