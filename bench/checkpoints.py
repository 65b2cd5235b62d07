"""Checkpoints: one of a 10,000-file checkout with 10 files changed, the stop hook's added cost, the storage.

A checkout of ``--files`` files (100 per folder, about 1 KiB each) on an agent's branch, recorded
as exo records an agent (its worktree exo made, its proof), with an ignored ``.env``:

- **a checkpoint** (``ops.checkpoints.take``, in this process: the work the background helper and
  the stop hook do) after 10 files changed, median of ``--runs`` (each run changes 10 other
  files). The first checkpoint (seeding the shadow index from the agent's own) is printed apart.
  ``git status`` of the same checkout is printed beside it (the baseline of "look at every file").
  Budget: under 150 ms.
- **the stop hook** (``exo hook stop``, a real process, a Stop payload, nothing pending) when its
  turn is checkpointed (marks it due and starts the background helper) minus when the agent's
  checkout is not one exo checkpoints; interleaved, the helper waited for between runs. Budget:
  at most 10 ms added. The hook that keeps the agent going (a pending message) takes it before it
  answers: that cost is printed too (report only).
- **storage**: the bytes a checkpoint of 10 changed files adds to the object store (``git
  objects, as written), in this checkout and in one of a tenth of its size: it grows
  with what changed, not with the checkout's size.

    python bench/checkpoints.py [--runs 15] [--files 10000]
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
STOP = json.dumps({"session_id": "s", "stop_hook_active": False, "last_assistant_message": "done"})
CHANGED = 10


def checkout(tmp: Path, env: dict[str, str], files: int, name: str) -> tuple[Path, Path, dict[str, str]]:
    """A repository of ``files`` files, and agent ``name``'s worktree of it, recorded; (repo, worktree, agent env)."""
    from exo_cli.env import PROOF_FIELD, Env, new_proof
    from exo_cli.records import Agent

    tmp.mkdir(parents=True, exist_ok=True)
    repo = scratch_repo(tmp, env, exo_init=False)
    genv = {**env, **GIT_IDENTITY}
    for i in range(files):
        folder = repo / f"pkg{i // 100:03d}"
        folder.mkdir(exist_ok=True)
        (folder / f"mod{i:05d}.py").write_text(f"# module {i}\n" + "".join(f"VALUE_{j} = {i * j}\n" for j in range(60)))
    (repo / ".gitignore").write_text(".env\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=genv)
    subprocess.run(["git", "commit", "-q", "-m", "the code"], cwd=repo, check=True, env=genv)
    wt = tmp / name
    subprocess.run(["git", "worktree", "add", "-q", "-b", f"main.{name}", str(wt), "main"], cwd=repo, check=True,
                   env=genv)
    (wt / ".env").write_text("TOKEN=x\n")
    state = repo / ".git" / "exo"
    e = Env(cwd=repo, environ={**env, "EXO_STATE_DIR": str(state)})
    proof, digest = new_proof()
    now = time.time()
    for agent, eligible in ((name, True), (f"{name}-plain", False)):  # the second: a checkout exo does not checkpoint
        e.store.insert_agent(Agent(id=agent, name=agent, role="dev", parent="root", status="working",
                                   backend="claude", mux="headless", worktree=str(wt), branch=f"main.{name}",
                                   base_branch="main", repo=str(repo), created_at=now, updated_at=now, status_at=now,
                                   spec={PROOF_FIELD: digest, "worktree_created": eligible}))
    agent_env = {**env, "EXO_AGENT": name, "EXO_AGENT_PROOF": proof, "EXO_PARENT": "root", "EXO_ROLE": "dev",
                 "EXO_STATE_DIR": str(state)}
    return repo, wt, agent_env


def change(wt: Path, run: int, files: int) -> None:
    for k in range(CHANGED):
        i = (run * CHANGED + k) * 37 % files
        path = wt / f"pkg{i // 100:03d}" / f"mod{i:05d}.py"
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"CHANGED_{run} = True\n")


def objects_bytes(repo: Path) -> int:
    """The bytes of the repository's object store (each file's size, not the disk blocks it takes)."""
    return sum(p.stat().st_size for p in (repo / ".git" / "objects").rglob("*") if p.is_file())


