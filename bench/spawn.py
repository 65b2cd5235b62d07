"""Benchmark: `exo spawn` of 10 and of 30 demo agents in tmux vs a bare shell loop of `git worktree add` + `tmux new-window`.

The budget (docs/performance.md): spawning 10 agents, and 30, with the demo backend in tmux in
one call takes at most 1.0x the bare loop, measured in the same run. To keep the comparison fair:

- both sides run the SAME agent command line, the demo backend's
  (``python -m exo_cli.demo_agent --script FILE``; the script only sleeps, so the agents'
  own work after their start hook does not flood the machine during the measurement); after
  every run the command lines of the started panes are read back from /proc and compared;
- both start their own private tmux server and get a fresh, identical repository per
  repetition (created outside the timing);
- the repetitions are interleaved (the order alternates), the first one is a dropped warm-up,
  and the medians of wall time are compared. The load average is printed (the machine may be busy),
  and so is the CPU time of each side (user + system of the command and its children: git and the
  tmux client; the agents are the tmux server's children, on both sides).

    python bench/spawn.py [--runs 7] [--agents 10,30] [--default-demo | --light]

``--default-demo`` runs the demo agent without a script (it writes, commits and notes at once:
much more machine load during the measurement, for both sides alike). ``--light`` runs a bare
``python -c 'sleep'`` agent on both sides instead (exo's custom backend): the agents' own start
then costs little, so the figure shows exo's spawn machinery most sharply (stricter than the
budget's demo-backend figure).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _common import bench_env, exo_argv, precompile, write_trusted

BASELINE = r"""
set -e
cd "$1"; sock="$2"; n="$3"; shift 3
tmux -L "$sock" new-session -d -s base -n _placeholder sleep 2147483647
for i in $(seq 1 "$n"); do
  git worktree add -q --no-track -b "main.w$i" ".exo/worktrees/w$i" main
  tmux -L "$sock" new-window -d -t base: -c ".exo/worktrees/w$i" -n "w$i" "$@"
