"""Conflict foresight with 10 live siblings: the background check, and what it adds to the stop hook.

A repository with 11 sibling agents (w0..w10, parent root), each on its own branch off main with
a commit to a shared file (w0, w3 and w7 edit the same line: real conflicts; the others edit
other lines: clean overlaps) and one file of its own; main moved on since.

- `exo conflicts w0 --check`: the check the stop hook starts in the background (one
  `git merge-tree --write-tree` against the base and against each of the 10 siblings, records,
  tells). Budget: < 1000 ms median (it runs beside the agent, never in its way).
- `exo hook stop`: the answer time when the branches moved (foresight due: read the tips from
  the ref files, spawn the check) minus the answer time when nothing moved (no check). Budget:
  at most 15 ms added. The two are interleaved; the background checks are waited for between runs.

    python bench/foresight.py [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GIT_IDENTITY, ROOT, bench_env, exo_argv, median_ms, precompile, scratch_repo, settle  # noqa: E402

sys.path.insert(0, str(ROOT))
SIBLINGS = 10
SHARED = "".join(f"line {i}\n" for i in range(1, 41))


def setup(tmp: Path, env: dict[str, str]) -> tuple[Path, dict[str, str]]:
    from exo_cli.env import PROOF_FIELD, Env, new_proof
    from exo_cli.records import Agent

    repo = scratch_repo(tmp, env, exo_init=False)
    genv = {**env, **GIT_IDENTITY}

    def git(cwd: Path, *args: str) -> None:
        subprocess.run(["git", *args], cwd=cwd, check=True, env=genv, capture_output=True)

    (repo / "shared.py").write_text(SHARED)
    git(repo, "add", "shared.py")
    git(repo, "commit", "-q", "-m", "shared")
    state = repo / ".git" / "exo"
    e = Env(cwd=repo, environ={**env, "EXO_STATE_DIR": str(state)})
    now = time.time()
    proof, digest = new_proof()  # w0's, as spawn gives it: the hook and the check prove EXO_AGENT with it
    for i in range(SIBLINGS + 1):
        name = f"w{i}"
        wt = tmp / name
        git(repo, "worktree", "add", "-q", "-b", f"main.{name}", str(wt), "main")
        lines = SHARED.splitlines(keepends=True)
        row = 5 if i in (0, 3, 7) else 10 + i  # w0, w3, w7: the same line
        lines[row] = f"{name} was here\n"
        (wt / "shared.py").write_text("".join(lines))
        (wt / f"{name}.py").write_text(f"NAME = {name!r}\n")
        git(wt, "add", ".")
        git(wt, "commit", "-q", "-m", f"{name}'s work")
        e.store.insert_agent(Agent(id=name, name=name, role="dev", parent="root", status="working", backend="claude",
                                   mux="headless", worktree=str(wt), branch=f"main.{name}", base_branch="main",
                                   created_at=now, updated_at=now, status_at=now,
                                   spec={PROOF_FIELD: digest} if i == 0 else {}))
    (repo / "base.txt").write_text("main moved on\n")
    git(repo, "add", "base.txt")
    git(repo, "commit", "-q", "-m", "main moves on")
    agent_env = {**env, "EXO_AGENT": "w0", "EXO_AGENT_PROOF": proof, "EXO_PARENT": "root", "EXO_ROLE": "dev", "EXO_STATE_DIR": str(state)}
    return tmp / "w0", agent_env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    precompile()
    env = bench_env()
    with tempfile.TemporaryDirectory() as tmp:
        wt, agent_env = setup(Path(tmp), env)
        from exo_cli.env import Env

        store = Env(cwd=wt, environ=agent_env).store
        check_argv = [*exo_argv(), "conflicts", "w0", "--check", "--json"]
        hook_argv = [*exo_argv(), "hook", "stop", "--cli", "claude"]
        payload = json.dumps({"session_id": "s", "stop_hook_active": False, "last_assistant_message": "done"})
        first = subprocess.run(check_argv, cwd=wt, env=agent_env, capture_output=True, text=True, check=True)
        found = json.loads(first.stdout)["conflicts"]
        assert sorted(c["other"] for c in found if c["agent"] == "w0") == ["w3", "w7"], found
        checks: list[float] = []
        due: list[float] = []
        quiet: list[float] = []

        def hook() -> float:
            t0 = time.perf_counter()
            subprocess.run(hook_argv, cwd=wt, env=agent_env, input=payload, capture_output=True, text=True, check=True)
            return time.perf_counter() - t0

        hook()
        settle("conflicts w0 --check")
        for _ in range(args.runs):
            t0 = time.perf_counter()
            subprocess.run(check_argv, cwd=wt, env=agent_env, capture_output=True, check=True)
            checks.append(time.perf_counter() - t0)
            raw = json.loads(store.kv_get("hook:w0") or "{}")
            raw.pop("foresight", None)  # as if a branch moved
            store.kv_set("hook:w0", json.dumps(raw))
            due.append(hook())
            settle("conflicts w0 --check")
            quiet.append(hook())  # nothing moved since: no check
    check_ms = median_ms(checks)
    added = (statistics.median(due) - statistics.median(quiet)) * 1000
    print(f"{'measure':52} {'median ms':>10}")
    print(f"{'exo conflicts w0 --check (10 siblings + base)':52} {check_ms:10.1f}")
    print(f"{'exo hook stop, branches moved (check started)':52} {median_ms(due):10.1f}")
    print(f"{'exo hook stop, nothing moved (no check)':52} {median_ms(quiet):10.1f}")
    ok = check_ms < 1000 and added <= 15
    print(f"foresight: check {check_ms:.0f} ms (budget 1000), stop hook {added:+.1f} ms (budget 15): "
          f"{'ok' if ok else 'over budget'}")
    return 0


if __name__ == "__main__":
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    raise SystemExit(main())
