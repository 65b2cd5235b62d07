"""A budget for an agent on another host: recorded by exo there, enforced there, raised and costed from here.

Two hosts over a real sshd on 127.0.0.1 (tests/hosts_harness.py), one bare origin, the private
PostgreSQL cluster as the shared store; the agent is a real custom agent on host b reporting its
tokens with `exo usage` (exo on its PATH, as on any host).
"""

from __future__ import annotations

from typing import Any

import pytest
from hosts_harness import TwoHosts, _write_toml

from conftest import Exo, stop_repo_agents

AGENT = ["sh", "-c", 'exo usage --model house --input 150 && echo "[exo-output]turn one[/exo-output]";'
         ' while read -r line; do echo "[exo-output]got $line[/exo-output]"; done', "agent"]


def _ok(res: Any) -> Any:
    assert res.exit_code == 0, res.stdout + res.stderr
    return res.json()


@pytest.fixture
def hosts(two_hosts: TwoHosts) -> Any:
    yield two_hosts
    stop_repo_agents(two_hosts.a)


def test_an_agent_on_another_host_gets_the_budget_given_here_and_is_stopped_and_raised(
        hosts: TwoHosts, exo: Exo) -> None:
    h = hosts
    # this side's [budget] agent_tokens goes with the spawn (b configures none)
    _write_toml(h.a_config, {"agent": {"command": AGENT}, "budget": {"agent_tokens": 100}})
    res = _ok(exo("spawn", "--host", "b", "--worker", "c1", "--agent", "custom", "--mux", "headless", "--json"))
    assert [a["host"] for a in res["agents"]] == ["b"]
    from exo_cli.env import Env

    store = Env(cwd=h.a).store
    assert store.agent("c1").spec["budget"] == {"tokens": 100}  # type: ignore[union-attr]
    waited = _ok(exo("wait", "c1", "--until-idle", "--timeout", "150", "--json"))
    assert waited["timed_out"] is False  # watched on b, where it runs: over its budget counts as idle
    c1 = store.agent("c1")
    assert (c1.status, c1.status_reason) == ("over-budget", "over budget: 150 of 100 tokens")  # type: ignore[union-attr]
    cost = _ok(exo("cost", "c1", "--json"))
    assert cost["agents"][0]["total"]["tokens"] == 150
    assert [s["delivery"] for s in _ok(exo("send", "c1", "hello", "--json"))["sent"]] == ["held"]
    raised = _ok(exo("budget", "c1", "+100", "--tokens", "--json"))  # handed over on b, by exo there
    assert (raised["released"], raised["budget_tokens"], len(raised["delivered"])) == (True, 200, 1)
    again = _ok(exo("wait", "c1", "--until-idle", "--timeout", "150", "--json"))
    assert again["timed_out"] is False
    assert "got" in (store.agent("c1").output or "") and "hello" in (store.agent("c1").output or "")  # type: ignore[union-attr]
