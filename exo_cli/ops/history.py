"""A finished agent kept as history: its name free again, its records under ``<name>@<n>``.

Below ``lifecycle`` and ``spawn`` (both retire agents), with nothing of theirs imported, so
neither depends on the other for it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from exo_cli.records import HOOK_STATE_KEY, MCP_READY_KEY, RETIRED_SEP, ROOT, Agent

if TYPE_CHECKING:
    from exo_cli.env import Env

CURSOR_KEY = "read-cursor:{reader}:{agent}"  # where `exo read --since-last` keeps what a reader saw


def retire(env: Env, agent: Agent) -> str | None:
    """Keep a finished agent as history under ``<name>@<n>``, so that its name is free again.

    Its record, messages, events and PRs move to the new id (``exo agents --all`` lists it);
    what exo kept per agent for it (hook state, MCP readiness, bead snapshot, read cursors)
    is forgotten, so a new agent of that name starts fresh. Returns the new id, or None when
    the record is gone (or already retired).
    """
    from exo_cli.ops.tasks import SNAPSHOT_KEY, SYNCED_KEY  # the beads adapter only when retiring

    if agent.retired or agent.id == ROOT:
        return None
    keys = [k.format(agent=agent.id) for k in (HOOK_STATE_KEY, MCP_READY_KEY, SNAPSHOT_KEY)]
    prefixes = [SYNCED_KEY.format(agent=agent.id, rel=""), CURSOR_KEY.format(reader=agent.id, agent="")]
    stamp = int(agent.created_at or time.time())
    for n in range(100):
        new_id = f"{agent.id}{RETIRED_SEP}{stamp}" + (f".{n}" if n else "")
        if env.store.retire_agent(agent.id, new_id, forget_keys=keys, forget_prefixes=prefixes,
                                  created_at=agent.created_at):
            return new_id
        if env.store.agent(agent.id) is None:
            return None
    return None
