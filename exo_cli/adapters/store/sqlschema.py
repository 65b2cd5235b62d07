"""The SQLite store's schema: the statements of each schema version, applied on open (``bring_up_to_date``).

Imported only when a database is created or older than this exo, so no hook pays for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from exo_cli.adapters.store import SCHEMA_VERSION

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
    2: (
        """CREATE TABLE usage (
            agent TEXT NOT NULL, turn INTEGER NOT NULL, model TEXT NOT NULL,
            input INTEGER NOT NULL DEFAULT 0, output INTEGER NOT NULL DEFAULT 0,
            cache_write INTEGER NOT NULL DEFAULT 0, cache_read INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL)""",
        "CREATE INDEX usage_agent ON usage(agent)",
    ),
}


def bring_up_to_date(conn: Any) -> None:
    """Apply, in one write transaction, the migrations from the database's version to ``SCHEMA_VERSION``
    (a process that raced this one to it finds nothing left to do)."""
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
