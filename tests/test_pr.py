"""Pull requests on the local forge: file, merge (squash/merge), refusals that leave the base untouched."""

from __future__ import annotations

from pathlib import Path

import pytest
from pr_helpers import commit, env_for, git, make_agent, snapshot

from conftest import Exo
from exo_cli import registry
from exo_cli.errors import NotFound, StateError
from exo_cli.ops import pr as prmod
from exo_cli.ops.branches import base_branch
from exo_cli.ops.rebase import rebase_onto_base


def file_as(agent_id: str, wt: str, **kw: object) -> prmod.FileResult:
    return registry.invoke("pr_file", env_for(wt, agent_id), **kw)


def merge_as_root(repo: Path, number: int, strategy: str | None = None) -> prmod.MergeResult:
    return registry.invoke("pr_merge", env_for(repo), number=number, strategy=strategy)


def test_base_branch_detection(repo: Path) -> None:
    git(repo, "branch", "main.feature")
    env = env_for(repo)
    assert base_branch(env, None, "main.feature.auth") == "main.feature"
    assert base_branch(env, None, "bd-4hj/fix") == "main"  # the main checkout's branch
    assert base_branch(env) == "main"  # the main branch
    with pytest.raises(StateError, match="^main is the main branch: there is no branch above it to merge it into$"):
        base_branch(env, None, "main")  # the main checkout's own branch has no base
    (repo / "exo.toml").write_text('[worktree]\nbase = "develop"\n')
    assert base_branch(env_for(repo), None, "bd-4hj/fix") == "develop"
    assert base_branch(env_for(repo)) == "develop"
    a = make_agent(repo, "w1", base="main.feature", branch="odd-name")
    assert base_branch(env, a, "odd-name") == "main.feature"


def test_file_records_and_refiling_updates(repo: Path) -> None:
    a = make_agent(repo, "w1", parent="tl1")
    with pytest.raises(StateError, match="no commits"):
        file_as("w1", a.worktree)
    commit(a.worktree, "a.txt", "a\n", "add a")
    r = file_as("w1", a.worktree, title="Add a", body="Body")
    assert r.created and r.commits == 1
    assert (r.pr.number, r.pr.head, r.pr.base, r.pr.author, r.pr.state) == (1, "main.w1", "main", "w1", "open")
    assert r.pr.forge == "local" and r.pr.review is None and r.pr.checks is None
    again = file_as("w1", a.worktree, title="Add a, v2", body="Body 2", draft=True)
    assert not again.created and again.pr.number == 1 and again.pr.title == "Add a, v2" and again.pr.draft
    env = env_for(repo)
    assert len(env.store.prs()) == 1
    msgs = env.store.messages(recipient="tl1", kinds=["pr-filed"])
    assert [m.data["pr"] for m in msgs] == [1, 1]
    # default title from the last commit
    b = make_agent(repo, "w2")
    commit(b.worktree, "b.txt", "b\n", "add b please")
    assert file_as("w2", b.worktree).pr.title == "add b please"


def test_squash_merge_into_base_worktree_and_siblings_told(repo: Path) -> None:
    a = make_agent(repo, "w1")
    b = make_agent(repo, "w2")
    c = make_agent(repo, "w3", parent="other")
    commit(a.worktree, "a.txt", "a1\n")
    commit(a.worktree, "a2.txt", "a2\n")
    n = file_as("w1", a.worktree, title="Add a", body="two commits").pr.number
    (repo / "exo.toml").write_text("# a fresh, untracked exo.toml is no reason to refuse\n")
    r = merge_as_root(repo, n)
    assert r.strategy == "squash" and r.base_worktree == str(repo) and r.local_updated
    assert git(repo, "rev-parse", "HEAD") == r.merge_commit
    assert git(repo, "rev-list", "--parents", "-n", "1", "HEAD").count(" ") == 1  # one parent
    assert (repo / "a.txt").read_text() == "a1\n" and (repo / "a2.txt").read_text() == "a2\n"
    assert git(repo, "log", "-1", "--format=%s") == "Add a (#1)"
    assert git(repo, "status", "--porcelain") == "?? exo.toml"
    env = env_for(repo)
    pr = env.store.pr(n)
    assert pr is not None and pr.state == "merged" and pr.merge_commit == r.merge_commit
    assert sorted(r.notified) == ["w1", "w2"]
    assert env.store.messages(recipient="w2", kinds=["pr-merged"])[0].data["pr"] == n
    assert env.store.messages(recipient="w1", kinds=["pr-merged"])[0].data["yours"] is True
    assert not env.store.messages(recipient=c.id, kinds=["pr-merged"])
    assert any(e["kind"] == "pr-merged" for e in env.store.events("w1"))
    # the sibling's stop hook rebases it onto the new base
    commit(b.worktree, "b.txt", "b\n")
    rb = rebase_onto_base(env, env.store.agent("w2"))  # type: ignore[arg-type]
    assert rb.status == "rebased" and (Path(b.worktree) / "a.txt").exists()
    assert rebase_onto_base(env, env.store.agent("w2")).status == "up-to-date"  # type: ignore[arg-type]
    # the author's own branch is not rebased onto the squash of itself (that would conflict)
    rb = rebase_onto_base(env, env.store.agent("w1"))  # type: ignore[arg-type]
    assert (rb.status, rb.detail) == ("skipped", "its PR is merged")
    with pytest.raises(StateError, match="is merged"):
        merge_as_root(repo, n)


