"""exo's tmux server runs only while it has something to show: a live agent, or a dead agent's screen
that waits for `exo reap`. When exo removes the last such window (complete, reap, doctor), the
server exits and its socket goes; `exo kill` leaves the dead pane readable, so the server stays.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import Exo, wait_for
from exo_cli.env import Env

pytestmark = [pytest.mark.tmux, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]


def _socket(repo: Path) -> str:
    return f"exo-{Env(cwd=repo).repo_id}"


def server_runs(repo: Path) -> bool:
    return subprocess.run(["tmux", "-L", _socket(repo), "list-sessions"], capture_output=True).returncode == 0


def socket_file(repo: Path) -> Path:
    return Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / _socket(repo)


def spawn(exo: Exo, *names: str) -> None:
    for name in names:
        r = exo("spawn", "--worker", name, "--prompt", "x", "--agent", "custom", "--mux", "tmux")
        assert r.exit_code == 0, r.stderr


def test_complete_of_the_last_agent_stops_the_server(sleepers: Path) -> None:
    exo = Exo(sleepers)
    spawn(exo, "w1", "w2")
    assert server_runs(sleepers)
    assert exo("complete", "w1").exit_code == 0
    assert server_runs(sleepers)  # w2 still runs there
    assert exo("complete", "w2").exit_code == 0
    assert not server_runs(sleepers) and not socket_file(sleepers).exists()
    spawn(exo, "w3")  # a spawn after that starts a new server
    assert server_runs(sleepers)
    assert exo("complete", "w3").exit_code == 0
    assert not server_runs(sleepers)


def test_a_killed_agent_keeps_its_screen_until_reap(sleepers: Path) -> None:
    exo = Exo(sleepers)
    spawn(exo, "w1")
    assert exo("kill", "w1").exit_code == 0
    assert server_runs(sleepers)  # its last screen stays readable
    assert "w1" in exo("read", "w1", "--json").stdout
    r = exo("reap", "--json")
    assert r.exit_code == 0 and r.json()["reaped"] == ["w1"]  # type: ignore[index]
    wait_for(lambda: not server_runs(sleepers), timeout=30, what="the tmux server to exit")
    assert not socket_file(sleepers).exists()


def test_doctor_stops_a_server_left_with_nothing_in_it(sleepers: Path) -> None:
    exo = Exo(sleepers)
    spawn(exo, "w1")
    assert exo("complete", "w1").exit_code == 0
    from exo_cli.adapters.mux.tmux import Tmux

    Tmux(_socket(sleepers), "exo").ensure_session()  # as an older exo left it: the placeholder alone
    assert server_runs(sleepers)
    assert exo("doctor").exit_code == 0
    assert not server_runs(sleepers)
    assert exo("doctor", "--dry-run").exit_code == 0 and not server_runs(sleepers)
