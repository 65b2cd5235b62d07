"""Benchmark: `exo agents --json` with 500 live agents in tmux, and the tmux calls it forks.

Sets up a scratch repository whose custom agent is `sleep 3600` (cheap: no Python per agent),
starts 500 of them through exo's own `exo spawn --worker ... --mux tmux` in batches of 50
(outside the timing), checks that all 500 are recorded and alive, then:

- times `exo agents --json` (``--runs`` runs, interleaved with `python -c "import click"`
  for context; the figure is the median; the budget (docs/performance.md): under 300 ms);
- counts the tmux processes one `exo agents --json` forks, by putting a counting `tmux` shim
  first on PATH (a shell script that logs its argv and execs the real tmux) for a separate
  set of calls, so the shim's own cost stays out of the timing. The budget: exactly one
  listing call (`tmux list-panes -a`) per refresh.

Everything it started (the private tmux server, the worktrees, the scratch folder) is
removed at the end, also on failure.

``--store postgres`` keeps the state in a private PostgreSQL cluster (a temp folder, a Unix
socket, no TCP port); ``--store both`` measures SQLite then PostgreSQL in one run, each beside
the same baseline, and prints the ratio.

    python bench/agents500.py [--agents 500] [--runs 20] [--store sqlite|postgres|both]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_env, exo_argv, median_ms, precompile, write_trusted  # noqa: E402

AGENT = ["sleep", "3600"]
BATCH = 50
SHIM = """#!/bin/sh
printf '%s\\n' "$*" >> "$EXO_BENCH_TMUX_LOG"
exec {tmux} "$@"
"""


def clean_env() -> dict[str, str]:
    """The benchmark's environment (the user's shell already scrubbed out by ``_common``) with a git identity."""
    return {**bench_env(), "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid",
            "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.invalid"}


def make_repo(root: Path, env: dict[str, str]) -> Path:
    repo = root / "repo"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    write_trusted(repo, f"[agent]\ncommand = {json.dumps(AGENT)}\n", env)
    return repo


def socket_name(repo: Path, env: dict[str, str]) -> str:
    code = "from exo_cli.env import Env; print(Env().repo_id)"
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, text=True, check=True)
    return f"exo-{out.stdout.strip()}"


def spawn_all(repo: Path, env: dict[str, str], n: int) -> None:
    exo = exo_argv()
    names = [f"a{i:03d}" for i in range(1, n + 1)]
    for start in range(0, n, BATCH):
        batch = names[start : start + BATCH]
        workers = [x for name in batch for x in ("--worker", name)]
        proc = subprocess.run([*exo, "spawn", *workers, "--prompt", "bench", "--agent", "custom", "--mux", "tmux",
                               "--json"], cwd=repo, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"exo spawn failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


def agents(repo: Path, env: dict[str, str]) -> list[dict[str, object]]:
    proc = subprocess.run([*exo_argv(), "agents", "--json"], cwd=repo, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"exo agents failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout)["agents"]


def count_tmux_calls(repo: Path, env: dict[str, str], tmp: Path, calls: int) -> list[list[str]]:
    """Run `exo agents --json` ``calls`` times with the counting shim; the tmux argv lists of each call."""
    real = shutil.which("tmux", path=env.get("PATH"))
    assert real
    shim_dir = tmp / "shim"
    shim_dir.mkdir()
    shim = shim_dir / "tmux"
    shim.write_text(SHIM.format(tmux=real))
    shim.chmod(0o755)
    per_call: list[list[str]] = []
    for i in range(calls):
        log = tmp / f"tmux-calls-{i}.log"
        log.touch()
        shim_env = {**env, "PATH": f"{shim_dir}{os.pathsep}{env.get('PATH', '')}", "EXO_BENCH_TMUX_LOG": str(log)}
        subprocess.run([*exo_argv(), "agents", "--json"], cwd=repo, env=shim_env, capture_output=True, check=True)
        per_call.append(log.read_text().splitlines())
    return per_call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=500)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--store", choices=("sqlite", "postgres", "both"), default="sqlite")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        sys.exit("tmux is not installed")
    precompile()
    medians: dict[str, float] = {}
    for store in ("sqlite", "postgres") if args.store == "both" else (args.store,):
        env = clean_env()
        cluster = None
        try:
            if store == "postgres":
                sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
                from pg_cluster import Cluster, pg_bin

                bindir = pg_bin()
                if bindir is None:
                    sys.exit("PostgreSQL is not installed (no initdb)")
                cluster = Cluster(bindir).start(fsync=True)
                env["EXO_STORE_URL"] = cluster.url()
            medians[store] = measure(args, env)
        finally:
            if cluster is not None:
                cluster.stop()
        print(f"(store: {store})")
    if len(medians) == 2:
        print(f"postgres / sqlite, exo agents --json median: {medians['postgres'] / medians['sqlite']:.2f}x")
    return 0


def measure(args: argparse.Namespace, env: dict[str, str]) -> float:
    """Spawn the agents in a scratch repository, time `exo agents --json`, count its tmux calls; the median ms."""
    tmp = Path(tempfile.mkdtemp(prefix="exo-bench-agents-"))
    sock = None
    try:
        repo = make_repo(tmp, env)
        sock = socket_name(repo, env)
        t0 = time.perf_counter()
        spawn_all(repo, env, args.agents)
        spawn_s = time.perf_counter() - t0
        rows = agents(repo, env)
        live = [a for a in rows if a["status"] not in ("dead", "done")]
        if len(rows) != args.agents or len(live) != args.agents:
            raise SystemExit(f"expected {args.agents} live agents, got {len(live)} live of {len(rows)}")
        panes = subprocess.run(["tmux", "-L", sock, "list-panes", "-a", "-F", "#{pane_dead}"], capture_output=True,
                               text=True, check=True).stdout.split()
        if panes.count("0") < args.agents:
            raise SystemExit(f"expected {args.agents} live panes, tmux lists {panes.count('0')}")
        cmds = {"baseline": [sys.executable, "-c", "import click"], "agents": [*exo_argv(), "agents", "--json"]}
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(args.runs):
            for name, argv in cmds.items():
                t = time.perf_counter()
                subprocess.run(argv, cwd=repo, env=env, capture_output=True, check=True)
                times[name].append(time.perf_counter() - t)
        calls = count_tmux_calls(repo, env, tmp, 5)
        still = [a for a in agents(repo, env) if a["status"] not in ("dead", "done")]
    finally:
        if sock:
            subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    counts = [len(c) for c in calls]
    listing = [sum(1 for argv in c if argv.split()[2:3] == ["list-panes"]) for c in calls]
    agents_ms = median_ms(times["agents"])
    base_ms = median_ms(times["baseline"])
    print(f"{args.agents} live agents spawned in {spawn_s:.1f} s (batches of {BATCH}); {len(still)} still live after")
    print(f"baseline python -c 'import click': median {base_ms:7.1f} ms")
    print(f"exo agents --json ({args.runs} runs): median {agents_ms:7.1f} ms  "
          f"(min {min(times['agents']) * 1000:.1f}, max {max(times['agents']) * 1000:.1f}, "
          f"p90 {statistics.quantiles(times['agents'], n=10)[-1] * 1000:.1f}; {agents_ms / base_ms:.2f}x the baseline)")
    print(f"tmux processes per call (PATH shim, {len(calls)} calls): {counts}; list-panes per call: {listing}; "
          f"argv of the first: {calls[0]}")
    ok = agents_ms < 300 and all(c == 1 for c in counts)
    print(f"exo agents --json with {args.agents} live agents: {agents_ms:.1f} ms, tmux calls per refresh "
          f"{max(counts)} (budget < 300 ms, 1 call): {'ok' if ok else 'GAP'}")
    return agents_ms


if __name__ == "__main__":
    raise SystemExit(main())
