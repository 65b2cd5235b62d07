"""The team broker from the operations' side: which agents have a socket, starting it, status and stop.

The broker (``exo broker serve``, the front end in ``exo_cli/broker/``) is one exo process per
repository and host that serves every agent's calls, hooks and MCP session on that agent's own
socket. Spawn asks it for the socket of each new agent (``register``); any exo call of the
human, the agents' relays and launchers start it when it is not running (``ensure``); it exits
by itself once the last of its agents is gone. ``exo broker status`` shows it, ``exo broker
stop`` stops it (the relays of live agents start it again), ``exo doctor`` repairs leftovers.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from exo_cli import __version__
from exo_cli.adapters import broker as adapter
from exo_cli.errors import ExoError, StateError
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.env import Env
    from exo_cli.records import Agent

# The agent's record keeps its socket's folder name here (``adapters.broker.socket_key``).
KEY_FIELD = "socket_key"



def enabled(env: Env) -> bool:
    """Whether new agents get a socket (``[broker] enabled``, ``EXO_BROKER``; default on)."""
    try:
        return bool(env.config.get("broker.enabled"))
    except ExoError:
        return True


def paths(env: Env) -> adapter.Paths:
    """The broker's files in the repository's runtime folder."""
    from exo_cli.adapters.files import runtime_dir_for

    return adapter.Paths(runtime_dir_for(str(env.state_dir.resolve()), create=False))


def serve_argv(env: Env) -> list[str]:
    """The command that runs this repository's broker (``adapters.broker.start`` adds ``--ready-fd``)."""
    from exo_cli.selfcmd import exo_command

    return [*exo_command(), "-C", str(env.repo.root), "broker", "serve"]


def ensure(env: Env) -> dict[str, Any]:
    """The running broker's facts, started first when none answers (EnvironmentError_ when it cannot start)."""
    return adapter.ensure(paths(env), argv=serve_argv(env), version=__version__, environ=_environ(env))


def _environ(env: Env) -> dict[str, str]:
    """The broker's environment (``adapter.broker_environ``), following the state where the state folder says it is.

    Its starter may be an agent, which follows the state folder alone (``Env.store_url``): a TL
    spawning into another repository makes its state there in SQLite while ``EXO_STORE_URL``
    names PostgreSQL, and a keeper starts the broker again with the environment of the agent's
    spawn, from before any ``exo store migrate``. Without the markers the broker would read that
    URL, refuse the state and never start: ``EXO_STORE_FOLLOW`` has it follow the state folder
    (its pointer, or its SQLite database) wherever it holds the state, and the URL only before.
    """
    from exo_cli.env import STORE_FOLLOW_VAR

    out = adapter.broker_environ(env.environ, str(env.state_dir.resolve()))
    out[STORE_FOLLOW_VAR] = "1"
    return out


def keeper(env: Env) -> dict[str, Any]:
    """What a headless agent's runner needs to start the broker again when it dies (``_runner.py``'s keeper).

    The broker's life lock and control socket, and the command with its environment: the spawner's
    (the human's) minus every exo marker, as ``ensure`` gives the broker itself. The runner lives
    outside the agent's sandbox, so a team of sandboxed agents recovers with no human command.
    """
    from exo_cli.selfcmd import exo_command

    p = paths(env)
    return {"life": str(p.life), "ctl": str(p.ctl),
            "argv": [*exo_command(), "-C", str(env.repo.root), "broker", "start"],
            "env": _environ(env)}


def new_key(agent_id: str) -> str:
    """A fresh socket folder name for ``agent_id`` (random: a restarted broker finds it in the record)."""
    return adapter.socket_key(agent_id, secrets.token_hex(16))


def socket_path(env: Env, key: str) -> str:
    return str(paths(env).agent_socket(key))


def register(env: Env, agent_id: str) -> str:
    """Have the broker (started first if need be) open the socket of recorded agent ``agent_id``; its path.

    StateError with a hint when the running broker is another exo's version still serving agents
    (it keeps serving them; the new agent then works without a socket).
    """
    last: ExoError | None = None
    for _ in range(3):  # a broker that was just exiting: start it again
        info = ensure(env)
        if info.get("exo") != __version__:
            raise StateError(
                f"exo's broker for this repository runs exo {info.get('exo')} (this is exo {__version__}) and "
                f"still serves {info.get('agents')} agent(s)",
                hint="It keeps serving them until they end; new agents work without it meanwhile. Once they are "
                "done, `exo broker stop` (or any exo command) lets this version start its own.",
                broker_exo=info.get("exo"))
        try:
            answer = adapter.ctl(paths(env), "register", __version__, agent=agent_id)
        except (adapter.Unreachable, adapter.Lost) as exc:
            last = exc
            continue
        return str(answer["socket"])
    assert last is not None
    raise last


