"""Helpers shared by the benchmarks: repeated, interleaved timing of whole commands."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bench_env() -> dict[str, str]:
    """The environment a user has: bytecode caching allowed (pip compiles installed packages)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("NO_COLOR", "1")
    return env


def precompile() -> None:
    """Compile exo's modules like a regular install does, so the comparison with click is fair."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "exo_cli")], check=True)


def exo_argv() -> list[str]:
    script = Path(sys.executable).with_name("exo")
    return [str(script)] if script.exists() else [sys.executable, "-m", "exo_cli"]


def run_timed(argv: Sequence[str], *, cwd: Path, env: dict[str, str], stdin: str | None = None) -> tuple[float, float]:
    """Run one command to its end; (wall seconds, CPU seconds: user + system of the process and its children)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    assert proc.stdin is not None
    try:
        proc.stdin.write((stdin or "").encode())
        proc.stdin.close()
    except BrokenPipeError:  # a command that does not read its stdin
        pass
    _, _, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = 0  # reaped by wait4 above
    return wall, usage.ru_utime + usage.ru_stime


def time_commands(cmds: dict[str, Sequence[str]], *, runs: int, cwd: Path, env: dict[str, str],
                  stdin: dict[str, str] | None = None,
                  cpu: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Run every command ``runs`` times, interleaved (so noise hits all alike); wall seconds per run.

    With ``cpu``, each command's CPU seconds per run (user + system) are appended there too.
    """
    out: dict[str, list[float]] = {k: [] for k in cmds}
    for name, argv in cmds.items():  # warm-up: page cache, .pyc files
        run_timed(argv, cwd=cwd, env=env, stdin=(stdin or {}).get(name))
    for _ in range(runs):
        for name, argv in cmds.items():
            wall, used = run_timed(argv, cwd=cwd, env=env, stdin=(stdin or {}).get(name))
            out[name].append(wall)
            if cpu is not None:
                cpu.setdefault(name, []).append(used)
    return out


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


GIT_IDENTITY = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}


def scratch_repo(parent: Path, env: dict[str, str], *, exo_init: bool = True) -> Path:
    """A fresh repository ``parent/repo`` on branch main with one commit (and ``exo init`` run)."""
    repo = parent / "repo"
    repo.mkdir()
    git_env = {**env, **GIT_IDENTITY}
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(cmd, cwd=repo, check=True, env=git_env)
    if exo_init:
        subprocess.run([*exo_argv(), "init"], cwd=repo, env=env, capture_output=True, check=True)
    return repo


def settle(pattern: str, *, timeout: float = 60) -> None:
    """Wait until no process's command line matches ``pattern`` (a background exo a hook started), so runs do not
    overlap."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.strip():
            return
        time.sleep(0.02)
