"""The PostgreSQL store's schema: the statements of each schema version (``postgres.py`` applies them).

Everything lives in the PostgreSQL schema ``exo``; every table but ``exo.version`` and
``exo.repos`` keys its rows by the repository (``repo``), so several repositories share one
database. Columns mirror SQLite's (``sqlite.py``): JSON as text, times as seconds since the
epoch; an agent's own ``repo`` field is the column ``repo_path``. ``exo.repos`` also holds, per
repository, who holds its state during `exo store migrate` (``held_by``), where the state
moved (``moved_to``: the row stays when the state leaves, so late writers are told), and
whether its rows are a copy a migrate has not yet switched to (``incoming``: where from).
"""

from __future__ import annotations

from collections.abc import Sequence

# The PostgreSQL schema's own version (SQLite's is ``store.SCHEMA_VERSION``): 2 added the hold and
# moved marker of `exo store migrate` to ``exo.repos`` (a process of an older exo then refuses the
# database instead of writing past a migrate it cannot see).
# 3 added exo.usage (tokens per agent, turn, model and kind).
PG_SCHEMA_VERSION = 3

MIGRATIONS: dict[int, Sequence[str]] = {
    1: (
        "CREATE TABLE IF NOT EXISTS exo.version (version INTEGER NOT NULL)",
        """CREATE TABLE exo.repos (
            id TEXT PRIMARY KEY, created_at DOUBLE PRECISION NOT NULL, next_pr BIGINT NOT NULL DEFAULT 0)""",
        """CREATE TABLE exo.agents (
            repo TEXT NOT NULL, id TEXT NOT NULL, name TEXT NOT NULL, role TEXT NOT NULL, parent TEXT,
            status TEXT NOT NULL, backend TEXT NOT NULL, mux TEXT NOT NULL,
            task TEXT, bead TEXT, worktree TEXT, branch TEXT, base_branch TEXT, repo_path TEXT,
            location TEXT NOT NULL DEFAULT '{}', session_id TEXT, output TEXT, status_reason TEXT,
            turns BIGINT NOT NULL DEFAULT 0, tool_calls BIGINT NOT NULL DEFAULT 0,
            tokens BIGINT NOT NULL DEFAULT 0,
            created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
            status_at DOUBLE PRECISION NOT NULL, completed_at DOUBLE PRECISION,
            spec TEXT NOT NULL DEFAULT '{}', undo TEXT NOT NULL DEFAULT '[]', PRIMARY KEY (repo, id))""",
        "CREATE INDEX agents_parent ON exo.agents (repo, parent)",
        """CREATE TABLE exo.messages (
            repo TEXT NOT NULL, id BIGSERIAL, kind TEXT NOT NULL, sender TEXT NOT NULL,
            recipient TEXT NOT NULL, body TEXT NOT NULL, data TEXT NOT NULL DEFAULT '{}',
            created_at DOUBLE PRECISION NOT NULL, delivered_at DOUBLE PRECISION,
            consumed_at DOUBLE PRECISION, reply_to BIGINT, state TEXT, PRIMARY KEY (repo, id))""",
        "CREATE INDEX messages_recipient ON exo.messages (repo, recipient, consumed_at)",
        "CREATE INDEX messages_reply ON exo.messages (repo, reply_to)",
        """CREATE TABLE exo.events (
            repo TEXT NOT NULL, id BIGSERIAL, kind TEXT NOT NULL, agent TEXT,
            data TEXT NOT NULL DEFAULT '{}', created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (repo, id))""",
        "CREATE INDEX events_agent ON exo.events (repo, agent)",
        """CREATE TABLE exo.prs (
            repo TEXT NOT NULL, number BIGINT NOT NULL, forge TEXT NOT NULL, title TEXT NOT NULL,
            body TEXT NOT NULL, head TEXT NOT NULL, base TEXT NOT NULL, author TEXT NOT NULL,
            state TEXT NOT NULL, draft INTEGER NOT NULL DEFAULT 0, url TEXT, remote_number BIGINT,
            strategy TEXT, merge_commit TEXT, review_state TEXT, checks_state TEXT,
            created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
            merged_at DOUBLE PRECISION, data TEXT NOT NULL DEFAULT '{}', PRIMARY KEY (repo, number))""",
        "CREATE INDEX prs_head ON exo.prs (repo, head)",
        "CREATE TABLE exo.kv (repo TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (repo, key))",
    ),
    2: (
        "ALTER TABLE exo.repos ADD COLUMN IF NOT EXISTS held_by TEXT, ADD COLUMN IF NOT EXISTS moved_to TEXT,"
        " ADD COLUMN IF NOT EXISTS incoming TEXT",
    ),
    3: (
        """CREATE TABLE IF NOT EXISTS exo.usage (
            repo TEXT NOT NULL, agent TEXT NOT NULL, turn BIGINT NOT NULL, model TEXT NOT NULL,
            input BIGINT NOT NULL DEFAULT 0, output BIGINT NOT NULL DEFAULT 0,
            cache_write BIGINT NOT NULL DEFAULT 0, cache_read BIGINT NOT NULL DEFAULT 0,
            created_at DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS usage_agent ON exo.usage (repo, agent)",
    ),
}
