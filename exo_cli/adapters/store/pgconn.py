"""The PostgreSQL store's connections: transactions, reconnection, the migrate's hold, wake-ups.

``PgLink`` is what ``PostgresStore`` is built on: one connection per thread (autocommit; a
transaction is an explicit block), opened on first use, the schema migrated once per process.

A server that restarts, crashes, has no free connection slot ("too many clients") or is still
starting is waited for: the call reconnects with backoff until its deadline (the caller's own
timeout, ``patience``, else ``timeouts.store``: 30 s), then fails with an EnvironmentError that
names the server and what it said; it is never reported as a bug. A refused connection counts
as a restart only once this process has reached the server (a wrong URL fails at once). A
transaction whose connection broke before COMMIT rolled back and runs again; one that broke
during COMMIT is looked up by its transaction id (``txid_status``), so it is never applied
twice nor lost.

Every write transaction first takes the repository's hold lock shared
(``pg_advisory_xact_lock_shared``) and then reads the repository's moved marker: while
``exo store migrate`` holds the lock exclusively, writers wait (at most ``HOLD_SECONDS``, then a
StateError naming the migrate); once the state moved, they fail with a StateError naming
the new location. Reads are not refused (an operation that wrote is never failed by a read
after it; what it reads is the state as it was moved): ``exists`` and waiters' loops
(``moved_to``) are where a process that outlived a migrate learns of it.

Wake-ups: a waiter LISTENs (committed at once: autocommit) on one channel per (repository,
key) before it reads the tables, then waits; ``post`` sends its NOTIFY in the transaction that
stores the message, so the waiter wakes when it commits, on any machine. A waiter whose
connection broke listens again on a new one and wakes, so its caller reads the tables again
and misses nothing posted meanwhile.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cached_property
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pgerrors
from psycopg.rows import dict_row

from exo_cli import cancel
from exo_cli.adapters.store.moving import HOLD_SECONDS, held_error, moved_error
from exo_cli.adapters.store.pgschema import MIGRATIONS, PG_SCHEMA_VERSION
from exo_cli.errors import EnvironmentError_, InvalidInput, StateError
from exo_cli.records import TEAM_BELL

T = TypeVar("T")

# How long a call keeps trying to reach a server that restarts or is full, unless the store was
# given another (``timeouts.store``) or its caller gave its own deadline (``PgLink.patience``).
RECONNECT_SECONDS = 30.0
_RETRY_SECONDS = 60.0  # deadlocks and serialization failures
_LOCK_KEY = 0x65786F  # the advisory lock that serializes schema migrations ("exo")
_RETRYABLE = (pgerrors.SerializationFailure, pgerrors.DeadlockDetected)
# What a server says while it cannot take a connection for a while (connection errors carry no SQLSTATE).
_BUSY_STATES = ("53300", "57P01", "57P02", "57P03")
_BUSY_TEXT = ("too many clients", "connection slots are reserved", "starting up", "shutting down",
              "in recovery mode", "not yet accepting connections")
_FULL_TEXT = ("too many clients", "connection slots are reserved")


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


def hold_key(repo: str) -> int:
    """The advisory lock of one repository's hold (a signed 64-bit number)."""
    return int.from_bytes(hashlib.sha1(f"exo-hold\0{repo}".encode()).digest()[:8], "big", signed=True)


def not_utf8(exc: UnicodeEncodeError) -> InvalidInput:
    return InvalidInput(f"Invalid value {exc.object[:80]!r}: it is not valid UTF-8 text")


def unreachable(url: str, exc: Exception, waited: float | None = None) -> EnvironmentError_:
    detail = " ".join(str(exc).split()) or type(exc).__name__
    text = detail.lower()
    full = any(t in text for t in _FULL_TEXT) or getattr(exc, "sqlstate", None) == "53300"
    if full:
        detail = f"the server's connection limit (max_connections) is reached: {detail}"
    if waited is not None:
        detail += f" (exo kept trying for {waited:.0f} s)"
    hint = ("Raise max_connections on the server, or run fewer exo processes at once (each holds one connection, "
            "and one more while it waits)." if full else
            "Check that the server runs and the URL (host, port, database, user) is right; exo reads the "
            "password from libpq's sources only (PGPASSWORD, ~/.pgpass, a service file). Set [store] url or "
            "EXO_STORE_URL to change the store.")
    return EnvironmentError_(f"Cannot use exo's PostgreSQL store ({url}): {detail}", hint=hint, url=url,
                             store="postgresql", **({"limit": "max_connections"} if full else {}))


