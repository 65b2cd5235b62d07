"""``exo mcp`` of an agent with a socket: pipe its MCP session to the broker (stdlib only, no SDK).

The agent CLI starts ``exo mcp`` and speaks MCP on its stdin and stdout (newline-delimited
JSON-RPC). This relay says hello on the agent's socket (``kind: mcp``, the role and ``--compat``
sets asked for, its folder and environment, and a relay id), then copies lines both ways: the
broker's session for this agent serves the very tools ``exo mcp`` serves (the same
``build_server``), and a client's ``notifications/cancelled`` reaches the tool call it names.

When the broker goes away mid-session (killed, restarted), the relay starts it again if it can
(``relay.restart``), reconnects, replays the client's ``initialize`` and ``notifications/
initialized`` (swallowing the second answer) and sends every request still unanswered again. A
tool call's request key is the relay id and its JSON-RPC id, the same on both connections: a
``wait`` that had consumed messages hands the same ones back, never others (``cancel.key``).
"""

from __future__ import annotations

import json
import os
import selectors
import sys
import time
import uuid

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

RECONNECT = 60.0  # seconds the relay keeps trying to reach a broker that went away


class Pump:
    """The lines in flight between the agent CLI (stdin/stdout) and the broker's session (the socket)."""

    def __init__(self, environ: Mapping[str, str], role: str, compat: list[str]) -> None:
        self.environ = environ
        self.role = role
        self.compat = compat
        self.relay = uuid.uuid4().hex
        self.initialize: bytes | None = None  # the client's initialize request, replayed on reconnect
        self.init_answered = False  # the client had the answer to it (a replay's answer is swallowed then)
        self.initialized: bytes | None = None
        self.pending: dict[str, bytes] = {}  # JSON-RPC id -> the request line still unanswered
        self.swallow: set[str] = set()  # ids of replayed requests whose answer the client already had
        self.sock: Any = None

    # ------------------------------------------------------------------ connecting

    def connect(self, *, first: bool) -> None:
        """Say hello on the agent's socket (``relay.hello``: starting the broker if need be); raise when it cannot."""
        from exo_cli.adapters import broker as adapter
        from exo_cli.relay import hello

        try:
            cwd: str | None = os.getcwd()
        except OSError:
            cwd = None
        fields = {"role": self.role, "compat": self.compat, "cwd": cwd, "environ": dict(self.environ),
                  "relay": self.relay}
        sock, _ = hello(self.environ, "mcp", fields, wait=adapter.HELLO_TIMEOUT * 3 if first else RECONNECT)
        sock.settimeout(None)
        self.sock = sock

    def replay(self) -> None:
        """On a new connection: the client's handshake again (its answer swallowed), then what is unanswered."""
        lines: list[bytes] = []
        if self.initialize is not None:
            ident = _ident(self.initialize)
            if ident is not None and self.init_answered:
                self.swallow.add(ident)
            lines.append(self.initialize)
        if self.initialized is not None:
            lines.append(self.initialized)
        lines += list(self.pending.values())
        if lines:
            self.sock.sendall(b"".join(lines))

    # ------------------------------------------------------------------ the lines

    def from_client(self, line: bytes) -> None:
        """Note what a line from the agent CLI is (handshake, request, cancellation), then send it."""
        msg = _parse(line)
        if isinstance(msg, dict):
            method = msg.get("method")
            ident = _key(msg.get("id")) if "id" in msg else None
            if method == "initialize":
                self.initialize = line
            elif method == "notifications/initialized":
                self.initialized = line
            elif method == "notifications/cancelled":
                params = msg.get("params")
                if isinstance(params, dict) and "requestId" in params:
                    self.pending.pop(_key(params["requestId"]), None)
            elif isinstance(method, str) and ident is not None:
                self.pending[ident] = line
        self.sock.sendall(line)

    def from_broker(self, line: bytes) -> bytes | None:
        """The line for the agent CLI (None: an answer it already had), its request marked answered."""
        msg = _parse(line)
        if isinstance(msg, dict) and "method" not in msg and "id" in msg:
            ident = _key(msg["id"])
            if ident in self.swallow:
                self.swallow.discard(ident)
                return None
            if self.initialize is not None and ident == _ident(self.initialize):
                self.init_answered = True
            self.pending.pop(ident, None)
        return line

    def fail_pending(self, why: str) -> bytes:
        """A JSON-RPC error for every request still unanswered (the broker could not be reached again)."""
        out = b""
        for line in self.pending.values():
            msg = _parse(line)
            if isinstance(msg, dict):
                err = {"jsonrpc": "2.0", "id": msg.get("id"), "error": {"code": -32005, "message": why}}
                out += json.dumps(err).encode() + b"\n"
        self.pending.clear()
        return out

    # ------------------------------------------------------------------ the loop

    def run(self) -> int:
        stdin = sys.stdin.buffer.fileno()
        stdout = sys.stdout.buffer.fileno()
        os.set_blocking(stdin, False)
        # poll, not epoll: epoll refuses a stdin that is a regular file or /dev/null (EPERM)
        sel: selectors.BaseSelector = getattr(selectors, "PollSelector", selectors.SelectSelector)()
        sel.register(stdin, selectors.EVENT_READ, "client")
        sel.register(self.sock, selectors.EVENT_READ, "broker")
        inbuf = b""
        outbuf = b""
        client_open = True
        while True:
            for key, _ in sel.select():
                if key.data == "client":
                    try:
                        chunk = os.read(stdin, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        client_open = False
                        sel.unregister(stdin)
                        if inbuf:
                            self.from_client(inbuf + b"\n")
                            inbuf = b""
                        _close_write(self.sock)
                        continue
                    inbuf += chunk
                    *lines, inbuf = inbuf.split(b"\n")
                    for line in lines:
                        if line.strip():
                            self._to_broker(line + b"\n", sel)
                else:
                    try:
                        chunk = self.sock.recv(65536)
                    except OSError:
                        chunk = b""
                    if not chunk:
                        if not client_open:
                            return 0  # the session ended as the client asked
                        sel.unregister(self.sock)
                        if not self._reconnect(sel):
                            return 7
                        continue
                    outbuf += chunk
                    *lines, outbuf = outbuf.split(b"\n")
                    for line in lines:
                        out = self.from_broker(line + b"\n")
                        if out is not None:
                            _write_all(stdout, out)

    def _to_broker(self, line: bytes, sel: selectors.BaseSelector) -> None:
        try:
            self.from_client(line)
        except OSError:
            # the broker went away while we wrote: the line is noted (pending) or replayed on reconnect
            try:
                sel.unregister(self.sock)
            except (KeyError, ValueError):
                pass
            if not self._reconnect(sel):
                _write_all(sys.stdout.buffer.fileno(), self.fail_pending("exo's broker cannot be reached"))
                raise SystemExit(7) from None

    def _reconnect(self, sel: selectors.BaseSelector) -> bool:
        """Connect again and replay; False (with the unanswered requests failed) when the broker stays away."""
        from exo_cli.errors import ExoError

        try:
            self.sock.close()
        except OSError:
            pass
        try:
            self.connect(first=False)
            self.replay()
        except (ExoError, OSError) as exc:
            message = getattr(exc, "message", None) or str(exc)
            sys.stderr.write(f"exo mcp: exo's broker went away and cannot be reached again: {message}\n")
            _write_all(sys.stdout.buffer.fileno(), self.fail_pending(f"exo's broker cannot be reached: {message}"))
            return False
        sel.register(self.sock, selectors.EVENT_READ, "broker")
        return True


def _parse(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _key(ident: Any) -> str:
    """A JSON-RPC id as a dictionary key (1 and "1" are different ids)."""
    return json.dumps(ident)


def _ident(line: bytes) -> str | None:
    msg = _parse(line)
    return _key(msg["id"]) if isinstance(msg, dict) and "id" in msg else None


def _close_write(sock: Any) -> None:
    import _socket

    try:
        sock.shutdown(_socket.SHUT_WR)
    except OSError:
        pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        view = view[n:]


def serve(environ: Mapping[str, str], role: str, compat: list[str]) -> int:
    """Relay this process's MCP session to the broker until the client closes it; the exit status."""
    from exo_cli.errors import ExoError

    pump = Pump(environ, role, compat)
    try:
        pump.connect(first=True)
    except ExoError as exc:
        from exo_cli.render import warn

        warn(f"Error: {exc.message}")
        if exc.hint:
            warn(f"Hint: {exc.hint}")
        return exc.exit_code
    try:
        return pump.run()
    except BrokenPipeError:  # the client went away
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        try:
            pump.sock.close()
        except OSError:
            pass


def parse(argv: list[str]) -> tuple[str, list[str]] | None:
    """(role, compat) from ``exo mcp``'s own arguments, or None to let the command line parse them."""
    role = "auto"
    compat: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        value = argv[i + 1] if i + 1 < len(argv) else None
        if arg in ("--role", "--compat") and value is not None and not value.startswith("-"):
            i += 2
        elif arg.startswith(("--role=", "--compat=")):
            arg, value = arg.split("=", 1)
            i += 1
        else:
            return None  # --help, an unknown option: Click answers as before
        if arg == "--role":
            if value not in ("auto", "tl", "dev"):
                return None
            role = value
        else:
            from exo_cli.records import MCP_COMPAT

            if value not in MCP_COMPAT:
                return None
            compat.append(str(value))
    return role, compat
