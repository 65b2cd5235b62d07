"""The state store on PostgreSQL (psycopg 3), with wake-ups by LISTEN/NOTIFY.

Chosen by ``[store] url`` or ``EXO_STORE_URL`` (a ``postgresql://`` URL without a password:
libpq finds it in ``PGPASSWORD``, ``~/.pgpass`` or a service file). This is the only module
that imports psycopg, so the SQLite path never pays for it.

Several repositories share one database: exo's tables live in the PostgreSQL schema ``exo``
and every row carries the repository's identity (``repo``). The schema's version is the one
row of ``exo.version``; an older schema is migrated when first opened (under an advisory
lock), a newer one is refused. Writes are short READ COMMITTED transactions whose single
statements are atomic on their rows; a deadlock or serialization failure is retried inside.

Wake-ups: a waiter LISTENs (committed at once: its connection is in autocommit) on one
channel per (repository, key) before it reads the tables, then waits; ``post`` sends its
NOTIFY in the transaction that stores the message, so the waiter wakes when it commits, on
any machine. A spare notification only makes the waiter read again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import errors as pgerrors
from psycopg.rows import dict_row

from exo_cli.adapters.store import SCHEMA_VERSION, TABLES
from exo_cli.adapters.store.pgschema import MIGRATIONS
from exo_cli.errors import EnvironmentError_, InvalidInput, StateError
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

if TYPE_CHECKING:
    from exo_cli.adapters.store.base import Store
else:
    Store = object

T = TypeVar("T")

_AGENT_COLS = Agent._fields
_PR_COLS = PullRequest._fields
_RETRY_SECONDS = 60.0
_LOCK_KEY = 0x65786F  # the advisory lock that serializes schema migrations ("exo")

# The agent record's field ``repo`` (a path) is the column ``repo_path``: ``repo`` keys the rows.
_AGENT_SQL_COLS = tuple("repo_path" if c == "repo" else c for c in _AGENT_COLS)
_RETRYABLE = (pgerrors.SerializationFailure, pgerrors.DeadlockDetected)
# A number in an agent's location (JSON text), as SQLite's json_extract gives it; NULL otherwise.
_JSON_INT = ("CASE WHEN jsonb_typeof(location::jsonb -> '{key}') = 'number'"
             " THEN (location::jsonb ->> '{key}')::numeric::bigint END")


# -- rows to records --------------------------------------------------------------------
def agent_changes(changes: Any) -> dict[str, Any]:
    """The columns ``update_agent`` sets: ``updated_at`` follows, ``status_at`` with a status; KeyError on
    an unknown column; JSON fields encoded."""
    out = dict(changes)
    now = time.time()
    out.setdefault("updated_at", now)
    if "status" in out:
        out.setdefault("status_at", now)
    for k in out:
        if k not in Agent._fields:
            raise KeyError(k)
    return {k: dumps(v) if k in AGENT_JSON_FIELDS else v for k, v in out.items()}


def agent_from_row(row: Any) -> Agent:
    kw = {k: row[k] for k in Agent._fields}
    for k in AGENT_JSON_FIELDS:
        kw[k] = json.loads(kw[k] or ("[]" if k == "undo" else "{}"))
    return Agent(**kw)


def message_from_row(row: Any) -> Message:
    kw = {k: row[k] for k in Message._fields}
    kw["data"] = json.loads(kw["data"] or "{}")
    return Message(**kw)


def pr_from_row(row: Any) -> PullRequest:
    kw = {k: row[k] for k in PullRequest._fields}
    kw["data"] = json.loads(kw["data"] or "{}")
    kw["draft"] = bool(kw["draft"])
    return PullRequest(**kw)


def check_url(url: str) -> dict[str, str]:
    """The connection parameters of ``url``; InvalidInput when it is malformed or carries a password."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
    except psycopg.ProgrammingError as exc:
        raise InvalidInput(f"The store URL is not a valid PostgreSQL connection string: {exc}",
                           hint="Use postgresql://USER@HOST[:PORT]/DBNAME (or host=/path/to/socket).") from exc
    if params.get("password"):
        raise InvalidInput(
            "The store URL carries a password; exo keeps passwords out of URLs, files and command lines",
            hint="Remove the password from the URL and give it to libpq instead: PGPASSWORD, ~/.pgpass "
            "or a service file (PGSERVICE).",
        )
    return params


