"""The benchmarks start from a clean environment, whatever the user's shell carries (bench/_common.py).

A benchmark run from inside tmux, Zellij or an exo agent, or from a shell that names another
state folder, store, tracker, git directory or tmux folder, must measure the same thing, and
must never start, reach or kill anything of the user's: the same list as the tests'
(``tests/shell_env.py``) is scrubbed, tmux gets a folder of the benchmark's own, and every tmux
server started there is stopped when the benchmark ends.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

# What a benchmark does: import _common, then start a tmux server by name (as bench/spawn.py's
# shell loop and bench/agents500.py do), and print what its environment then holds.
BENCH = """
import json, os, subprocess, sys
sys.path.insert(0, sys.argv[1])
import _common
subprocess.run(["tmux", "-L", "bench", "new-session", "-d", "-s", "b", "sleep 600"], check=True)
print(json.dumps({"env": dict(os.environ), "root": str(getattr(_common, "RUN_ROOT", ""))}))
"""


@pytest.fixture
def user() -> Iterator[Path]:
    """The user's own folder (their TMUX_TMPDIR, runtime folder, state), outside this run; their tmux server
    stopped at the end if a failing benchmark started one there."""
    path = Path(tempfile.mkdtemp(prefix="exo-user-", dir=os.path.realpath("/tmp")))
    yield path
    for sock in sorted(path.glob("tmux-*/*")):
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True)
    shutil.rmtree(path, ignore_errors=True)


def test_a_benchmark_ignores_the_users_shell_and_leaves_their_tmux_alone(user: Path) -> None:
    (user / "xdg").mkdir(mode=0o700)
    # The user's own tmux server, in their TMUX_TMPDIR, under the name the benchmark uses.
    mine = {"PATH": os.environ["PATH"], "TMUX_TMPDIR": str(user)}
    subprocess.run(["tmux", "-L", "bench", "new-session", "-d", "-s", "mine", "sleep 600"], env=mine, check=True)
    shell = {
        **mine, "HOME": os.environ.get("HOME", str(user)), "XDG_RUNTIME_DIR": str(user / "xdg"),
        "TMUX": f"{user}/tmux-{os.getuid()}/bench,1,0", "TMUX_PANE": "%0", "ZELLIJ": "0", "ZELLIJ_SESSION_NAME": "z",
        "EXO_AGENT": "w1", "EXO_STATE_DIR": str(user / "state"), "EXO_STORE_URL": "postgresql://nowhere/x",
        "EXO_CONFIG_DIR": str(user / "config"), "BEADS_DIR": str(user / "beads"), "GIT_DIR": str(user / "git"),
        "GIT_WORK_TREE": str(user), "PGHOST": "/nowhere", "PGDATABASE": "x", "STY": "1.screen",
    }
    proc = subprocess.run([sys.executable, "-c", BENCH, str(ROOT / "bench")], env=shell, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    env, root = seen["env"], Path(seen["root"] or "/nonexistent")
    for var in ("TMUX", "TMUX_PANE", "ZELLIJ", "ZELLIJ_SESSION_NAME", "EXO_AGENT", "EXO_STATE_DIR", "EXO_STORE_URL",
                "BEADS_DIR", "GIT_DIR", "GIT_WORK_TREE", "PGHOST", "PGDATABASE", "STY"):
        assert var not in env, var
    assert env["TMUX_TMPDIR"] == str(root) and env["XDG_RUNTIME_DIR"] == str(root / "xdg")
    assert not str(root).startswith(str(user))
    assert env["EXO_CONFIG_DIR"].startswith(str(root))  # nor the user's exo configuration
    # The user's server still runs its one session; the benchmark's server ran in its own folder, and is gone
    # with that folder.
    sessions = subprocess.run(["tmux", "-L", "bench", "list-sessions", "-F", "#{session_name}"], env=mine,
                              capture_output=True, text=True)
    assert sessions.stdout.split() == ["mine"]
    assert not root.exists()
