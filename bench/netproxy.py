"""The sandbox's network path (issue 32): what the allow-list proxy and the bridge add.

A small HTTP/1.1 server on 127.0.0.1 (keep-alive, 64-byte answers). Measured in one run, each
path interleaved with the direct one (medians of ``--runs`` rounds of ``--n`` operations):

1. per connection: open, one GET, read the answer, close; directly, through the proxy's Unix
   socket (a ``CONNECT`` first), and through the bridge (TCP 127.0.0.1 -> the bridge -> the Unix
   socket -> the proxy -> the server: what a sandboxed agent pays);
2. per request: ``--n`` GETs on one kept-alive connection, directly and through bridge + proxy;
3. a 256 MiB download (MiB/s, median of 3) directly and through bridge + proxy;
4. memory: RSS of one process hosting the proxy for 30 agents against 30 processes hosting one
   each (the per-team against the per-agent design).

    python bench/netproxy.py [--runs 7] [--n 200]
"""

from __future__ import annotations

import argparse
import http.server
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, bench_env  # noqa: E402

sys.path.insert(0, str(ROOT))
from exo_cli.adapters import netpolicy  # noqa: E402
from exo_cli.adapters.netproxy import BRIDGE, NetProxy  # noqa: E402

BODY = b"x" * 64
BIG = 256 << 20  # bytes of the download case
MIB = b"y" * (1 << 20)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if self.path == "/big":  # a download: BIG bytes in 1 MiB writes
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % BIG)
            for _ in range(BIG >> 20):
                self.wfile.write(MIB)
            return
        # one write: head and body apart would meet Nagle and the client's delayed ACK (40 ms) on every path
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)

    def log_message(self, *args: object) -> None:
        pass


def read_answer(sock: socket.socket, buf: bytearray) -> None:
    """Read one HTTP answer with a Content-Length body (what is left over stays in ``buf``)."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(rest) < length:
        rest += sock.recv(65536)
    buf[:] = rest[length:]


def get(sock: socket.socket, buf: bytearray) -> None:
    sock.sendall(b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
    read_answer(sock, buf)


def tunnel(sock: socket.socket, port: int) -> None:
    sock.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(1)
    assert b" 200 " in data.split(b"\r\n")[0], data


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    tmp = Path(tempfile.mkdtemp(prefix="exo-netbench-", dir="/tmp"))
    proxy = NetProxy()
    path = proxy.add("bench", tmp / "net", netpolicy.parse([f"127.0.0.1:{port}"]), tmp / "log")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        bport = probe.getsockname()[1]
    bridge = subprocess.Popen([sys.executable, "-I", "-S", str(BRIDGE), path, str(bport), "--", "sleep", "3600"])
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", bport), timeout=5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)

    def direct() -> socket.socket:
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def via_proxy() -> socket.socket:
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        tunnel(s, port)
        return s

    def via_bridge() -> socket.socket:
        s = socket.create_connection(("127.0.0.1", bport))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tunnel(s, port)
        return s

    def per_connection(opener: Callable[[], socket.socket]) -> float:
        t0 = time.perf_counter()
        for _ in range(args.n):
            with opener() as s:
                get(s, bytearray())
        return (time.perf_counter() - t0) / args.n * 1000

    def per_request(opener: Callable[[], socket.socket]) -> float:
        with opener() as s:
            buf = bytearray()
            get(s, buf)
            t0 = time.perf_counter()
            for _ in range(args.n):
                get(s, buf)
            return (time.perf_counter() - t0) / args.n * 1000

    def download(opener: Callable[[], socket.socket]) -> float:
        """MiB/s of one BIG download."""
        with opener() as s:
            t0 = time.perf_counter()
            s.sendall(b"GET /big HTTP/1.1\r\nHost: bench\r\n\r\n")
            got = 0
            while got < BIG:
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                got += len(chunk)
            return (BIG >> 20) / (time.perf_counter() - t0)

    cases = {"direct": direct, "proxy (Unix socket + CONNECT)": via_proxy, "bridge + proxy (the sandbox's path)": via_bridge}
    conn: dict[str, list[float]] = {k: [] for k in cases}
    req: dict[str, list[float]] = {"direct": [], "bridge + proxy (the sandbox's path)": []}
    for _ in range(args.runs):
        for name, opener in cases.items():
            conn[name].append(per_connection(opener))
        for name in req:
            req[name].append(per_request(cases[name]))
    rate: dict[str, list[float]] = {"direct": [], "bridge + proxy (the sandbox's path)": []}
    for _ in range(3):
        for name in rate:
            rate[name].append(download(cases[name]))
    bridge.kill()
    bridge.wait()
    proxy.close()
    server.shutdown()

    load = os.getloadavg()[0]
    print(f"netproxy: {args.runs} rounds of {args.n}, load average {load:.2f}")
    print(f"{'per connection (open, GET, close)':45} {'ms':>8} {'x direct':>9} {'added ms':>9}")
    base = statistics.median(conn["direct"])
    for name, values in conn.items():
        med = statistics.median(values)
        print(f"{name:45} {med:8.3f} {med / base:9.2f} {med - base:9.3f}")
    print(f"{'per request (kept-alive connection)':45} {'ms':>8} {'x direct':>9} {'added ms':>9}")
    base = statistics.median(req["direct"])
    for name, values in req.items():
        med = statistics.median(values)
        print(f"{name:45} {med:8.3f} {med / base:9.2f} {med - base:9.3f}")
    added_conn = statistics.median(conn["bridge + proxy (the sandbox's path)"]) - statistics.median(conn["direct"])
    added_req = statistics.median(req["bridge + proxy (the sandbox's path)"]) - base
    print(f"sandbox path adds {added_conn:.2f} ms per connection and {added_req * 1000:.0f} us per request")
    direct_rate = statistics.median(rate["direct"])
    sandbox_rate = statistics.median(rate["bridge + proxy (the sandbox's path)"])
    print(f"download of {BIG >> 20} MiB: direct {direct_rate:.0f} MiB/s, sandbox path {sandbox_rate:.0f} MiB/s "
          f"({sandbox_rate / direct_rate:.2f}x)")
    memory(tmp)
    return 0


HOLD = r"""
import sys, time
from pathlib import Path
from exo_cli.adapters import netpolicy
from exo_cli.adapters.netproxy import NetProxy
tmp, n = Path(sys.argv[1]), int(sys.argv[2])
p = NetProxy()
for i in range(n):
    p.add(f"a{i}", tmp / f"n{i}", netpolicy.parse(["npm", "api.anthropic.com"]), tmp / "log")
print(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmRSS")), flush=True)
time.sleep(3600)
"""


def memory(tmp: Path) -> None:
    """RSS (KiB) of one process proxying 30 agents against 30 processes proxying one each."""
    def hold(n: int, where: Path) -> tuple[subprocess.Popen[str], int]:
        where.mkdir()
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(where), str(n)], stdout=subprocess.PIPE, text=True,
                                env=bench_env())
        assert proc.stdout is not None
        return proc, int(proc.stdout.readline())

    team, team_rss = hold(30, tmp / "team")
    team.kill()
    team.wait()
    singles = [hold(1, tmp / f"one{i}") for i in range(30)]
    per_agent = sum(rss for _, rss in singles)
    for proc, _ in singles:
        proc.kill()
        proc.wait()
    print(f"memory: one proxy for 30 agents {team_rss / 1024:.1f} MiB; 30 proxies of one agent "
          f"{per_agent / 1024:.1f} MiB ({per_agent / team_rss:.1f}x)")


if __name__ == "__main__":
    sys.exit(main())
