"""Data-safety matrix of ``exo complete``: what is removed, what is refused, and --force restores byte for byte."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
from pr_helpers import commit, env_for, git, make_agent, snapshot, tree_bytes

from exo_cli import registry
from exo_cli.errors import StateError
from exo_cli.ops.complete import CompleteResult


def complete(repo: Path, target: str | None, force: bool = False) -> CompleteResult:
    return registry.invoke("complete", env_for(repo), target=target, force=force)


def refused(repo: Path, target: str) -> StateError:
    before = snapshot(env_for(repo).store.agent(target).worktree)  # type: ignore[union-attr]
    with pytest.raises(StateError) as info:
        complete(repo, target)
    wt = env_for(repo).store.agent(target).worktree  # type: ignore[union-attr]
    assert snapshot(wt) == before  # nothing touched
    assert git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/main.{target}", check=False)
    return info.value


def removed(repo: Path, r: CompleteResult) -> None:
    assert r.removal == "removed" and r.worktree_removed and r.branch_deleted
    assert not Path(r.worktree or "").exists()
    assert not git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{r.branch}", check=False)
    assert r.worktree not in git(repo, "worktree", "list")


def force_and_restore(repo: Path, name: str) -> CompleteResult:
    """--force, then the printed restore commands bring back the exact files, index and branch."""
    wt = env_for(repo).store.agent(name).worktree  # type: ignore[union-attr]
    files, status = tree_bytes(wt), git(wt, "status", "--porcelain", "--untracked-files=all")
    head = git(wt, "rev-parse", "HEAD")
    r = complete(repo, name, force=True)
    removed(repo, r)
    assert r.archived and r.restore
    assert all(ref.startswith("refs/exo/archive/") for ref in r.archived)
    for cmd in r.restore:
        subprocess.run(shlex.split(cmd), cwd=repo, check=True, capture_output=True)
    assert git(wt, "rev-parse", "HEAD") == head
    assert tree_bytes(wt) == files
    assert git(wt, "status", "--porcelain", "--untracked-files=all") == status
    return r


def test_clean_merged_is_removed_and_bead_closed(repo: Path) -> None:
    beads = repo / ".beads"
    beads.mkdir()
    (beads / "issues.jsonl").write_text(json.dumps({
        "id": "bd-1", "title": "t", "status": "in_progress", "priority": 2, "issue_type": "task",
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}) + "\n")
    git(repo, "add", ".beads")
    git(repo, "commit", "-q", "-m", "beads")
    a = make_agent(repo, "w1", bead="bd-1")
    commit(a.worktree, "a.txt", "a\n")
    git(repo, "merge", "-q", "--ff-only", "main.w1")
    r = complete(repo, "bd-1")
    removed(repo, r)
    assert r.agent == "w1" and r.bead_closed and r.status == "done" and not r.archived
    rows = [json.loads(x) for x in (beads / "issues.jsonl").read_text().splitlines()]
    assert rows[0]["status"] == "closed"
    assert env_for(repo).store.agent("w1").status == "done"  # type: ignore[union-attr]


@pytest.mark.parametrize("strategy", ["squash", "merge"])
def test_merged_through_exo_is_removed(repo: Path, strategy: str) -> None:
    a = make_agent(repo, "w1")
    commit(a.worktree, "a.txt", "a\n")
    commit(a.worktree, "b.txt", "b\n")
    n = registry.invoke("pr_file", env_for(a.worktree, "w1")).pr.number
    registry.invoke("pr_merge", env_for(repo), number=n, strategy=strategy)
    commit(repo, "later.txt", "base moved on\n")
    removed(repo, complete(repo, "w1"))


def test_squash_merged_outside_exo_counts_as_merged(repo: Path) -> None:
    a = make_agent(repo, "w1")
    commit(a.worktree, "a.txt", "a\n")
    commit(a.worktree, "a.txt", "a2\n")
    git(repo, "merge", "-q", "--squash", "main.w1")
    git(repo, "commit", "-q", "-m", "squashed by hand")
    commit(repo, "other.txt", "x\n")
    removed(repo, complete(repo, "w1"))


def test_dirty_is_refused_then_forced_and_restored(repo: Path) -> None:
    a = make_agent(repo, "w1")
    commit(a.worktree, "a.txt", "a\n")
    git(repo, "merge", "-q", "--ff-only", "main.w1")
    (Path(a.worktree) / "a.txt").write_text("changed\n")
    (Path(a.worktree) / "README.md").write_bytes(b"staged \x00\xff bytes\n")
    git(a.worktree, "add", "README.md")
    err = refused(repo, "w1")
    assert err.data["would_lose"]["uncommitted"] == ["M  README.md", " M a.txt"]
    r = force_and_restore(repo, "w1")
    assert any(ref.endswith("-wip") for ref in r.archived)


def test_untracked_only_is_refused_then_forced_and_restored(repo: Path) -> None:
    a = make_agent(repo, "w1")
    (Path(a.worktree) / "notes").mkdir()
    (Path(a.worktree) / "notes" / "idea.md").write_text("keep me\n")
    err = refused(repo, "w1")
    assert err.data["would_lose"] == {"untracked": ["notes/idea.md"]}
    force_and_restore(repo, "w1")


def test_unmerged_commits_are_refused_then_forced_and_restored(repo: Path) -> None:
    a = make_agent(repo, "w1")
    commit(a.worktree, "a.txt", "a\n", "work in progress")
    err = refused(repo, "w1")
    assert [c.split(" ", 1)[1] for c in err.data["would_lose"]["unmerged_commits"]] == ["work in progress"]
    r = force_and_restore(repo, "w1")
    assert list(r.archived) == ["refs/exo/archive/main.w1"]


def test_unpushed_commits_are_refused(repo: Path, tmp_path: Path) -> None:
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    a = make_agent(repo, "w1")
    commit(a.worktree, "a.txt", "a\n", "pushed")
    git(a.worktree, "push", "-q", "-u", "origin", "main.w1")
    commit(a.worktree, "b.txt", "b\n", "not pushed")
    err = refused(repo, "w1")
    lost = err.data["would_lose"]
    assert [c.split(" ", 1)[1] for c in lost["unpushed_commits"]] == ["not pushed"]
    assert len(lost["unmerged_commits"]) == 2
    force_and_restore(repo, "w1")


def test_live_agent_is_stopped_first_and_other_processes_refuse(repo: Path) -> None:
    a = make_agent(repo, "w1", start=["sleep", "300"])
    pid = a.location["pid"]
    # someone else (a user's shell, an editor) works inside the worktree
    other = subprocess.Popen(["sleep", "300"], cwd=Path(a.worktree) / ".", start_new_session=True)
    try:
        with pytest.raises(StateError, match="Not removing") as info:
            complete(repo, "w1", force=True)  # even --force does not pull a folder from under a process
        procs = info.value.data["would_block"]["processes"]
        assert [p["pid"] for p in procs] == [other.pid]
        assert Path(a.worktree).exists()
        with pytest.raises(ProcessLookupError):  # the agent itself was stopped first
            for _ in range(100):
                os.kill(pid, 0)
                time.sleep(0.05)
    finally:
        other.kill()
        other.wait()
    r = complete(repo, "w1")
    removed(repo, r)


def test_live_agent_alone_is_stopped_and_removed(repo: Path) -> None:
    a = make_agent(repo, "w1", start=["sleep", "300"])
    r = complete(repo, "w1")
    assert r.stopped
    removed(repo, r)
    with pytest.raises(ProcessLookupError):
        for _ in range(100):
            os.kill(a.location["pid"], 0)
            time.sleep(0.05)


def test_branch_checked_out_elsewhere_is_refused(repo: Path, tmp_path: Path) -> None:
    a = make_agent(repo, "w1")
    git(a.worktree, "checkout", "-q", "--detach")
    git(repo, "worktree", "add", "-q", str(tmp_path / "mine"), "main.w1")
    with pytest.raises(StateError, match="checked out elsewhere") as info:
        complete(repo, "w1", force=True)
    assert info.value.data["would_block"]["checked_out_elsewhere"] == [str(tmp_path / "mine")]
    assert Path(a.worktree).exists() and git(repo, "rev-parse", "--verify", "main.w1")


def test_self_complete_defers_removal(repo: Path) -> None:
    a = make_agent(repo, "w1", start=["sleep", "300"])
    r = registry.invoke("complete", env_for(a.worktree, "w1"), target=None, force=False)
    assert r.removal == "deferred" and r.status == "done" and not r.stopped
    assert Path(a.worktree).exists()
    os.kill(a.location["pid"], 0)  # still running: never pulled from under itself
    msgs = env_for(repo).store.messages(recipient="root", kinds=["completed"])
    assert msgs and msgs[0].data["removal"] == "deferred"
    # the parent finishes it later
    removed(repo, complete(repo, "w1"))
    os.killpg(a.location["pgid"], signal.SIGKILL) if _alive(a.location["pid"]) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_dev_cannot_complete_a_sibling(repo: Path) -> None:
    make_agent(repo, "w1")
    b = make_agent(repo, "w2")
    with pytest.raises(StateError, match="cannot complete"):
        registry.invoke("complete", env_for(b.worktree, "w2"), target="w1", force=False)


def test_git_refusal_is_not_retried_with_force(repo: Path) -> None:
    a = make_agent(repo, "w1")
    git(repo, "worktree", "lock", a.worktree, "--reason", "user lock")
    with pytest.raises(Exception, match="git worktree remove") as info:
        complete(repo, "w1")
    assert "does not retry" in (info.value.hint or "")  # type: ignore[attr-defined]
    assert Path(a.worktree).exists()