class Backoff:
    """Pauses between attempts to reach the server: 50 ms doubling to 1 s, with jitter, until a deadline."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.start = time.monotonic()
        self.delay = 0.05

    def pause(self) -> bool:
        """Sleep before the next attempt; False when the deadline passed or the call was cancelled."""
        now = time.monotonic()
        if now >= self.deadline or cancel.cancelled():
            return False
        # jitter from the clock, so processes that failed together do not come back together
        time.sleep(min(self.delay * (1 + (time.perf_counter_ns() % 1000) / 1000), self.deadline - now))
        self.delay = min(self.delay * 2, 1.0)
        return True

    @property
    def waited(self) -> float:
        return time.monotonic() - self.start


class PgLink:
    """The connections of one repository's PostgreSQL store (rows keyed by ``repo``)."""

    def __init__(self, url: str, repo: str, patience: float | None = None) -> None:
        check_url(url)
        self.url = url
        self.repo = repo
        self.default_patience = RECONNECT_SECONDS if patience is None else patience
        self._local = threading.local()
        self._ready = False
        self._seen = False  # this process reached the server: a refused connection now means a restart

    @cached_property
    def bell(self) -> PgBell:
        return PgBell(self)

    # -- patience ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def patience(self, seconds: float | None) -> Iterator[None]:
        """Inside the block, this thread's calls keep reaching for the server up to ``seconds`` from now
        (the caller's own timeout) instead of the store's default; None keeps the default."""
        before = getattr(self._local, "deadline", None)
        self._local.deadline = None if seconds is None else time.monotonic() + seconds
        try:
            yield
        finally:
            self._local.deadline = before

    def deadline(self) -> float:
        """When this thread's current call gives up reaching the server."""
        until: float | None = getattr(self._local, "deadline", None)
        return until if until is not None else time.monotonic() + self.default_patience

    def transient(self, exc: psycopg.OperationalError) -> bool:
        """Whether ``exc`` is a server that cannot serve for a while (restarting, full), not a wrong URL."""
        text = str(exc).lower()
        if exc.sqlstate in _BUSY_STATES or any(t in text for t in _BUSY_TEXT):
            return True
        # a lost or refused connection to a server this process has used: it restarts
        return self._seen and (exc.sqlstate is None or exc.sqlstate.startswith("08")) and "fatal:" not in text

    # -- connections -----------------------------------------------------------------------
    def connect(self) -> psycopg.Connection[Any]:
        """A new autocommit connection (psycopg's errors raw: callers retry through ``retrying``)."""
        conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10, application_name="exo")
        self._seen = True
        try:  # every lock wait of exo's sessions is bounded, the migrate's hold above all (a SET: the
            # connection's options would replace the user's own, from the URL, PGOPTIONS or a service)
            conn.execute(f"SET lock_timeout = {int(HOLD_SECONDS * 1000)}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _connected(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            if getattr(self._local, "pinned", False):  # the session that holds the state is gone, and its hold too
                raise StateError("exo lost its connection to the store while it held the state; nothing moved",
                                 hint="Run it again.", url=self.url)
            conn = self._local.conn = self.connect()
        return conn

    def _session(self) -> psycopg.Connection[Any]:
        """This thread's connection, the schema prepared once per process (errors raw)."""
        conn = self._connected()
        if not self._ready:
            self._prepare(conn)
            self._ready = True
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pinned", False):
            return  # the session that holds the state: closed only by the hold (its end, or the server)
        self._local.conn = None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def close(self) -> None:
        """Release this thread's connections (the next call opens new ones)."""
        self._drop()
        if "bell" in self.__dict__:
            self.bell.drop()

    def retrying(self, attempt: Callable[[], T]) -> T:
        """Run ``attempt``; while the server cannot serve for a while, again with backoff until the deadline.

        Every psycopg error that means "cannot use the server" becomes an EnvironmentError naming it.
        """
        backoff: Backoff | None = None
        while True:
            try:
                return attempt()
            except _RETRYABLE:
                raise  # the transaction's own retry (``_tx``)
            except pgerrors.LockNotAvailable as exc:  # a lock wait passed lock_timeout: the hold, most likely
                raise held_error(self._holder(), HOLD_SECONDS) from exc
            except pgerrors.InsufficientPrivilege as exc:
                raise unreachable(self.url, exc) from exc
            except psycopg.OperationalError as exc:
                self._drop()
                if not self.transient(exc):
                    raise unreachable(self.url, exc) from exc
                backoff = backoff or Backoff(self.deadline())
                if not backoff.pause():
                    raise unreachable(self.url, exc, backoff.waited) from exc
            except UnicodeEncodeError as exc:  # nothing half-written: the transaction rolled back
                raise not_utf8(exc) from exc

    def _tx(self, fn: Callable[[psycopg.Connection[Any]], T], *, gate: bool = True) -> T:
        """Run ``fn`` in one transaction (the hold and the moved marker checked first, unless ``gate`` is off).

        Deadlocks and serialization failures run it again; so does a connection lost before COMMIT.
        """
        deadline = time.monotonic() + _RETRY_SECONDS
        delay = 0.005
        while True:
            try:
                return self.retrying(lambda: self._once(fn, gate))
            except _RETRYABLE:
                if time.monotonic() > deadline:
                    raise
                time.sleep(delay * (1 + (time.perf_counter_ns() % 1000) / 1000))
                delay = min(delay * 2, 0.2)

    def _once(self, fn: Callable[[psycopg.Connection[Any]], T], gate: bool) -> T:
        conn = self._session()
        xid: int | None = None
        done = False
        result: T
        try:
            with conn.transaction():
                if gate:  # wait while a migrate holds the state; then (a new snapshot) is it still here?
                    conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (hold_key(self.repo),))
                row = conn.execute("SELECT txid_current(), pg_notify(%s, '')",  # the board's doorbell
                                   (channel(self.repo, TEAM_BELL),)).fetchone()
                xid = int(row[0]) if row else None
                if gate:
                    self._refuse_if_moved(conn)
                result = fn(conn)
                done = True
            return result
        except psycopg.OperationalError:
            if done and xid is not None and self._committed(xid):
                return result  # the connection broke during COMMIT, and the transaction had committed
            raise

    def _committed(self, xid: int) -> bool:
        """Whether transaction ``xid`` committed (asked on a new connection, waiting while it is in progress)."""
        def status() -> str | None:
            row = self._connected().execute("SELECT txid_status(%s)", (xid,)).fetchone()
            return str(row[0]) if row and row[0] is not None else None

        backoff = Backoff(self.deadline())
        while True:
            got = self.retrying(status)
            if got != "in progress" or not backoff.pause():
                return got == "committed"

    def _run(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Statements outside a transaction block (autocommit): reads, NOTIFY."""
        return self.retrying(lambda: fn(self._session()))

    def query(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        """Rows of one read, as dicts (for this class and tests; not part of ``Store``)."""
        def read(c: psycopg.Connection[Any]) -> list[dict[str, Any]]:
            with c.cursor(row_factory=dict_row) as cur:
                cur.execute(sql, args)
                return cur.fetchall()
        return self._run(read)

    def _exec(self, sql: str, args: Sequence[Any] = ()) -> int:
        """One write statement in its own transaction; its rowcount."""
        return self._tx(lambda c: c.execute(sql, args).rowcount)

    # -- the schema and the moved marker ------------------------------------------------------
    def version(self, conn: psycopg.Connection[Any]) -> int | None:
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
        if version > PG_SCHEMA_VERSION:
            raise StateError(
                f"exo's state in {self.url} has schema {version}, newer than this exo ({PG_SCHEMA_VERSION})",
                hint="Upgrade exo.", url=self.url)
        return version

    def _prepare(self, conn: psycopg.Connection[Any]) -> None:
        """Migrate the schema when it is older, and register this repository."""
        if self.version(conn) != PG_SCHEMA_VERSION:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                conn.execute("CREATE SCHEMA IF NOT EXISTS exo")
                current = self.version(conn) or 0
                for v in range(current + 1, PG_SCHEMA_VERSION + 1):
                    for stmt in MIGRATIONS[v]:
                        conn.execute(stmt)
                conn.execute("DELETE FROM exo.version")
                conn.execute("INSERT INTO exo.version (version) VALUES (%s)", (PG_SCHEMA_VERSION,))
        conn.execute("INSERT INTO exo.repos (id, created_at) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                     (self.repo, time.time()))

    def _marker(self, conn: psycopg.Connection[Any]) -> str | None:
        """Where this repository's state moved (its marker), or None."""
        row = conn.execute("SELECT moved_to FROM exo.repos WHERE id = %s", (self.repo,)).fetchone()
        return str(row[0]) if row and row[0] else None

    def _refuse_if_moved(self, conn: psycopg.Connection[Any]) -> None:
        moved = self._marker(conn)
        if moved:
            raise moved_error(moved)

    def _holder(self) -> str | None:
        """Who holds the state (``exo store migrate``'s note), for a writer's error; None when nobody holds it
        (a note left by a migrate that was killed is not believed)."""
        key = hold_key(self.repo)
        try:
            conn = self._connected()
            free = conn.execute("SELECT pg_try_advisory_lock_shared(%s)", (key,)).fetchone()
            if free and free[0]:
                conn.execute("SELECT pg_advisory_unlock_shared(%s)", (key,))
                return None
            row = conn.execute("SELECT held_by FROM exo.repos WHERE id = %s", (self.repo,)).fetchone()
        except psycopg.Error:
            return None
        return str(row[0]) if row and row[0] else "exo store migrate"


class PgWaiter:
    """A connection LISTENing on some channels; it listens again on a new one when the server restarts."""

    def __init__(self, bell: PgBell, keys: list[str], conn: psycopg.Connection[Any] | None) -> None:
        self.bell = bell
        self.keys = keys
        self.conn = conn
        self._down: Backoff | None = None  # since when the server is out of reach (its deadline)

    def wait(self, timeout: float | None) -> bool:
        if self.conn is None:
            return self._listen_again(timeout)
        rung = False
        try:
            for _ in self.conn.notifies(timeout=timeout, stop_after=1):
                rung = True
            if rung:
                for _ in self.conn.notifies(timeout=0):
                    pass
        except psycopg.OperationalError:
            self.drop()
            return self._listen_again(timeout)
        return rung

    def _listen_again(self, timeout: float | None) -> bool:
        """Reconnect and LISTEN again within ``timeout``; True either way: the caller must read the tables again
        (a message may have been posted while nobody listened). EnvironmentError once the server stayed away
        past the call's deadline."""
        link = self.bell.link
        down = self._down = self._down or Backoff(link.deadline())
        until = min(down.deadline, time.monotonic() + (timeout if timeout is not None else link.default_patience))
        while True:
            try:
                self.conn = self.bell.listening(self.keys)
                self._down = None
                return True
            except psycopg.OperationalError as exc:
                if not link.transient(exc):
                    raise unreachable(link.url, exc) from exc
                if time.monotonic() >= down.deadline or cancel.cancelled():
                    raise unreachable(link.url, exc, down.waited) from exc
                if time.monotonic() >= until:
                    return True
                time.sleep(min(0.05 + down.delay, max(until - time.monotonic(), 0.0)))
                down.delay = min(down.delay * 2, 1.0)

    def drop(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
        self.conn = None


class PgBell:
    """Wake-ups by LISTEN/NOTIFY on one channel per (repository, key)."""

    def __init__(self, link: PgLink) -> None:
        self.link = link
        self._local = threading.local()  # one listening connection per thread, kept between waits

    def ring(self, key: str) -> int:
        """NOTIFY the key's channel (PostgreSQL does not say how many listen: 1 when sent)."""
        self.link._run(lambda c: c.execute("SELECT pg_notify(%s, '')", (channel(self.link.repo, key),)))
        return 1

    def listening(self, keys: Iterable[str], conn: psycopg.Connection[Any] | None = None) -> psycopg.Connection[Any]:
        """A connection (``conn``, else a new one) LISTENing on ``keys`` (errors raw)."""
        conn = conn if conn is not None and not conn.closed else self.link.connect()
        for key in keys:
            conn.execute(f"LISTEN {channel(self.link.repo, key)}")
        return conn

    @contextlib.contextmanager
    def listen(self, keys: Iterable[str]) -> Iterator[PgWaiter]:
        """LISTEN on a connection of its own in autocommit, so the LISTEN is committed on return.

        The connection is kept for the thread's next ``listen`` (UNLISTEN and drained on exit), so a
        loop of waits does not pay a connection each time; it is closed when anything fails.
        """
        kept: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        self._local.conn = None  # a nested listen gets a connection of its own
        keys = list(keys)
        tries = [kept]

        def first() -> psycopg.Connection[Any]:
            conn = tries.pop() if tries else None
            try:
                return self.listening(keys, conn)
            except psycopg.OperationalError:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
                raise

        waiter = PgWaiter(self, keys, self.link.retrying(first))
        ok = False
        try:
            yield waiter
            ok = self._unlisten(waiter)
        finally:
            if ok and waiter.conn is not None and getattr(self._local, "conn", None) is None:
                self._local.conn = waiter.conn
            else:
                waiter.drop()

    @staticmethod
    def _unlisten(waiter: PgWaiter) -> bool:
        """Stop listening and drain, so the connection can serve the next wait; False when it broke."""
        if waiter.conn is None:
            return False
        try:
            waiter.conn.execute("UNLISTEN *")
            for _ in waiter.conn.notifies(timeout=0):
                pass
        except psycopg.OperationalError:
            return False  # the server went away as the wait ended: the connection is closed
        return True

    def drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
