"""Wake-up latency: 20 agents write notes at once while their parent waits (docs/performance.md).

Each of 20 writer processes is a recorded agent (EXO_AGENT) that posts notes through the
real code path (``exo_cli.ops.messages.note``: the durable row, then the parent's
doorbell); the parent blocks in the real ``wait`` operation. The note carries its send
time (CLOCK_MONOTONIC, shared by all processes); latency = the moment ``wait`` returned
it in the parent minus that. Prints p50/p99 and the count of lost notes (must be 0),
beside a bare FIFO round trip between two Python processes measured in the same run.
Goal: p50 < 20 ms, p99 < 100 ms.

    python bench/wake.py [--agents 20] [--notes 25]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WRITER = r"""
import os, random, sys, time
from exo_cli.env import Env
from exo_cli.ops import messages
n, go = int(sys.argv[1]), sys.argv[2]
env = Env()
env.store.agents()
while not os.path.exists(go):
    time.sleep(0.005)
for i in range(n):
    time.sleep(random.uniform(0.05, 0.25))
    messages.note(env, message=f"{os.environ['EXO_AGENT']}:{i}:{time.monotonic()!r}")
"""

FIFO_CHILD = r"""
import os, sys
a = os.open(sys.argv[1], os.O_RDONLY)
b = os.open(sys.argv[2], os.O_WRONLY)
while True:
    c = os.read(a, 1)
    if not c or c == b"q":
        break
    os.write(b, c)
"""


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))] * 1000


def fifo_round_trip(rounds: int, tmp: Path) -> list[float]:
    a, b = tmp / "a", tmp / "b"
    os.mkfifo(a)
    os.mkfifo(b)
    child = subprocess.Popen([sys.executable, "-c", FIFO_CHILD, str(a), str(b)])
    wa = os.open(a, os.O_WRONLY)
    rb = os.open(b, os.O_RDONLY)
    out = []
    for _ in range(rounds):
        t0 = time.monotonic()
        os.write(wa, b"!")
        os.read(rb, 1)
        out.append(time.monotonic() - t0)
        time.sleep(0.002)
    os.write(wa, b"q")
    os.close(wa)
    os.close(rb)
    child.wait()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--notes", type=int, default=25, help="notes per agent")
    args = parser.parse_args()
    from exo_cli.env import PROOF_FIELD, Env, new_proof
    from exo_cli.ops import messages
    from exo_cli.records import Agent

    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        repo = tmp / "repo"
        repo.mkdir()
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
        state = repo / ".git" / "exo"
        base_env = {**os.environ, "EXO_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
        base_env.pop("EXO_AGENT", None)
        base_env.pop("EXO_AGENT_PROOF", None)
        parent = Env(cwd=repo, environ=base_env)
        now = time.time()
        proofs = [new_proof() for _ in range(args.agents)]  # each writer proves its EXO_AGENT, as agents do
        for i in range(args.agents):
            parent.store.insert_agent(Agent(id=f"w{i}", name=f"w{i}", role="dev", parent="root", status="working",
                                            backend="demo", mux="headless", created_at=now, updated_at=now,
                                            status_at=now, spec={PROOF_FIELD: proofs[i][1]}))
        go = tmp / "go"
        writers = [
            subprocess.Popen([sys.executable, "-c", WRITER, str(args.notes), str(go)], cwd=repo,
                             env={**base_env, "EXO_AGENT": f"w{i}", "EXO_AGENT_PROOF": proofs[i][0]})
            for i in range(args.agents)
        ]
        time.sleep(1.0)  # let every writer import exo and open the store
        expected = args.agents * args.notes
        latencies: list[float] = []
        seen: set[str] = set()
        go.touch()
        start = time.monotonic()
        while len(seen) < expected:
            res = messages.wait(parent, timeout=10)
            if not res.results:
                break  # 10 s without any note: the rest are lost
            t = time.monotonic()
            body = res.results[0].message or ""
            who, idx, sent = body.split(":", 2)
            seen.add(f"{who}:{idx}")
            latencies.append(t - float(sent))
        elapsed = time.monotonic() - start
        for w in writers:
            w.wait(timeout=60)
        while True:  # anything that arrived after a (wrongly) early stop
            res = messages.wait(parent, timeout=0)
            if not res.results:
                break
            who, idx, _ = (res.results[0].message or "").split(":", 2)
            seen.add(f"{who}:{idx}")
        lost = expected - len(seen)
        fifo = fifo_round_trip(300, tmp)
    print(f"{args.agents} writers x {args.notes} notes = {expected} notes while the parent waits "
          f"(each writer: one note every 50-250 ms, all at once; {elapsed:.1f} s, {expected / elapsed:.0f} notes/s)")
    print(f"note -> wake-up latency: p50 {pct(latencies, 50):7.2f} ms   p99 {pct(latencies, 99):7.2f} ms   "
          f"max {max(latencies) * 1000:7.2f} ms   (goal p50 < 20, p99 < 100)")
    print(f"lost notes: {lost} (must be 0)")
    print(f"bare FIFO round trip (2 Python processes): p50 {pct(fifo, 50):6.3f} ms   p99 {pct(fifo, 99):6.3f} ms   "
          f"mean {statistics.mean(fifo) * 1000:6.3f} ms")
    return 0 if lost == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
