"""Benchmark: `exo spawn` of 10 workers in tmux vs a bare shell loop of `git worktree add` + `tmux new-window`.

Both sides run the same agent command (a Python process that sleeps), both start their own
private tmux server, and both get a fresh repository per repetition (set up outside the
timing). The repetitions are interleaved so machine noise hits both alike. The ratio of the
medians is printed last (DESIGN.md's budget: at most 1.3).

    python bench/spawn.py [--runs 5] [--agents 10]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _common import bench_env, exo_argv, precompile

AGENT = [sys.executable, "-c", "import time; time.sleep(600)"]

BASELINE = r"""
set -e
cd "$1"; sock="$2"; n="$3"; shift 3
tmux -L "$sock" new-session -d -s base -n _placeholder sleep 2147483647
for i in $(seq 1 "$n"); do
  git worktree add -q --no-track -b "main.w$i" ".exo/worktrees/w$i" main
  tmux -L "$sock" new-window -d -t base: -c ".exo/worktrees/w$i" -n "w$i" "$@"
done
"""


def make_repo(root: Path) -> Path:
    repo = root / f"repo-{uuid.uuid4().hex[:6]}"
    repo.mkdir()
    env = {**bench_env(), "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.invalid"}
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    for i in range(50):  # a few files so the checkout is not free
        (repo / f"file{i}.txt").write_text("x\n" * 200)
    subprocess.run(["git", "add", "."], cwd=repo, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "files"], cwd=repo, env=env, check=True)
    (repo / "exo.toml").write_text(f"[agent]\ncommand = {json.dumps(AGENT)}\n")
    return repo


def repo_id(repo: Path) -> str:
    import hashlib

    state = (repo / ".git" / "exo").resolve()
    return hashlib.sha1(str(state).encode()).hexdigest()[:10]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--agents", type=int, default=10)
    opts = ap.parse_args()
    if shutil.which("tmux") is None:
        sys.exit("tmux is not installed")
    precompile()
    env = bench_env()
    exo = exo_argv()
    workers = [x for i in range(1, opts.agents + 1) for x in ("--worker", f"w{i}")]
    times: dict[str, list[float]] = {"exo spawn": [], "shell loop": []}
    with tempfile.TemporaryDirectory(prefix="exo-bench-") as tmp:
        root = Path(tmp)
        for run in range(opts.runs + 1):  # the first run warms caches and is dropped
            order = ["exo spawn", "shell loop"] if run % 2 == 0 else ["shell loop", "exo spawn"]
            for name in order:
                repo = make_repo(root)
                if name == "exo spawn":
                    sock = f"exo-{repo_id(repo)}"
                    argv = [*exo, "spawn", *workers, "--prompt", "bench", "--agent", "custom", "--mux", "tmux",
                            "--json"]
                else:
                    sock = f"exo-bench-{uuid.uuid4().hex[:8]}"
                    argv = ["bash", "-c", BASELINE, "bash", str(repo), sock, str(opts.agents), *AGENT]
                t0 = time.perf_counter()
                proc = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True)
                elapsed = time.perf_counter() - t0
                subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)
                if proc.returncode != 0:
                    sys.exit(f"{name} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
                if run:
                    times[name].append(elapsed)
    for name, values in times.items():
        print(f"{name:12s} median {statistics.median(values) * 1000:7.1f} ms  "
              f"(min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f}, n={len(values)})")
    ratio = statistics.median(times["exo spawn"]) / statistics.median(times["shell loop"])
    print(f"ratio exo spawn / shell loop ({opts.agents} agents): {ratio:.2f} (goal <= 1.3)")


if __name__ == "__main__":
    main()
