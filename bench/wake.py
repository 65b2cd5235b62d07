"""Wake-ups and batches: 20 agents write notes at once while their parent waits (docs/performance.md).

Each of 20 writer processes is a recorded agent (EXO_AGENT) that posts notes through the
real code path (``exo_cli.ops.messages.note``: the durable row, then the parent's
doorbell); the parent blocks in the real ``wait`` operation, which returns every note
pending at once (oldest first, up to its bound). Two phases:

1. live: the writers post while the parent waits. Each note carries its send time
   (CLOCK_MONOTONIC, shared by all processes); latency = the moment ``wait`` returned it in
   the parent minus that. Goal: p50 < 20 ms, p99 < 100 ms; printed beside a bare FIFO round
   trip between two Python processes measured in the same run.
2. queued: the writers post 100 notes (5 each) while nobody waits; then the parent calls
   ``wait`` until it has them all. Goal: at most 3 calls.

Both phases count lost notes (sent, never returned) and duplicated ones (returned twice):
both must be 0.

``--store postgres`` runs both phases on a private PostgreSQL cluster (a temp folder, a Unix
socket, no TCP port; initdb/pg_ctl from the distribution), where the wake-up is LISTEN/NOTIFY;
``--store both`` runs SQLite then PostgreSQL in one run and prints their latency ratio.

    python bench/wake.py [--agents 20] [--notes 25] [--queued 100] [--store sqlite|postgres|both]
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
sys.path.insert(0, str(ROOT / "bench"))
import _common  # noqa: E402, F401 - cleans this process's environment (what the user's shell carries) on import

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


def spawn_writers(args_agents: int, notes: int, go: Path, repo: Path, base_env: dict[str, str],
                  proofs: list[tuple[str, str]], *, spread: bool) -> list[subprocess.Popen[bytes]]:
    code = WRITER if spread else WRITER.replace("time.sleep(random.uniform(0.05, 0.25))", "pass")
    return [
        subprocess.Popen([sys.executable, "-c", code, str(notes), str(go)], cwd=repo,
                         env={**base_env, "EXO_AGENT": f"w{i}", "EXO_AGENT_PROOF": proofs[i][0]})
        for i in range(args_agents)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--notes", type=int, default=25, help="notes per agent in the live phase")
    parser.add_argument("--queued", type=int, default=100, help="notes queued (in all) before the parent waits")
    parser.add_argument("--store", choices=("sqlite", "postgres", "both"), default="sqlite")
    args = parser.parse_args()
    codes: list[int] = []
    p50s: dict[str, float] = {}
    for store in ("sqlite", "postgres") if args.store == "both" else (args.store,):
        if store == "sqlite":
            code, latencies = run(args, None)
        else:
            sys.path.insert(0, str(ROOT / "tests"))
            from pg_cluster import Cluster, pg_bin

            bindir = pg_bin()
            if bindir is None:
                sys.exit("PostgreSQL is not installed (no initdb)")
            cluster = Cluster(bindir).start(fsync=True)
            try:
                code, latencies = run(args, cluster.url())
            finally:
                cluster.stop()
        print(f"(store: {store})")
        codes.append(code)
        p50s[store] = pct(latencies, 50)
    if len(p50s) == 2:
        print(f"postgres / sqlite note -> wake-up p50: {p50s['postgres'] / p50s['sqlite']:.2f}x")
    return max(codes)


def run(args: argparse.Namespace, url: str | None) -> tuple[int, list[float]]:
    """Both phases in a fresh repository whose state is on PostgreSQL at ``url`` (None: SQLite)."""
    from exo_cli.adapters.store import point_to
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
        if url:  # the state folder says where the state is: every process of the repository follows it
            state.mkdir(parents=True)
            point_to(state, url)
        parent = Env(cwd=repo, environ=base_env)
        now = time.time()
        proofs = [new_proof() for _ in range(args.agents)]  # each writer proves its EXO_AGENT, as agents do
        for i in range(args.agents):
            parent.store.insert_agent(Agent(id=f"w{i}", name=f"w{i}", role="dev", parent="root", status="working",
                                            backend="demo", mux="headless", created_at=now, updated_at=now,
                                            status_at=now, spec={PROOF_FIELD: proofs[i][1]}))
        received: list[str] = []  # every note wait returned, duplicates included

        # 1. live: the parent waits while the writers post
        go = tmp / "go"
        writers = spawn_writers(args.agents, args.notes, go, repo, base_env, proofs, spread=True)
        time.sleep(2.0 if url else 1.0)  # let every writer import exo (and psycopg) and open the store
        expected = args.agents * args.notes
        latencies: list[float] = []
        seen: set[str] = set()
        live_calls = 0
        go.touch()
        start = time.monotonic()
        while len(seen) < expected:
            res = messages.wait(parent, timeout=10)
            live_calls += 1
            if not res.results:
                break  # 10 s without any note: the rest are lost
            t = time.monotonic()
            for entry in res.results:
                who, idx, sent = (entry.message or "").split(":", 2)
                received.append(f"{who}:{idx}")
                seen.add(f"{who}:{idx}")
                latencies.append(t - float(sent))
        elapsed = time.monotonic() - start
        for w in writers:
            w.wait(timeout=60)
        while True:  # anything that arrived after a (wrongly) early stop
            res = messages.wait(parent, timeout=0)
            if not res.results:
                break
            for entry in res.results:
                who, idx, _ = (entry.message or "").split(":", 2)
                received.append(f"{who}:{idx}")
                seen.add(f"{who}:{idx}")
        lost = expected - len(seen)

        # 2. queued: the writers post while nobody waits, then the parent takes them
        per_writer = max(1, args.queued // args.agents)
        queued = per_writer * args.agents
        go2 = tmp / "go2"
        writers = spawn_writers(args.agents, per_writer, go2, repo, base_env, proofs, spread=False)
        time.sleep(1.0)
        go2.touch()
        for w in writers:
            w.wait(timeout=60)
        calls = 0
        batches: list[int] = []
        taken: set[str] = set()
        while len(taken) < queued:
            res = messages.wait(parent, timeout=5)
            calls += 1
            if not res.results:
                break
            batches.append(len(res.results))
            for entry in res.results:
                who, idx, _ = (entry.message or "").split(":", 2)
                received.append(f"q{who}:{idx}")
                taken.add(f"{who}:{idx}")
        leftover = messages.wait(parent, timeout=0).results
        lost += queued - len(taken) + len(leftover)
        duplicated = len(received) - len(set(received))
        parent.store.close()
        fifo = fifo_round_trip(300, tmp)
    print(f"live: {args.agents} writers x {args.notes} notes = {expected} notes while the parent waits "
          f"(each writer: one note every 50-250 ms, all at once; {elapsed:.1f} s, {expected / elapsed:.0f} notes/s; "
          f"{live_calls} wait calls)")
    print(f"note -> wake-up latency: p50 {pct(latencies, 50):7.2f} ms   p99 {pct(latencies, 99):7.2f} ms   "
          f"max {max(latencies) * 1000:7.2f} ms   (goal p50 < 20, p99 < 100)")
    print(f"queued: {queued} notes from {args.agents} writers consumed in {calls} wait calls "
          f"(batches {batches}; goal <= 3)")
    print(f"lost notes: {lost} (must be 0)")
    print(f"duplicated notes: {duplicated} (must be 0)")
    print(f"bare FIFO round trip (2 Python processes): p50 {pct(fifo, 50):6.3f} ms   p99 {pct(fifo, 99):6.3f} ms   "
          f"mean {statistics.mean(fifo) * 1000:6.3f} ms")
    return (0 if lost == 0 and duplicated == 0 else 1), latencies


if __name__ == "__main__":
    raise SystemExit(main())
