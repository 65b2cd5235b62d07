"""Startup budget: `exo --help`, `exo status --json`, `exo agents --json` vs `python -c "import click"`.

Budget (docs/performance.md): each at most 1.3x the baseline, in wall time and in CPU time (user +
system of the process and its children, such as git), measured in the same run, interleaved.
`exo status --json` and `exo agents --json` are measured twice, as users run them: in a repository
with no agents, and at the root of a team of live headless agents (`--agents`, default 5: real
`exo spawn --agent demo --mux headless`, each of which did its first turn and waits for messages,
so every call observes them all).
Prints one line per command with its medians and ratios, the load average during the runs, and the
worst ratio last.

    python bench/startup.py [--runs 30] [--agents 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    bench_env,
    exo_argv,
    live_team,
    load_range,
    median_ms,
    precompile,
    scratch_repo,
    stop_team,
    time_commands,
)

BASE = "baseline: python -c 'import click'"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--agents", type=int, default=5, help="live headless agents of the team (0: none)")
    args = parser.parse_args()
    precompile()
    env = bench_env()
    exo = exo_argv()
    load: list[float] = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        empty = scratch_repo(Path(tmp) / "empty", env)
        cmds = {
            BASE: [sys.executable, "-c", "import click"],
            "exo --help": [*exo, "--help"],
            "exo status --json": [*exo, "status", "--json"],
            "exo agents --json": [*exo, "agents", "--json"],
        }
        cwds = {}
        team: list[str] = []
        repo = empty
        if args.agents:
            repo = scratch_repo(Path(tmp) / "team", env)
            with_team = f"({args.agents} agents)"
            cmds[f"exo status --json {with_team}"] = cmds["exo status --json"]
            cmds[f"exo agents --json {with_team}"] = cmds["exo agents --json"]
            cwds = {f"exo status --json {with_team}": repo, f"exo agents --json {with_team}": repo}
        try:
            team = live_team(repo, env, args.agents)
            cpu: dict[str, list[float]] = {}
            times = time_commands(cmds, runs=args.runs, cwd=empty, env=env, cpu=cpu, cwds=cwds, load=load)
        finally:
            stop_team(repo, env, team)
    base, base_cpu = median_ms(times[BASE]), median_ms(cpu[BASE])
    worst = worst_cpu = 0.0
    print(f"{args.runs} runs each, interleaved; load average (1 min) during the runs: {load_range(load)} "
          f"on {os.cpu_count()} CPUs")
    print(f"{'command':40} {'median ms':>10} {'ratio':>6} {'cpu ms':>8} {'ratio':>6}")
    for name, vals in times.items():
        ms, cpu_ms = median_ms(vals), median_ms(cpu[name])
        ratio, cpu_ratio = ms / base, cpu_ms / base_cpu
        if name != BASE:
            worst, worst_cpu = max(worst, ratio), max(worst_cpu, cpu_ratio)
        print(f"{name:40} {ms:10.1f} {ratio:6.2f} {cpu_ms:8.1f} {cpu_ratio:6.2f}")
    print(f"worst ratio vs import click: {worst:.2f} wall, {worst_cpu:.2f} cpu (budget 1.30)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
