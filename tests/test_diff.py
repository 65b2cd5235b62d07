"""``exo diff AGENT`` and ``exo pr show N --diff``: three-dot diffs of real branches."""

from __future__ import annotations

from pathlib import Path

from pr_helpers import commit, env_for, make_agent

from conftest import Exo
from exo_cli import registry


def file_as(agent_id: str, wt: str, **kw: object):  # type: ignore[no-untyped-def]
    return registry.invoke("pr_file", env_for(wt, agent_id), **kw)


def test_diff_is_three_dot_against_the_base(repo: Path, exo: Exo) -> None:
    a = make_agent(repo, "w1")
    commit(a.worktree, "src/api.py", "def api():\n    return 1\n", "add api")
    commit(a.worktree, "README.md", "# hello\nmore\n", "readme")
    commit(repo, "base-only.txt", "moved on\n", "base moves on")  # not part of w1's diff (three-dot)
    r = exo("diff", "w1", "--json")
    assert r.exit_code == 0, r.stderr
    data = r.json()
    assert (data["agent"], data["head"], data["base"]) == ("w1", "main.w1", "main")
    files = {f["path"]: (f["status"], f["added"], f["deleted"]) for f in data["files"]}
    assert files == {"src/api.py": ("A", 2, 0), "README.md": ("M", 2, 1)}
    assert "+def api():" in data["patch"] and "base-only" not in data["patch"] and not data["truncated"]
    stat = exo("diff", "w1", "--stat")
    assert stat.exit_code == 0 and "src/api.py" in stat.stdout and "+2 -0" in stat.stdout
    assert "2 file(s) changed, +4 -1" in stat.stdout and "def api" not in stat.stdout
    names = exo("diff", "w1", "--name-only")
    assert names.stdout.splitlines() == ["README.md", "src/api.py"]
    assert exo("diff", "w1", "--stat", "--name-only").exit_code != 0
    plain = exo("diff", "w1")
    assert plain.stdout.startswith("diff --git") and "[" not in plain.stderr


def test_diff_refusals(repo: Path, exo: Exo) -> None:
    r = exo("diff", "nobody", "--json")
    assert r.exit_code == 3 and r.json()["error"]["name"] == "NotFound"
    make_agent(repo, "w2")
    empty = exo("diff", "w2")
    assert empty.exit_code == 0 and "No changes" in empty.stdout


def test_pr_show_diff_open_and_merged(repo: Path, exo: Exo) -> None:
    a = make_agent(repo, "w1")
    commit(a.worktree, "a.txt", "a\n", "add a")
    n = file_as("w1", a.worktree, title="Add a").pr.number
    shown = exo("pr", "show", str(n), "--diff", "--json").json()
    assert shown["number"] == n and [f["path"] for f in shown["diff"]["files"]] == ["a.txt"]
    assert "diff" not in exo("pr", "show", str(n), "--json").json()  # unchanged without --diff
    registry.invoke("pr_merge", env_for(repo), number=n)
    merged = exo("pr", "show", str(n), "--diff")
    assert merged.exit_code == 0 and "+a" in merged.stdout and "Add a" in merged.stdout
