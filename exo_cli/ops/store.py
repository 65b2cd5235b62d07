"""``exo store migrate``: move a repository's state between SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from exo_cli.errors import InvalidInput, StateError
from exo_cli.records import ASKING, ROOT, STARTING, WAITING_PERMISSION, WORKING
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.env import Env

SQLITE = "sqlite"
# Agents in these states are mid-operation: a turn, a spawn, a question or a permission wait
# would write to the old store after the copy.
BUSY = (STARTING, WORKING, ASKING, WAITING_PERMISSION)


@dataclass(frozen=True)
class MigrateResult:
    source: str  # "sqlite" or the URL the state came from
    target: str  # "sqlite" or the URL the state is in now
    counts: dict[str, int]  # rows copied, by table (checked against both stores)
    kept: str | None  # where the old SQLite database was kept, if the state left SQLite


@op("store_migrate", cli="store migrate", roles=("human",), destructive=False, idempotent=False,
    help={"to": "Where the state goes: a postgresql:// URL (no password: libpq reads PGPASSWORD, ~/.pgpass or "
          "a service file), or `sqlite` for the database in exo's state folder."})
def store_migrate(env: Env, *, to: str) -> MigrateResult:
    """Move this repository's state (agents, messages, events, PRs) to another store and check the counts.

    Refused while an agent is mid-operation (starting, working, asking or waiting for a
    permission): run it while the team is idle. The copy keeps every id; the state folder then
    records the new store, so every exo process (agents' hooks and MCP servers too) follows it.
    The old SQLite database is kept aside as `state.db.moved-<time>`; the old PostgreSQL rows
    are deleted once the copy is checked.
    """
    from exo_cli.adapters.store import open_store, point_to, pointed_team

    target_url = None if to.strip().lower() == SQLITE else to.strip()
    if target_url is not None and not target_url.startswith(("postgresql://", "postgres://")):
        raise InvalidInput(f"exo store migrate --to {to!r}: expected a postgresql:// URL or `sqlite`")
    source_url = env.store_url
    if source_url == target_url:
        raise StateError(f"The state is already in {target_url or SQLITE}")
    if not env.has_state():
        raise StateError("This repository has no exo state to move", hint="Set [store] url before `exo init` instead.")
    source = env.store
    busy = [f"{a.id} ({a.status})" for a in source.agents()
            if a.id != ROOT and a.status in BUSY and a.spec.get("phase") != "pending"]
    if busy:
        raise StateError(f"Agents are mid-operation: {', '.join(busy)}",
                         hint="Run it again when they are idle (exo wait), or kill them.", agents=busy)
    team = pointed_team(env.state_path)  # a clone sharing another host's rows keeps sharing them
    target = open_store(env.state_dir, lambda: env.runtime_dir, target_url, team)
    before = source.counts()
    target.load(source.dump())
    copied = target.counts()
    if copied != before or source.counts() != before:
        target.set_aside()
        raise StateError("The state changed during the copy (or the copy is incomplete); nothing moved",
                         hint="Run it again when the team is idle.", source=before, copied=copied)
    point_to(env.state_dir, target_url, team)
    kept = source.set_aside()
    return MigrateResult(source=source_url or SQLITE, target=target_url or SQLITE, counts=copied, kept=kept)
