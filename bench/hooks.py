"""Hook budget: `exo hook stop --cli claude` (realistic stdin) vs `python -c "import click"`.

Budget (docs/performance.md): at most 1.5x the baseline, measured in the same run,
interleaved. The hook runs as a recorded agent (EXO_AGENT, its EXO_AGENT_PROOF and EXO_STATE_DIR as
exo gives them; not under the agent's process, so it is identified by its proof, the costlier way)
in a worktree whose parent branch did not move, with a Claude transcript on disk, so it does
all of its usual work: identify the caller, record output/turn/tokens, check the parent
branch (local refs), look for pending messages, post `idle` to the parent.
Prints one line per command with its median and ratio, and the ratio last.

    python bench/hooks.py [--runs 30]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    GIT_IDENTITY,
    ROOT,
    bench_env,
    exo_argv,
    median_ms,
    precompile,
    scratch_repo,
    time_commands,
)

sys.path.insert(0, str(ROOT))


def setup(tmp: Path, env: dict[str, str]) -> tuple[Path, dict[str, str], str]:
    """A repo with exo state, one dev agent (its worktree = a branch off main) and its payload."""
    repo = scratch_repo(tmp, env, exo_init=False)
    genv = {**env, **GIT_IDENTITY}
    wt = tmp / "wt"
    subprocess.run(["git", "worktree", "add", "-q", "-b", "main.w1", str(wt), "main"], cwd=repo, check=True, env=genv)
    state = repo / ".git" / "exo"
    from exo_cli.env import PROOF_FIELD, Env, new_proof
    from exo_cli.records import Agent

    e = Env(cwd=repo, environ={**env, "EXO_STATE_DIR": str(state)})
    now = time.time()
    proof, digest = new_proof()  # as spawn gives it: the hook proves EXO_AGENT with it (no ancestry here)
    e.store.insert_agent(Agent(id="w1", name="w1", role="dev", parent="root", status="working", backend="claude",
                               mux="headless", worktree=str(wt), branch="main.w1", base_branch="main",
                               created_at=now, updated_at=now, status_at=now, spec={PROOF_FIELD: digest}))
    transcript = tmp / "transcript.jsonl"
    with open(transcript, "w") as fh:
        for i in range(200):
            fh.write(json.dumps({"type": "assistant", "message": {"id": f"msg_{i}", "role": "assistant",
                     "content": [{"type": "text", "text": "x" * 300}],
                     "usage": {"input_tokens": 1200, "output_tokens": 300, "cache_read_input_tokens": 9000}}})
                     + "\n")
    payload = json.dumps({
        "session_id": "0f9a4c52-6c1e-4d1c-9a55-3c1b7f1e2d10",
        "transcript_path": str(transcript),
        "cwd": str(wt),
        "permission_mode": "bypassPermissions",
        "hook_event_name": "Stop",
        "stop_hook_active": False,
        "last_assistant_message": "I added the --verbose flag, updated the tests (12 passed) and committed. " * 8,
        "background_tasks": [],
        "session_crons": [],
    })
    agent_env = {**env, "EXO_AGENT": "w1", "EXO_AGENT_PROOF": proof, "EXO_PARENT": "root", "EXO_ROLE": "dev",
                 "EXO_STATE_DIR": str(state)}
    return wt, agent_env, payload


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    precompile()
    env = bench_env()
    with tempfile.TemporaryDirectory() as tmp:
        wt, agent_env, payload = setup(Path(tmp), env)
        base_name = "baseline: python -c 'import click'"
        cmds = {
            base_name: [sys.executable, "-c", "import click"],
            "exo hook stop --cli claude": [*exo_argv(), "hook", "stop", "--cli", "claude"],
            "exo hook tool --cli claude": [*exo_argv(), "hook", "tool", "--cli", "claude"],
        }
        stdin = {k: payload for k in cmds if k != base_name}
        times = time_commands(cmds, runs=args.runs, cwd=wt, env=agent_env, stdin=stdin)
        check = subprocess.run(cmds["exo hook stop --cli claude"], cwd=wt, env=agent_env, input=payload,
                               capture_output=True, text=True)
        assert check.returncode == 0 and check.stdout.strip() == "{}" and not check.stderr, (check.stdout, check.stderr)
    base = median_ms(times[base_name])
    print(f"{'command':40} {'median ms':>10} {'ratio':>6}")
    worst = 0.0
    for name, vals in times.items():
        ms = median_ms(vals)
        if not name.startswith("baseline"):
            worst = max(worst, ms / base)
        print(f"{name:40} {ms:10.1f} {ms / base:6.2f}")
    print(f"worst ratio vs import click: {worst:.2f} (budget 1.50)")
    return 0


if __name__ == "__main__":
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    raise SystemExit(main())
