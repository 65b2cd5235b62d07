"""Benchmark: how many `bd` processes `exo spawn` of N beads and `exo beads ready` fork.

Sets up a scratch repository with a beads tracker of ``--beads`` open beads (every fifth one
blocked by the next), whose agent is `sleep 3600` started headless (cheap: no tmux, no
Python per agent), and puts a counting `bd` first on PATH: a shell script that logs its argv
and execs the stand-in `bd` of the tests (tests/fake_bd.py: real `bd` downloads a native
binary at install time, so it cannot be installed here; the stand-in speaks bd's documented
`--json` interface). Then it counts the `bd` calls of

- `exo spawn --ready N` for N in ``--spawn`` (default 2 and 10),
- `exo spawn ID ID` (two beads named by id),
- `exo beads ready`.

The budget: one `bd ready`, one `bd show` of all the beads, and one `bd update --claim` per
bead (a claim carries the agent's name as its actor, so claims cannot share a call); no
`bd list` and no `bd blocked` when every bead is ready. Everything it started (the agents,
the scratch folder) is stopped and removed at the end, also on failure.

    python bench/beads.py [--beads 30] [--spawn 2,10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GIT_IDENTITY, ROOT, bench_env, exo_argv, precompile, write_trusted  # noqa: E402

STAND_IN = ROOT / "tests" / "fake_bd.py"
SHIM = """#!/bin/sh
printf '%s\\n' "$*" >> "$EXO_BENCH_BD_LOG"
exec {python} {stand_in} "$@"
"""


def make_repo(root: Path, env: dict[str, str], n: int) -> Path:
    """A repository with ``n`` open beads committed in .beads/issues.jsonl (every fifth blocked)."""
    repo = root / "repo"
    (repo / ".beads").mkdir(parents=True)
    lines = []
    for i in range(1, n + 1):
        bead = {"id": f"bn-{i:03d}", "title": f"Task {i}", "status": "open", "priority": i % 4,
                "issue_type": "task", "created_at": f"2026-01-01T00:{i % 60:02d}:00Z"}
        if i % 5 == 0 and i < n:
            bead["dependencies"] = [{"issue_id": bead["id"], "depends_on_id": f"bn-{i + 1:03d}", "type": "blocks"}]
        lines.append(json.dumps(bead) + "\n")
    (repo / ".beads" / "issues.jsonl").write_text("".join(lines))
    (repo / "exo.toml").write_text('[agent]\ncommand = ["sleep", "3600"]\n')
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    write_trusted(repo, (repo / "exo.toml").read_text(), env)  # the committed text, trusted as its user would
    return repo


def counted(repo: Path, env: dict[str, str], log: Path, *args: str) -> Counter[str]:
    """Run ``exo ARGS --json`` and return the `bd` subcommands it ran, counted."""
    log.write_text("")
    proc = subprocess.run([*exo_argv(), *args, "--json"], cwd=repo, env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 5):
        raise SystemExit(f"exo {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return Counter(line.split()[0] for line in log.read_text().splitlines() if line.strip())


def stop_agents(repo: Path, env: dict[str, str]) -> None:
    proc = subprocess.run([*exo_argv(), "agents", "--json"], cwd=repo, env=env, capture_output=True, text=True)
    if proc.returncode == 0:
        for agent in json.loads(proc.stdout)["agents"]:
            subprocess.run([*exo_argv(), "kill", agent["id"]], cwd=repo, env=env, capture_output=True)


def show(counts: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--beads", type=int, default=30)
    parser.add_argument("--spawn", default="2,10", help="comma-separated N of `exo spawn --ready N`")
    args = parser.parse_args()
    sizes = [int(x) for x in args.spawn.split(",") if x]
    if sum(sizes) + 2 > args.beads * 4 // 5:
        sys.exit("--beads is too small for those spawns")
    precompile()
    tmp = Path(tempfile.mkdtemp(prefix="exo-bench-beads-"))
    env = {**bench_env(), **GIT_IDENTITY}  # the user's shell already scrubbed out (``_common``)
    repo = None
    rows: list[tuple[str, int, Counter[str]]] = []
    try:
        repo = make_repo(tmp, env, args.beads)
        shim_dir = tmp / "shim"
        shim_dir.mkdir()
        shim = shim_dir / "bd"
        shim.write_text(SHIM.format(python=sys.executable, stand_in=STAND_IN))
        shim.chmod(0o755)
        log = tmp / "bd-calls.log"
        env = {**env, "PATH": f"{shim_dir}{os.pathsep}{env.get('PATH', '')}", "EXO_BENCH_BD_LOG": str(log),
               "FAKE_BD_JSONL": str(repo / ".beads" / "issues.jsonl")}
        common = ["--agent", "custom", "--mux", "headless"]
        for n in sizes:
            rows.append((f"exo spawn --ready {n}", n, counted(repo, env, log, "spawn", "--ready", str(n), *common)))
        last = [f"bn-{i:03d}" for i in range(args.beads - 1, 0, -1) if i % 4 == 3 and i % 5][:2]  # picked last
        rows.append(("exo spawn ID ID", 2, counted(repo, env, log, "spawn", *last, *common)))
        rows.append(("exo beads ready", 0, counted(repo, env, log, "beads", "ready")))
    finally:
        if repo is not None:
            stop_agents(repo, {k: v for k, v in env.items() if k != "EXO_BENCH_BD_LOG"} | {"PATH": bench_env()["PATH"]})
        shutil.rmtree(tmp, ignore_errors=True)
    worst_extra = 0
    for name, claims, counts in rows:
        budget = (1 + (1 if claims else 0) + claims)  # ready, show of them all, one claim each
        total = sum(counts.values())
        worst_extra = max(worst_extra, total - budget)
        print(f"{name:<24} bd calls {total:3d} (budget {budget:3d}): {show(counts)}")
    first = rows[0]
    verdict = "ok" if worst_extra <= 0 else "GAP"
    print(f"bd calls to spawn {first[1]} beads: {sum(first[2].values())}; over budget by at most {worst_extra}: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