def channel(repo: str, key: str) -> str:
    """The LISTEN/NOTIFY channel of one wake-up key of one repository (a plain identifier)."""
    return "exo_" + hashlib.sha1(f"{repo}\0{key}".encode()).hexdigest()[:40]


class PgWaiter:
    """A connection LISTENing on some channels."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def wait(self, timeout: float | None) -> bool:
        rung = False
        try:
            for _ in self.conn.notifies(timeout=timeout, stop_after=1):
                rung = True
            if rung:
                for _ in self.conn.notifies(timeout=0):
                    pass
        except psycopg.OperationalError as exc:
            raise _unreachable(self.conn.info.dsn, exc) from exc
        return rung


class PgBell:
    """Wake-ups by LISTEN/NOTIFY on one channel per (repository, key)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self._local = threading.local()  # one listening connection per thread, kept between waits

    def ring(self, key: str) -> int:
        """NOTIFY the key's channel (PostgreSQL does not say how many listen: 1 when sent)."""
        self.store._run(lambda c: c.execute("SELECT pg_notify(%s, '')", (channel(self.store.repo, key),)))
        return 1

    @contextlib.contextmanager
    def listen(self, keys: Iterable[str]) -> Iterator[PgWaiter]:
        """LISTEN on a connection of its own in autocommit, so the LISTEN is committed on return.

        The connection is kept for the thread's next ``listen`` (UNLISTEN and drained on exit), so a
        loop of waits does not pay a connection each time; it is closed when anything fails.
        """
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        self._local.conn = None  # a nested listen gets a connection of its own
        if conn is None or conn.closed:
            conn = self.store._connect()
        ok = False
        try:
            for key in keys:
                conn.execute(f"LISTEN {channel(self.store.repo, key)}")
            yield PgWaiter(conn)
            conn.execute("UNLISTEN *")
            for _ in conn.notifies(timeout=0):
                pass
            ok = True
        finally:
            if ok and getattr(self._local, "conn", None) is None:
                self._local.conn = conn
            else:
                conn.close()


def _not_utf8(exc: UnicodeEncodeError) -> InvalidInput:
    return InvalidInput(f"Invalid value {exc.object[:80]!r}: it is not valid UTF-8 text")


def _unreachable(url: str, exc: Exception) -> EnvironmentError_:
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return EnvironmentError_(
        f"Cannot use exo's PostgreSQL store ({url}): {detail}",
        hint="Check that the server runs and the URL (host, port, database, user) is right; exo reads the "
        "password from libpq's sources only (PGPASSWORD, ~/.pgpass, a service file). Set [store] url or "
        "EXO_STORE_URL to change the store.",
        url=url, store="postgresql",
    )