def key_of_process(env: Env, pid: int) -> str | None:
    """The socket key of a live agent process of this repository (``EXO_SOCKET`` in its environment, naming a
    socket folder of this repository's broker), or None: ``exo doctor`` gives a rebuilt record its socket back."""
    from pathlib import Path

    from exo_cli.adapters.proc import environ_value
    from exo_cli.env import SOCKET_VAR

    value = environ_value(pid, SOCKET_VAR)
    if not value:
        return None
    sock = Path(value)
    key = sock.parent.name
    ok = sock.name == "sock" and sock.parent.parent == paths(env).sockets and len(key) == 12 \
        and all(ch in "0123456789abcdef" for ch in key)
    return key if ok else None


def socket_agents(env: Env) -> list[Agent]:
    """The agents of this host recorded with a socket (history and other hosts' agents aside)."""
    return [a for a in env.store.agents() if a.spec.get(KEY_FIELD) and not a.retired and env.runs_here(a)]


def gone_ids(env: Env, agents: list[Agent]) -> set[str]:
    """The ids of ``agents`` whose process is gone (their socket can go once their last hooks ran).

    The recorded process (pane process, headless runner, Zellij launcher) with its start time,
    read from /proc; a location without a pid asks its multiplexer (one call). An agent still
    being spawned (no location yet) lives as long as the process spawning it.
    """
    from exo_cli.adapters.proc import pid_alive

    gone: set[str] = set()
    ask: list[Agent] = []
    for a in agents:
        loc = a.location or {}
        pid = loc.get("pid")
        if not loc:
            spawner = a.spec.get("spawner_pid")
            if not (isinstance(spawner, int) and spawner > 1 and pid_alive(spawner, reap_child=False)):
                gone.add(a.id)
        elif isinstance(pid, int) and not isinstance(pid, bool) and pid > 1:
            start = loc.get("start_time")
            if not pid_alive(pid, start if isinstance(start, int) else None, reap_child=False):
                gone.add(a.id)
        else:
            ask.append(a)
    if ask:
        from exo_cli.ops import panes
        from exo_cli.records import WORKING

        # the process counts, not the status: an agent that completed itself still runs its last hooks
        running = panes.alive_ids(env, [a._replace(status=WORKING) for a in ask])
        gone |= {a.id for a in ask if a.id not in running}
    return gone


def revive(env: Env, agents: list[Agent]) -> bool:
    """Start the broker again when live agents of this host have a socket and nothing answers on it.

    For the human's exo commands that read the team anyway (``exo agents``, ``exo status``): one
    connect when such agents exist, nothing otherwise. Best effort: False when it cannot start.
    """
    from exo_cli.adapters.brokerio import answers

    if not any(a.live and a.spec.get(KEY_FIELD) and env.runs_here(a) for a in agents):
        return False
    if answers(str(paths(env).ctl)):
        return False
    try:
        ensure(env)
    except ExoError:
        return False
    return True


def leftovers(env: Env, agents: list[Agent]) -> list[tuple[str, str, str, str, Any]]:
    """What ``exo doctor`` finds wrong with the broker: (kind, subject, detail, action, repair or None).

    A broker that does not answer while live agents have a socket is started again; socket files
    nobody answers on (a broker killed with ``kill -9``: its control socket, the sockets of agents
    that are gone) and a pid file naming no live broker are removed. A socket that answers, and the
    socket of a live agent, are never touched.
    """
    from exo_cli.adapters import brokerio

    p = paths(env)
    live_keys = {str(a.spec[KEY_FIELD]) for a in agents if a.spec.get(KEY_FIELD) and a.live}
    out: list[tuple[str, str, str, str, Any]] = []
    running = brokerio.answers(str(p.ctl))
    if live_keys and not running:
        out.append(("broker-down", "broker", f"{len(live_keys)} live agent(s) have a socket and no broker answers",
                    "start the broker", lambda: bool(ensure(env))))
    elif not running and os.path.lexists(p.ctl):
        out.append(("stale-socket", str(p.ctl), "the broker's control socket answers no more",
                    "remove it", lambda: brokerio.unlink_stale(str(p.ctl))))
    if not running and p.pid_file.exists() and not adapter.alive(p):
        out.append(("stale-file", str(p.pid_file), "names a broker that is gone", "remove it",
                    lambda: _unlink(p.pid_file)))
    try:
        keys = sorted(os.listdir(p.sockets))
    except OSError:
        keys = []
    for key in keys:
        if key in live_keys:
            continue
        sock = p.sockets / key / "sock"
        if brokerio.answers(str(sock)):
            continue  # a broker still serves it (an agent gone a moment ago): it closes it itself
        out.append(("stale-socket", str(sock.parent), "the socket of an agent that is gone", "remove it",
                    lambda folder=sock.parent: _remove_socket_folder(folder)))
    return out


