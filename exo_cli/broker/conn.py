"""One connection to the broker: its hello, who it is, then what it asked for.

The hello is the first frame: ``{"hello": PROTOCOL, "exo": version, "kind": ..., "pid": ...,
"proof": ...}`` plus the request of a ``call`` or ``hook`` (one frame each way), or the session
options of an ``mcp`` connection (then MCP's own newline-delimited JSON-RPC). The control socket
takes ``ctl`` connections only (``ping``, ``register``, ``status``, ``stop``); an agent's socket
takes the other kinds, for that agent only (``guard.identify``). A relay of another exo version
that speaks the same protocol is served; a newer broker protocol refuses it with a hint, and
registering a new agent needs the broker's own exo version.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from exo_cli import __version__
from exo_cli.adapters import broker as adapter
from exo_cli.adapters import brokerio
from exo_cli.broker.calls import answer, error
from exo_cli.errors import ExoError, InvalidInput, StateError, UsageError

if TYPE_CHECKING:
    import socket

    from exo_cli.broker.serve import Broker, Slot


def handle(broker: Broker, conn: socket.socket, slot: Slot | None) -> None:
    """Serve one accepted connection (on its own thread) until it is done."""
    conn.settimeout(adapter.HELLO_TIMEOUT)
    try:
        hello = brokerio.recv(conn)
    except (OSError, ValueError):
        return  # not exo speaking: nothing to answer
    if hello is None:
        return  # a liveness probe (connect, close)
    pid, uid, _ = brokerio.peer(conn)
    try:
        kind = _check(hello, slot)
        if slot is None:
            if uid != os.getuid():
                raise StateError(f"A process of another user (uid {uid}) reached the broker")
            _ctl(broker, conn, hello)
            return
        from exo_cli.broker import guard

        proof = hello.get("proof") if isinstance(hello.get("proof"), str) else None
        peer = guard.identify(broker.env.store, slot.agent, pid=pid, uid=uid, proof=proof)
    except ExoError as exc:
        if slot is not None:
            broker.log(f"refused a {hello.get('kind')!r} connection on {slot.agent}'s socket (pid {pid}): {exc.message}")
        answer(conn, error(exc))
        return
    conn.settimeout(None)
    from exo_cli.broker import calls

    if kind == "mcp":
        calls.serve_mcp(broker, conn, slot, peer, hello)
    elif kind == "hook":
        answer(conn, calls.serve_hook(broker, conn, slot, peer, hello))
    else:
        answer(conn, calls.serve_call(broker, conn, slot, peer, hello))


def _check(hello: dict[str, Any], slot: Slot | None) -> str:
    """The connection's kind, once its protocol and kind fit the socket it came through."""
    if hello.get("hello") != adapter.PROTOCOL:
        raise StateError(
            f"This broker (exo {__version__}) speaks protocol {adapter.PROTOCOL}; the caller "
            f"(exo {hello.get('exo')!r}) speaks {hello.get('hello')!r}",
            hint="The agent was started by another exo version: it keeps working until it ends, and new agents "
            "use this version. `exo broker stop` restarts the broker once its agents are done.",
            protocol=adapter.PROTOCOL)
    kind = hello.get("kind")
    if kind not in adapter.KINDS:
        raise UsageError(f"Unknown kind of connection {kind!r}", hint=f"One of: {', '.join(adapter.KINDS)}.")
    if (slot is None) != (kind == "ctl"):
        where = "the control socket" if slot is None else "an agent's socket"
        raise InvalidInput(f"A {kind} connection cannot come through {where}", kind=kind)
    return str(kind)


def _ctl(broker: Broker, conn: socket.socket, hello: dict[str, Any]) -> None:
    answer(conn, {"ok": True, "exo": __version__, "protocol": adapter.PROTOCOL, "broker_pid": os.getpid()})
    try:
        req = brokerio.recv(conn)
    except (OSError, ValueError):
        return
    if req is None:
        return
    try:
        answer(conn, _command(broker, hello, req))
    except ExoError as exc:
        answer(conn, error(exc))


def _command(broker: Broker, hello: dict[str, Any], req: dict[str, Any]) -> dict[str, Any]:
    cmd = req.get("cmd")
    if cmd == "ping":
        with broker.lock:
            agents, connections = len(broker.slots), broker.connections
        return {"ok": True, "pid": os.getpid(), "exo": __version__, "protocol": adapter.PROTOCOL, "agents": agents,
                "connections": connections, "later": broker.later.pending, "state_dir": str(broker.state_dir)}
    if cmd == "register":
        if hello.get("exo") != __version__:
            raise StateError(f"This broker runs exo {__version__}; exo {hello.get('exo')!r} cannot add agents to it",
                             hint="It keeps serving its agents until they end; `exo broker stop` then lets this "
                             "version start its own.", broker_exo=__version__)
        agent = req.get("agent")
        if not isinstance(agent, str) or not agent:
            raise InvalidInput("register needs an agent id", field="agent")
        slot = broker.register(agent)
        return {"ok": True, "socket": slot.path}
    if cmd == "status":
        with broker.lock:
            carried = broker.net.carried() if broker.net is not None else {}
            sockets = [{"agent": s.agent, "socket": s.path, "gone": s.gone_since is not None,
                        "net_carried": carried.get(s.agent)} for s in broker.slots.values()]
        return {"ok": True, "sockets": sockets}
    if cmd == "stop":
        broker.log("asked to stop")
        broker.stop()
        return {"ok": True}
    raise UsageError(f"Unknown broker command {cmd!r}", hint="One of: ping, register, status, stop.")
