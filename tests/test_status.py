"""`exo status`: task, branch ahead/behind its parent, dirty files, PR;
at the root, a summary of the team (issue 10, item 13)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from conftest import Exo, git
from exo_cli.env import Env
from exo_cli.records import Agent


def _agent(env: Env, agent_id: str, status: str, **kw: object) -> None:
    now = time.time()
    env.store.insert_agent(Agent(id=agent_id, name=agent_id, role="dev", parent="root", status=status,
                                 backend="demo", mux="headless", created_at=now, updated_at=now, status_at=now,
                                 **kw))  # type: ignore[arg-type]


def test_agent_status_in_its_worktree(repo: Path, tmp_path: Path) -> None:
    wt = tmp_path / "w1"
    git(repo, "worktree", "add", "-q", "--no-track", "-b", "main.w1", str(wt), "main")
    env = Env(cwd=repo)
    _agent(env, "w1", "working", task="Add a --verbose flag", worktree=str(wt), branch="main.w1",
           base_branch="main")
    for i in range(2):
        (wt / f"f{i}.txt").write_text(str(i))
        git(wt, "add", f"f{i}.txt")
        git(wt, "commit", "-q", "-m", f"w1 {i}")
    (repo / "main.txt").write_text("m")
    git(repo, "add", "main.txt")
    git(repo, "commit", "-q", "-m", "main moves")
    (wt / "dirty.txt").write_text("uncommitted")
    env.store.insert_pr(forge="local", title="w1", body="", head="main.w1", base="main", author="w1", state="open")

    r = Exo(wt)("status", "--json")
    assert r.exit_code == 0, r.stderr
    s = r.json()
    assert s["caller"] == "w1" and s["role"] == "dev" and s["via"] == "worktree"
    assert s["task"] == "Add a --verbose flag"
    assert s["git"]["branch"] == "main.w1" and s["git"]["parent_branch"] == "main"
    assert (s["git"]["ahead"], s["git"]["behind"]) == (2, 1)
    assert s["git"]["dirty"] == ["?? dirty.txt"]
    assert s["pr"] == {"number": 1, "state": "open", "base": "main", "queue": None}
    assert s["team"] is None

    # The same agent seen from the root, by name.
    r = Exo(repo)("status", "w1", "--json")
    assert r.json()["git"]["ahead"] == 2 and r.json()["worktree"] == str(wt)

    text = Exo(wt)("status").stdout
    assert "+2 / -1 vs main" in text and "#1 open -> main" in text and "Add a --verbose flag" in text


def test_root_status_summarises_the_team(repo: Path) -> None:
    env = Env(cwd=repo)
    _agent(env, "a", "working")
    _agent(env, "b", "idle")
    _agent(env, "c", "idle")
    _agent(env, "d", "done")
    env.store.insert_pr(forge="local", title="x", body="", head="main.a", base="main", author="a", state="open")
    env.store.insert_pr(forge="local", title="y", body="", head="main.b", base="main", author="b", state="merged")
    r = Exo(repo)("status", "--json", env={k: v for k, v in os.environ.items() if k != "EXO_AGENT"})
    s = r.json()
    assert s["caller"] == "root" and s["agent"] is None
    assert s["team"] == {"agents": 4, "by_status": {"working": 1, "idle": 2, "done": 1}, "open_prs": 1}
    assert "4 agent(s): 1 done, 2 idle, 1 working; 1 open PR(s)" in Exo(repo)("status").stdout


def test_agents_shows_turns_tool_calls_and_tokens(repo: Path) -> None:
    env = Env(cwd=repo)
    _agent(env, "w1", "working", turns=3, tool_calls=12, tokens=13_400, task="Write the parser")
    env.store.bump_agent("w1", tool_calls=1)  # what `exo hook tool` does on every tool call
    r = Exo(repo)("agents", "--json")
    row = r.json()["agents"][0]
    assert (row["turns"], row["tool_calls"], row["tokens"]) == (3, 13, 13_400)
    text = Exo(repo)("agents").stdout
    assert "TURNS/TOOLS/TOK" in text and "3/13/13.4k" in text