class PostgresStore(Store):
    """PostgreSQL-backed state of one repository (rows keyed by ``repo``)."""

    def __init__(self, url: str, repo: str) -> None:
        check_url(url)
        self.url = url
        self.repo = repo
        self._local = threading.local()
        self._ready = False

    @cached_property
    def bell(self) -> PgBell:
        return PgBell(self)

    # -- connections ---------------------------------------------------------------------
    def _connect(self) -> psycopg.Connection[Any]:
        """A new autocommit connection (an EnvironmentError when the server cannot be used)."""
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=10, application_name="exo")
        except psycopg.Error as exc:
            raise _unreachable(self.url, exc) from exc

    def _conn(self, create: bool = True) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is not None and conn.closed:
            conn = None
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        if not self._ready and create:
            self._prepare(conn)
            self._ready = True
        return conn

    def _version(self, conn: psycopg.Connection[Any]) -> int | None:
        """The schema version in the database (None: no exo schema); StateError when it is newer or foreign."""
        row = conn.execute("SELECT to_regclass('exo.version') IS NOT NULL, to_regnamespace('exo') IS NOT NULL"
                           ).fetchone()
        assert row is not None
        has_table, has_schema = row
        if not has_table:
            if has_schema and conn.execute(
                    "SELECT count(*) FROM pg_class WHERE relnamespace = 'exo'::regnamespace").fetchone() != (0,):
                raise StateError("The database has a schema named exo that is not exo's state (no exo.version)",
                                 hint="Point [store] url / EXO_STORE_URL at another database, or drop that schema.",
                                 url=self.url)
            return None
        got = conn.execute("SELECT max(version) FROM exo.version").fetchone()
        version = int(got[0]) if got and got[0] is not None else 0
        if version > SCHEMA_VERSION:
            raise StateError(
                f"exo's state in {self.url} has schema {version}, newer than this exo ({SCHEMA_VERSION})",
                hint="Upgrade exo.", url=self.url)
        return version

    def _prepare(self, conn: psycopg.Connection[Any]) -> None:
        """Migrate the schema when it is older, and register this repository."""
        if self._version(conn) != SCHEMA_VERSION:
            def migrate(c: psycopg.Connection[Any]) -> None:
                c.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                c.execute("CREATE SCHEMA IF NOT EXISTS exo")
                current = self._version(c) or 0
                for v in range(current + 1, SCHEMA_VERSION + 1):
                    for stmt in MIGRATIONS[v]:
                        c.execute(stmt)
                c.execute("DELETE FROM exo.version")
                c.execute("INSERT INTO exo.version (version) VALUES (%s)", (SCHEMA_VERSION,))
            self._tx(migrate, conn)
        if conn.execute("SELECT 1 FROM exo.repos WHERE id = %s", (self.repo,)).fetchone() is None:
            conn.execute("INSERT INTO exo.repos (id, created_at) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                         (self.repo, time.time()))

    def exists(self) -> bool:
        """True when this repository has state in the database (creates nothing; once true, not asked again)."""
        if self._ready:
            return True  # this process prepared (or found) the state: it stays until set aside
        try:
            conn = self._conn(create=False)
            version = self._version(conn)
            if version is None:
                return False
            found = conn.execute("SELECT 1 FROM exo.repos WHERE id = %s", (self.repo,)).fetchone() is not None
            self._ready = found and version == SCHEMA_VERSION
            return found
        except psycopg.Error as exc:
            raise _unreachable(self.url, exc) from exc

    def _tx(self, fn: Callable[[psycopg.Connection[Any]], T], conn: psycopg.Connection[Any] | None = None) -> T:
        """Run ``fn`` in one transaction; deadlocks and serialization failures are retried."""
        conn = conn or self._conn()
        deadline = time.monotonic() + _RETRY_SECONDS
        delay = 0.005
        while True:
            try:
                with conn.transaction():
                    result = fn(conn)
                    conn.execute("SELECT pg_notify(%s, '')", (channel(self.repo, TEAM_BELL),))  # the board's doorbell
                    return result
            except _RETRYABLE:
                if time.monotonic() > deadline:
                    raise
                time.sleep(delay * (1 + (time.perf_counter_ns() % 1000) / 1000))
                delay = min(delay * 2, 0.2)
            except psycopg.OperationalError as exc:
                self.close()
                raise _unreachable(self.url, exc) from exc
            except pgerrors.InsufficientPrivilege as exc:
                raise _unreachable(self.url, exc) from exc
            except UnicodeEncodeError as exc:  # nothing half-written: the transaction rolled back
                raise _not_utf8(exc) from exc

    def _run(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """One statement outside a transaction block (autocommit)."""
        conn = self._conn()
        try:
            return fn(conn)
        except psycopg.OperationalError as exc:
            self.close()
            raise _unreachable(self.url, exc) from exc
        except pgerrors.InsufficientPrivilege as exc:
            raise _unreachable(self.url, exc) from exc
        except UnicodeEncodeError as exc:
            raise _not_utf8(exc) from exc

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows of one read, as dicts (for this class and tests; not part of ``Store``)."""
        def read(c: psycopg.Connection[Any]) -> list[dict[str, Any]]:
            with c.cursor(row_factory=dict_row) as cur:
                cur.execute(sql, args)
                return cur.fetchall()
        return self._run(read)

    def _exec(self, sql: str, args: Sequence[Any] = ()) -> int:
        """One write statement in its own transaction; its rowcount."""
        return self._tx(lambda c: c.execute(sql, args).rowcount)

    def close(self) -> None:
        for holder in (self._local, self.bell._local) if "bell" in self.__dict__ else (self._local,):
            conn = getattr(holder, "conn", None)
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
                holder.conn = None

    # -- agents ------------------------------------------------------------------------
    @staticmethod
    def _agent(row: Mapping[str, Any]) -> Agent:
        return agent_from_row({**row, "repo": row["repo_path"]})

    def agent(self, agent_id: str) -> Agent | None:
        rows = self.query("SELECT * FROM exo.agents WHERE repo = %s AND id = %s", (self.repo, agent_id))
        return self._agent(rows[0]) if rows else None

    def agents(self) -> list[Agent]:
        return [self._agent(r) for r in
                self.query("SELECT * FROM exo.agents WHERE repo = %s ORDER BY created_at, id", (self.repo,))]

    def agent_keys(self, *, pids: Sequence[int] | None = None, ids: Sequence[str] | None = None) -> list[AgentKey]:
        where = "repo = %s"
        args: list[Any] = [self.repo]
        if pids is not None:
            if not pids:
                return []
            where += " AND (pid = ANY(%s) OR pgid = ANY(%s))"
            args += [list(pids), list(pids)]
        elif ids is not None:
            if not ids:
                return []
            where += " AND id = ANY(%s)"
            args.append(list(ids))
        rows = self.query(
            "SELECT id, role, status, worktree, pid, pgid FROM (SELECT repo, id, role, status, worktree, created_at,"
            f" {_JSON_INT.format(key='pid')} AS pid, {_JSON_INT.format(key='pgid')} AS pgid FROM exo.agents) a"
            f" WHERE {where} ORDER BY created_at, id", args)
        return [AgentKey(r["id"], r["role"], r["status"], r["worktree"], r["pid"], r["pgid"]) for r in rows]

    def insert_agent(self, agent: Agent) -> None:
        values = [dumps(v) if c in AGENT_JSON_FIELDS else v for c, v in zip(_AGENT_COLS, agent, strict=True)]
        self._exec(f"INSERT INTO exo.agents (repo, {', '.join(_AGENT_SQL_COLS)})"
                   f" VALUES (%s, {', '.join(['%s'] * len(_AGENT_COLS))})", [self.repo, *values])

    def _set_agent(self, c: psycopg.Connection[Any], agent_id: str, changes: Mapping[str, Any],
                   if_status: str | None) -> bool:
        changes = agent_changes(changes)
        cols = ", ".join(f"{'repo_path' if k == 'repo' else k} = %s" for k in changes)
        sql = f"UPDATE exo.agents SET {cols} WHERE repo = %s AND id = %s"
        args = [*changes.values(), self.repo, agent_id]
        if if_status is not None:
            sql += " AND status = %s"
            args.append(if_status)
        return c.execute(sql, args).rowcount > 0

    def update_agent(self, agent_id: str, *, if_status: str | None = None, **changes: Any) -> bool:
        return self._tx(lambda c: self._set_agent(c, agent_id, changes, if_status))

    def bump_agent(self, agent_id: str, **deltas: int) -> None:
        for k in deltas:
            if k not in _AGENT_COLS:
                raise KeyError(k)
        cols = ", ".join(f"{k} = {k} + %s" for k in deltas)
        self._exec(f"UPDATE exo.agents SET {cols} WHERE repo = %s AND id = %s", [*deltas.values(), self.repo, agent_id])

    def record_tool_call(self, agent_id: str) -> None:
        self._exec("UPDATE exo.agents SET tool_calls = tool_calls + 1,"
                   " status = CASE WHEN status = %s THEN %s ELSE status END WHERE repo = %s AND id = %s",
                   (WAITING_PERMISSION, WORKING, self.repo, agent_id))

    def record_turn(self, agent_id: str, changes: Mapping[str, Any], *, turns: int, tokens: int,
                    kv: tuple[str, str]) -> None:
        def turn(c: psycopg.Connection[Any]) -> None:
            self._set_agent(c, agent_id, changes, None)
            c.execute("UPDATE exo.agents SET turns = turns + %s, tokens = tokens + %s WHERE repo = %s AND id = %s",
                      (turns, tokens, self.repo, agent_id))
            c.execute(_KV_UPSERT, (self.repo, *kv))
        self._tx(turn)

    def delete_agent(self, agent_id: str) -> None:
        self._exec("DELETE FROM exo.agents WHERE repo = %s AND id = %s", (self.repo, agent_id))

    def retire_agent(self, agent_id: str, new_id: str, *, forget_keys: Sequence[str] = (),
                     forget_prefixes: Sequence[str] = ()) -> bool:
        def retire(c: psycopg.Connection[Any]) -> bool:
            r = self.repo
            if c.execute("SELECT 1 FROM exo.agents WHERE repo = %s AND id = %s", (r, new_id)).fetchone():
                return False
            if c.execute("UPDATE exo.agents SET id = %s WHERE repo = %s AND id = %s", (new_id, r, agent_id)).rowcount == 0:
                return False
            for table, col in (("agents", "parent"), ("messages", "sender"), ("messages", "recipient"),
                               ("events", "agent"), ("prs", "author")):
                c.execute(f"UPDATE exo.{table} SET {col} = %s WHERE repo = %s AND {col} = %s", (new_id, r, agent_id))
            if forget_keys:
                c.execute("DELETE FROM exo.kv WHERE repo = %s AND key = ANY(%s)", (r, list(forget_keys)))
            for prefix in forget_prefixes:
                c.execute("DELETE FROM exo.kv WHERE repo = %s AND left(key, %s) = %s", (r, len(prefix), prefix))
            return True
        return self._tx(retire)

    def pending_agent_ids(self) -> list[str]:
        rows = self.query("SELECT id FROM exo.agents WHERE repo = %s AND status = %s AND spec LIKE %s",
                          (self.repo, STARTING, '%"pending"%'))
        return [r["id"] for r in rows]

    # -- messages and events -------------------------------------------------------------
    def post(self, kind: str, sender: str, recipient: str, body: str, *, data: dict[str, Any] | None = None,
             reply_to: int | None = None, state: str | None = None) -> int:
        """Store a message and NOTIFY the recipient's channel in the same transaction."""
        def insert(c: psycopg.Connection[Any]) -> int:
            row = c.execute(
                "INSERT INTO exo.messages (repo, kind, sender, recipient, body, data, created_at, reply_to, state)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                (self.repo, kind, sender, recipient, body, dumps(data or {}), time.time(), reply_to, state),
            ).fetchone()
            c.execute("SELECT pg_notify(%s, '')", (channel(self.repo, recipient),))
            return int(row[0]) if row else 0
        return self._tx(insert)

    def message(self, msg_id: int) -> Message | None:
        rows = self.query("SELECT * FROM exo.messages WHERE repo = %s AND id = %s", (self.repo, msg_id))
        return message_from_row(rows[0]) if rows else None

    def messages(self, *, recipient: str | None = None, sender: str | None = None, kinds: Sequence[str] | None = None,
                 unconsumed: bool = False, undelivered: bool = False, reply_to: int | None = None,
                 limit: int | None = None) -> list[Message]:
        where = ["repo = %s"]
        args: list[Any] = [self.repo]
        for col, value in (("recipient", recipient), ("sender", sender), ("reply_to", reply_to)):
            if value is not None:
                where.append(f"{col} = %s")
                args.append(value)
        if kinds:
            where.append("kind = ANY(%s)")
            args.append(list(kinds))
        if unconsumed:
            where.append("consumed_at IS NULL")
        if undelivered:
            where.append("delivered_at IS NULL")
        sql = "SELECT * FROM exo.messages WHERE " + " AND ".join(where) + " ORDER BY id"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [message_from_row(r) for r in self.query(sql, args)]

    def last_message_by_sender(self) -> dict[str, str]:
        rows = self.query("SELECT DISTINCT ON (sender) sender, body FROM exo.messages WHERE repo = %s"
                          " AND (data::jsonb -> 'notice') IS DISTINCT FROM 'true'::jsonb"
                          " ORDER BY sender, id DESC", (self.repo,))
        return {r["sender"]: r["body"] for r in rows}

    def mark_messages(self, ids: Iterable[int], **changes: Any) -> int:
        ids = list(ids)
        if not ids:
            return 0
        cols = ", ".join(f"{k} = %s" for k in changes)
        return self._exec(f"UPDATE exo.messages SET {cols} WHERE repo = %s AND id = ANY(%s)",
                          [*changes.values(), self.repo, ids])

    def consume(self, ids: Iterable[int], *, delivered: bool = False) -> list[int]:
        also = ", delivered_at = COALESCE(delivered_at, %(now)s)" if delivered else ""
        return self._take(f"UPDATE exo.messages SET consumed_at = %(now)s{also}"
                          " WHERE repo = %(repo)s AND id = ANY(%(ids)s) AND consumed_at IS NULL RETURNING id", ids)

    def claim_pending(self, recipient: str) -> list[Message]:
        pending = self.messages(recipient=recipient, unconsumed=True, undelivered=True)
        if not pending:
            return []
        taken = set(self._take(
            "UPDATE exo.messages SET delivered_at = %(now)s, consumed_at = %(now)s WHERE repo = %(repo)s"
            " AND id = ANY(%(ids)s) AND consumed_at IS NULL AND delivered_at IS NULL RETURNING id",
            [m.id for m in pending]))
        return [m for m in pending if m.id in taken]

    def _take(self, sql: str, ids: Iterable[int]) -> list[int]:
        """Run an UPDATE ... RETURNING id over ``ids`` in one write; the ids it changed, in order."""
        order = list(ids)
        if not order:
            return []
        args = {"now": time.time(), "repo": self.repo, "ids": sorted(set(order))}
        got = self._tx(lambda c: {int(r[0]) for r in c.execute(sql, args).fetchall()})
        return [i for i in dict.fromkeys(order) if i in got]

    def claim_delivery(self, msg_id: int) -> bool:
        return self._exec("UPDATE exo.messages SET delivered_at = %s WHERE repo = %s AND id = %s"
                          " AND delivered_at IS NULL AND consumed_at IS NULL",
                          (time.time(), self.repo, msg_id)) == 1

    def event(self, kind: str, agent: str | None, data: dict[str, Any] | None = None) -> int:
        def insert(c: psycopg.Connection[Any]) -> int:
            row = c.execute("INSERT INTO exo.events (repo, kind, agent, data, created_at)"
                            " VALUES (%s, %s, %s, %s, %s) RETURNING id",
                            (self.repo, kind, agent, dumps(data or {}), time.time())).fetchone()
            return int(row[0]) if row else 0
        return self._tx(insert)

    def events(self, agent: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        sql = "SELECT id, kind, agent, data, created_at FROM exo.events WHERE repo = %s"
        args: list[Any] = [self.repo]
        if agent is not None:
            sql += " AND agent = %s"
            args.append(agent)
        sql += f" ORDER BY id DESC LIMIT {int(limit)}"
        return [{**r, "data": json.loads(r["data"])} for r in self.query(sql, args)]

    # -- pull requests ---------------------------------------------------------------------
    def insert_pr(self, **values: Any) -> int:
        now = time.time()
        values.setdefault("created_at", now)
        values.setdefault("updated_at", now)
        if "data" in values:
            values["data"] = dumps(values["data"])
        if "draft" in values:
            values["draft"] = int(bool(values["draft"]))
        for k in values:
            if k not in _PR_COLS:
                raise KeyError(k)

        def insert(c: psycopg.Connection[Any]) -> int:
            number = values.get("number")
            if number is None:
                row = c.execute("UPDATE exo.repos SET next_pr = next_pr + 1 WHERE id = %s RETURNING next_pr",
                                (self.repo,)).fetchone()
                number = int(row[0]) if row else 1
            else:
                c.execute("UPDATE exo.repos SET next_pr = GREATEST(next_pr, %s) WHERE id = %s", (number, self.repo))
            cols = [k for k in values if k != "number"]
            c.execute(f"INSERT INTO exo.prs (repo, number, {', '.join(cols)})"
                      f" VALUES (%s, %s, {', '.join(['%s'] * len(cols))})", [self.repo, number, *(values[k] for k in cols)])
            return int(number)
        return self._tx(insert)

    def update_pr(self, number: int, **changes: Any) -> None:
        changes.setdefault("updated_at", time.time())
        if "data" in changes:
            changes["data"] = dumps(changes["data"])
        if "draft" in changes:
            changes["draft"] = int(bool(changes["draft"]))
        cols = ", ".join(f"{k} = %s" for k in changes)
        self._exec(f"UPDATE exo.prs SET {cols} WHERE repo = %s AND number = %s", [*changes.values(), self.repo, number])

    def pr(self, number: int) -> PullRequest | None:
        rows = self.query("SELECT * FROM exo.prs WHERE repo = %s AND number = %s", (self.repo, number))
        return pr_from_row(rows[0]) if rows else None

    def prs(self, *, head: str | None = None, state: str | None = None) -> list[PullRequest]:
        where, args = ["repo = %s"], [self.repo]
        for col, value in (("head", head), ("state", state)):
            if value is not None:
                where.append(f"{col} = %s")
                args.append(value)
        return [pr_from_row(r) for r in
                self.query("SELECT * FROM exo.prs WHERE " + " AND ".join(where) + " ORDER BY number", args)]

    # -- small key/value --------------------------------------------------------------------
    def kv_get(self, key: str) -> str | None:
        rows = self.query("SELECT value FROM exo.kv WHERE repo = %s AND key = %s", (self.repo, key))
        return str(rows[0]["value"]) if rows else None

    def kv_set(self, key: str, value: str) -> None:
        self._exec(_KV_UPSERT, (self.repo, key, value))

    def kv_claim(self, key: str, value: str) -> bool:
        return self._exec("INSERT INTO exo.kv (repo, key, value) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                          (self.repo, key, value)) == 1

    # -- moving the state between stores ---------------------------------------------------
    def counts(self) -> dict[str, int]:
        return {t: int(self.query(f"SELECT count(*) AS n FROM exo.{t} WHERE repo = %s", (self.repo,))[0]["n"])
                for t in TABLES}

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        return {t: [_sqlite_names(t, r) for r in self.query(f"SELECT * FROM exo.{t} WHERE repo = %s", (self.repo,))]
                for t in TABLES}

    def load(self, rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        def insert(c: psycopg.Connection[Any]) -> None:
            for t in TABLES:
                if c.execute(f"SELECT 1 FROM exo.{t} WHERE repo = %s LIMIT 1", (self.repo,)).fetchone():
                    raise StateError(f"{self.url} already holds state for this repository (table {t})",
                                     hint="Use another database, or remove that state first.", url=self.url)
            for t in TABLES:
                for row in rows.get(t, ()):
                    cols = ["repo_path" if (t, k) == ("agents", "repo") else k for k in row]
                    c.execute(f"INSERT INTO exo.{t} (repo, {', '.join(cols)})"
                              f" VALUES (%s, {', '.join(['%s'] * len(cols))})", [self.repo, *row.values()])
            for t in ("messages", "events"):  # the shared sequences stay ahead of every id kept
                c.execute(f"SELECT setval(pg_get_serial_sequence('exo.{t}', 'id'), GREATEST("
                          f"(SELECT COALESCE(max(id), 1) FROM exo.{t}), (SELECT last_value FROM exo.{t}_id_seq)))")
            c.execute("UPDATE exo.repos SET next_pr = (SELECT COALESCE(max(number), 0) FROM exo.prs WHERE repo = %s)"
                      " WHERE id = %s", (self.repo, self.repo))
        self._tx(insert)

    def set_aside(self) -> str | None:
        """Delete this repository's rows (one transaction); nothing is kept here."""
        def delete(c: psycopg.Connection[Any]) -> None:
            for t in TABLES:
                c.execute(f"DELETE FROM exo.{t} WHERE repo = %s", (self.repo,))
            c.execute("DELETE FROM exo.repos WHERE id = %s", (self.repo,))
        self._tx(delete)
        self._ready = False
        return None


def _sqlite_names(table: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """A row as the SQLite table names its columns (no ``repo`` key; an agent's ``repo_path`` is ``repo``)."""
    out = {k: v for k, v in row.items() if k != "repo"}
    if table == "agents":
        out["repo"] = out.pop("repo_path")
    return out


_KV_UPSERT = ("INSERT INTO exo.kv (repo, key, value) VALUES (%s, %s, %s)"
              " ON CONFLICT (repo, key) DO UPDATE SET value = excluded.value")
