"""Between hosts through the broker: host A's broker states the caller, host B's ``host-call`` checks it.

Two real hosts (``tests/hosts_harness.py``: sshd on 127.0.0.1, one PostgreSQL store). A dev agent
on A reaches exo through its own socket; its calls about a sibling on B travel from A's broker
over ssh with the agent's proof, which B proves against the shared store as it always did: the
dev may read its sibling there (``exo diff``) and may not kill it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hosts_harness import TwoHosts
from test_broker_agents import PUPPET, Team

from conftest import ROOT, Exo, sandbox_reach, stop_repo_agents, wait_for, write_trusted


@pytest.fixture
def hosts(two_hosts: TwoHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TwoHosts, Team]]:
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    command = [sys.executable, str(PUPPET), str(results)]
    # the puppets are sandboxed (the default): the results folder is one they may write ([sandbox] paths)
    write_trusted(two_hosts.a, sandbox_reach(results) + f"[agent]\ncommand = {json.dumps(command)}\n[broker]\n"
                  "idle_exit = 1\n")
    yield two_hosts, Team(two_hosts.a, results)
    stop_repo_agents(two_hosts.a)


def test_a_dev_reads_its_sibling_on_another_host_through_its_broker_and_may_not_kill_it(
        hosts: tuple[TwoHosts, Team]) -> None:
    h, team = hosts
    exo = Exo(h.a)
    r = exo("spawn", "--host", "b", "--worker", "sib", "--prompt", "add sib.txt", "--agent", "demo", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr

    def sib_committed() -> bool:
        d = exo("diff", "sib", "--name-only", "--json")
        return d.exit_code == 0 and "sib.txt" in d.stdout

    wait_for(sib_committed, 240, "the sibling on b to commit its file")
    team.spawn("d1")
    assert "EXO_SOCKET" in team.environ("d1")
    r = team.run("d1", "diff", "sib", "--name-only", "--json")
    assert r["rc"] == 0, r
    assert [f["path"] for f in json.loads(r["stdout"])["files"]] == ["sib.txt"]  # B answered for d1
    r = team.run("d1", "kill", "sib", "--json")
    assert r["rc"] == 5 and "dev role cannot" in r["stdout"], r
    agents = {a["id"]: a for a in exo("agents", "--json").json()["agents"]}  # type: ignore[index]
    assert agents["sib"]["host"] == "b" and agents["sib"]["status"] not in ("dead", "done")
