"""Conflict foresight on real branches: real conflicts, clean overlaps, a base that moved, told once."""

from __future__ import annotations

import json
import time
from pathlib import Path

from pr_helpers import commit, env_for, git, make_agent

from conftest import Exo, wait_for
from exo_cli import registry
from exo_cli.ops import foresight

API = "".join(f"line {i}\n" for i in range(1, 11))


def edit_line(wt: Path | str, path: str, n: int, text: str, base: str = API) -> None:
    lines = base.splitlines(keepends=True)
    lines[n - 1] = text + "\n"
    commit(wt, path, "".join(lines), f"edit {path}:{n}")


def setup(repo: Path) -> tuple[str, str, str]:
    commit(repo, "src/api.py", API, "api")
    commit(repo, "README.md", "readme\n", "readme")
    a, b, c = (make_agent(repo, n) for n in ("w1", "w2", "w3"))
    edit_line(a.worktree, "src/api.py", 2, "w1's line 2")
    edit_line(b.worktree, "src/api.py", 2, "w2's line 2")  # same line: a conflict with w1
    edit_line(c.worktree, "src/api.py", 9, "w3's line 9")  # same file, another place: clean with both
    commit(c.worktree, "README.md", "w3's readme\n", "w3 readme")
    commit(repo, "README.md", "main's readme\n", "main moves on")  # w3's base now conflicts with it
    return a.worktree, b.worktree, c.worktree


def told(repo: Path, agent: str) -> list[str]:
    return [m.body for m in env_for(repo).store.messages(recipient=agent, kinds=["event"])
            if (m.data or {}).get("event") == "conflict"]


def test_conflicts_between_siblings_and_with_the_base(repo: Path) -> None:
    setup(repo)
    env = env_for(repo)
    r = registry.invoke("conflicts", env, agent="w1", check=True)
    assert r.checked == ["w1"] and sorted(r.told) == ["w1", "w2"]
    assert [(c.agent, c.other, c.paths) for c in r.conflicts] == [("w1", "w2", ["src/api.py"])]
    assert "conflicts with w2's branch main.w2 in: src/api.py" in told(repo, "w1")[0]
    assert "conflicts with w1's branch main.w1 in: src/api.py" in told(repo, "w2")[0]
    # the same conflict seen again, from either side: nobody is told twice
    assert registry.invoke("conflicts", env, agent="w1", check=True).told == []
    again = registry.invoke("conflicts", env, agent="w2", check=True)
    assert again.told == [] and [(c.agent, c.other) for c in again.conflicts] == [("w2", "w1"), ("w1", "w2")]
    # w3 overlaps both in src/api.py without conflict, but its base moved under its README
    r3 = registry.invoke("conflicts", env, agent="w3", check=True)
    assert [(c.other, c.other_branch, c.paths) for c in r3.conflicts] == [("base", "main", ["README.md"])]
    assert r3.told == [] and told(repo, "w3") == []  # the stop hook's rebase tells it about its base
    listed = Exo(repo)("conflicts", "--json").json()
    assert sorted((c["agent"], c["other"]) for c in listed["conflicts"]) == [("w1", "w2"), ("w2", "w1"),
                                                                            ("w3", "base")]
    human = Exo(repo)("conflicts")
    assert "w2 (main.w2)" in human.stdout and "its base main" in human.stdout
    # w2 resolves its side (it takes w1's line): the conflict is gone from the records
    wt2 = env.store.agent("w2").worktree
    git(wt2, "checkout", "-q", "main.w1", "--", "src/api.py")
    git(wt2, "commit", "-q", "-m", "take w1's line")
    resolved = registry.invoke("conflicts", env, agent="w2", check=True)
    assert foresight.recorded(env, "w2") == {} and all(c.agent != "w2" for c in resolved.conflicts)


def test_the_stop_hook_checks_in_the_background_only_when_branches_moved(repo: Path) -> None:
    wt1, wt2, _ = setup(repo)
    payload = json.dumps({"session_id": "s", "last_assistant_message": "did it"})

    def stop() -> list[str]:
        return registry.invoke("hook", env_for(wt1, "w1"), event="stop", cli="claude", payload=payload).actions

    first = stop()
    assert "foresight" in first
    # the check never works inside the agent's worktree (that would hold up `exo complete`)
    from exo_cli.adapters.proc import processes_inside

    for _ in range(20):
        assert not [p for p in processes_inside(wt1) if "conflicts" in p["command"] or "kill -0" in p["command"]]
        time.sleep(0.02)
    wait_for(lambda: foresight.recorded(env_for(repo), "w1").get("w2", {}).get("paths") == ["src/api.py"],
             timeout=60, what="the background check's record")
    assert "foresight" not in stop()  # nothing moved: no check
    edit_line(wt2, "src/api.py", 5, "w2 again", base=(Path(wt2) / "src/api.py").read_text())
    assert "foresight" in stop()  # a sibling's branch moved


def test_an_agent_working_on_the_base_itself_is_no_sibling_branch(repo: Path) -> None:
    """A --no-worktree sibling works on main, the agents' base: its branch is the base, whose conflicts are
    the stop hook's rebase's to report; it is neither listed twice nor told about the others' branches."""
    setup(repo)
    edit_line(repo, "src/api.py", 2, "main's line 2")  # the base now conflicts with w1 (and w2)
    env = env_for(repo)
    env.store.update_agent("w3", branch="main")  # as a --no-worktree agent: on the base itself
    r = registry.invoke("conflicts", env, agent="w1", check=True)
    mine = [(c.other, c.other_branch) for c in r.conflicts if c.agent == "w1"]
    assert ("base", "main") in mine and ("w3", "main") not in mine, mine  # the base once, as the base
    assert "w3" not in r.told and told(repo, "w3") == []
