"""Startup budget: `exo --help`, `exo status --json`, `exo agents --json` vs `python -c "import click"`.

Budget (docs/performance.md): each at most 1.5x the baseline, measured in the same run,
interleaved.
Prints one line per command with its median and ratio, and the worst ratio last.

    python bench/startup.py [--runs 30]
"""

from __future__ import annotations

import argparse
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
        times = time_commands(cmds, runs=args.runs, cwd=repo, env=env)
    base = median_ms(times["baseline: python -c 'import click'"])
    worst = 0.0
    print(f"{'command':40} {'median ms':>10} {'ratio':>6}")
    for name, vals in times.items():
        ms = median_ms(vals)
        ratio = ms / base
        if not name.startswith("baseline"):
            worst = max(worst, ratio)
        print(f"{name:40} {ms:10.1f} {ratio:6.2f}")
    print(f"worst ratio vs import click: {worst:.2f} (budget 1.50)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
