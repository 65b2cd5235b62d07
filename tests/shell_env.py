"""What a user's shell may carry that exo (or git, libpq, tmux) would read: one list, for the tests and the benchmarks.

A test run (``tests/leftovers.py``) and a benchmark (``bench/_common.py``) both start from the
environment of the shell that started them, which may be inside tmux or Zellij or an exo agent,
name another state folder, store, tracker or git directory, or point tmux at the user's own
server folder. ``scrub`` takes all of that out: the markers of tmux and Zellij and of an exo agent,
every ``EXO_*`` (but the suite's own knobs in ``KEEP``), ``BEADS_DIR``, ``HANGAR_ROOT``, and the
``GIT_*`` and ``PG*`` variables. ``private`` then points ``TMUX_TMPDIR`` and ``XDG_RUNTIME_DIR``
into a folder of the run's own, so every tmux server it starts has its socket there, never beside
the user's. Standard library only (the benchmarks import it without pytest).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

KEEP = ("EXO_UPDATE_SNAPSHOTS", "EXO_TEST_")  # the suite's own knobs, set on purpose for a run
SCRUB_EXACT = ("TMUX", "TMUX_PANE", "BEADS_DIR", "HANGAR_ROOT", "_EXO_COMPLETE", "STY", "WINDOW")
SCRUB_PREFIX = ("EXO_", "ZELLIJ", "GIT_", "PG")


def scrub(environ: MutableMapping[str, str]) -> list[str]:
    """Take out of ``environ`` what a user's shell may carry that exo (or git, libpq) would read."""
    gone = [k for k in environ if (k in SCRUB_EXACT or k.startswith(SCRUB_PREFIX)) and not k.startswith(KEEP)]
    for k in gone:
        del environ[k]
    return sorted(gone)


def private(environ: MutableMapping[str, str], root: Path) -> None:
    """Point ``environ``'s ``TMUX_TMPDIR`` at ``root`` and its ``XDG_RUNTIME_DIR`` at ``root/xdg`` (made, mode 0700).

    ``root`` should be short, under /tmp: tmux sockets live under it (a unix socket path holds
    about 104 bytes).
    """
    xdg = root / "xdg"
    xdg.mkdir(mode=0o700, exist_ok=True)
    environ["TMUX_TMPDIR"] = str(root)
    environ["XDG_RUNTIME_DIR"] = str(xdg)
    environ["NO_COLOR"] = "1"


def tmux_env() -> dict[str, str]:
    """This process's environment without the markers of being inside tmux (for tmux calls naming their socket)."""
    return {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}


def tmux_servers(root: Path) -> list[Path]:
    """The sockets under ``root`` (a ``TMUX_TMPDIR``) where a tmux server still answers."""
    import shutil
    import subprocess

    if shutil.which("tmux") is None:
        return []
    env = tmux_env()
    out = []
    for sock in sorted(root.glob("tmux-*/*")):
        if sock.is_socket() and subprocess.run(["tmux", "-S", str(sock), "list-sessions"], capture_output=True,
                                               env=env, timeout=30).returncode == 0:
            out.append(sock)
    return out
