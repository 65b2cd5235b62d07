"""Quick reads of the state store for a shell's TAB: names and numbers only.

``SqliteStore`` builds full records and migrates the schema on open; a TAB needs neither,
and must never create or change anything. ``locate`` finds where a state folder's state
lives (the pointer file a PostgreSQL store leaves there, else the SQLite database) without
opening anything; the functions below run one SELECT there and return plain tuples; on any
error they return nothing. On SQLite a read costs little more than opening the file; on
PostgreSQL it imports psycopg and connects (a few hundred milliseconds), with short
deadlines so that a TAB never hangs on an unreachable server.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, NamedTuple

# Names of adapters/store/__init__.py (imported from there by the tests, not here: a TAB imports
# as little as it can). The PostgreSQL tables live in the schema ``exo``, keyed by ``repo``.
DB_FILE = "state.db"
POINTER_FILE = "store-url"
QUESTION, PENDING = "question", "pending"  # a question not answered yet (ops/delivery.py)


class Where(NamedTuple):
    """Where a repository's state is: its SQLite database, or a PostgreSQL store and its rows' key."""

    db: Path | None = None
    url: str | None = None
    repo: str = ""


class AgentRow(NamedTuple):
    id: str  # a retired agent's id holds ``@``
    name: str
    status: str
    role: str
    task: str  # the bead's id, or the task's text
    status_reason: str


class PrRow(NamedTuple):
    number: int
    state: str
    title: str


def locate(state_dir: Path) -> Where | None:
    """Where the state of ``state_dir`` is, or None when it has none (nothing is opened or created)."""
    try:
        lines = (state_dir / POINTER_FILE).read_text().splitlines()
    except OSError:
        lines = []
    if lines and lines[0].strip():
        team = lines[1].strip() if len(lines) > 1 else ""
        return Where(url=lines[0].strip(), repo=team or str(state_dir.resolve()))
    db = state_dir / DB_FILE
    return Where(db=db) if db.is_file() else None


def _rows(where: Where, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    """Run ``sql`` (``{t}`` before each table, ``{repo}`` where the PostgreSQL key goes, ``?`` for
    ``args``) on the state; nothing on any error."""
    if where.url:
        return _pg_rows(where, sql, args)
    if where.db is None or not where.db.is_file():
        return []
    try:
        conn = sqlite3.connect(where.db, timeout=0.5)
        try:
            return list(conn.execute(sql.format(t="", repo="1 = 1"), args).fetchall())
        finally:
            conn.close()
    except sqlite3.Error:
        return []


def _pg_rows(where: Where, sql: str, args: tuple[object, ...]) -> list[tuple[Any, ...]]:
    try:
        import psycopg
    except ImportError:  # the postgres extra is not installed: nothing to offer
        return []
    query = sql.replace("%", "%%").replace("?", "%s").format(t="exo.", repo="repo = %s")
    try:
        with psycopg.connect(where.url or "", autocommit=True, connect_timeout=2, application_name="exo-complete",
                             options="-c statement_timeout=2000") as conn:
            return list(conn.execute(query, (where.repo, *args)).fetchall())
    except (psycopg.Error, OSError):
        return []


def agents(where: Where) -> list[AgentRow]:
    """Every recorded agent but the root, retired ones included, by name."""
    rows = _rows(where, "SELECT id, name, status, role, COALESCE(bead, task, ''), COALESCE(status_reason, '')"
                        " FROM {t}agents WHERE {repo} AND id != 'root' ORDER BY name, id")
    return [AgentRow(*(str(v) for v in r)) for r in rows]


def asking(where: Where) -> set[str]:
    """The ids of the agents with a question still waiting for its answer."""
    rows = _rows(where, "SELECT DISTINCT sender FROM {t}messages WHERE {repo} AND kind = ? AND state = ?",
                 (QUESTION, PENDING))
    return {str(r[0]) for r in rows}


def prs(where: Where, *, open_only: bool = False) -> list[PrRow]:
    """Every pull request (or only the open ones), by number."""
    sql = "SELECT number, state, title FROM {t}prs WHERE {repo}" + (" AND state = 'open'" if open_only else "")
    return [PrRow(int(str(n)), str(s), str(t)) for n, s, t in _rows(where, sql + " ORDER BY number")]