done
"""

GIT_ID = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid",
          "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.invalid"}


def make_repo(root: Path) -> Path:
    """A fresh repository on main with 50 files (so the checkout is not free)."""
    repo = root / f"repo-{uuid.uuid4().hex[:6]}"
    repo.mkdir()
    env = {**bench_env(), **GIT_ID}
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    for i in range(50):
        (repo / f"file{i}.txt").write_text("x\n" * 200)
    subprocess.run(["git", "add", "."], cwd=repo, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "files"], cwd=repo, env=env, check=True)
    return repo


def repo_id(repo: Path) -> str:
    state = (repo / ".git" / "exo").resolve()
    return hashlib.sha1(str(state).encode()).hexdigest()[:10]


def agent_python(exo: list[str]) -> str:
    """The interpreter exo runs under (its sys.executable starts the demo agent)."""
    first = Path(exo[0])
    if first.name.startswith("python"):
        return str(first)
    line = first.read_text(errors="replace").splitlines()[0]
    return line[2:].strip() if line.startswith("#!") else sys.executable


def pane_commands(sock: str, count: int, expected: list[str], timeout: float = 10.0) -> list[list[str]]:
    """The command lines of the agent panes (placeholders skipped), once ``count`` run ``expected``."""
    deadline = time.monotonic() + timeout
    cmds: list[list[str]] = []
    while time.monotonic() < deadline:
        out = subprocess.run(["tmux", "-L", sock, "list-panes", "-a", "-F", "#{window_name} #{pane_pid}"],
                             capture_output=True, text=True).stdout
        cmds = []
        for line in out.splitlines():
            name, _, pid = line.partition(" ")
            if name.startswith("_"):
                continue
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            cmds.append(raw.rstrip(b"\0").decode(errors="replace").split("\0"))
        if len(cmds) == count and all(c == expected for c in cmds):
            break
        time.sleep(0.05)
    return sorted(cmds)


def measure(opts: argparse.Namespace, count: int, exo: list[str], env: dict[str, str]
            ) -> tuple[dict[str, list[float]], dict[str, list[float]], list[float], list[str]]:
    """``opts.runs`` interleaved runs of both sides with ``count`` agents: wall seconds per side, CPU seconds per side
    (user + system of the command and its children: git, the tmux client; not the tmux server nor the agents, which
    tmux starts), load averages, agent argv."""
    workers = [x for i in range(1, count + 1) for x in ("--worker", f"w{i}")]
    times: dict[str, list[float]] = {"exo spawn": [], "shell loop": []}
    cpu: dict[str, list[float]] = {"exo spawn": [], "shell loop": []}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="exo-bench-") as tmp:
        root = Path(tmp)
        script = root / "sleep.json"
        script.write_text(json.dumps([{"sleep": {"seconds": 600}}]))
        demo_args = [] if opts.default_demo else ["--script", str(script)]
        agent = [agent_python(exo), "-m", "exo_cli.demo_agent", *demo_args]  # DemoBackend.prepare's argv
        backend = ["--agent", "demo", *([] if opts.default_demo else ["--demo-script", str(script)])]
        if opts.light:
            agent = [agent_python(exo), "-c", "import time; time.sleep(600)"]
            backend = ["--agent", "custom"]
        for run in range(opts.runs + 1):  # the first run warms caches and is dropped
            order = ["exo spawn", "shell loop"] if run % 2 == 0 else ["shell loop", "exo spawn"]
            seen: dict[str, list[list[str]]] = {}
            for name in order:
                repo = make_repo(root)
                if name == "exo spawn":
                    if opts.light:
                        write_trusted(repo, f"[agent]\ncommand = {json.dumps(agent)}\n", env)
                    sock = f"exo-{repo_id(repo)}"
                    argv = [*exo, "spawn", *workers, "--prompt", "bench", *backend, "--mux", "tmux", "--json"]
                else:
                    sock = f"exo-bench-{uuid.uuid4().hex[:8]}"
                    argv = ["bash", "-c", BASELINE, "bash", str(repo), sock, str(count), *agent]
                t0, used0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
                proc = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True)
                elapsed, used = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
                try:
                    if proc.returncode != 0:
                        sys.exit(f"{name} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
                    seen[name] = pane_commands(sock, count, agent)
                finally:
                    subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)
                if run:
                    times[name].append(elapsed)
                    cpu[name].append(used.ru_utime - used0.ru_utime + used.ru_stime - used0.ru_stime)
            if seen["exo spawn"] != seen["shell loop"] or len(seen["exo spawn"]) != count:
                sys.exit(f"unfair run: the agents' command lines differ:\n{seen}")
            load.append(os.getloadavg()[0])
    return times, cpu, load, agent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--agents", default="10,30", help="agents per spawn call; several sizes separated by commas")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--default-demo", action="store_true", help="run the demo agent without a script")
    mode.add_argument("--light", action="store_true", help="run a sleeping python -c agent (custom backend)")
    opts = ap.parse_args()
    if shutil.which("tmux") is None:
        sys.exit("tmux is not installed")
    precompile()
    env = bench_env()
    exo = exo_argv()
    for count in (int(x) for x in opts.agents.split(",") if x):
        times, cpu, load, agent = measure(opts, count, exo, env)
        print(f"-- {count} agents; agent command (both sides): {' '.join(agent)}")
        print(f"load average (1 min) during the runs: {min(load):.2f}..{max(load):.2f} on {os.cpu_count()} CPUs")
        for name, values in times.items():
            print(f"{name:12s} median {statistics.median(values) * 1000:7.1f} ms  "
                  f"(min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f}, n={len(values)})")
        ratio = statistics.median(times["exo spawn"]) / statistics.median(times["shell loop"])
        cpu_ms = {name: statistics.median(values) * 1000 for name, values in cpu.items()}
        print(f"cpu (user + system, children included; not the agents): exo spawn {cpu_ms['exo spawn']:.1f} ms, "
              f"shell loop {cpu_ms['shell loop']:.1f} ms, ratio {cpu_ms['exo spawn'] / cpu_ms['shell loop']:.2f}")
        print(f"ratio of the minimums: {min(times['exo spawn']) / min(times['shell loop']):.2f}")
        pairs = sorted(e / s for e, s in zip(times["exo spawn"], times["shell loop"], strict=True))
        print(f"per-run ratios: {' '.join(f'{r:.2f}' for r in pairs)}")
        print(f"ratio exo spawn / shell loop ({count} agents): {ratio:.2f} (goal <= 1.0)")


if __name__ == "__main__":
    main()
