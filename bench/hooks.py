"""Hook budget: `exo hook tool` and `exo hook stop` (realistic stdin, nothing pending) vs `python -c pass`.

Budget (docs/performance.md): each at most 1.5x `python -c pass` in wall time and in CPU time
(user + system), medians of ``--runs`` (at least 15), measured in the same run, interleaved.
Both run as a recorded agent (EXO_AGENT, its EXO_AGENT_PROOF and EXO_STATE_DIR as exo gives them; not
under the agent's process, so it is identified by its proof, the costlier way) in a worktree whose
parent branch did not move, with a Claude transcript on disk, so they do all of their usual
work: `tool` identifies the caller and counts the tool call (a PostToolUse payload); `stop`
identifies it, records output/turn/tokens, checks the parent branch (local refs), looks for
pending messages and posts `idle` to the parent (a Stop payload). `python -c "import click"`
is printed for context (the old budget's baseline).
Prints one line per command with its medians and ratios, and the worst ratio last.

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

MIN_RUNS = 15

sys.path.insert(0, str(ROOT))


def setup(tmp: Path, env: dict[str, str]) -> tuple[Path, dict[str, str], str, str]:
    """A repo with exo state, one dev agent (its worktree = a branch off main) and its Stop and PostToolUse payloads."""
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
    tool = json.dumps({
        "session_id": "0f9a4c52-6c1e-4d1c-9a55-3c1b7f1e2d10",
        "transcript_path": str(transcript),
        "cwd": str(wt),
        "permission_mode": "bypassPermissions",
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "python -m pytest -q tests/test_cli.py", "description": "Run the tests"},
        "tool_response": {"stdout": "." * 12 + "\n12 passed in 0.41s\n", "stderr": "", "interrupted": False,
                          "isImage": False},
        "tool_use_id": "toolu_01A2b3C4d5E6f7G8h9I0j1K2",
    })
    agent_env = {**env, "EXO_AGENT": "w1", "EXO_AGENT_PROOF": proof, "EXO_PARENT": "root", "EXO_ROLE": "dev",
                 "EXO_STATE_DIR": str(state)}
    return wt, agent_env, payload, tool


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    runs = max(args.runs, MIN_RUNS)
    precompile()
    env = bench_env()
    with tempfile.TemporaryDirectory() as tmp:
        wt, agent_env, payload, tool = setup(Path(tmp), env)
        base_name = "baseline: python -c pass"
        cmds = {
            base_name: [sys.executable, "-c", "pass"],
            "exo hook tool --cli claude": [*exo_argv(), "hook", "tool", "--cli", "claude"],
            "exo hook stop --cli claude": [*exo_argv(), "hook", "stop", "--cli", "claude"],
            "context: python -c 'import click'": [sys.executable, "-c", "import click"],
        }
        stdin = {"exo hook tool --cli claude": tool, "exo hook stop --cli claude": payload}
        cpu: dict[str, list[float]] = {}
        times = time_commands(cmds, runs=runs, cwd=wt, env=agent_env, stdin=stdin, cpu=cpu)
        for name, text in stdin.items():
            check = subprocess.run(cmds[name], cwd=wt, env=agent_env, input=text, capture_output=True, text=True)
            assert check.returncode == 0 and check.stdout.strip() == "{}" and not check.stderr, (check.stdout,
                                                                                                  check.stderr)
    base, base_cpu = median_ms(times[base_name]), median_ms(cpu[base_name])
    print(f"{runs} runs each, interleaved; load average (1 min) at the end: {os.getloadavg()[0]:.2f} "
          f"on {os.cpu_count()} CPUs")
    print(f"{'command':40} {'wall ms':>8} {'ratio':>6} {'cpu ms':>8} {'ratio':>6}")
    worst = 0.0
    for name, vals in times.items():
        ms, cpu_ms = median_ms(vals), median_ms(cpu[name])
        if name in stdin:
            worst = max(worst, ms / base, cpu_ms / base_cpu)
        print(f"{name:40} {ms:8.1f} {ms / base:6.2f} {cpu_ms:8.1f} {cpu_ms / base_cpu:6.2f}")
    print(f"worst ratio vs python -c pass (wall or cpu): {worst:.2f} (budget 1.50)")
    return 0


if __name__ == "__main__":
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    raise SystemExit(main())
