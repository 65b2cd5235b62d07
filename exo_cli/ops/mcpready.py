"""The MCP readiness handshake: a Claude agent's session-start hook waits for its own exo MCP server.

Claude's TUI sends the first prompt while MCP servers still connect, and a first ``mcp__exo__*``
call then fails. exo's MCP server notes, once it answered ``tools/list``, the pid of its parent
(the agent CLI) under the agent's kv key and rings it; the session-start hook waits (at most
``EXO_MCP_WAIT`` seconds) until that pid is one of its own ancestors. In the broker the server's
process is the agent's ``exo mcp`` relay and the hook's the agent's hook relay (``Env.pid``).
"""

from __future__ import annotations

import time

TYPE_CHECKING = False  # importing typing costs the hooks' path; type checkers still see the import below
if TYPE_CHECKING:
    from exo_cli.env import Env


def mcp_ready_key(agent_id: str) -> str:
    """The kv key (and doorbell) where an agent's exo MCP server says it listed its tools."""
    from exo_cli.records import MCP_READY_KEY

    return MCP_READY_KEY.format(agent=agent_id)


def mark_mcp_ready(env: Env, agent_id: str) -> None:
    """Record (for ``wait_mcp_ready``) that this MCP server answered tools/list: its parent's pid.

    The server is ``env.pid`` (in the broker: the agent's ``exo mcp`` relay), its parent the agent CLI.
    """
    from exo_cli.adapters.proc import parent_of

    key = mcp_ready_key(agent_id)
    env.store.kv_set(key, str(parent_of(env.pid)))
    env.store.bell.ring(key)


def mcp_wait(env: Env) -> float:
    """Seconds session-start waits for the agent's own exo MCP server (``EXO_MCP_WAIT``, set by the
    Claude backend: its TUI sends the first prompt while MCP servers still connect, and a first
    ``mcp__exo__*`` call then fails)."""
    from exo_cli.config import EnvVars

    try:
        return float(env.environ.get(EnvVars.MCP_WAIT) or 0)
    except ValueError:
        return 0.0


def wait_mcp_ready(env: Env, agent_id: str, timeout: float) -> bool:
    """Wait until the exo MCP server of the agent CLI process running this hook has listed its tools.

    The server records its parent's pid (``mark_mcp_ready``); it counts only when that
    process is an ancestor of this hook, i.e. the same agent CLI process (a marker left by
    an earlier run of the agent does not). Returns False after ``timeout`` seconds.
    """
    from exo_cli.adapters.proc import ancestors

    mine = set(ancestors(env.pid))  # the hook's process (in the broker: the agent's hook relay)
    key = mcp_ready_key(agent_id)
    deadline = time.monotonic() + timeout
    with env.store.bell.listen([key]) as waiter:
        while True:
            raw = env.store.kv_get(key) or ""
            if raw.isdigit() and int(raw) in mine:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            waiter.wait(min(left, 1.0))
