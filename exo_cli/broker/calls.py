"""What an agent's connection asks for: a call, a hook, or its MCP session.

Each builds the calling agent's ``Env`` (``agent_env``: the caller fixed to the socket's agent,
the request's folder and environment checked by ``guard``, the broker's store shared) and goes
through ``registry.invoke`` exactly as the command line does, so roles, routing to other hosts
and errors are the same. A blocking operation runs in a worker thread: when its relay goes
away (the agent's ``exo wait`` interrupted) the operation sees ``cancel.cancelled()``.
"""

from __future__ import annotations

import select
import threading
import traceback
from typing import TYPE_CHECKING, Any

from exo_cli import __version__, cancel
from exo_cli.adapters import broker as adapter
from exo_cli.errors import ExoError, NotFound

if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

    from exo_cli.broker.guard import Peer
    from exo_cli.broker.serve import Broker, Slot
    from exo_cli.env import Env


def agent_env(broker: Broker, slot: Slot, peer: Peer, req: dict[str, Any]) -> Env:
    """The ``Env`` of one request of ``peer.agent``: its folder and environment checked, the caller fixed."""
    from exo_cli.broker import guard
    from exo_cli.config_paths import user_config_dir
    from exo_cli.env import Caller, Env

    agent = peer.agent
    cwd = guard.checked_cwd(agent, req.get("cwd"), bool(req.get("cwd_given")), broker.repo_root)
    environ = guard.request_environ(req.get("environ"), agent, state_dir=str(broker.state_dir), socket=slot.path,
                                    proof=peer.proof, repo_root=broker.repo_root,
                                    config_dir=str(user_config_dir(broker.env.environ)))
    fault = broker.env.environ.get("EXO_FAULT")
    if fault:  # the broker's own fault points (a reliability test started it so), never an agent's
        environ["EXO_FAULT"] = fault
    return Env(cwd, environ, caller=Caller(agent.id, agent.role, "socket"), pid=peer.pid,
               shared={"state_path": broker.env.state_path, "store": broker.env.store, "defer": broker.later.defer})


def answer(conn: socket.socket, obj: dict[str, Any]) -> None:
    """Send one answer frame; an answer too large becomes its error; a relay that left gets nothing."""
    from exo_cli.adapters import brokerio

    try:
        brokerio.send(conn, obj)
    except ExoError as exc:
        try:
            brokerio.send(conn, error(exc))
        except OSError:
            pass
    except OSError:
        pass


def error(exc: ExoError) -> dict[str, Any]:
    """The answer frame of a refusal or a failed operation."""
    return {"ok": False, "exo": __version__, "protocol": adapter.PROTOCOL, "error": exc.to_dict()["error"]}


def _ok(result: Any) -> dict[str, Any]:
    from exo_cli.records import to_jsonable

    return {"ok": True, "exo": __version__, "protocol": adapter.PROTOCOL, "result": to_jsonable(result)}


def _failed(broker: Broker, what: str, exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, ExoError):
        return error(exc)
    broker.log(f"{what}: internal error: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    err = ExoError(f"internal error: {type(exc).__name__}: {exc}",
                   hint="This is a bug in exo; the broker's log (exo broker status) has the traceback.")
    return error(err)


