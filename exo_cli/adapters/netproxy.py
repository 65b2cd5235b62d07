"""The allow-list proxy of sandboxed agents, outside their sandboxes (HTTP ``CONNECT`` and plain HTTP).

A sandbox has its own network namespace (``bwrap --unshare-net``): only ``lo``. Its one way out
is the Unix socket this proxy listens on in the agent's own runtime folder, reached through the
bridge inside (``netbridge``), so the socket a connection came through names the agent. Each
request names a host and a port; the agent's ``Policy`` decides on the name as asked, before
anything is resolved (a refused name is never looked up: no DNS query carries data out). An
allowed name is resolved here, outside, and a name that resolves only to a loopback, link-local
or unspecified address is refused (a hostile DNS answer must not open the host's own services or
a cloud metadata endpoint; an IP literal in the allow-list is the way to name such an address).

Every refusal is logged (``<log folder>/<agent>.log``, JSON lines with time, agent, host, port
and why; cut at ``LOG_MAX``) and counted (``<agent>.refused``, one number, what ``exo agents``
shows as ``net_refused``). One ``NetProxy`` serves any number of agents: the team broker hosts
one (docs/architecture.md, "The network of a sandboxed agent").
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

from exo_cli.adapters import brokerio, netlog
from exo_cli.adapters.netbridge import answer_and_close, splice
from exo_cli.adapters.netpolicy import Policy, is_address, normalize_host, pin_address

MAX_HEAD = 16 << 10  # bytes of a request head; a longer one is refused
HEAD_TIMEOUT = 30.0  # seconds a client has to send its request head
CONNECT_TIMEOUT = 15.0  # seconds to reach an allowed host
MAX_CONNECTIONS = 256  # open connections of one agent (a thread each); more wait for one to end
HOP_HEADERS = (b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive", b"host")

Address = tuple[int, tuple[str, int]]  # (address family, (ip, port))
Resolver = Callable[[str, int], list[Address]]


class Refused(Exception):
    """A request the proxy will not carry: ``status`` is the HTTP answer, ``counted`` whether it is a refusal."""

    def __init__(self, status: int, reason: str, *, counted: bool = True, host: str = "-", port: int = 0) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.counted = counted
        self.host = host
        self.port = port


def _local(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    mapped = getattr(addr, "ipv4_mapped", None)
    addr = mapped or addr
    return addr.is_loopback or addr.is_link_local or addr.is_unspecified or addr.is_multicast


def system_resolve(host: str, port: int) -> list[Address]:
    """The addresses of ``host`` by this machine's resolver, without loopback/link-local/unspecified ones.

    ``localhost`` is the one name that is loopback by definition (no DNS answer makes it so): an
    allow-list that names it (a ``*_BASE_URL`` of ``http://localhost:PORT``) means the host's own.
    """
    if host == "localhost":
        return [(socket.AF_INET, ("127.0.0.1", port))]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Refused(502, f"cannot resolve {host}: {exc}", counted=False) from exc
    out = [(int(fam), (str(sa[0]), int(sa[1]))) for fam, _, _, _, sa in infos if not _local(str(sa[0]))]
    if not out:
        raise Refused(403, f"{host} resolves only to a local address")
    return out


class Request(NamedTuple):
    """A parsed request head: the target and what to send upstream first (b"" for a CONNECT)."""

    host: str
    port: int
    connect: bool
    forward: bytes  # the rewritten head (plain HTTP) plus the body bytes already read


def parse_head(head: bytes, rest: bytes) -> Request:
    """The target of one proxy request head (``head`` ends with CRLF CRLF); Refused(400) when malformed."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise Refused(400, "not an HTTP proxy request")
    method, target, version = parts
    try:
        text = target.decode("ascii")
    except UnicodeDecodeError as exc:
        raise Refused(400, "a target that is not ASCII") from exc
    if method == b"CONNECT":
        host, port = _host_port(text, None)
        return Request(host, port, True, rest)
    if not text.lower().startswith("http://"):
        raise Refused(400, "a plain request must name an absolute http:// URL (use CONNECT for https)")
    authority, slash, path = text[7:].partition("/")
    authority = authority.rpartition("@")[2]
    host, port = _host_port(authority, 80)
    # The Host header names the host the policy allowed, whatever the client wrote: another name there
    # would reach another site behind the same front (domain fronting).
    headers = [line for line in lines[1:] if line and line.split(b":", 1)[0].strip().lower() not in HOP_HEADERS]
    out = b"\r\n".join([b" ".join([method, ("/" + path if slash else "/").encode(), version]),
                        b"Host: " + authority.encode(), *headers, b"Connection: close", b"", b""])
    return Request(host, port, False, out + rest)


def _host_port(text: str, default: int | None) -> tuple[str, int]:
    if text.startswith("["):
        host, _, tail = text[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
    else:
        host, _, port_text = text.rpartition(":") if ":" in text else (text, "", "")
    if not port_text and default is not None:
        port = default
    elif port_text.isdigit() and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise Refused(400, f"no valid port in {text[:100]!r}")
    if not host:
        raise Refused(400, "no host")
    return host, port


class Agent:
    """One agent's listener, policy and refusal record."""

    def __init__(self, agent: str, sock: socket.socket, inode: int, path: str, policy: Policy, log_dir: Path,
                 record: str, pins: Mapping[str, str] | None = None) -> None:
        self.agent = agent
        self.pins = dict(pins or {})  # name -> ADDRESS[:PORT] connected to without a lookup ([sandbox] resolve)
        self.record = record  # the name of its files in log_dir (``netlog.stem``)
        self.sock = sock
        self.inode = inode
        self.path = path
        self.policy = policy
        self.log_dir = log_dir
        self.lock = threading.Lock()
        self.refused = netlog.refused_count(log_dir, record)
        self.carried = 0  # connections carried to an allowed host in this proxy's life
        self.open = 0  # connections being served
        self.paused = False  # at MAX_CONNECTIONS: not listened to until one ends

    def refuse(self, host: str, port: int, reason: str) -> None:
        """Log and count one refusal."""
        line = json.dumps({"time": round(time.time(), 3), "agent": self.agent, "host": host[:255], "port": port,
                           "reason": reason[:300]}) + "\n"
        with self.lock:
            self.refused += 1
            netlog.record(self.log_dir, self.record, self.refused, line)


class NetProxy:
    """The proxy: one listening Unix socket per agent, one thread per connection.

    ``resolve`` is how names are looked up (``system_resolve``); ``log`` gets one line per event
    worth a human's eye (the broker's log).
    """

    def __init__(self, *, resolve: Resolver = system_resolve, log: Callable[[str], None] | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT) -> None:
        self.resolve = resolve
        self.say = log or (lambda _text: None)
        self.connect_timeout = connect_timeout
        self.sel = selectors.DefaultSelector()
        self.agents: dict[str, Agent] = {}
        self.lock = threading.Lock()
        self.wake_r, self.wake_w = os.pipe()
        self.sel.register(self.wake_r, selectors.EVENT_READ, None)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="exo-netproxy", daemon=True)
        self.thread.start()

    def add(self, agent: str, folder: Path, policy: Policy, log_dir: Path, *, record: str | None = None,
            pins: Mapping[str, str] | None = None) -> str:
        """Listen for ``agent`` on ``folder``/sock (made private); return the socket's path.

        Refusals go to ``log_dir``/``record`` (default: the agent's id) ``.log`` and ``.refused``.
        ``pins`` (``netpolicy.parse_pins``): allowed names reached at the address given, never looked up.
        """
        from exo_cli.adapters.files import ensure_private_dir

        ensure_private_dir(folder)
        ensure_private_dir(log_dir, parents=True)
        path = str(folder / "sock")
        self.remove(agent)
        sock, inode = brokerio.listen(path)
        sock.setblocking(False)
        entry = Agent(agent, sock, inode, path, policy, log_dir, record or agent, pins)
        with self.lock:
            self.agents[agent] = entry
            self.sel.register(sock, selectors.EVENT_READ, entry)
        self._wake()
        return path

    def carried(self) -> dict[str, int]:
        """Agent -> how many connections its proxy carried to an allowed host (since this proxy started)."""
        with self.lock:
            return {name: entry.carried for name, entry in self.agents.items()}

    def remove(self, agent: str, *, keep_folder: bool = False) -> None:
        """Stop listening for ``agent`` (connections already open run to their end); ``keep_folder``: see
        ``brokerio.close_owned``."""
        with self.lock:
            entry = self.agents.pop(agent, None)
            if entry is None:
                return
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(entry.sock)
        brokerio.close_owned(entry.sock, entry.path, entry.inode, keep_folder=keep_folder)
        self._wake()

    def close(self) -> None:
        """Stop every listener and the accept thread."""
        for agent in list(self.agents):
            self.remove(agent)
        self.stopping.set()
        self._wake()
        self.thread.join(timeout=10)
        with contextlib.suppress(OSError):
            os.close(self.wake_r)
            os.close(self.wake_w)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self.wake_w, b"!")

    def _loop(self) -> None:
        while not self.stopping.is_set():
            for key, _ in self.sel.select(1.0):
                if key.data is None:
                    with contextlib.suppress(OSError):
                        os.read(self.wake_r, 4096)
                    continue
                entry: Agent = key.data
                try:
                    conn, _ = entry.sock.accept()
                except OSError:
                    continue
                self._count(entry, +1)
                threading.Thread(target=self._serve, args=(entry, conn), name="exo-netproxy-conn",
                                 daemon=True).start()

    # ------------------------------------------------------------------ one connection

    def _serve(self, entry: Agent, conn: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            conn.setblocking(True)
            conn.settimeout(HEAD_TIMEOUT)
            head, rest = _read_head(conn)
            request = parse_head(head, rest)
            upstream = self._open(entry, request)
            with entry.lock:
                entry.carried += 1
            if request.connect:
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if request.forward:
                upstream.sendall(request.forward)
            conn.settimeout(None)
            upstream.settimeout(None)
            splice(conn, upstream)
        except Refused as exc:
            if exc.counted:
                entry.refuse(exc.host, exc.port, exc.reason)
                self.say(f"network: refused {entry.agent} -> {exc.host}:{exc.port} ({exc.reason})")
            self._answer(conn, exc)
        except OSError:
            pass  # the client or the upstream went away
        finally:
            if upstream is not None:
                upstream.close()
            conn.close()
            self._count(entry, -1)

    def _count(self, entry: Agent, delta: int) -> None:
        """One connection more or less; at ``MAX_CONNECTIONS`` the agent's next ones wait in the backlog."""
        with self.lock:
            entry.open += delta
            if entry.open >= MAX_CONNECTIONS and not entry.paused and self.agents.get(entry.agent) is entry:
                entry.paused = True
                self.sel.unregister(entry.sock)
            elif entry.open < MAX_CONNECTIONS and entry.paused and self.agents.get(entry.agent) is entry:
                entry.paused = False
                self.sel.register(entry.sock, selectors.EVENT_READ, entry)
                self._wake()

    def _open(self, entry: Agent, request: Request) -> socket.socket:
        host, port = request.host, request.port
        name = normalize_host(host)
        if name is None or not entry.policy.allows(name, port):
            from exo_cli.validate import visible

            shown = visible(host[:255])
            reason = "not in the allow-list" if name is not None else "not a valid host name"
            raise Refused(403, reason, host=shown, port=port)
        pin = entry.pins.get(name)
        if pin is not None:  # the user named its address: no lookup, and a loopback one is meant
            ip, to = pin_address(pin, port)
            name, port = ip, to
        try:
            addresses = [(_family(name), (name, port))] if is_address(name) else self.resolve(name, port)
        except Refused as exc:
            exc.host, exc.port = name, port
            raise
        last: OSError | None = None
        for family, sockaddr in addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a relay holds back nothing (Nagle)
            sock.settimeout(self.connect_timeout)
            try:
                sock.connect(sockaddr)
            except OSError as exc:
                sock.close()
                last = exc
                continue
            return sock
        raise Refused(502, f"cannot reach {name}:{port}: {last}", counted=False)

    def _answer(self, conn: socket.socket, exc: Refused) -> None:
        words = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}.get(exc.status, "Error")
        target = f"{exc.host}:{exc.port}: " if exc.port else ""
        hint = " ([sandbox] allow_hosts)" if exc.status == 403 else ""
        body = f"exo: {target}{exc.reason}{hint}\n".encode("utf-8", "replace")
        head = (f"HTTP/1.1 {exc.status} {words}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\nX-Exo-Refused: {int(exc.counted)}\r\n\r\n")
        answer_and_close(conn, head.encode() + body)


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _read_head(conn: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD:
            raise Refused(400, "request head too long")
        chunk = conn.recv(4096)
        if not chunk:  # a connection closed before a word is no attempt to go anywhere
            raise Refused(400, "the connection closed before a whole request head", counted=bool(data))
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    if len(head) > MAX_HEAD:
        raise Refused(400, "request head too long")
    return head, rest


# --------------------------------------------------------------------------- the sandbox's side

INSIDE = "/run/exo-net"  # where the proxy's socket folder appears inside the sandbox
PROXY_PORT = 3128  # the bridge's port inside (the sandbox's own namespace: never taken)
BRIDGE = Path(__file__).with_name("netbridge.py")


class NetworkPlan(NamedTuple):
    """What the sandbox builder adds for the network: run it with ``--unshare-net`` and

    ``--ro-bind SRC DST`` for each of ``binds`` (the proxy's socket folder: a socket in a read-only
    folder still connects), ``--setenv`` for each of ``env``, and ``prelude`` before the agent's argv
    (the bridge, which ``exec``s the agent once its listeners are up).
    """

    binds: tuple[tuple[str, str], ...]
    env: dict[str, str]
    prelude: tuple[str, ...]
    policy: Policy


def network_plan(folder: Path, policy: Policy, *, python: str | None = None, tunnels: bool = True) -> NetworkPlan:
    """The plan for an agent whose proxy listens in ``folder`` (``NetProxy.add``) with ``policy``.

    Every loopback address with one port in the policy (a model server on the host's 127.0.0.1)
    also gets a tunnel on the same port inside, so a client that never proxies 127.0.0.1 reaches it
    (``tunnels=False``: none, so such a client must use the proxy variables).
    """
    import sys

    url = f"http://127.0.0.1:{PROXY_PORT}"
    env = {name: url for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy")}
    env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1,::1"
    prelude = [python or sys.executable, "-I", "-S", str(BRIDGE), f"{INSIDE}/sock", str(PROXY_PORT)]
    taken = {PROXY_PORT}
    for rule in policy.rules:
        loopback = rule.host == "localhost" or (is_address(rule.host) and _local(rule.host))
        if tunnels and loopback and len(rule.ports) == 1 and rule.ports[0] not in taken:
            taken.add(rule.ports[0])
            target = f"[{rule.host}]:{rule.ports[0]}" if ":" in rule.host else f"{rule.host}:{rule.ports[0]}"
            prelude += ["--tunnel", f"{rule.ports[0]}={target}"]
    return NetworkPlan(((str(folder), INSIDE),), env, (*prelude, "--"), policy)
