"""The state store on PostgreSQL (psycopg 3), with wake-ups by LISTEN/NOTIFY.

Chosen by ``[store] url`` or ``EXO_STORE_URL`` (a ``postgresql://`` URL without a password:
libpq finds it in ``PGPASSWORD``, ``~/.pgpass`` or a service file). This package's PostgreSQL
modules (this one, ``pgconn``, ``pgmove``) are the only ones that import psycopg, so the SQLite
path never pays for it.

Several repositories share one database: exo's tables live in the PostgreSQL schema ``exo``
and every row carries the repository's identity (``repo``). The schema's version is the one
row of ``exo.version``; an older schema is migrated when first opened (under an advisory
lock), a newer one is refused. Writes are short READ COMMITTED transactions whose single
statements are atomic on their rows; a deadlock or serialization failure is retried inside.
Connections, reconnection after a restart, the migrate's hold and the wake-ups are
``pgconn.py``'s; moving the state in and out (`exo store migrate`) is ``pgmove.py``'s.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from exo_cli.adapters.store.pgconn import channel, check_url
from exo_cli.adapters.store.pgmove import PgMoving
from exo_cli.adapters.store.pgschema import PG_SCHEMA_VERSION
from exo_cli.adapters.store.usage import PgUsage
from exo_cli.records import (
    AGENT_JSON_FIELDS,
    STARTING,
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
    from exo_cli.records import Usage
else:
    Store = object

__all__ = ["PostgresStore", "check_url", "channel"]

_AGENT_COLS = Agent._fields
_PR_COLS = PullRequest._fields

# The agent record's field ``repo`` (a path) is the column ``repo_path``: ``repo`` keys the rows.
_AGENT_SQL_COLS = tuple("repo_path" if c == "repo" else c for c in _AGENT_COLS)
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


class PostgresStore(PgUsage, PgMoving, Store):
    """PostgreSQL-backed state of one repository (rows keyed by ``repo``)."""

    def exists(self) -> bool:
        """True when this repository has state in the database (creates nothing; once true, not asked again).

        A StateError naming the new location when the state moved away (`exo store migrate`).
        """
        if self._ready:
            return True  # this process prepared (or found) the state: it stays until set aside

        def look() -> bool:
            conn = self._connected()
            version = self.version(conn)
            if version is None:
                return False
            found = conn.execute("SELECT 1 FROM exo.repos WHERE id = %s", (self.repo,)).fetchone() is not None
            if found and version >= 2:
                self._refuse_if_moved(conn)
            self._ready = found and version == PG_SCHEMA_VERSION
            return found
        return self.retrying(look)

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
                    kv: tuple[str, str], turn: int = 0, usage: Sequence[Usage] = ()) -> None:
        def end(c: psycopg.Connection[Any]) -> None:
            self._set_agent(c, agent_id, changes, None)
            c.execute("UPDATE exo.agents SET turns = turns + %s, tokens = tokens + %s WHERE repo = %s AND id = %s",
                      (turns, tokens, self.repo, agent_id))
            c.execute(_KV_UPSERT, (self.repo, *kv))
            self._insert_usage(c, agent_id, turn, usage)
        self._tx(end)

    def delete_agent(self, agent_id: str) -> None:
        def delete(c: psycopg.Connection[Any]) -> None:
            c.execute("DELETE FROM exo.agents WHERE repo = %s AND id = %s", (self.repo, agent_id))
            c.execute("DELETE FROM exo.usage WHERE repo = %s AND agent = %s", (self.repo, agent_id))
        self._tx(delete)

    def retire_agent(self, agent_id: str, new_id: str, *, forget_keys: Sequence[str] = (),
                     forget_prefixes: Sequence[str] = (), created_at: float | None = None) -> bool:
        def retire(c: psycopg.Connection[Any]) -> bool:
            r = self.repo
            if c.execute("SELECT 1 FROM exo.agents WHERE repo = %s AND id = %s", (r, new_id)).fetchone():
                return False
            if c.execute("UPDATE exo.agents SET id = %s WHERE repo = %s AND id = %s AND (%s::float8 IS NULL OR "
                         "created_at = %s)", (new_id, r, agent_id, created_at, created_at)).rowcount == 0:
                return False
            for table, col in (("agents", "parent"), ("messages", "sender"), ("messages", "recipient"),
                               ("events", "agent"), ("prs", "author"), ("usage", "agent")):
                c.execute(f"UPDATE exo.{table} SET {col} = %s WHERE repo = %s AND {col} = %s", (new_id, r, agent_id))
            if forget_keys:
                c.execute("DELETE FROM exo.kv WHERE repo = %s AND key = ANY(%s)", (r, list(forget_keys)))
            for prefix in forget_prefixes:
                c.execute("DELETE FROM exo.kv WHERE repo = %s AND left(key, %s) = %s", (r, len(prefix), prefix))
            return True
        return self._tx(retire)

    def pending_agent_ids(self) -> list[str]:
        rows = self.query("SELECT id FROM exo.agents WHERE repo = %s AND status = %s AND spec LIKE %s "
                          "ORDER BY created_at, id", (self.repo, STARTING, '%"pending"%'))
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

    def named_lock(self, name: str, *, host: str, wait: float | None) -> contextlib.AbstractContextManager[bool]:
        from exo_cli.adapters.store.baselock import pg_lock

        return pg_lock(self, name, host=host, wait=wait)


_KV_UPSERT = ("INSERT INTO exo.kv (repo, key, value) VALUES (%s, %s, %s)"
              " ON CONFLICT (repo, key) DO UPDATE SET value = excluded.value")