def _unlink(path: Any) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return True


def _remove_socket_folder(folder: Any) -> bool:
    """Remove an agent's socket folder holding nothing but a socket nobody answers on."""
    from exo_cli.adapters import brokerio

    sock = folder / "sock"
    if os.path.lexists(sock) and not brokerio.unlink_stale(str(sock)):
        return False
    try:
        os.rmdir(folder)
    except FileNotFoundError:
        pass
    return True


# --------------------------------------------------------------------------- exo broker status / stop


@dataclass(frozen=True)
class BrokerSocket:
    """One agent's socket as the broker serves it."""

    agent: str
    socket: str
    present: bool  # the socket file exists
    net_carried: int | None = None  # a sandboxed agent's connections its proxy carried to allowed hosts (this broker)


@dataclass(frozen=True)
class BrokerStatus:
    """The repository's broker: whether it runs, its process and version, and its agents' sockets."""

    running: bool
    enabled: bool
    pid: int | None = None
    exo: str | None = None
    protocol: int | None = None
    connections: int | None = None
    log: str | None = None
    sockets: list[BrokerSocket] = field(default_factory=list)


@op(
    "broker_status",
    cli="broker status",
    roles=("human",),
    read_only=True,
    idempotent=True,
    help={},
)
def broker_status(env: Env) -> BrokerStatus:
    """Show the team broker: its process, version and agents' sockets.

    The broker serves every agent's calls, hooks and MCP session on the agent's own socket; it
    runs while agents with a socket live. Nothing is started or changed.
    """
    return _status(env)


def _status(env: Env) -> BrokerStatus:
    p = paths(env)
    info = adapter.ping(p, __version__) if p.ctl.exists() else None
    pid_info = adapter.read_pid(p) or {}
    sockets: list[BrokerSocket] = []
    if env.has_state():
        for a in socket_agents(env):
            path = p.agent_socket(str(a.spec[KEY_FIELD]))
            if a.live or path.exists():
                sockets.append(BrokerSocket(a.id, str(path), path.exists()))
    if info is None:
        return BrokerStatus(running=False, enabled=enabled(env), log=_log(env, pid_info), sockets=sockets)
    carried = _carried(p)
    sockets = [replace(s, net_carried=carried.get(s.agent)) for s in sockets]
    return BrokerStatus(running=True, enabled=enabled(env), pid=info.get("pid"), exo=info.get("exo"),
                        protocol=info.get("protocol"), connections=info.get("connections"),
                        log=_log(env, pid_info), sockets=sockets)


def _carried(p: adapter.Paths) -> dict[str, int]:
    """Agent -> connections its network proxy carried, as the running broker counts them ({} when it cannot say)."""
    try:
        answer = adapter.ctl(p, "status", __version__)
    except (OSError, ExoError):
        return {}
    out: dict[str, int] = {}
    for item in answer.get("sockets") or []:
        if isinstance(item, dict) and isinstance(item.get("agent"), str) and isinstance(item.get("net_carried"), int):
            out[item["agent"]] = item["net_carried"]
    return out


@op(
    "broker_start",
    cli="broker start",
    tools=[],
    no_tools="a broker is started by whatever needs it (any exo call, the relays, the headless runners); a model "
    "never needs to",
    roles=("human", "tl", "dev"),  # the runners of agents start it: it changes nothing but its being there
    idempotent=True,
    help={},
)
def broker_start(env: Env) -> BrokerStatus:
    """Start the team broker unless it runs, then show it.

    Any exo command of the human, the agents' relays and headless runners start it by themselves
    when it is needed; this is the explicit way (a headless agent's runner uses it when the broker
    died). A running broker, of this exo or another version, is left as it is.
    """
    ensure(env)
    return _status(env)


def _log(env: Env, pid_info: dict[str, Any]) -> str:
    return str(pid_info.get("log") or env.state_dir / "broker.log")


@dataclass(frozen=True)
class BrokerStopResult:
    """Whether a broker was running and is stopped now, and how many agents it served."""

    stopped: bool
    agents: int


@op(
    "broker_stop",
    cli="broker stop",
    roles=("human",),
    destructive=False,
    idempotent=True,
    help={},
)
def broker_stop(env: Env) -> BrokerStopResult:
    """Stop the team broker (live agents' relays start it again).

    Use it to let a newer exo start its own broker once the agents of the old one are done. An
    agent mid-call loses nothing: its relay reconnects and sends the call again. Nothing to stop
    is no error.
    """
    p = paths(env)
    info = adapter.ping(p, __version__)
    stopped = adapter.stop(p, __version__)
    if not stopped and os.path.lexists(p.ctl):
        from exo_cli.adapters.brokerio import unlink_stale

        unlink_stale(str(p.ctl))
    return BrokerStopResult(stopped=stopped, agents=int((info or {}).get("agents") or 0))
