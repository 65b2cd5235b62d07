"""exo on every agent's PATH."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest
from hosts_harness import VENV_BIN, TwoHosts, wait_until

from conftest import Exo, stop_repo_agents


def _ok(res: Any) -> Any:
    assert res.exit_code == 0, res.stdout + res.stderr
    return res.json()


@pytest.fixture
def hosts(two_hosts: TwoHosts) -> Any:
    yield two_hosts
    stop_repo_agents(two_hosts.a)


# --------------------------------------------------------------------------- the agent


def _custom_agent() -> list[str]:
    """A custom agent that says which exo it finds, runs it, and records its arguments; then waits."""
    return ["sh", "-c", 'command -v exo > found-exo.txt; exo --version >> found-exo.txt 2>&1;'
            ' printf "%s\\n" "$@" > args.txt; exec sleep 600', "agent"]


# --------------------------------------------------------------------------- exo on a local agent's PATH


def test_a_local_agent_finds_the_exo_that_started_it_first_on_its_path(repo: Path, exo: Exo, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = Path(os.environ["EXO_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "config.toml").write_text(f"[agent]\ncommand = {json.dumps(_custom_agent())}\n")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # exo run by its full path: its folder is not on PATH
    try:
        res = _ok(exo("spawn", "--worker", "c1", "--prompt", "p", "--agent", "custom", "--mux", "headless", "--json"))
        wt = Path(res["agents"][0]["worktree"])
        found = wait_until(lambda: (wt / "found-exo.txt").is_file()
                           and (wt / "found-exo.txt").read_text().count("\n") >= 2 and (wt / "found-exo.txt").read_text(),
                           timeout=120, what="the custom agent to look for exo")
        exo_path, version = found.splitlines()[:2]
        assert exo_path == str(repo / ".git" / "exo" / "bin" / "exo"), found
        assert "exo" in version.lower() and "not found" not in version, found
        script = Path(exo_path).read_text()
        assert shlex.split(script.splitlines()[1])[:2] == ["exec", str(VENV_BIN / "exo")], script  # this very exo
        assert sorted(os.listdir(Path(exo_path).parent)) == ["exo"]  # nothing else of exo's shadows the user's tools
    finally:
        stop_repo_agents(repo, tmux=False)
