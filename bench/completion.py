"""Benchmark: a TAB on `exo attach <TAB>` with 30 live agents, as bash runs it.

Sets up a scratch repository whose custom agent is `sleep 3600`, starts 30 of them in tmux
through `exo spawn --worker ...` (outside the timing), checks they are live, then times what
bash's completion function runs for `exo attach a0<TAB>`: `exo` with `_EXO_COMPLETE=bash_complete`,
`COMP_WORDS="exo attach a0"` and `COMP_CWORD=2` (Click's protocol), interleaved with
`python -c "import click"`. The budget (docs/performance.md): at most 1.5x the baseline.
It also checks the answer (the 30 names, nothing else) and that a TAB in a repository
without exo state prints nothing and creates nothing.

    python bench/completion.py [--agents 30] [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import exo_argv, median_ms, precompile, scratch_repo, time_commands  # noqa: E402
from agents500 import agents, clean_env, make_repo, socket_name, spawn_all  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=30)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        sys.exit("tmux is not installed")
    precompile()
    env = clean_env()
    tmp = Path(tempfile.mkdtemp(prefix="exo-bench-completion-"))
    sock = None
    try:
        repo = make_repo(tmp, env)
        sock = socket_name(repo, env)
        spawn_all(repo, env, args.agents)
        live = [a for a in agents(repo, env) if a["status"] not in ("dead", "done")]
        if len(live) != args.agents:
            raise SystemExit(f"expected {args.agents} live agents, got {len(live)}")
        completing = {**env, "_EXO_COMPLETE": "bash_complete", "COMP_WORDS": "exo attach a0", "COMP_CWORD": "2"}
        answer = subprocess.run(exo_argv(), cwd=repo, env=completing, capture_output=True, text=True, check=True)
        names = sorted(str(a["name"]) for a in live if str(a["name"]).startswith("a0"))
        if answer.stdout.split() != [f"plain,{n}" for n in names]:
            raise SystemExit(f"wrong completion: {answer.stdout!r} {answer.stderr!r}")
        (tmp / "bare").mkdir()
        bare = scratch_repo(tmp / "bare", env, exo_init=False)
        empty = subprocess.run(exo_argv(), cwd=bare, env=completing, capture_output=True, text=True, check=True)
        created = sorted(str(p.relative_to(bare)) for p in (bare / ".git").rglob("exo*"))
        if empty.stdout or empty.stderr or created:
            raise SystemExit(f"a TAB without exo state printed {empty.stdout!r} {empty.stderr!r} or created {created}")
        cmds = {"baseline: python -c 'import click'": [sys.executable, "-c", "import click"],
                "exo attach a0<TAB>": exo_argv()}
        times = time_commands(cmds, runs=args.runs, cwd=repo, env=completing)
    finally:
        if sock:
            subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    base = median_ms(times["baseline: python -c 'import click'"])
    ms = median_ms(times["exo attach a0<TAB>"])
    ratio = ms / base
    print(f"{args.agents} live agents; the completion lists {len(names)} names; a TAB without exo state prints "
          "nothing and creates nothing")
    print(f"{'command':40} {'median ms':>10} {'ratio':>6}")
    print(f"{'baseline: python -c import click':40} {base:10.1f} {1.0:6.2f}")
    print(f"{'exo attach a0<TAB> (bash_complete)':40} {ms:10.1f} {ratio:6.2f}")
    print(f"completion of a live agent name with {args.agents} agents: {ratio:.2f}x import click "
          f"(budget 1.50): {'ok' if ratio <= 1.5 else 'GAP'}")
    return 0


if __name__ == "__main__":
    if os.environ.get("_EXO_COMPLETE"):
        sys.exit("run the benchmark itself without _EXO_COMPLETE set")
    raise SystemExit(main())
