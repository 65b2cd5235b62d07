"""A full disk under exo's state: a clear EnvironmentError (exit 7), nothing half-written, and the
next call works once there is room again.

The disk is real: a small tmpfs mounted for the test. Mounting needs root with CAP_SYS_ADMIN (as in
CI); elsewhere the module is skipped, saying so.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import git, live_agent_environ, run_exo, stop_repo_agents, write_trusted
from exo_cli.env import Env


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0755", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root with CAP_SYS_ADMIN): {r.stderr.decode().strip()}")
    repo = mnt / "repo"  # a repository with exo's state on it
    try:
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        git(repo, "commit", "-q", "--allow-empty", "-m", "initial")
        assert run_exo("init", cwd=repo).returncode == 0
        yield mnt
    finally:
        stop_repo_agents(repo)
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(folder: Path) -> Path:
    """Take every free byte of the disk ``folder`` is on (the file returned holds them)."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    block = b"\0" * 65536
    try:
        while True:
            try:
                os.write(fd, block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                if len(block) == 1:
                    break
                block = block[: len(block) // 2]
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_is_an_environment_error_and_nothing_is_half_written(small_disk: Path) -> None:
    repo = small_disk / "repo"
    assert run_exo("send", "root", "before", "--json", cwd=repo).returncode == 0
    filler = _fill(small_disk)
    for n in range(5):  # a write that fits in what SQLite already had may pass: one of them meets the full disk
        r = run_exo("send", "root", f"on a full disk {n}", "--json", cwd=repo)
        if r.returncode != 0:
            break
    assert r.returncode == 7, r.stdout + r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["name"] == "EnvironmentError" and "space" in err["message"], err
    assert "Traceback" not in r.stderr
    filler.unlink()
    r = run_exo("send", "root", "after", "--json", cwd=repo)
    assert r.returncode == 0, r.stdout + r.stderr
    bodies = [m.body for m in Env(cwd=repo).store.messages(recipient="root")]
    assert bodies[0] == "before" and bodies[-1] == "after"
    assert len(bodies) == len(set(bodies))  # each stored at most once


def _agent_env(repo: Path, name: str) -> dict[str, str]:
    """The exo variables exo gave the live agent ``name`` (its socket to the broker, its proof), as its recorded
    process has them (the agent's runner, or its sandbox's bwrap: the sandbox is a pid namespace of its own)."""
    return {k: v for k, v in live_agent_environ(repo, name).items() if k.startswith("EXO_")}


def test_an_agent_on_a_full_disk_gets_an_environment_error_through_its_broker_and_its_hooks_fail_open(
        small_disk: Path) -> None:
    repo = small_disk / "repo"
    write_trusted(repo, '[agent]\ncommand = ["sleep", "600"]\n')
    r = run_exo("spawn", "--worker", "w1", "--prompt", "x", "--agent", "custom", "--mux", "headless", cwd=repo)
    assert r.returncode == 0, r.stdout + r.stderr
    env = _agent_env(repo, "w1")
    assert env.get("EXO_SOCKET")  # it reaches exo through its broker
    wt = repo / ".exo" / "worktrees" / "w1"
    filler = _fill(small_disk)
    for n in range(5):
        r = run_exo("note", f"on a full disk {n}", "--json", cwd=wt, env=env)
        if r.returncode != 0:
            break
    assert r.returncode == 7, r.stdout + r.stderr
    assert json.loads(r.stdout)["error"]["name"] == "EnvironmentError" and "Traceback" not in r.stderr
    hook = run_exo("hook", "stop", "--cli", "claude", cwd=wt, env=env, input="{}")
    assert hook.returncode == 0 and json.loads(hook.stdout) == {}, hook.stdout + hook.stderr
    filler.unlink()
    r = run_exo("note", "after", "--json", cwd=wt, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
