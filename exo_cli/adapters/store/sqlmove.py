"""Moving a repository's state into and out of SQLite (`exo store migrate`): ``SqliteMoving``.

As the source: ``hold`` is one ``BEGIN IMMEDIATE`` transaction kept for the whole copy, so every
other writer waits in its own (at most ``HOLD_SECONDS``, then a StateError naming the holder,
whose note ``state.db.held`` says who it is) while readers go on; ``mark_moved`` writes the moved
marker in that transaction (``PRAGMA application_id`` and the ``moved`` table), so it lands
exactly when the hold ends. A process that still holds a connection to the old file is then
told on its next write (and, within a second, its next read) where the state went.

As the target: ``load`` writes a new database beside the live one (``state.db.incoming``; one
an interrupted migrate left is replaced), ``settle`` renames it into place (a database already
there is kept aside, never deleted), ``discard`` removes it.
"""

from __future__ import annotations

import contextlib
import os
import time

from exo_cli.adapters.store import DB_FILE, MOVED_APP_ID, TABLES
from exo_cli.errors import StateError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Iterator, Mapping, Sequence
    from pathlib import Path
    from typing import Any

    from exo_cli.adapters.store.sqlite import SqliteStore

# A copy `exo store migrate` writes before it becomes the state (beside ``state.db``).
INCOMING = DB_FILE + ".incoming"


def held_note(db: Path) -> Path:
    """The file naming who holds the database (``hold``), for the errors of the writers that wait."""
    return db.with_name(db.name + ".held")


def marker(conn: sqlite3.Connection) -> str | None:
    """Where the state of the database ``conn`` is open on moved, or None."""
    if conn.execute("PRAGMA application_id").fetchone()[0] != MOVED_APP_ID:
        return None
    row = conn.execute("SELECT location FROM moved ORDER BY at DESC LIMIT 1").fetchone()
    return str(row[0]) if row else "another store"


class SqliteMoving:
    """The SQLite store's side of `exo store migrate`, on one ``SqliteStore`` (loaded only by a migrate)."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store

    @property
    def path(self) -> Path:
        return self.store.path

    def counts(self) -> dict[str, int]:
        return {t: int(self.store.query(f"SELECT count(*) AS n FROM {t}")[0]["n"]) for t in TABLES}

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        return {t: [dict(r) for r in self.store.query(f"SELECT * FROM {t}")] for t in TABLES}

    # -- as the source -------------------------------------------------------------------------
    @contextlib.contextmanager
    def hold(self, holder: str) -> Iterator[None]:
        from exo_cli.adapters.files import atomic_write

        note = held_note(self.path)
        try:
            with self.store._write_turn:
                conn = self.store._conn()
                self.store._retry(lambda: conn.execute("BEGIN IMMEDIATE"))  # waits for the write under way
                atomic_write(note, holder + "\n", mode=0o600)  # who holds it, for the writers that wait
                self.store._local.held = conn
                try:
                    self.store.refuse_if_moved(conn)
                    yield
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                else:
                    self.store._retry(lambda: conn.execute("COMMIT"))
                finally:
                    self.store._local.held = None
        finally:
            note.unlink(missing_ok=True)

    def mark_moved(self, location: str) -> None:
        with self.store.write() as c:  # inside the hold: its transaction
            c.execute("CREATE TABLE IF NOT EXISTS moved (location TEXT NOT NULL, at REAL NOT NULL)")
            c.execute("INSERT INTO moved (location, at) VALUES (?, ?)", (location, time.time()))
            c.execute(f"PRAGMA application_id = {MOVED_APP_ID}")

    def moved_to(self) -> str | None:
        conn = getattr(self.store._local, "conn", None)  # the file this process uses, even renamed since
        if conn is None:
            if not self.path.exists():
                return None
            conn = self.store._conn()
        return self.store._retry(lambda: marker(conn))  # type: ignore[no-any-return]

    def set_aside(self) -> str | None:
        """Keep the database aside as ``state.db.moved-<time>`` (nothing opens it again)."""
        kept = self.path.with_name(f"{self.path.name}.moved-{time.strftime('%Y%m%d-%H%M%S')}")
        self._close_file(self.path, kept)
        return str(kept)

    def forget(self) -> None:
        """Remove the database (and its WAL files)."""
        self._close_file(self.path, None)

    def _close_file(self, path: Path, to: Path | None) -> None:
        """Checkpoint and close the database at ``path``, then rename it to ``to`` (None: remove it)."""
        if path.exists():
            conn = self.store._conn()
            self.store._retry(lambda: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)"))
        self.store.close()
        if to is not None:
            os.replace(path, to)
        else:
            path.unlink(missing_ok=True)
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{path}{suffix}")

    # -- as the target -------------------------------------------------------------------------
    def load(self, rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        if self.path.name == INCOMING and self.path.exists():
            self._close_file(self.path, None)  # an interrupted migrate's copy: nobody ever used it
        with self.store.write() as c:
            for t in TABLES:
                if c.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone():
                    raise StateError(f"The SQLite state {self.path} is not empty (table {t})",
                                     hint=f"Move {self.path} aside first.", path=str(self.path))
            for t in TABLES:
                for row in rows.get(t, ()):
                    cols = list(row)
                    c.execute(f"INSERT INTO {t} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                              [row[k] for k in cols])

    def settle(self) -> None:
        live = self.path.with_name(DB_FILE)
        if self.path == live or not self.path.exists():
            return  # settled already (an interrupted migrate finished by the next one)
        if live.exists():  # a file nothing used (the state was elsewhere): kept, never deleted
            self._keep_aside(live)
        self._close_file(self.path, live)
        self.store.path = live

    @staticmethod
    def _keep_aside(live: Path) -> None:
        kept = live.with_name(f"{live.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(live, kept)
        for suffix in ("-wal", "-shm"):  # SQLite finds them by name: they follow the database
            with contextlib.suppress(FileNotFoundError):
                os.replace(f"{live}{suffix}", f"{kept}{suffix}")

    def discard(self) -> None:
        if self.path.name == INCOMING:
            self._close_file(self.path, None)
