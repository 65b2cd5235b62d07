"""``exo store migrate``: move a repository's state between SQLite and PostgreSQL.

The steps: hold the source (every writer of the repository, on every host, waits), check that
no agent is mid-operation, copy every row, compare the copy with the source table by table
(a digest of every row, not counts), mark the source moved (late writers are told where the
state went, never written there), make the copy the state, point the state folder at it, and
keep the old SQLite database aside. A migrate killed at any step leaves the state whole in
one store: run it again, and it redoes the copy, or finishes the switch it had checked.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from exo_cli import fault
from exo_cli.errors import InvalidInput, StateError
from exo_cli.records import ASKING, ROOT, STARTING, WAITING_PERMISSION, WORKING
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.adapters.store.base import Store
    from exo_cli.env import Env

SQLITE = "sqlite"
# Agents in these states are mid-operation: a turn, a spawn, a question or a permission wait
# would write to the old store after the copy.
BUSY = (STARTING, WORKING, ASKING, WAITING_PERMISSION)


@dataclass(frozen=True)
class MigrateResult:
    source: str  # "sqlite" or the URL the state came from
    target: str  # "sqlite" or the URL the state is in now
    counts: dict[str, int]  # rows copied, by table
    kept: str | None  # where the old SQLite database was kept, if the state left SQLite
    # SHA-256 of every row of each table, equal in both stores (empty when an interrupted migrate was finished)
    digests: dict[str, str]


@op("store_migrate", cli="store migrate", roles=("human",), destructive=False, idempotent=False,
    help={"to": "Where the state goes: a postgresql:// URL (no password: libpq reads PGPASSWORD, ~/.pgpass or "
          "a service file), or `sqlite` for the database in exo's state folder."})
def store_migrate(env: Env, *, to: str) -> MigrateResult:
    """Move this repository's state (agents, messages, events, PRs) to another store and check every row.

    Every exo process of the repository (hooks, MCP servers, your shell, other hosts) waits
    while the state is copied, up to a minute, then fails with an error naming the migrate. The
    copy keeps every id and is compared with the source row by row; the state folder then
    records the new store, so every exo process follows it, and one that still used the old
    store is told where the state went instead of writing there. Refused while an agent is
    mid-operation (starting, working, asking or waiting for a permission): run it while the
    team is idle. The old SQLite database is kept aside as `state.db.moved-<time>`; the old
    PostgreSQL rows are deleted. Run it again after an interruption: it finishes or redoes it.
    """
    from exo_cli.adapters.store import location, open_target, pointed_team
    from exo_cli.adapters.store.moving import digests, holder_text, moved_error

    target_url = None if to.strip().lower() == SQLITE else to.strip()
    if target_url is not None and not target_url.startswith(("postgresql://", "postgres://")):
        raise InvalidInput(f"exo store migrate --to {to!r}: expected a postgresql:// URL or `sqlite`")
    source_url = env.store_url
    if source_url == target_url:
        raise StateError(f"The state is already in {target_url or SQLITE}")
    team = pointed_team(env.state_path)  # a clone sharing another host's rows keeps sharing them
    source = env.store
    where = location(env.state_dir, target_url, env.host_name)
    target = open_target(env.state_dir, lambda: env.runtime_dir, target_url, team)
    moved = source.moved_to()
    if moved is not None:  # a migrate that checked its copy and was interrupted before the switch
        if moved != where:
            raise moved_error(moved)
        kept = _switch(env, source, target, target_url, team)
        return MigrateResult(source=source_url or SQLITE, target=target_url or SQLITE, counts=target.counts(),
                             kept=kept, digests={})
    if not env.has_state():
        raise StateError("This repository has no exo state to move", hint="Set [store] url before `exo init` instead.")
    try:
        with source.hold(holder_text(where)):
            fault.point("migrate.held", env.environ)
            _refuse_busy(env, source, to_sqlite=target_url is None)
            rows = source.dump()
            want = digests(rows)
            target.load(rows)
            fault.point("migrate.loaded", env.environ)
            got = digests(target.dump())
            if got != want:
                raise StateError("The copy differs from the state; nothing moved",
                                 hint="Run it again; report it if it happens again.",
                                 tables=sorted(t for t in want if got.get(t) != want[t]))
            source.mark_moved(where)
            fault.point("migrate.marked", env.environ)
    except BaseException:
        with contextlib.suppress(Exception):
            if source.moved_to() != where:  # never drop a copy the source already says it moved to
                target.discard()
        raise
    fault.point("migrate.committed", env.environ)
    kept = _switch(env, source, target, target_url, team)
    return MigrateResult(source=source_url or SQLITE, target=target_url or SQLITE,
                         counts={t: len(r) for t, r in rows.items()}, kept=kept, digests=want)


def _refuse_busy(env: Env, source: Store, *, to_sqlite: bool) -> None:
    """StateError when an agent is mid-operation, or (to SQLite) runs on another host that could not follow."""
    agents = source.agents()
    busy = [f"{a.id} ({a.status})" for a in agents
            if a.id != ROOT and a.status in BUSY and a.spec.get("phase") != "pending"]
    if busy:
        raise StateError(f"Agents are mid-operation: {', '.join(busy)}",
                         hint="Run it again when they are idle (exo wait), or kill them.", agents=busy)
    if to_sqlite:
        away = [a.id for a in agents if a.live and not env.runs_here(a)]
        if away or env.joined:
            raise StateError("This team shares its PostgreSQL store with other hosts, which cannot reach a SQLite "
                             "database here" + (f" (agents {', '.join(away)})" if away else ""),
                             hint="Complete or kill the agents on other hosts first, and migrate from the clone "
                             "that began the team.", agents=away)


def _switch(env: Env, source: Store, target: Store, target_url: str | None, team: str | None) -> str | None:
    """Make the checked copy the state, point the state folder at it, and set the old state aside."""
    from exo_cli.adapters.store import point_to

    target.settle()
    fault.point("migrate.settled", env.environ)
    point_to(env.state_dir, target_url, team)
    fault.point("migrate.pointed", env.environ)
    return source.set_aside()
