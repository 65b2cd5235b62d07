"""Checkpoints of an agent on another host (issue 29): taken there by its own hooks, listed, shown and
undone from here through exo there (tests/hosts_harness.py: a real sshd on 127.0.0.1, the private
PostgreSQL cluster as the shared store, clone B with its own HOME and state)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hosts_harness import TwoHosts, wait_until

from conftest import Exo, git, stop_repo_agents

SCRIPT = [{"write": {"path": "w1.txt", "content": "made on host b\n"}}, {"commit": {"message": "w1: add w1.txt"}},
          {"write": {"path": "notes.md", "content": "uncommitted notes on b\n"}}]


def _ok(res: Any) -> Any:
    assert res.exit_code == 0, res.stdout + res.stderr
    return res.json()


@pytest.fixture
def hosts(two_hosts: TwoHosts) -> Any:
    yield two_hosts
    stop_repo_agents(two_hosts.a)


def test_an_agent_on_another_host_is_checkpointed_there_and_undone_from_here(hosts: TwoHosts, exo: Exo,
                                                                             tmp_path: Path) -> None:
    h = hosts
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    res = _ok(exo("spawn", "--host", "b", "--worker", "w1", "--prompt", "work on b", "--agent", "demo",
                  "--demo-script", str(script), "--json"))
    [w1] = res["agents"]
    wt = Path(w1["worktree"])
    assert wt.is_relative_to(h.b)

    def checkpointed() -> Any:
        got = _ok(exo("checkpoints", "w1", "--json"))["checkpoints"]  # asked of exo on b
        return got if any(c["reason"] == "turn" for c in got) else None

    [turn] = [c for c in wait_until(checkpointed, timeout=240, what="w1's turn checkpoint on b") if c["reason"] == "turn"]
    assert git(h.b, "cat-file", "-p", f"{turn['commit']}:notes.md") == "uncommitted notes on b"
    assert git(h.a, "for-each-ref", "refs/exo/") == ""  # nothing of it in this clone
    diff = _ok(exo("diff", "w1", "--checkpoint", str(turn["id"]), "--name-only", "--json"))
    assert "notes.md" in [f["path"] for f in diff["files"]]
    (wt / "notes.md").write_text("overwritten\n")
    (wt / "w1.txt").unlink()
    done = _ok(exo("undo", "w1", "--to", str(turn["id"]), "--force", "--json"))
    assert done["restored"] == turn["id"] and sorted(done["files"]) == ["notes.md", "w1.txt"]
    assert (wt / "notes.md").read_text() == "uncommitted notes on b\n"
    assert (wt / "w1.txt").read_text() == "made on host b\n"
