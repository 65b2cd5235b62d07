"""Startup budget: `exo --help`, `exo status --json`, `exo agents --json` vs `python -c "import click"`.

Budget (docs/performance.md): each at most 1.3x the baseline, measured in the same run,
interleaved (wall time; CPU time, user + system of the process and its children such as git,
is printed beside it).
Prints one line per command with its medians and ratios, and the worst wall ratio last.

    python bench/startup.py [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_env, exo_argv, median_ms, precompile, scratch_repo, time_commands  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    precompile()
    env = bench_env()
    with tempfile.TemporaryDirectory() as tmp:
        repo = scratch_repo(Path(tmp), env)
        exo = exo_argv()
        cmds = {
            "baseline: python -c 'import click'": [sys.executable, "-c", "import click"],
            "exo --help": [*exo, "--help"],
            "exo status --json": [*exo, "status", "--json"],
            "exo agents --json": [*exo, "agents", "--json"],
        }
        cpu: dict[str, list[float]] = {}
        times = time_commands(cmds, runs=args.runs, cwd=repo, env=env, cpu=cpu)
    base_name = "baseline: python -c 'import click'"
    base, base_cpu = median_ms(times[base_name]), median_ms(cpu[base_name])
    worst = 0.0
    print(f"{args.runs} runs each, interleaved; load average (1 min) at the end: {os.getloadavg()[0]:.2f} "
          f"on {os.cpu_count()} CPUs")
    print(f"{'command':40} {'median ms':>10} {'ratio':>6} {'cpu ms':>8} {'ratio':>6}")
    for name, vals in times.items():
        ms, cpu_ms = median_ms(vals), median_ms(cpu[name])
        ratio = ms / base
        if not name.startswith("baseline"):
            worst = max(worst, ratio)
        print(f"{name:40} {ms:10.1f} {ratio:6.2f} {cpu_ms:8.1f} {cpu_ms / base_cpu:6.2f}")
    print(f"worst ratio vs import click: {worst:.2f} (budget 1.30)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
