"""Run pytest under a hostile shell environment: what a user's shell may carry into the test run.

    python tests/hostile_env.py [PYTEST ARGS...]

The suite must pass whatever the shell that starts it carries: the markers of being inside tmux
(`TMUX`, `TMUX_PANE`, pointing at a real "user" tmux server with a session, started here) or
Zellij (`ZELLIJ*`), a `TMUX_TMPDIR`, an `XDG_RUNTIME_DIR`, `NO_COLOR`, a `BEADS_DIR` holding a
tracker, `HANGAR_ROOT`, `GIT_DIR` and libpq's `PG*`, and every `EXO_*` variable exo's source names (found by reading it, so a new
variable is covered without editing this file), each with a value that would mislead a test that
read it. After the run, the user's tmux server must still run with its session and the user's own
"agent" (a process started from the user's folder) must still be alive: the suite's leftover check
(tests/leftovers.py) must never take the user's own processes for its own.

Exits with pytest's status, or 1 when the user's server or process did not survive. `.ci/run` runs
the tmux and parity modules this way.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = re.compile(rb"\bEXO_[A-Z][A-Z0-9_]*\b")


def exo_variables() -> list[str]:
    """Every ``EXO_*`` name that exo's own source mentions."""
    names: set[str] = set()
    for path in (ROOT / "exo_cli").rglob("*.py"):
        names.update(m.decode() for m in NAME.findall(path.read_bytes()))
    return sorted(names)


def hostile_environ(base: Path, tmux_socket: str | None, pane: str | None, server_pid: int | None) -> dict[str, str]:
    """``os.environ`` plus the hostile variables; folders are made under ``base``."""
    beads = base / "beads"
    beads.mkdir()
    (beads / "issues.jsonl").write_text('{"id":"hostile-1","title":"a bead of the user\'s own tracker",'
                                        '"status":"open","priority":0,"issue_type":"task"}\n')
    xdg = base / "xdg"
    xdg.mkdir(mode=0o700)
    config = base / "config"
    config.mkdir()
    (config / "config.toml").write_text('[agent]\ndefault = "codex"\n[mux]\ndefault = "zellij"\n')
    env = dict(os.environ)
    values = {
        "EXO_AGENT": "hostile", "EXO_AGENT_PROOF": "not-a-proof", "EXO_PARENT": "hostile-parent", "EXO_ROLE": "tl",
        "EXO_STATE_DIR": str(base / "state"), "EXO_CONFIG_DIR": str(config), "EXO_DEBUG": "1",
        "EXO_FAULT": "spawn.started", "EXO_MCP_WAIT": "0", "EXO_PROCESS_READER": "psutil",
        "EXO_AGENT_BACKEND": "codex", "EXO_SKIP_PERMISSIONS": "1", "EXO_MUX": "zellij", "EXO_FORGE": "github",
        "EXO_MAX_AGENTS": "1", "EXO_WORKTREE_ROOT": str(base / "worktrees"), "EXO_BASE_BRANCH": "hostile",
        "EXO_STORE_URL": "postgresql://hostile@127.0.0.1:9/none", "EXO_SSH_COMMAND": "false", "EXO_HOST": "hostile",
    }
    for name in exo_variables():
        env[name] = values.get(name, f"hostile-{name.lower()}")
    env.update({
        "TMUX_TMPDIR": str(base), "XDG_RUNTIME_DIR": str(xdg), "NO_COLOR": "1", "BEADS_DIR": str(beads),
        "HANGAR_ROOT": str(base / "hangar"), "ZELLIJ": "0", "ZELLIJ_SESSION_NAME": "hostile-user",
        "ZELLIJ_PANE_ID": "7", "_EXO_COMPLETE": "",
        # a shell inside a git hook, or set up for another PostgreSQL server
        "GIT_DIR": str(base / "not-a-repo"), "GIT_WORK_TREE": str(base), "PGHOST": str(base), "PGSSLMODE": "require",
    })
    if tmux_socket and pane and server_pid:
        env["TMUX"] = f"{tmux_socket},{server_pid},0"
        env["TMUX_PANE"] = pane
    else:  # no tmux here: markers of a tmux that is not there
        env["TMUX"] = f"{base}/tmux-{os.getuid()}/default,1,0"
        env["TMUX_PANE"] = "%0"
    return env


def user_tmux(base: Path) -> tuple[str | None, str | None, int | None]:
    """A tmux server of "the user" under ``base`` with a session running a shell: (socket, pane, pid)."""
    if shutil.which("tmux") is None:
        return None, None, None
    socket = str(base / f"tmux-{os.getuid()}" / "default")
    os.makedirs(os.path.dirname(socket), mode=0o700, exist_ok=True)
    clean = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    subprocess.run(["tmux", "-S", socket, "new-session", "-d", "-s", "user", "sleep 86400"], check=True, env=clean)
    out = subprocess.run(["tmux", "-S", socket, "display-message", "-p", "-t", "user", "#{pane_id} #{pid}"],
                         check=True, capture_output=True, text=True, env=clean).stdout.split()
    return socket, out[0], int(out[1])


def main(argv: list[str]) -> int:
    base = Path(tempfile.mkdtemp(prefix="exo-hostile-", dir=os.path.realpath("/tmp")))
    socket, pane, server_pid = user_tmux(base)
    agent = subprocess.Popen(["sleep", "86400"], cwd=base, start_new_session=True)  # the user's own agent
    try:
        env = hostile_environ(base, socket, pane, server_pid)
        code = subprocess.call([sys.executable, "-m", "pytest", *argv], cwd=ROOT, env=env)
        problems = []
        if agent.poll() is not None:
            problems.append(f"the user's own process (pid {agent.pid}) was stopped by the run")
        if socket and subprocess.run(["tmux", "-S", socket, "has-session", "-t", "=user"], capture_output=True,
                                     env={k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
                                     ).returncode != 0:
            problems.append(f"the user's tmux server ({socket}) or its session was stopped by the run")
        for p in problems:
            print(f"hostile_env: {p}", file=sys.stderr)
        return code if not problems else (code or 1)
    finally:
        if agent.poll() is None:
            agent.send_signal(signal.SIGKILL)
            agent.wait()
        if socket:
            subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
