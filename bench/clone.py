"""Benchmark: `exo spawn --layout clone` vs `exo spawn --layout worktree` of the same agents.

The budget (docs/performance.md): spawning agents into their own `git clone --shared` takes at
most 1.1x spawning them into linked worktrees, measured in the same run. Both sides run the
same `exo spawn` of ``--agents`` headless agents (a sleeping `python -c`, exo's custom
backend, so the agents' own start costs little) in a fresh, identical repository of
``--files`` files per repetition (made outside the timing; the checkout of those files is most
of either side's cost). The repetitions alternate which side goes first; the first round is a
dropped warm-up; the medians of wall time are compared, with the CPU time (user + system of
the command and its children) and the load average printed beside them.

    python bench/clone.py [--runs 5] [--agents 5] [--files 2000]
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
from pathlib import Path

from _common import GIT_IDENTITY, bench_env, exo_argv, precompile, run_timed


def make_repo(root: Path, files: int, env: dict[str, str]) -> Path:
    """A repository with ``files`` files in 40 folders, one commit, gc'd (one pack), exo initialised."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    git_env = {**env, **GIT_IDENTITY}
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True, env=git_env)
    for i in range(files):
        folder = repo / f"d{i % 40}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i}.txt").write_text(f"file {i}\n" * 20)
    agent = [sys.executable, "-c", "import time; time.sleep(3600)", "{prompt}"]
    (repo / "exo.toml").write_text(f"[agent]\ncommand = {json.dumps(agent)}\n")
    for cmd in (["git", "add", "-A"], ["git", "commit", "-q", "-m", "files"], ["git", "gc", "-q"]):
        subprocess.run(cmd, cwd=repo, check=True, env=git_env)
    subprocess.run([*exo_argv(), "init"], cwd=repo, env=env, capture_output=True, check=True)
    subprocess.run([*exo_argv(), "trust"], cwd=repo, env=env, capture_output=True, check=True)  # its agent.command
    return repo


def spawn_argv(agents: int, layout: str) -> list[str]:
    workers = [x for i in range(1, agents + 1) for x in ("--worker", f"w{i}")]
    return [*exo_argv(), "spawn", *workers, "--prompt", "bench", "--agent", "custom", "--mux", "headless",
            "--layout", layout, "--json"]


def one(layout: str, opts: argparse.Namespace, env: dict[str, str]) -> tuple[float, float]:
    root = Path(tempfile.mkdtemp(prefix=f"exo-clone-{layout}-", dir=os.path.realpath("/tmp")))
    repo = make_repo(root, opts.files, env)
    try:
        wall, cpu = run_timed(spawn_argv(opts.agents, layout), cwd=repo, env=env)
        listed = subprocess.run([*exo_argv(), "agents", "--json"], cwd=repo, env=env, capture_output=True, text=True)
        got = [a.get("layout") for a in json.loads(listed.stdout)["agents"]] if listed.returncode == 0 else []
        if got != [layout] * opts.agents:
            sys.exit(f"the {layout} spawn did not make {opts.agents} agents in that layout: {got}")
        return wall, cpu
    finally:
        for i in range(1, opts.agents + 1):
            subprocess.run([*exo_argv(), "kill", f"w{i}"], cwd=repo, env=env, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--agents", type=int, default=5)
    ap.add_argument("--files", type=int, default=2000)
    opts = ap.parse_args()
    precompile()
    env = bench_env()
    walls: dict[str, list[float]] = {"worktree": [], "clone": []}
    cpus: dict[str, list[float]] = {"worktree": [], "clone": []}
    load: list[float] = []
    for run in range(opts.runs + 1):
        order = ("worktree", "clone") if run % 2 == 0 else ("clone", "worktree")
        for layout in order:
            wall, cpu = one(layout, opts, env)
            if run:  # the first round warms the page cache and the .pyc files
                walls[layout].append(wall)
                cpus[layout].append(cpu)
        load.append(os.getloadavg()[0])
    print(f"{opts.agents} headless agents per spawn, {opts.files} files, {opts.runs} runs; "
          f"load {min(load):.2f}..{max(load):.2f}")
    for layout in ("worktree", "clone"):
        print(f"exo spawn --layout {layout:<8} median {statistics.median(walls[layout]) * 1000:8.0f} ms   "
              f"cpu {statistics.median(cpus[layout]) * 1000:8.0f} ms")
    ratio = statistics.median(walls["clone"]) / statistics.median(walls["worktree"])
    print(f"ratio clone / worktree spawn: {ratio:.2f}x (budget 1.1x)")


if __name__ == "__main__":
    main()
