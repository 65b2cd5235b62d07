"""``exo store migrate``: a team's state moves to PostgreSQL and back, every row and id kept."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import run_exo
from exo_cli.env import Env
from exo_cli.records import Agent


@pytest.fixture
def url(pg_cluster: Any) -> str:
    pg_cluster.psql("DROP DATABASE IF EXISTS migrate")
    pg_cluster.psql("CREATE DATABASE migrate")
    return str(pg_cluster.url("migrate"))


def seed(repo: Path, status: str = "idle") -> dict[str, Any]:
    """A small team's state: agents, messages (a question and its answer), events, a PR, kv."""
    store = Env(cwd=repo).store
    now = time.time()
    for i, parent in enumerate(["root", "w0", "w0"]):
        store.insert_agent(Agent(id=f"w{i}", name=f"w{i}", role="tl" if i == 0 else "dev", parent=parent,
                                 status=status if i == 2 else "idle", backend="custom", mux="headless",
                                 created_at=now + i, updated_at=now, status_at=now, repo=str(repo),
                                 location={"pid": 4242 + i}, spec={"phase": "spawned"}, undo=[{"kind": "x"}]))
    q = store.post("question", "w1", "w0", "why?", state="pending")
    store.post("answer", "w0", "w1", "because", reply_to=q, data={"n": 1})
    store.post("note", "w2", "w0", "done")
    store.event("spawned", "w1", {"k": "v"})
    store.insert_pr(forge="local", title="t", body="b", head="main.w1", base="main", author="w1", state="open", draft=True)
    store.kv_set("hook:w1", '{"blocks": 1}')
    return {"agents": store.agents(), "messages": store.messages(),
            "prs": store.prs(), "kv": store.kv_get("hook:w1"), "events": store.events()}


def test_migrate_to_postgres_and_back_keeps_every_row_and_id(repo: Path, url: str) -> None:
    before = seed(repo)
    state = repo / ".git" / "exo"
    proc = run_exo("store", "migrate", "--to", url, "--json", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(proc.stdout)
    assert res["counts"] == {"agents": 3, "messages": 3, "events": 1, "prs": 1, "kv": 1}
    assert (res["source"], res["target"]) == ("sqlite", url)
    assert not (state / "state.db").exists() and Path(res["kept"]).exists()
    assert (state / "store-url").read_text().strip() == url
    env = Env(cwd=repo)
    assert env.store_url == url
    assert env.store.messages() == before["messages"] and env.store.prs() == before["prs"]
    assert env.store.kv_get("hook:w1") == before["kv"] and env.store.events() == before["events"]
    assert env.store.agents() == before["agents"]
    # an agent's process (its environment predates the move) follows the state folder's record
    agent_env = Env(cwd=repo, environ={"EXO_STATE_DIR": str(state), "EXO_AGENT": "w1", "HOME": os.environ["HOME"]})
    assert agent_env.store_url == url and agent_env.store.agent("w1") == before["agents"][1]
    new = env.store.post("note", "w1", "w0", "after the move")
    assert new > max(m.id for m in before["messages"])
    assert env.store.insert_pr(forge="local", title="t2", body="", head="h", base="main", author="w1",
                               state="open") == 2
    proc = run_exo("store", "migrate", "--to", "sqlite", "--json", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["counts"]["messages"] == 4
    assert not (state / "store-url").exists() and (state / "state.db").exists()
    back = Env(cwd=repo)
    assert back.store_url is None and back.store.messages()[:3] == before["messages"]
    assert back.store.agents() == before["agents"]
    local = Env(cwd=repo).store  # nothing of this repository is left in the database
    from exo_cli.adapters.store import open_store

    assert open_store(state, state, url).counts() == {"agents": 0, "messages": 0, "events": 0, "prs": 0, "kv": 0}
    assert local.counts()["messages"] == 4


def test_migrate_is_refused_while_an_agent_is_mid_operation(repo: Path, url: str) -> None:
    seed(repo, status="working")
    proc = run_exo("store", "migrate", "--to", url, "--json", cwd=repo)
    assert proc.returncode == 5
    err = json.loads(proc.stdout)["error"]
    assert "w2 (working)" in err["message"] and err["data"]["agents"] == ["w2 (working)"]
    assert (repo / ".git" / "exo" / "state.db").exists() and not (repo / ".git" / "exo" / "store-url").exists()


def test_migrate_refuses_what_it_cannot_do(repo: Path, url: str) -> None:
    assert run_exo("store", "migrate", "--to", url, cwd=repo).returncode == 5  # no state yet
    seed(repo)
    assert run_exo("store", "migrate", "--to", "sqlite", cwd=repo).returncode == 5  # already there
    assert run_exo("store", "migrate", "--to", "mysql://x", cwd=repo).returncode == 4
    assert run_exo("store", "migrate", "--to", "postgresql://u:pw@/x?host=/x", cwd=repo).returncode == 4
    unreachable = run_exo("store", "migrate", "--to", "postgresql://u@/x?host=/nonexistent", "--json", cwd=repo)
    assert unreachable.returncode == 7 and "Traceback" not in unreachable.stderr
    assert (repo / ".git" / "exo" / "state.db").exists() and not (repo / ".git" / "exo" / "store-url").exists()
    other = Env(cwd=repo)  # a database already holding this repository's state is refused
    from exo_cli.adapters.store import open_store

    open_store(other.state_path, other.state_path, url).insert_agent(other.store.agents()[0])
    proc = run_exo("store", "migrate", "--to", url, "--json", cwd=repo)
    assert proc.returncode == 5 and "already holds state" in json.loads(proc.stdout)["error"]["message"]
