"""Helpers shared by the benchmarks: a clean environment, repeated and interleaved timing of whole commands.

Importing this module cleans this process's environment first (``isolate``): whatever the shell
that started the benchmark carries (inside tmux or Zellij or an exo agent, another state folder,
store, tracker or git directory, the user's tmux folder), nothing of it reaches exo, git or tmux;
neither does the user's exo or git configuration; and every tmux server a benchmark starts has its
socket in a folder of the benchmark's own, never beside the user's.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import shell_env  # noqa: E402 - the one list of what a user's shell may carry (shared with the tests)


def isolate() -> Path:
    """Scrub this process's environment (``tests/shell_env.py``'s list) and give it a private ``TMUX_TMPDIR`` and
    ``XDG_RUNTIME_DIR``; at exit, stop every tmux server still answering there and remove it. Returns that folder."""
    shell_env.scrub(os.environ)
    root = Path(tempfile.mkdtemp(prefix="exo-bench-", dir=os.path.realpath("/tmp")))  # short: tmux sockets live here
    shell_env.private(os.environ, root)
    # Nor the user's configuration: exo's (an empty folder) and git's (an identity, for the agents' commits).
    (root / "gitconfig").write_text("[user]\n\tname = bench\n\temail = bench@example.invalid\n"
                                    "[init]\n\tdefaultBranch = main\n")
    os.environ.update({"EXO_CONFIG_DIR": str(root / "config"), "GIT_CONFIG_GLOBAL": str(root / "gitconfig"),
                       "GIT_CONFIG_NOSYSTEM": "1"})

    def clean_up() -> None:
        for sock in shell_env.tmux_servers(root):
            subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, env=shell_env.tmux_env())
        shutil.rmtree(root, ignore_errors=True)

    atexit.register(clean_up)
    return root


RUN_ROOT = isolate()


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


def write_trusted(repo: Path, text: str, env: dict[str, str]) -> None:
    """Write the scratch repository's exo.toml and trust it (`exo trust`), as its user would."""
    (repo / "exo.toml").write_text(text)
    subprocess.run([*exo_argv(), "trust"], cwd=repo, env=env, check=True, capture_output=True)


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
                  stdin: dict[str, str] | None = None, cpu: dict[str, list[float]] | None = None,
                  cwds: dict[str, Path] | None = None, load: list[float] | None = None) -> dict[str, list[float]]:
    """Run every command ``runs`` times, interleaved (so noise hits all alike); wall seconds per run.

    With ``cpu``, each command's CPU seconds per run (user + system) are appended there too;
    ``cwds`` gives some commands another working folder than ``cwd``; ``load`` gets the 1-minute
    load average after each round.
    """
    out: dict[str, list[float]] = {k: [] for k in cmds}
    where = {name: (cwds or {}).get(name, cwd) for name in cmds}
    for name, argv in cmds.items():  # warm-up: page cache, .pyc files
        run_timed(argv, cwd=where[name], env=env, stdin=(stdin or {}).get(name))
    for _ in range(runs):
        for name, argv in cmds.items():
            wall, used = run_timed(argv, cwd=where[name], env=env, stdin=(stdin or {}).get(name))
            out[name].append(wall)
            if cpu is not None:
                cpu.setdefault(name, []).append(used)
        if load is not None:
            load.append(os.getloadavg()[0])
    return out


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


GIT_IDENTITY = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}


def scratch_repo(parent: Path, env: dict[str, str], *, exo_init: bool = True) -> Path:
    """A fresh repository ``parent/repo`` on branch main with one commit (and ``exo init`` run)."""
    repo = parent / "repo"
    repo.mkdir(parents=True)
    git_env = {**env, **GIT_IDENTITY}
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(cmd, cwd=repo, check=True, env=git_env)
    if exo_init:
        subprocess.run([*exo_argv(), "init"], cwd=repo, env=env, capture_output=True, check=True)
    return repo


def live_team(repo: Path, env: dict[str, str], count: int) -> list[str]:
    """``count`` live agents at ``repo``'s root, as users run them: ``exo spawn --agent demo --mux headless`` (each
    writes, commits and notes, then stays alive waiting for messages); their names, once every one of them is idle.

    Stop them with ``stop_team`` (in a ``finally``: they outlive this process otherwise).
    """
    names = [f"a{i}" for i in range(1, count + 1)]
    if not names:
        return names
    workers = [x for name in names for x in ("--worker", name)]
    spawn = subprocess.run([*exo_argv(), "spawn", *workers, "--prompt", "bench", "--agent", "demo", "--mux",
                            "headless", "--json"], cwd=repo, env=env, capture_output=True, text=True)
    if spawn.returncode != 0:
        stop_team(repo, env, names)
        sys.exit(f"exo spawn of the team failed ({spawn.returncode}):\n{spawn.stdout}\n{spawn.stderr}")
    deadline = time.monotonic() + 180
    statuses: dict[str, str] = {}
    while time.monotonic() < deadline:
        out = subprocess.run([*exo_argv(), "agents", "--json"], cwd=repo, env=env, capture_output=True, text=True)
        if out.returncode == 0:
            statuses = {a["name"]: a["status"] for a in json.loads(out.stdout)["agents"]}
            if all(statuses.get(n) == "idle" for n in names):
                return names
            if any(statuses.get(n) in ("dead", "done") for n in names):
                break
        time.sleep(0.3)
    stop_team(repo, env, names)
    sys.exit(f"the team did not come to rest (idle, waiting for messages): {statuses}")


def stop_team(repo: Path, env: dict[str, str], names: list[str]) -> None:
    """Stop the agents ``live_team`` started (``exo kill`` each: its process group)."""
    for name in names:
        subprocess.run([*exo_argv(), "kill", name], cwd=repo, env=env, capture_output=True)


def load_range(values: list[float]) -> str:
    """The 1-minute load averages seen during a measurement, as ``min..max``."""
    return f"{min(values):.2f}..{max(values):.2f}" if values else "?"


def settle(pattern: str, *, timeout: float = 60) -> None:
    """Wait until no process's command line matches ``pattern`` (a background exo a hook started), so runs do not
    overlap."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.strip():
            return
        time.sleep(0.02)
