"""exo's state store: the interface (``base``) and its implementations (``sqlite``, ``postgres``).

``open_store`` is the one place that picks an implementation from plain values; only the
chosen implementation's module (and its driver) is imported: SQLite by default, PostgreSQL
(psycopg) only when a store URL is given.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from exo_cli.adapters.store.base import Store

# The schema version every store implements; a store refuses a database whose version is newer.
SCHEMA_VERSION = 2  # 2: the usage table (tokens per agent, turn, model and kind)

# The SQLite database's file name inside exo's state folder.
DB_FILE = "state.db"

# The tables a repository's state is made of (what `exo store migrate` copies and counts).
TABLES = ("agents", "messages", "events", "prs", "kv", "usage")

# How long a writer waits while `exo store migrate` holds the state, in seconds (``moving.py``).
HOLD_SECONDS = 60.0
# SQLite's ``application_id`` of a database whose state moved away ("exoM"), checked by every write.
MOVED_APP_ID = 0x65786F4D

# A file in the state folder naming the PostgreSQL store the state moved to (`exo store migrate`),
# so processes started before the move (whose environment has no EXO_STORE_URL) follow it.
POINTER_FILE = "store-url"


def open_store(state_dir: Path, runtime_dir: Path | Callable[[], Path], url: str | None = None,
               team: str | None = None, patience: float | None = None) -> Store:
    """The store for one repository's state folder (nothing is opened until first use).

    ``runtime_dir`` is the short folder of the wake-up sockets, or a function returning it
    (called only when a wake-up is first needed, so reads never create it). With ``url``
    (``postgresql://...``), the PostgreSQL store, its rows keyed by ``team`` (the identity clones
    on several hosts share), else by the state folder's path; ``patience`` is how long its calls
    keep trying to reach a server that restarts or is full (``timeouts.store``).
    """
    if url:
        from exo_cli.adapters.store.postgres import PostgresStore

        return PostgresStore(url, team or repo_identity(state_dir), patience)
    from exo_cli.adapters.store.sqlite import SqliteStore

    return SqliteStore(state_dir / DB_FILE, runtime_dir)


def open_target(state_dir: Path, runtime_dir: Path | Callable[[], Path], url: str | None = None,
                team: str | None = None, patience: float | None = None) -> Store:
    """The store `exo store migrate` copies into: PostgreSQL at ``url``, or a new SQLite database beside
    the live one (``state.db.incoming``, renamed into place by ``settle``)."""
    if url:
        return open_store(state_dir, runtime_dir, url, team, patience)
    from exo_cli.adapters.store.sqlite import SqliteStore
    from exo_cli.adapters.store.sqlmove import INCOMING

    return SqliteStore(state_dir / INCOMING, runtime_dir)


def location(state_dir: Path, url: str | None, host: str) -> str:
    """Where a repository's state is, as a moved marker records it: the URL, or the SQLite file on ``host``."""
    if url:
        return url
    from exo_cli.adapters.store.moving import sqlite_location

    return sqlite_location(host, str(state_dir.resolve() / DB_FILE))


def repo_identity(state_dir: Path) -> str:
    """The key of one repository's rows in a shared database: its state folder's real path."""
    return str(state_dir.resolve())


def has_state(state_dir: Path) -> bool:
    """True when the SQLite state already exists in ``state_dir`` (a check that creates nothing)."""
    return (state_dir / DB_FILE).exists()


def _pointer(state_dir: Path) -> list[str]:
    try:
        return (state_dir / POINTER_FILE).read_text().splitlines()
    except OSError:
        return []


def pointed_url(state_dir: Path) -> str | None:
    """The store URL ``exo store migrate`` left in the state folder, if any (one failed open when none)."""
    lines = _pointer(state_dir)
    return (lines[0].strip() or None) if lines else None


def pointed_team(state_dir: Path) -> str | None:
    """The identity of the team whose rows this clone shares (the pointer's second line), if any.

    A clone on another host that an agent was spawned into carries the spawning clone's
    identity, so both read and write the same rows of the shared database.
    """
    lines = _pointer(state_dir)
    return (lines[1].strip() or None) if len(lines) > 1 else None


def point_to(state_dir: Path, url: str | None, team: str | None = None) -> None:
    """Record in the state folder that the state lives at ``url`` (None: the SQLite database), as ``team``."""
    from exo_cli.adapters.files import atomic_write

    path = state_dir / POINTER_FILE
    if url is None:
        path.unlink(missing_ok=True)
    else:
        atomic_write(path, url + "\n" + (f"{team}\n" if team else ""), mode=0o600)


def same_store(a: str | None, b: str | None) -> bool:
    """Whether two store URLs name the same database (two spellings of one URL do; SQLite is no shared store).

    Compared as the connection parameters libpq reads from them, without the password, with
    the defaults filled in (port 5432, the database named after the user), host names in
    lower case and socket folders normalised.
    """
    if not a or not b:
        return False
    return a.strip() == b.strip() or _store_key(a) == _store_key(b)


def _store_key(url: str) -> tuple[tuple[str, str], ...]:
    import os

    try:
        from psycopg.conninfo import conninfo_to_dict

        params = {k: str(v) for k, v in conninfo_to_dict(url.strip()).items() if v is not None and str(v) != ""}
    except Exception:  # not a connection string (or no psycopg): only the very same text is the same store
        return (("url", url.strip()),)
    for k in ("password", "passfile", "application_name", "connect_timeout", "fallback_application_name"):
        params.pop(k, None)
    params.setdefault("port", "5432")
    if "user" in params:
        params.setdefault("dbname", params["user"])
    if "host" in params:
        params["host"] = ",".join(os.path.normpath(h) if h.startswith("/") else h.lower()
                                  for h in params["host"].split(","))
    return tuple(sorted(params.items()))


def holds_work(url: str, team: str) -> bool:
    """Whether ``team``'s rows in the store at ``url`` hold an agent, a message or a pull request (a clone
    whose exo only looked, with ``[store] url`` in its configuration, holds none)."""
    from exo_cli.adapters.store.postgres import PostgresStore

    store = PostgresStore(url, team)
    try:
        if not store.exists():
            return False
        counts = store.counts()
        return any(counts.get(t) for t in ("agents", "messages", "prs"))
    finally:
        store.close()
