"""Benchmark: `exo spawn --sandbox` of N agents in tmux vs the same spawn unsandboxed, both in their own clones.

The budget (issue 31): a sandboxed spawn takes at most 1.1x an unsandboxed one. Both sides run
``exo spawn --layout clone`` of the same sleeping custom agent (``python -c 'sleep'``) on a fresh,
identical repository per repetition, in their own tmux server; the only difference is
``--sandbox`` (bubblewrap around each agent, its private HOME filled, its plan built) against
``--no-sandbox``. Repetitions alternate the order, the first is a dropped warm-up, and the medians of
wall time are compared; the load average is printed.

    python bench/sandbox.py [--runs 7] [--agents 10]
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

from _common import bench_env, exo_argv, precompile, write_trusted
from spawn import agent_python, make_repo, repo_id


def measure(runs: int, count: int, exo: list[str], env: dict[str, str]) -> tuple[dict[str, list[float]], list[float]]:
    workers = [x for i in range(1, count + 1) for x in ("--worker", f"w{i}")]
    times: dict[str, list[float]] = {"sandboxed": [], "unsandboxed": []}
    load = [os.getloadavg()[0]]
    agent = [agent_python(exo), "-c", "import time; time.sleep(600)"]
    with tempfile.TemporaryDirectory(prefix="exo-bench-") as tmp:
        root = Path(tmp)
        for run in range(runs + 1):
            order = list(times) if run % 2 == 0 else list(reversed(times))
            for name in order:
                repo = make_repo(root)
                write_trusted(repo, f"[agent]\ncommand = {json.dumps(agent)}\n", env)  # agent.command needs trust
                flag = "--sandbox" if name == "sandboxed" else "--no-sandbox"
                argv = [*exo, "spawn", *workers, "--prompt", "bench", "--agent", "custom", "--mux", "tmux",
                        "--layout", "clone", flag, "--json"]
                t0 = time.perf_counter()
                proc = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True)
                elapsed = time.perf_counter() - t0
                subprocess.run(["tmux", "-L", f"exo-{repo_id(repo)}", "kill-server"], capture_output=True)
                if proc.returncode != 0:
                    sys.exit(f"{name} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
                got = {a["sandboxed"] for a in json.loads(proc.stdout)["agents"]}
                if got != {name == "sandboxed"}:
                    sys.exit(f"{name}: the agents' sandboxed flags are {got}")
                if run:
                    times[name].append(elapsed)
            load.append(os.getloadavg()[0])
    return times, load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--agents", type=int, default=10)
    opts = ap.parse_args()
    for tool in ("tmux", "bwrap"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed")
    precompile()
    times, load = measure(opts.runs, opts.agents, exo_argv(), bench_env())
    print(f"-- {opts.agents} agents, each in its own clone, tmux")
    print(f"load average (1 min) during the runs: {min(load):.2f}..{max(load):.2f} on {os.cpu_count()} CPUs")
    for name, values in times.items():
        print(f"{name:12s} median {statistics.median(values) * 1000:7.1f} ms  "
              f"(min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f}, n={len(values)})")
    ratio = statistics.median(times["sandboxed"]) / statistics.median(times["unsandboxed"])
    print(f"ratio sandboxed / unsandboxed ({opts.agents} agents): {ratio:.2f} (goal <= 1.1)")


if __name__ == "__main__":
    main()
