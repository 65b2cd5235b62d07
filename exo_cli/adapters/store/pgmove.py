"""Moving a repository's state into and out of PostgreSQL (`exo store migrate`): ``PgMoving``.

As the source: ``hold`` takes the repository's hold lock exclusively on this thread's session
(every writer, on every host, waits in its transaction's first statement), after noting who
holds it in ``exo.repos.held_by``; ``dump`` then reads a state nobody changes;
``mark_moved`` records the new location in ``exo.repos.moved_to``, so a late writer is told
where the state went. The rows stay, as the old state kept aside (a process still reading them
mid-operation reads the state as it was; the next migrate into this database replaces them). While it holds, the session is pinned: a lost
connection ends the migrate (its hold is gone with it) instead of reconnecting silently.

As the target: ``load`` inserts the rows marked ``incoming`` (a copy nobody uses yet; an
interrupted migrate's copy is replaced by the next one), ``settle`` makes them the state,
``discard`` removes them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import psycopg

from exo_cli.adapters.store import TABLES
from exo_cli.adapters.store.pgconn import PgLink, hold_key
from exo_cli.errors import StateError


class PgMoving(PgLink):
    """The PostgreSQL store's side of `exo store migrate`."""

    def counts(self) -> dict[str, int]:
        return {t: int(self.query(f"SELECT count(*) AS n FROM exo.{t} WHERE repo = %s", (self.repo,))[0]["n"])
                for t in TABLES}

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        return {t: [_sqlite_names(t, r) for r in self.query(f"SELECT * FROM exo.{t} WHERE repo = %s", (self.repo,))]
                for t in TABLES}

    # -- as the source -------------------------------------------------------------------------
    @contextlib.contextmanager
    def hold(self, holder: str) -> Iterator[None]:
        key = hold_key(self.repo)
        self._exec("UPDATE exo.repos SET held_by = %s WHERE id = %s", (holder, self.repo))  # refused once moved
        conn = self.retrying(self._session)
        self._local.pinned = True
        try:
            # waits for the writes under way; a session lost meanwhile ends the migrate (StateError)
            self.retrying(lambda: self._connected().execute("SELECT pg_advisory_lock(%s)", (key,)))
            try:
                yield
            finally:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        finally:
            self._local.pinned = False
            if conn.closed:
                self._drop()
            with contextlib.suppress(Exception):
                self._tx(lambda c: c.execute("UPDATE exo.repos SET held_by = NULL WHERE id = %s AND held_by = %s",
                                             (self.repo, holder)), gate=False)

    def mark_moved(self, location: str) -> None:
        self._tx(lambda c: c.execute("UPDATE exo.repos SET moved_to = %s, held_by = NULL WHERE id = %s",
                                     (location, self.repo)), gate=False)

    def moved_to(self) -> str | None:
        def look() -> str | None:
            conn = self._connected()
            version = self.version(conn)
            return self._marker(conn) if version is not None and version >= 2 else None
        return self.retrying(look)

    def set_aside(self) -> str | None:
        """The rows stay where they are, marked moved: the old state, kept (replaced if the state comes back)."""
        self._ready = False
        return self.url

    def forget(self) -> None:
        """Delete this repository's rows, its record included, in one transaction."""
        def delete(c: psycopg.Connection[Any]) -> None:
            for t in TABLES:
                c.execute(f"DELETE FROM exo.{t} WHERE repo = %s", (self.repo,))
            c.execute("DELETE FROM exo.repos WHERE id = %s", (self.repo,))
        self._tx(delete, gate=False)
        self._ready = False

    # -- as the target -------------------------------------------------------------------------
    def load(self, rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        def insert(c: psycopg.Connection[Any]) -> None:
            row = c.execute("SELECT incoming, moved_to FROM exo.repos WHERE id = %s FOR UPDATE",
                            (self.repo,)).fetchone()
            # an interrupted migrate's copy nobody ever used, or the state as it was when it moved away
            leftover = bool(row and (row[0] or row[1]))
            for t in TABLES:
                if not leftover and c.execute(f"SELECT 1 FROM exo.{t} WHERE repo = %s LIMIT 1",
                                              (self.repo,)).fetchone():
                    raise StateError(f"{self.url} already holds state for this repository (table {t})",
                                     hint="Use another database, or remove that state first.", url=self.url)
                c.execute(f"DELETE FROM exo.{t} WHERE repo = %s", (self.repo,))
            for t in TABLES:
                for r in rows.get(t, ()):
                    cols = ["repo_path" if (t, k) == ("agents", "repo") else k for k in r]
                    c.execute(f"INSERT INTO exo.{t} (repo, {', '.join(cols)})"
                              f" VALUES (%s, {', '.join(['%s'] * len(cols))})", [self.repo, *r.values()])
            for t in ("messages", "events"):  # the shared sequences stay ahead of every id kept
                c.execute(f"SELECT setval(pg_get_serial_sequence('exo.{t}', 'id'), GREATEST("
                          f"(SELECT COALESCE(max(id), 1) FROM exo.{t}), (SELECT last_value FROM exo.{t}_id_seq)))")
            c.execute("UPDATE exo.repos SET next_pr = (SELECT COALESCE(max(number), 0) FROM exo.prs WHERE repo = %s),"
                      " incoming = 'exo store migrate' WHERE id = %s", (self.repo, self.repo))
        self._tx(insert, gate=False)

    def settle(self) -> None:
        self._exec_ungated("UPDATE exo.repos SET incoming = NULL, moved_to = NULL, held_by = NULL WHERE id = %s")

    def discard(self) -> None:
        def drop(c: psycopg.Connection[Any]) -> None:
            row = c.execute("SELECT incoming FROM exo.repos WHERE id = %s FOR UPDATE", (self.repo,)).fetchone()
            if row and row[0]:  # only a copy nobody switched to
                for t in TABLES:
                    c.execute(f"DELETE FROM exo.{t} WHERE repo = %s", (self.repo,))
                c.execute("UPDATE exo.repos SET incoming = NULL WHERE id = %s", (self.repo,))
        self._tx(drop, gate=False)

    def _exec_ungated(self, sql: str) -> None:
        self._tx(lambda c: c.execute(sql, (self.repo,)), gate=False)


def _sqlite_names(table: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """A row as the SQLite table names its columns (no ``repo`` key; an agent's ``repo_path`` is ``repo``)."""
    out = {k: v for k, v in row.items() if k != "repo"}
    if table == "agents":
        out["repo"] = out.pop("repo_path")
    return out
