"""An agent in its own clone on another host (``spawn --host b --layout clone``), over a real sshd on 127.0.0.1.

Everything exo does to the agent runs on its host, through exo there, so the reads of the clone
are that exo's hostile reader: status, diff, its PR (filed inside, merged from here), complete
and doctor. The clone is planted with a configuration that would run programs; none may run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hosts_harness import TwoHosts, wait_until
from test_hosts_e2e import _agent, _ok, _script

from conftest import Exo, agent_vars, git, stop_repo_agents


@pytest.fixture
def hosts(two_hosts: TwoHosts) -> Any:
    yield two_hosts
    stop_repo_agents(two_hosts.a)


def test_a_worker_in_its_own_clone_on_another_host(hosts: TwoHosts, exo: Exo, tmp_path: Path) -> None:
    h = hosts
    _ok(exo("spawn", "--subtree", "--task", "lead", "--branch", "tl1", "--agent", "demo", "--mux", "headless",
            "--json"))
    tl = agent_vars(h.a, "tl1")
    steps = [{"write": {"path": "w1.txt", "content": "made in a clone on b\n"}},
             {"commit": {"message": "w1: add w1.txt"}}, {"pr": {"title": "w1 work", "body": "from a clone"}}]
    res = _ok(exo("spawn", "--host", "b", "--worker", "w1", "--prompt", "add w1.txt", "--agent", "demo",
                  "--demo-script", _script(tmp_path, steps), "--layout", "clone", "--json", env=tl))
    [w1] = res["agents"]
    clone = Path(w1["worktree"])
    assert w1["layout"] == "clone" and str(clone).startswith(str(h.b)), w1
    assert (clone / ".git" / "objects" / "info" / "alternates").read_text().strip() == str(h.b / ".git" / "objects")
    wait_until(lambda: any(p["head"] == "main.tl1.w1" for p in _ok(exo("pr", "list", "--json"))["prs"]),
               timeout=240, what="w1's PR, filed from its clone on b")
    [pr] = [p for p in _ok(exo("pr", "list", "--json"))["prs"] if p["head"] == "main.tl1.w1"]
    marks = tmp_path / "marks"
    marks.mkdir()
    with open(clone / ".git" / "config", "a") as fh:  # the agent's own configuration, read by no exo
        fh.write(f'[core]\n\tfsmonitor = "touch {marks}/fsmonitor; false"\n\thooksPath = {marks}/hooks\n'
                 f'[diff]\n\texternal = "touch {marks}/extdiff"\n')
    (clone / "w1.txt").write_text("changed after the PR\n")
    status = _ok(exo("status", "w1", "--json", env=tl))
    assert status["git"]["branch"] == "main.tl1.w1" and any("w1.txt" in d for d in status["git"]["dirty"]), status
    diff = _ok(exo("diff", "w1", "--name-only", "--json", env=tl))
    assert [f["path"] for f in diff["files"]] == ["w1.txt"], diff
    (clone / "w1.txt").write_text("made in a clone on b\n")  # as committed (no git of the clone's config here)
    merged = _ok(exo("pr", "merge", str(pr["number"]), "--json", env=tl))
    assert git(h.a, "rev-parse", "refs/heads/main.tl1") == merged["merge_commit"]
    assert _ok(exo("doctor", "--hosts", "--dry-run", "--json"))["remaining"] == 0
    done = _ok(exo("complete", "w1", "--json", env=tl))
    assert done["worktree_removed"], done
    assert not clone.exists() and git(h.b, "for-each-ref", "refs/exo/clones/") == ""
    assert _agent(exo, "w1")["status"] == "done"
    assert sorted(p.name for p in marks.iterdir()) == [], json.dumps(done)
