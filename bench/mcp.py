"""`exo mcp`: time from process start to the first `tools/list` answer, and peak RSS.

Printed beside the same figures for a minimal MCPServer with one tool (written to a temp
file), measured in the same run, interleaved, N runs each; medians. docs/performance.md asks
for the figures (no fixed budget); the last line gives the ratios against the minimal server.

    python bench/mcp.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_env, exo_argv, median_ms, precompile, scratch_repo  # noqa: E402

MINIMAL = '''\
from mcp.server.mcpserver import MCPServer

server = MCPServer("minimal")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


server.run("stdio")
'''

HANDSHAKE = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize",
     "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]


def peak_rss_kib(pid: int) -> int:
    """VmHWM (peak resident set) of a live process, in KiB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc status")


def one_run(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> tuple[float, int, int]:
    """Start the server, handshake, time to the tools/list answer; (seconds, peak RSS KiB, tool count)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in HANDSHAKE))
        proc.stdin.flush()
        while True:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{argv[0]} exited before answering tools/list")
            msg = json.loads(line)
            if msg.get("id") == 2:
                elapsed = time.perf_counter() - t0
                tools = len(msg["result"]["tools"])
                break
        rss = peak_rss_kib(proc.pid)
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return elapsed, rss, tools


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    precompile()
    env = bench_env()
    with tempfile.TemporaryDirectory() as tmp:
        repo = scratch_repo(Path(tmp), env)
        exo = exo_argv()
        minimal = Path(tmp) / "minimal_server.py"
        minimal.write_text(MINIMAL)
        servers = {
            "baseline: minimal MCPServer, 1 tool": [sys.executable, str(minimal)],
            "exo mcp": [*exo, "mcp"],
        }
        for argv in servers.values():  # warm-up: page cache, .pyc files
            one_run(argv, repo, env)
        times: dict[str, list[float]] = {k: [] for k in servers}
        rss: dict[str, list[int]] = {k: [] for k in servers}
        tools: dict[str, int] = {}
        for _ in range(args.runs):
            for name, argv in servers.items():
                t, r, n = one_run(argv, repo, env)
                times[name].append(t)
                rss[name].append(r)
                tools[name] = n
    print(f"{'server':40} {'tools':>5} {'start->tools/list ms':>21} {'peak RSS MiB':>13}   ({args.runs} runs, medians)")
    for name in servers:
        print(f"{name:40} {tools[name]:5d} {median_ms(times[name]):21.1f} {statistics.median(rss[name]) / 1024:13.1f}")
    base, exo_name = "baseline: minimal MCPServer, 1 tool", "exo mcp"
    t_ratio = median_ms(times[exo_name]) / median_ms(times[base])
    r_ratio = statistics.median(rss[exo_name]) / statistics.median(rss[base])
    print(f"exo mcp vs minimal MCPServer: time ratio {t_ratio:.2f}, RSS ratio {r_ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
