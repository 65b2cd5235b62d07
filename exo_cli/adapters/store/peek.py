"""Quick reads of the state database for a shell's TAB: names and numbers only.

``SqliteStore`` builds full records and migrates the schema on open; a TAB needs neither,
and must never create or change anything. These functions open an existing database, run
one SELECT, and return plain tuples; on any error they return nothing.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import NamedTuple


class AgentRow(NamedTuple):
    name: str
    status: str
    role: str
    task: str  # the bead's id, or the task's text


class PrRow(NamedTuple):
    number: int
    state: str
    title: str


def _rows(db: Path, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    if not db.is_file():
        return []
    try:
        conn = sqlite3.connect(db, timeout=0.5)
        try:
            return list(conn.execute(sql, args).fetchall())
        finally:
            conn.close()
    except sqlite3.Error:
        return []


def agents(db: Path) -> list[AgentRow]:
    """Every recorded agent but the root, by name."""
    rows = _rows(db, "SELECT name, status, role, COALESCE(bead, task, '') FROM agents WHERE id != 'root' ORDER BY name")
    return [AgentRow(str(n), str(s), str(r), str(t)) for n, s, r, t in rows]


def prs(db: Path, *, open_only: bool = False) -> list[PrRow]:
    """Every pull request (or only the open ones), by number."""
    sql = "SELECT number, state, title FROM prs" + (" WHERE state = 'open'" if open_only else "") + " ORDER BY number"
    return [PrRow(int(str(n)), str(s), str(t)) for n, s, t in _rows(db, sql)]