def take(repo: Path, agent_env: dict[str, str], name: str) -> float:
    from exo_cli.env import Env
    from exo_cli.ops.checkpoints import take as take_one

    env = Env(cwd=repo, environ=agent_env)
    rec = env.store.agent(name)
    assert rec is not None
    t0 = time.perf_counter()
    got = take_one(env, rec, reason="turn")
    elapsed = time.perf_counter() - t0
    assert got.taken, got
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--files", type=int, default=10000)
    args = parser.parse_args()
    precompile()
    env = bench_env()
    with tempfile.TemporaryDirectory() as tmp:
        repo, wt, agent_env = checkout(Path(tmp) / "big", env, args.files, "w1")
        change(wt, 0, args.files)
        first = take(repo, agent_env, "w1")
        takes: list[float] = []
        status: list[float] = []
        for run in range(1, args.runs + 1):
            change(wt, run, args.files)
            t0 = time.perf_counter()
            subprocess.run(["git", "status", "--porcelain", "-uall"], cwd=wt, capture_output=True, check=True)
            status.append(time.perf_counter() - t0)
            takes.append(take(repo, agent_env, "w1"))
        # storage: bytes a checkpoint of 10 changed files adds, here and in a checkout a tenth of the size
        grown: dict[int, float] = {}
        for files, (r, w, a) in ((args.files, (repo, wt, agent_env)),
                                 (args.files // 10, checkout(Path(tmp) / "small", env, args.files // 10, "s1"))):
            name = "w1" if r == repo else "s1"
            if r != repo:
                take(r, a, name)
            before = objects_bytes(r)
            for run in range(1000, 1005):
                change(w, run, files)
                take(r, a, name)
            grown[files] = (objects_bytes(r) - before) / 5
        # the stop hook: its turn checkpointed (due + background helper) vs a checkout exo does not checkpoint
        hook = [*exo_argv(), "hook", "stop", "--cli", "claude"]
        plain_env = {**agent_env, "EXO_AGENT": "w1-plain"}
        due: list[float] = []
        quiet: list[float] = []
        sync: list[float] = []

        def run_hook(environ: dict[str, str]) -> float:
            t0 = time.perf_counter()
            subprocess.run(hook, cwd=wt, env=environ, input=STOP, capture_output=True, text=True, check=True)
            return time.perf_counter() - t0

        from exo_cli.env import Env

        store = Env(cwd=repo, environ=agent_env).store
        run_hook(agent_env)
        settle("checkpoint w1 --due")
        for run in range(args.runs):
            change(wt, 2000 + run, args.files)
            due.append(run_hook(agent_env))
            settle("checkpoint w1 --due")
            quiet.append(run_hook(plain_env))
            change(wt, 3000 + run, args.files)
            store.post("send", "root", "w1", "one more thing")  # pending: the hook keeps it going, checkpoint first
            sync.append(run_hook(agent_env))
    added = (statistics.median(due) - statistics.median(quiet)) * 1000
    take_ms = median_ms(takes)
    print(f"{'measure':62} {'median ms':>10}")
    print(f"{'first checkpoint (shadow index seeded from the agent index)':62} {first * 1000:10.1f}")
    print(f"{f'checkpoint, {args.files} files, {CHANGED} changed':62} {take_ms:10.1f}")
    print(f"{'git status --porcelain -uall of the same checkout (baseline)':62} {median_ms(status):10.1f}")
    print(f"{'exo hook stop, turn checkpointed in the background':62} {median_ms(due):10.1f}")
    print(f"{'exo hook stop, checkout not checkpointed':62} {median_ms(quiet):10.1f}")
    print(f"{'exo hook stop, pending message: checkpoint before the answer':62} {median_ms(sync):10.1f}")
    for files, size in sorted(grown.items()):
        print(f"storage per checkpoint of {CHANGED} changed files, {files} files: {size / 1024:.1f} KiB")
    ok = take_ms < 150 and added <= 10
    print(f"checkpoints: checkpoint {take_ms:.0f} ms (budget 150), stop hook {added:+.1f} ms (budget 10): "
          f"{'ok' if ok else 'over budget'}")
    return 0


if __name__ == "__main__":
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    raise SystemExit(main())
