"""The usage table of both stores: tokens per agent, turn, model and kind (``records.Usage``).

One mixin per store, sharing the SQL: ``record_usage`` (a custom agent's own report), ``usage``
(sums per agent and model) and ``_insert_usage`` (also called inside ``record_turn``'s
transaction, so a turn's counters, its usage rows and the hook's bookkeeping land together).
Standard library only: the stop hook imports it.
"""

from __future__ import annotations

import time

from exo_cli.records import TEAM_BELL, Usage

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

_COLS = "agent, turn, model, input, output, cache_write, cache_read, created_at"
_SUMS = ("SELECT agent, model, sum(input) AS i, sum(output) AS o, sum(cache_write) AS w, sum(cache_read) AS r"
         " FROM {table} WHERE {where} GROUP BY agent, model ORDER BY agent, model")


def _rows(agent_id: str, turn: int, usage: Sequence[Usage]) -> list[tuple[Any, ...]]:
    now = time.time()
    return [(agent_id, turn, u.model, u.input, u.output, u.cache_write, u.cache_read, now)
            for u in usage if u.total]


def _sums(rows: Sequence[Any]) -> list[tuple[str, Usage]]:
    return [(r["agent"], Usage(r["model"], int(r["i"]), int(r["o"]), int(r["w"]), int(r["r"]))) for r in rows]


class SqliteUsage:
    """The usage methods of ``SqliteStore``."""

    @staticmethod
    def _insert_usage(c: Any, agent_id: str, turn: int, usage: Sequence[Usage]) -> None:
        c.executemany(f"INSERT INTO usage ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", _rows(agent_id, turn, usage))

    def record_usage(self, agent_id: str, turn: int, usage: Sequence[Usage]) -> None:
        me: Any = self  # the SqliteStore this mixin is part of
        with me.write() as c:
            c.execute("UPDATE agents SET tokens = tokens + ? WHERE id = ?", (sum(u.total for u in usage), agent_id))
            self._insert_usage(c, agent_id, turn, usage)
        me.bell.ring(TEAM_BELL)

    def usage(self, agent_ids: Sequence[str] | None = None) -> list[tuple[str, Usage]]:
        me: Any = self
        if agent_ids is None:
            return _sums(me.query(_SUMS.format(table="usage", where="1 = 1")))
        ids = list(agent_ids)
        return _sums(me.query(_SUMS.format(table="usage", where=f"agent IN ({', '.join('?' * len(ids))})"), ids))


class PgUsage:
    """The usage methods of ``PostgresStore``."""

    def _insert_usage(self, c: Any, agent_id: str, turn: int, usage: Sequence[Usage]) -> None:
        me: Any = self  # the PostgresStore this mixin is part of
        rows = [(me.repo, *row) for row in _rows(agent_id, turn, usage)]
        if rows:
            c.cursor().executemany(f"INSERT INTO exo.usage (repo, {_COLS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                                   rows)

    def record_usage(self, agent_id: str, turn: int, usage: Sequence[Usage]) -> None:
        me: Any = self

        def add(c: Any) -> None:
            c.execute("UPDATE exo.agents SET tokens = tokens + %s WHERE repo = %s AND id = %s",
                      (sum(u.total for u in usage), me.repo, agent_id))
            self._insert_usage(c, agent_id, turn, usage)
        me._tx(add)

    def usage(self, agent_ids: Sequence[str] | None = None) -> list[tuple[str, Usage]]:
        me: Any = self
        if agent_ids is None:
            return _sums(me.query(_SUMS.format(table="exo.usage", where="repo = %s"), (me.repo,)))
        return _sums(me.query(_SUMS.format(table="exo.usage", where="repo = %s AND agent = ANY(%s)"),
                              (me.repo, list(agent_ids))))