def serve_call(broker: Broker, conn: socket.socket, slot: Slot, peer: Peer, req: dict[str, Any]) -> dict[str, Any]:
    """Run the operation the relay asked for, as the socket's agent; the answer frame."""
    from exo_cli import registry
    from exo_cli.broker import guard
    from exo_cli.schema import check_call

    name = req.get("op")
    if name == "":  # who am I: the relay's Env.caller
        return {"ok": True, "exo": __version__, "protocol": adapter.PROTOCOL, "result": None,
                "agent": peer.agent.id, "role": peer.agent.role}
    try:
        try:
            spec = registry.get(str(name))
        except KeyError:
            raise NotFound(f"exo {__version__} has no operation {name!r}", op=name) from None
        given = req.get("args")
        args = check_call(spec, given if isinstance(given, dict) else {})
        env = agent_env(broker, slot, peer, req)
        registry.check_role(spec, env)  # a role's refusal first: it says more than a path's
        allowed = guard.roots(peer.agent, broker.repo_root)
        guard.check_args(spec, args, cwd=str(env.cwd), allowed=allowed, agent=peer.agent.id)
        if spec.name == "hook":  # a hook sent as a call: its payload is checked all the same
            guard.check_payload(args.get("payload"), allowed=allowed,
                                transcripts=guard.transcript_roots(broker.env.environ), agent=peer.agent.id)
        key = req.get("key") if isinstance(req.get("key"), str) else None
        result = _run(conn, lambda: registry.invoke(spec.name, env, **args), blocking=spec.blocking,
                      key=f"{peer.agent.id}:{key}" if key else None)
        return _ok(result)
    except BaseException as exc:
        if not isinstance(exc, Exception):
            raise
        return _failed(broker, f"{peer.agent.id} {name}", exc)


def serve_hook(broker: Broker, conn: socket.socket, slot: Slot, peer: Peer, req: dict[str, Any]) -> dict[str, Any]:
    """Run ``exo hook EVENT`` for the socket's agent once its payload's paths are checked; the answer frame."""
    from exo_cli import registry
    from exo_cli.broker import guard

    try:
        env = agent_env(broker, slot, peer, req)
        payload = req.get("payload")
        guard.check_payload(payload, allowed=guard.roots(peer.agent, broker.repo_root),
                            transcripts=guard.transcript_roots(broker.env.environ), agent=peer.agent.id)
        result = registry.invoke("hook", env, event=str(req.get("event") or ""), cli=str(req.get("cli") or "claude"),
                                 payload=payload if isinstance(payload, str) else "")
        return _ok(result)
    except Exception as exc:
        return _failed(broker, f"{peer.agent.id} hook", exc)


def serve_mcp(broker: Broker, conn: socket.socket, slot: Slot, peer: Peer, hello: dict[str, Any]) -> None:
    """Serve the agent's MCP session on this connection (the hello answered once the server is built)."""
    from exo_cli.mcp_server import serve_socket

    try:
        env = agent_env(broker, slot, peer, hello)
    except Exception as exc:
        answer(conn, _failed(broker, f"{peer.agent.id} mcp", exc))
        return
    role = str(hello.get("role")) if hello.get("role") in ("auto", "tl", "dev") else "auto"
    compat = [c for c in hello.get("compat") or [] if isinstance(c, str)] if isinstance(hello.get("compat"), list) else []
    relay = hello.get("relay") if isinstance(hello.get("relay"), str) else None

    def started(served_role: str) -> None:
        answer(conn, {"ok": True, "exo": __version__, "protocol": adapter.PROTOCOL, "agent": peer.agent.id,
                            "role": served_role})

    def refused(exc: BaseException) -> None:
        answer(conn, _failed(broker, f"{peer.agent.id} mcp", exc))

    serve_socket(env, role, compat, conn, started=started, refused=refused,
                 key_prefix=f"{peer.agent.id}:{relay}" if relay else None)


def _run(conn: socket.socket, fn: Callable[[], Any], *, blocking: bool, key: str | None) -> Any:
    """``fn()``; a blocking one in a worker thread, cancelled when the relay closes its connection."""
    if not blocking:
        return fn()
    event = threading.Event()
    box: dict[str, Any] = {}

    def work() -> None:
        with cancel.scope(event, key=key):
            try:
                box["result"] = fn()
            except BaseException as exc:  # handed to the connection's thread
                box["error"] = exc

    worker = threading.Thread(target=work, name="exo-call", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.2)
        if not event.is_set() and _gone(conn):
            event.set()
    if "error" in box:
        raise box["error"]
    return box.get("result")


def _gone(conn: socket.socket) -> bool:
    """Whether the relay closed its side (it sends nothing after its request)."""
    import socket as socketmod

    try:
        ready, _, _ = select.select([conn], [], [], 0)
        if not ready:
            return False
        return conn.recv(1, socketmod.MSG_PEEK) == b""
    except OSError:
        return True
