"""The merge queue: gate runs for 20 PRs with one bad, nothing untested on the base, and how fast 100 entries drain.

A repository with N branches off main, each adding a file of its own, and a pull request per
branch (the local forge, filed by the human); ``[[merge.gates]]`` configured, batch 4, no fill
window. Every PR is enqueued with ``exo pr merge`` (the detached runner held back), then the
queue is advanced in this process (``queuerun.advance``, what the runner runs).

- 20 PRs, a gate that sleeps 1 s and fails when the candidate has a file ``BAD``, one PR (the
  10th) adding it: the gate runs it took. Budget: at most 10 (a serial queue: 20).
- The base's history replayed against the gate log: every commit the base was moved to (its
  reflog) must be one the queue's gate log (``runs.log``) records as passing. Budget: 0 untested.
- 100 PRs and a gate that exits 0 at once: the time from the first entry's test to the last
  landing. Budget: < 10 s.

    python bench/merge_queue.py [--prs 20] [--drain 100]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GIT_IDENTITY, ROOT, bench_env, scratch_repo  # noqa: E402

sys.path.insert(0, str(ROOT))


def team(tmp: Path, env: dict[str, str], count: int, bad: int | None, gate: str) -> Path:
    """A repository with ``count`` branches and their PRs, all enqueued (no runner started)."""
    import os

    from exo_cli import registry
    from exo_cli.env import Env

    repo = scratch_repo(tmp, env, exo_init=False)
    genv = {**env, **GIT_IDENTITY}

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=repo, check=True, env=genv, capture_output=True)

    for i in range(count):
        git("switch", "-q", "-c", f"main.p{i}", "main")
        (repo / f"p{i}.txt").write_text(f"{i}\n")
        if i == bad:
            (repo / "BAD").write_text("this breaks the build\n")
        git("add", "-A")
        git("commit", "-q", "-m", f"p{i}")
    git("switch", "-q", "main")
    (repo / ".git" / "info" / "exclude").write_text("/.exo/\n")
    (repo / ".exo").mkdir()
    (repo / ".exo" / "config.toml").write_text(
        f"[merge]\nbatch = 4\nwindow = 0\n[[merge.gates]]\ncommand = {json.dumps(gate)}\ntimeout = 60\n")
    os.environ.update(GIT_IDENTITY)
    for i in range(count):
        git("switch", "-q", f"main.p{i}")
        e = Env(cwd=repo, environ=dict(os.environ))
        registry.invoke("pr_file", e, title=f"p{i}")
    git("switch", "-q", "main")
    e = Env(cwd=repo, environ=dict(os.environ))
    e.queue_runner = lambda *_: True  # type: ignore[attr-defined]  # this process advances the queue
    for pr in e.store.prs(state="open"):
        registry.invoke("pr_merge", e, number=pr.number)
    return repo


def advance(repo: Path) -> tuple[int, float]:
    import os

    from exo_cli.env import Env
    from exo_cli.ops.queuerun import advance as run

    started = time.perf_counter()
    landed = run(Env(cwd=repo, environ=dict(os.environ)), "main")
    return landed, time.perf_counter() - started


def gate_log(repo: Path) -> list[tuple[str, str]]:
    from exo_cli.env import Env
    from exo_cli.ops import mergequeue

    text = Path(mergequeue.folder(Env(cwd=repo), "main"), "runs.log").read_text()
    return [(ln.split()[0], ln.split()[1]) for ln in text.splitlines()]


def untested_positions(repo: Path, start: str) -> list[str]:
    """The commits the base was moved to (its reflog since ``start``) that no gate run passed."""
    out = subprocess.run(["git", "log", "-g", "--format=%H", "refs/heads/main"], cwd=repo, check=True,
                         capture_output=True, text=True).stdout.split()
    moves = out[:out.index(start)]
    passed = {sha for sha, verdict in gate_log(repo) if verdict == "pass"}
    return [sha for sha in moves if sha not in passed]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prs", type=int, default=20)
    ap.add_argument("--drain", type=int, default=100)
    args = ap.parse_args()
    env = bench_env()
    import os

    os.environ.update(env)
    with tempfile.TemporaryDirectory(prefix="exo-bench-mq-") as tmp:
        repo = team(Path(tmp) / "gated", env, args.prs, args.prs // 2 - 1, "sleep 1; test ! -e BAD")
        start = subprocess.run(["git", "rev-parse", "main"], cwd=repo, capture_output=True, text=True).stdout.strip()
        landed, seconds = advance(repo)
        runs = len(gate_log(repo))
        untested = untested_positions(repo, start)
        print(f"merge_queue: {args.prs} PRs, 1 bad: {landed} landed in {runs} gate runs (serial: {args.prs}), "
              f"{seconds:.1f} s")
        print(f"merge_queue: base positions not tested: {len(untested)}")
        repo = team(Path(tmp) / "instant", env, args.drain, None, "true")
        landed, seconds = advance(repo)
        print(f"merge_queue: {args.drain} entries with an instant gate: {landed} landed in {seconds:.2f} s "
              f"({len(gate_log(repo))} gate runs)")


if __name__ == "__main__":
    main()
