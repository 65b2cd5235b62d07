"""The network of a sandboxed agent from the operations' side: its allow-list, plan and refusals.

Spawn (when it runs an agent in a sandbox) records the agent's allow-list in its record
(``NET_FIELD``, from ``policy``) before it asks the broker for the agent's socket, so the team
broker opens the agent's proxy socket with its exo socket (``<runtime>/s/<key>/net/sock``) and
keeps it while the agent lives, and passes the sandbox builder the ``plan``
(``adapters.sandbox.Network.bridge(plan)``). ``exo agents`` shows the refusals (``net_refused``, ``ops/status``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from exo_cli.adapters import netpolicy

if TYPE_CHECKING:
    from exo_cli.adapters.netproxy import NetworkPlan
    from exo_cli.env import Env

# The agent's record keeps its allow-list (``Policy.entries()``) here; no field: no proxy, no way out.
NET_FIELD = "net_allow"
# ... and the names its proxy connects to without looking them up (``[sandbox] resolve``, ``netpolicy.parse_pins``).
PIN_FIELD = "net_resolve"


def policy(env: Env, *, backend: str, environ: Mapping[str, str]) -> netpolicy.Policy:
    """The allow-list of a new agent of ``backend`` whose CLI gets ``environ``: its model API + ``allow_hosts``."""
    provider = None
    if backend == "codex":
        home = environ.get("CODEX_HOME") or str(Path(environ.get("HOME", "~")).expanduser() / ".codex")
        provider = netpolicy.codex_provider_url(Path(home))
    return netpolicy.policy_for(backend, environ, env.config.get("sandbox.allow_hosts"), provider_url=provider)


def pins(env: Env) -> dict[str, str]:
    """``[sandbox] resolve`` of a new agent (recorded with its allow-list, read by the broker's proxy)."""
    return netpolicy.parse_pins(env.config.get("sandbox.resolve") or {})


def plan(env: Env, *, socket_key: str, policy: netpolicy.Policy) -> NetworkPlan:
    """What the sandbox adds for an agent whose broker socket folder is ``socket_key``."""
    from exo_cli.adapters.netproxy import network_plan
    from exo_cli.ops.broker import paths

    return network_plan(net_folder(paths(env).agent_dir(socket_key)), policy)


def net_folder(agent_dir: Path) -> Path:
    """The folder of an agent's proxy socket, inside its broker socket folder."""
    return agent_dir / "net"
