"""The bridge inside a sandbox's own network namespace: 127.0.0.1 ports -> the proxy's Unix socket.

Run as a file, before the agent, by the sandbox (``python3 -I -S netbridge.py SOCKET PORT
[--tunnel PORT=HOST:PORT]... -- CMD...``): stdlib only, no network and no resolver needed. It binds
127.0.0.1:PORT (the agent's ``HTTPS_PROXY``), which passes every connection through to the
proxy's socket as it is, and each ``--tunnel`` port, which opens a ``CONNECT HOST:PORT`` through the
proxy first (a model server on the host's loopback, reached by clients that never use a proxy
for 127.0.0.1). Then it forks: the parent becomes the agent (``exec``), so the listeners are up
before the agent's first connection; the child serves them in a process group of its own (the
terminal's Ctrl-C is the agent's) and dies with the agent (``PR_SET_PDEATHSIG``).

``splice`` is also the proxy's own copy loop (``netproxy``).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import sys
import threading

CHUNK = 64 << 10
MAX_HEAD = 16 << 10
EXIT_USAGE = 2
EXIT_NO_LOOPBACK = 71  # EX_OSERR: 127.0.0.1 cannot be bound (loopback down in the namespace)


def splice(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until both sides are done (a half-close is passed on)."""
    sel = selectors.DefaultSelector()
    peers = {a: b, b: a}
    open_ = {a, b}
    for s in open_:
        sel.register(s, selectors.EVENT_READ)
    try:
        while open_:
            for key, _ in sel.select():
                src: socket.socket = key.fileobj  # type: ignore[assignment]
                dst = peers[src]
                try:
                    data = src.recv(CHUNK)
                except OSError:
                    data = b""
                if data:
                    try:
                        dst.sendall(data)
                    except OSError:
                        return
                    continue
                sel.unregister(src)
                open_.discard(src)
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
    finally:
        sel.close()


def answer_and_close(sock: socket.socket, data: bytes) -> None:
    """Send ``data``, then close without a reset: what the peer sent unread would make the kernel send an
    RST, which can reach the peer before the answer does (it would read ECONNRESET, not the answer)."""
    try:
        sock.settimeout(5.0)
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(65536):  # until the peer closes too (or 5 s of silence)
            pass
    except OSError:
        pass
    finally:
        sock.close()


def _tunnel(upstream: socket.socket, target: str) -> bool:
    """Ask the proxy for a CONNECT to ``target``; whether it answered 200 (extra bytes are never sent first)."""
    upstream.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode("ascii"))
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = upstream.recv(1)  # byte by byte: nothing after the head may be swallowed
        if not chunk or len(data) > MAX_HEAD:
            return False
        data += chunk
    parts = data.split(b" ", 2)
    return len(parts) >= 2 and parts[1] == b"200"


_WHY = b"exo: the sandbox's network proxy does not answer (see exo broker status)\n"
DOWN = b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (
    len(_WHY), _WHY)


def _serve(client: socket.socket, path: str, target: str | None) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            upstream.connect(path)
        except OSError:
            if target is None:  # a proxy client reads an answer: say why rather than just hang up
                answer_and_close(client, DOWN)
            return
        if target is None or _tunnel(upstream, target):
            splice(client, upstream)
    except OSError:
        pass
    finally:
        upstream.close()
        client.close()


def _listen(port: int) -> list[socket.socket]:
    """Listeners on 127.0.0.1:port (and ::1 where the namespace has it)."""
    out = []
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(128)
        except OSError:
            sock.close()
            if family == socket.AF_INET:
                raise
            continue
        out.append(sock)
    return out


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent (the agent) exits; exit now if it already has."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(0)


def _run(listeners: list[tuple[socket.socket, str | None]], path: str) -> None:
    sel = selectors.DefaultSelector()
    for sock, target in listeners:
        sel.register(sock, selectors.EVENT_READ, target)
    while True:
        for key, _ in sel.select():
            try:
                client, _ = key.fileobj.accept()  # type: ignore[union-attr]
                # a relay must not hold back small writes (Nagle): a streamed answer's chunks would
                # wait for the client's delayed ACK, 40 ms each time
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                continue
            threading.Thread(target=_serve, args=(client, path, key.data), daemon=True).start()


def parse_args(argv: list[str]) -> tuple[str, int, list[tuple[int, str]], list[str]]:
    """``SOCKET PORT [--tunnel PORT=HOST:PORT]... -- CMD...`` -> (socket, port, tunnels, cmd); ValueError when bad."""
    if "--" not in argv:
        raise ValueError("no -- before the command")
    cut = argv.index("--")
    head, cmd = argv[:cut], argv[cut + 1:]
    if len(head) < 2 or not cmd:
        raise ValueError("usage: netbridge.py SOCKET PORT [--tunnel PORT=HOST:PORT]... -- CMD...")
    path, port, rest = head[0], int(head[1]), head[2:]
    tunnels = []
    while rest:
        if rest[0] != "--tunnel" or len(rest) < 2 or "=" not in rest[1]:
            raise ValueError(f"unexpected {rest[0]!r}")
        local, target = rest[1].split("=", 1)
        tunnels.append((int(local), target))
        rest = rest[2:]
    return path, port, tunnels, cmd


def main(argv: list[str]) -> None:
    try:
        path, port, tunnels, cmd = parse_args(argv)
    except ValueError as exc:
        sys.stderr.write(f"exo netbridge: {exc}\n")
        sys.exit(EXIT_USAGE)
    listeners: list[tuple[socket.socket, str | None]] = []
    try:
        for local, target in [(port, None), *tunnels]:
            listeners += [(sock, target) for sock in _listen(local)]
    except OSError as exc:
        sys.stderr.write(f"exo netbridge: cannot listen on 127.0.0.1 in the sandbox ({exc}): is lo up?\n")
        sys.exit(EXIT_NO_LOOPBACK)
    parent = os.getpid()
    if os.fork() == 0:
        try:
            os.setpgid(0, 0)  # out of the terminal's foreground group: Ctrl-C and SIGHUP are the agent's
            for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
                signal.signal(sig, signal.SIG_IGN)
            _die_with_parent(parent)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            _run(listeners, path)
        finally:
            os._exit(0)
    for sock, _ in listeners:
        sock.close()
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        sys.stderr.write(f"exo netbridge: cannot run {cmd[0]}: {exc.strerror}\n")
        sys.exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