def test_merge_strategy_keeps_history_and_is_default_for_subtrees(repo: Path) -> None:
    t = make_agent(repo, "sub", role="tl")
    head = commit(t.worktree, "s.txt", "s\n")
    n = file_as("sub", t.worktree).pr.number
    r = merge_as_root(repo, n)
    assert r.strategy == "merge"
    parents = git(repo, "rev-list", "--parents", "-n", "1", "HEAD").split()[1:]
    assert parents[1] == head and len(parents) == 2


def _assert_refused_untouched(repo: Path, n: int, match: str) -> StateError:
    before = snapshot(repo)
    with pytest.raises(StateError, match=match) as info:
        merge_as_root(repo, n)
    assert snapshot(repo) == before
    pr = env_for(repo).store.pr(n)
    assert pr is not None and pr.state == "open" and pr.merge_commit is None
    assert not (repo / ".git" / "MERGE_HEAD").exists()
    return info.value


def test_refuses_dirty_base_worktree(repo: Path) -> None:
    a = make_agent(repo, "w1")
    commit(a.worktree, "a.txt", "a\n")
    n = file_as("w1", a.worktree).pr.number
    (repo / "README.md").write_text("# local edit\n")
    err = _assert_refused_untouched(repo, n, "modified or staged")
    assert err.data["files"] == [" M README.md"]
    git(repo, "add", "README.md")  # staged counts too
    _assert_refused_untouched(repo, n, "modified or staged")


def test_refuses_overwriting_untracked_file(repo: Path) -> None:
    a = make_agent(repo, "w1")
    commit(a.worktree, "new.txt", "theirs\n")
    n = file_as("w1", a.worktree).pr.number
    (repo / "new.txt").write_text("mine, untracked\n")
    err = _assert_refused_untouched(repo, n, "overwrite untracked")
    assert err.data["files"] == ["new.txt"]
    assert (repo / "new.txt").read_text() == "mine, untracked\n"


def test_refuses_conflict_cleanly(repo: Path) -> None:
    a = make_agent(repo, "w1")
    commit(a.worktree, "README.md", "# theirs\n")
    n = file_as("w1", a.worktree).pr.number
    commit(repo, "README.md", "# ours\n")
    err = _assert_refused_untouched(repo, n, "conflicts")
    assert err.data["files"] == ["README.md"]


def test_merge_without_a_checkout_of_the_base(repo: Path) -> None:
    git(repo, "branch", "main.feature")
    a = make_agent(repo, "w1", base="main.feature")
    commit(a.worktree, "a.txt", "a\n")
    n = file_as("w1", a.worktree).pr.number
    before = snapshot(repo)
    r = merge_as_root(repo, n)
    assert r.base_worktree is None and git(repo, "rev-parse", "main.feature") == r.merge_commit
    assert git(repo, "show", "main.feature:a.txt") == "a"
    assert snapshot(repo) == before  # main's checkout untouched


def test_roles_and_ownership(repo: Path) -> None:
    a = make_agent(repo, "w1")
    commit(a.worktree, "a.txt", "a\n")
    n = file_as("w1", a.worktree).pr.number
    with pytest.raises(StateError, match="dev role cannot"):
        registry.invoke("pr_merge", env_for(a.worktree, "w1"), number=n)
    other = make_agent(repo, "tl2", role="tl", base="main")
    with pytest.raises(StateError, match="not into your branch"):
        registry.invoke("pr_merge", env_for(other.worktree, "tl2"), number=n)
    with pytest.raises(NotFound):
        merge_as_root(repo, 99)


def test_rebase_conflict_is_aborted(repo: Path) -> None:
    a = make_agent(repo, "w1")
    commit(a.worktree, "README.md", "# mine\n")
    before = git(a.worktree, "rev-parse", "HEAD")
    commit(repo, "README.md", "# base moved\n")
    r = rebase_onto_base(env_for(repo), a)
    assert r.status == "conflict" and r.files == ["README.md"]
    assert git(a.worktree, "rev-parse", "HEAD") == before
    assert git(a.worktree, "status", "--porcelain") == ""


def test_cli_list_show_and_mcp(repo: Path, exo: Exo) -> None:
    a = make_agent(repo, "w1")
    commit(a.worktree, "a.txt", "a\n")
    file_as("w1", a.worktree, title="Add a", body="B")
    r = exo("pr", "list", "--json")
    assert r.exit_code == 0, r.stderr
    obj = r.json()
    assert obj["count"] == 1 and obj["prs"][0]["head"] == "main.w1" and obj["prs"][0]["review"] is None
    r = exo("pr", "show", "1", "--json")
    assert r.json()["title"] == "Add a"  # type: ignore[index]
    assert exo("pr", "show", "7", "--json").exit_code == 3
    assert "#1" in exo("pr", "list").stdout
    from test_parity import _call

    mcp = _call(repo, "list_prs", {"state": "open"})
    assert mcp == obj
    merged = _call(repo, "merge_pr", {"pr_number": 1, "strategy": "squash"})
    assert merged["pr"]["state"] == "merged"  # type: ignore[index]
    assert (repo / "a.txt").read_text() == "a\n"
    r = exo("pr", "merge", "1", "--json")
    assert r.exit_code == 5 and r.json()["error"]["name"] == "StateError"  # type: ignore[index]
