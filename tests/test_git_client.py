"""The git client (``exo_cli.adapters.git.Git``) against real temporary repositories."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from exo_cli.adapters.git import Git, Worktree, add_exclude, parse_status, parse_worktrees
from exo_cli.adapters.worktree import Worktrees
from exo_cli.errors import EnvironmentError_, ExternalFailure, StateError


def sh(cwd: Path | str, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def commit(cwd: Path, name: str, text: str, msg: str | None = None) -> str:
    (cwd / name).parent.mkdir(parents=True, exist_ok=True)
    (cwd / name).write_text(text)
    sh(cwd, "add", name)
    sh(cwd, "commit", "-q", "-m", msg or f"edit {name}")
    return sh(cwd, "rev-parse", "HEAD")


def by_path(items: list[Worktree]) -> dict[str, Worktree]:
    return {os.path.realpath(w.path): w for w in items}


# ------------------------------------------------------------------------------------- the runner


def test_run_captures_output_and_raises_on_failure(repo: Path) -> None:
    git = Git(repo)
    proc = git.run(["rev-parse", "--abbrev-ref", "HEAD"])
    assert (proc.returncode, proc.stdout, proc.ok) == (0, "main\n", True)
    assert proc.args[:3] == ["git", "-C", str(repo)]
    with pytest.raises(ExternalFailure, match="git rev-parse failed") as info:
        git.run(["rev-parse", "--verify", "no-such-ref"])
    assert info.value.data["returncode"] == 128 and "no-such-ref" in " ".join(info.value.data["command"])
    assert git.run(["rev-parse", "--verify", "no-such-ref"], check=False).returncode == 128


def test_run_feeds_large_stdin_and_reads_binary(repo: Path) -> None:
    """More input than a pipe holds, written while git's output is read (no deadlock), bytes kept exact."""
    git = Git(repo)
    data = bytes(range(256)) * 8192  # 2 MiB, not UTF-8
    sha = git.run(["hash-object", "-w", "--stdin"], input=data).stdout.strip()
    tree = git.run(["mktree"], input=f"100644 blob {sha}\tdata.bin\n").stdout.strip()
    rev = git.commit_tree(tree, [], "binary\n")
    assert git.blob(rev, "data.bin") == data
    assert git.blob(rev, "missing.bin") is None


def test_run_environment_and_timeout(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git = Git(repo, environ={**os.environ, "GIT_AUTHOR_NAME": "Someone Else"})
    assert git.out(["var", "GIT_AUTHOR_IDENT"]).startswith("Someone Else ")
    assert Git(repo).out(["var", "GIT_AUTHOR_IDENT"]).startswith("Exo Test ")
    assert git.run(["config", "--get", "x.y"], env={"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "x.y",
                                                     "GIT_CONFIG_VALUE_0": "z"}).stdout == "z\n"
    slow = git.run(["-c", "alias.nap=!sleep 2", "nap"], check=False, timeout=0.2)
    assert slow.returncode != 0 and "timed out after 0.2s" in slow.stderr
    monkeypatch.setenv("PATH", str(repo / "nowhere"))
    with pytest.raises(EnvironmentError_, match="git is not installed"):
        Git(repo).run(["status"])


# ------------------------------------------------------------------------------------- discovery


def test_discover_main_linked_and_outside(repo: Path, tmp_path: Path) -> None:
    (repo / "sub").mkdir()
    info = Git(repo / "sub").discover()
    assert (info.toplevel, info.root, info.common_dir) == (repo, repo, repo / ".git")
    assert info.git_dir == repo / ".git"
    wt = tmp_path / "linked wt"
    sh(repo, "worktree", "add", "-q", "-b", "feature", str(wt))
    info = Git(wt).discover()
    assert (info.toplevel, info.root, info.common_dir) == (wt, repo, repo / ".git")
    assert info.git_dir.parent == repo / ".git" / "worktrees"
    outside = tmp_path / "plain"
    outside.mkdir()
    with pytest.raises(EnvironmentError_, match="Not in a git repository"):
        Git(outside).discover()
    assert Git(outside).toplevel() is None and Git(wt / ".").toplevel() == str(wt)


def test_discover_from_a_worktree_of_a_bare_repository(repo: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare.git"
    sh(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    with pytest.raises(EnvironmentError_):
        Git(bare).discover()  # no work tree
    wt = tmp_path / "on-bare"
    sh(bare, "worktree", "add", "-q", str(wt), "main")
    info = Git(wt).discover()
    assert (info.toplevel, info.common_dir, info.root) == (wt, bare, bare)
    main = Git(bare).worktrees()[0]
    assert main.bare and main.head is None and main.branch is None and os.path.realpath(main.path) == str(bare)


def test_refs_and_branches(repo: Path) -> None:
    git = Git(repo)
    head = sh(repo, "rev-parse", "HEAD")
    assert git.rev("main") == git.rev("HEAD") == head and git.rev("nope") is None
    assert git.ref_exists("refs/heads/main") and not git.ref_exists("refs/heads/nope")
    assert git.tree("main") == sh(repo, "rev-parse", "HEAD^{tree}") and git.tree("nope") is None
    sh(repo, "tag", "-a", "v1", "-m", "tag")
    assert git.resolve("v1") != head and git.rev("v1") == head  # unpeeled vs the commit
    sh(repo, "branch", "b/one")
    assert git.branches() == ["b/one", "main"]
    assert git.current_branch() == "main"
    sh(repo, "checkout", "-q", "--detach")
    assert git.current_branch() is None
    assert git.upstream("main") is None


def test_config_identity_and_exclude(repo: Path) -> None:
    git = Git(repo)
    assert git.config_get("exo.test") is None
    git.config_set("exo.test", "a b")
    assert git.config_get("exo.test") == "a b"
    git.config_set("user.name", "Local Name")
    assert ("user.name", "Local Name") in git.config_matching(r"^user\.(name|email)$")
    assert git.remote_url("origin") is None
    sh(repo, "remote", "add", "origin", "git@github.com:o/r.git")
    assert git.remote_url("origin") == "git@github.com:o/r.git"
    assert git.has_identity()
    assert add_exclude(repo / ".git", "/.exo/") and not add_exclude(repo / ".git", "/.exo/")
    assert (repo / ".git" / "info" / "exclude").read_text().splitlines().count("/.exo/") == 1


# ------------------------------------------------------------------------------------- status


def test_snapshot_and_status_lines(repo: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    sh(tmp_path, "init", "-q", "--bare", str(remote))
    sh(repo, "remote", "add", "origin", str(remote))
    sh(repo, "push", "-q", "-u", "origin", "main")
    commit(repo, "a.txt", "a\n")
    sh(repo, "mv", "README.md", "READ ME.md")
    (repo / "new file.txt").write_text("x\n")
    (repo / "a.txt").write_text("changed\n")
    git = Git(repo)
    snap = git.snapshot()
    assert (snap.branch, snap.upstream, snap.ahead, snap.behind) == ("main", "origin/main", 1, 0)
    assert snap.head == sh(repo, "rev-parse", "--short=7", "HEAD")
    assert sorted(snap.changes) == [" M a.txt", "?? new file.txt", "R  READ ME.md"]
    # porcelain v1 quotes a path with a space; v2 (the snapshot) does not
    assert sorted(git.status_porcelain()) == [" M a.txt", '?? "new file.txt"', 'R  README.md -> "READ ME.md"']
    assert sorted(git.tracked_changes()) == [' M a.txt', 'R  README.md -> "READ ME.md"']
    assert git.untracked() == ["new file.txt"]
    assert git.upstream("main") == "origin/main"
    assert git.is_tracked("a.txt") and not git.is_tracked("new file.txt")


def test_parse_status_of_unborn_detached_and_conflicts() -> None:
    text = "# branch.oid (initial)\n# branch.head (detached)\nu UU N... 100644 100644 100644 100644 a b c f.txt\n"
    assert parse_status(text) == (None, None, None, None, None, ["UU f.txt"])


def test_skip_worktree_bit(repo: Path) -> None:
    git = Git(repo)
    git.skip_worktree("README.md")
    (repo / "README.md").write_text("local only\n")
    assert git.status_porcelain() == []
    git.skip_worktree("README.md", on=False)
    assert git.status_porcelain() == [" M README.md"]


# ------------------------------------------------------------------------------------- worktree list


def test_worktree_list_odd_paths_and_states(repo: Path, tmp_path: Path) -> None:
    """Spaces and a newline in paths (-z keeps them whole), detached, locked with a reason, prunable."""
    spaced = tmp_path / "with space"
    newline = tmp_path / "new\nline"
    detached = tmp_path / "detached"
    locked = tmp_path / "locked"
    gone = tmp_path / "gone"
    sh(repo, "worktree", "add", "-q", "-b", "spaced", str(spaced))
    sh(repo, "worktree", "add", "-q", "-b", "nl", str(newline))
    sh(repo, "worktree", "add", "-q", "--detach", str(detached))
    sh(repo, "worktree", "add", "-q", "-b", "locked", str(locked))
    sh(repo, "worktree", "lock", "--reason", "on a stick\nsecond line", str(locked))
    sh(repo, "worktree", "add", "-q", "-b", "gone", str(gone))
    sh(repo, "worktree", "lock", str(gone))
    subprocess.run(["rm", "-rf", str(gone)], check=True)
    git = Git(repo)
    found = git.worktrees()
    assert os.path.realpath(found[0].path) == str(repo) and found[0].branch_name == "main"
    wts = by_path(found)
    assert set(wts) == {str(repo), str(spaced), str(newline), str(detached), str(locked), str(gone)}
    assert wts[str(spaced)].branch == "refs/heads/spaced" and wts[str(spaced)].branch_name == "spaced"
    assert wts[str(newline)].branch_name == "nl"
    d = wts[str(detached)]
    assert d.detached and d.branch is None and d.head == sh(repo, "rev-parse", "HEAD")
    assert wts[str(locked)].locked == "on a stick\nsecond line" and wts[str(locked)].prunable is None
    g = wts[str(gone)]
    assert g.locked == "" and g.prunable is None  # a locked worktree is never prunable
    sh(repo, "worktree", "unlock", str(gone))
    g = by_path(git.worktrees())[str(gone)]
    assert g.locked is None and g.prunable and "gitdir file points to non-existent location" in g.prunable
    assert git.worktree_of("spaced") == str(spaced)
    assert git.worktree_of("gone") is None  # prunable: not a checkout any more
    assert git.main_worktree() == str(repo)
    assert "prunable" in Worktrees(git, tmp_path, repo / ".git").listing()[str(gone)]
    assert git.worktree_prune(dry_run=True).stderr.count("Removing worktrees/gone") == 1
    git.worktree_prune()
    assert str(gone) not in by_path(git.worktrees())


def test_parse_worktrees_without_nul() -> None:
    """The fallback for git < 2.36 (no -z): records end at an empty line."""
    text = ("worktree /r\nHEAD 1111\nbranch refs/heads/main\n\nworktree /r/w 2\nHEAD 2222\ndetached\nlocked\n\n"
            "worktree /b\nbare\n")
    got = parse_worktrees(text, nul=False)
    assert [(w.path, w.branch, w.detached, w.locked, w.bare) for w in got] == [
        ("/r", "refs/heads/main", False, None, False), ("/r/w 2", None, True, "", False), ("/b", None, False, None, True)]
    assert got[1].attrs == {"worktree": "/r/w 2", "HEAD": "2222", "detached": "", "locked": ""}


# ------------------------------------------------------------------------------------- history and merges


def test_counts_ancestry_and_logs(repo: Path) -> None:
    git = Git(repo)
    base = sh(repo, "rev-parse", "HEAD")
    sh(repo, "checkout", "-q", "-b", "topic")
    commit(repo, "t1.txt", "1\n", "first")
    commit(repo, "t2.txt", "2\n", "second")
    assert git.count("main..topic") == 2 and git.count("nope..topic") == 0
    assert git.ahead_behind("topic", "main") == (2, 0) and git.ahead_behind("topic", "nope") is None
    assert git.has_commits_not_in("topic", "main") and not git.has_commits_not_in("main", "topic")
    assert git.is_ancestor(base, "topic") and not git.is_ancestor("topic", base)
    assert git.log("main..topic", "%s") == ["second", "first"]
    assert git.log("main..topic", "- %s", reverse=True) == ["- first", "- second"]
    assert git.log("nope..topic", "%s") == []
    with pytest.raises(ExternalFailure):
        git.log("nope..topic", "%s", check=True)
    assert git.subject("topic") == "second"


def test_merge_tree_and_content_merged(repo: Path) -> None:
    git = Git(repo)
    sh(repo, "checkout", "-q", "-b", "topic")
    commit(repo, "a.txt", "a\n")
    commit(repo, "a.txt", "a2\n")  # a later commit rewrites the first one's lines
    sh(repo, "checkout", "-q", "main")
    clean = git.merge_tree("main", "topic")
    assert clean.tree and not clean.conflicts
    assert not git.merged_by_content("topic", "main")
    squash = git.commit_tree(clean.tree, [git.rev("main") or ""], "squash\n")
    sh(repo, "update-ref", "refs/heads/main", squash)
    assert git.merged_by_content("topic", "main")  # squash-merged: its content is in main
    sh(repo, "checkout", "-q", "-f", "main")
    commit(repo, "a.txt", "ours\n")
    sh(repo, "checkout", "-q", "-b", "other", "HEAD~1")
    commit(repo, "a.txt", "theirs\n")
    conflict = git.merge_tree("main", "other")
    assert conflict == (None, ["a.txt"])
    assert git.cherry("main", "other")[0].startswith("+ ")


def test_rebase_conflict_files_and_abort(repo: Path) -> None:
    git = Git(repo)
    sh(repo, "checkout", "-q", "-b", "topic")
    mine = commit(repo, "README.md", "mine\n")
    sh(repo, "checkout", "-q", "main")
    commit(repo, "README.md", "theirs\n")
    sh(repo, "checkout", "-q", "topic")
    proc = git.rebase("main")
    assert not proc.ok and git.conflicted_files() == ["README.md"]
    git.rebase_abort()
    assert git.rev("HEAD") == mine and git.tracked_changes() == [] and git.current_branch() == "topic"
    sh(repo, "checkout", "-q", "main")
    commit(repo, "other.txt", "x\n")
    sh(repo, "checkout", "-q", "-b", "clean", "main~1")
    commit(repo, "clean.txt", "c\n")
    assert git.rebase("main").ok and git.is_ancestor("main", "HEAD")


# ------------------------------------------------------------------------------------- writing


def test_add_commit_refs_and_trees(repo: Path) -> None:
    git = Git(repo)
    (repo / "x.txt").write_text("x\n")
    git.add()
    assert git.commit("add x").ok and git.subject("HEAD") == "add x"
    assert not git.commit("nothing", check=False).ok
    with pytest.raises(ExternalFailure):
        git.commit("nothing")
    head = git.rev("HEAD") or ""
    git.update_ref("refs/exo/test", head, reason="test")
    assert git.rev("refs/exo/test") == head
    with pytest.raises(ExternalFailure):
        git.update_ref("refs/exo/test", head, "0" * 40, reason="compare-and-swap fails")
    assert not git.delete_ref("refs/exo/test", "1" * 40).ok and git.rev("refs/exo/test") == head
    assert git.delete_ref("refs/exo/test", head).ok and git.rev("refs/exo/test") is None
    (repo / "u 1.txt").write_text("u\n")
    tree = git.tree_of_files(["u 1.txt"])
    assert sh(repo, "ls-tree", "--name-only", tree) == "u 1.txt"
    assert git.status_porcelain() == ['?? "u 1.txt"']  # the real index is untouched


def test_wip_commit_and_keep_ref_restore_everything(repo: Path) -> None:
    git = Git(repo)
    assert git.wip_commit("wip", label="exo archive") is None  # clean
    (repo / "README.md").write_text("modified\n")
    (repo / "staged.txt").write_text("staged\n")
    sh(repo, "add", "staged.txt")
    (repo / "untracked.txt").write_text("untracked\n")
    before = sorted(git.status_porcelain())
    wip = git.wip_commit("WIP archived", label="exo archive")
    assert wip and sorted(git.status_porcelain()) == before  # nothing moved
    assert len(sh(repo, "rev-list", "--parents", "-n", "1", wip).split()) == 4  # HEAD, index, untracked
    ref = git.keep_ref("refs/exo/archive/x", wip, reason="test")
    assert ref == "refs/exo/archive/x" and git.keep_ref("refs/exo/archive/x", wip, reason="again") == ref
    other = git.rev("HEAD") or ""
    assert git.keep_ref("refs/exo/archive/x", other, reason="test") == "refs/exo/archive/x.2"
    sh(repo, "reset", "-q", "--hard")
    sh(repo, "clean", "-qfd")
    sh(repo, "stash", "apply", "--index", ref)
    assert sorted(git.status_porcelain()) == before
    assert (repo / "untracked.txt").read_text() == "untracked\n"


def test_fast_forward_checkout_refusals_and_ref_swap(repo: Path, tmp_path: Path) -> None:
    git = Git(repo)
    old = git.rev("main") or ""
    sh(repo, "checkout", "-q", "-b", "topic")
    new = commit(repo, "new.txt", "theirs\n")
    sh(repo, "checkout", "-q", "main")
    (repo / "README.md").write_text("dirty\n")
    with pytest.raises(StateError, match="modified or staged") as info:
        git.fast_forward("main", old, new, reason="t", what="update main")
    assert info.value.data["files"] == [" M README.md"]
    sh(repo, "checkout", "-q", "README.md")
    (repo / "new.txt").write_text("mine\n")
    with pytest.raises(StateError, match="overwrite untracked") as info:
        git.fast_forward("main", old, new, reason="t", what="update main")
    assert info.value.data["files"] == ["new.txt"] and git.rev("main") == old
    (repo / "new.txt").unlink()
    assert git.fast_forward("main", old, new, reason="t", what="update main") == str(repo)
    assert (repo / "new.txt").read_text() == "theirs\n"
    sh(repo, "branch", "nocheckout", old)
    assert git.fast_forward("nocheckout", old, new, reason="t", what="x") is None and git.rev("nocheckout") == new


def test_push_and_fetch_to_a_local_remote(repo: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    sh(tmp_path, "init", "-q", "--bare", str(remote))
    sh(repo, "remote", "add", "origin", str(remote))
    git = Git(repo)
    assert git.push("origin", "main").ok and git.upstream("main") == "origin/main"
    assert sh(remote, "rev-parse", "main") == git.rev("main")
    assert git.fetch("origin", "+refs/heads/main:refs/remotes/origin/copy").ok
    assert git.rev("refs/remotes/origin/copy") == git.rev("main")
    assert not git.fetch("nowhere", "main").ok


# ------------------------------------------------------------------------------------- the worktree adapter


def test_worktrees_create_remove_and_delete_branch(repo: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    wts = Worktrees(Git(repo), state, repo / ".git")
    base = Git(repo).rev("HEAD") or ""
    path = tmp_path / "wts" / "w 1"
    wts.create(path=path, branch="main.w1", base_commit=base)
    assert (path / "README.md").read_text() == "# demo\n" and Git(path).status_porcelain() == []
    assert wts.listing()[str(path)]["branch"] == "refs/heads/main.w1"
    with pytest.raises(StateError, match="already exists"):
        wts.create(path=tmp_path / "wts" / "w2", branch="main.w1", base_commit=base)
    (path / "dirty.txt").write_text("x\n")
    ok, why = wts.remove(path)
    assert not ok and "untracked" in why
    assert wts.remove(path, force=True) == (True, "")
    assert not wts.delete_branch_if_at("main.w1", "1" * 40) and wts.delete_branch_if_at("main.w1", base)
    assert not Git(repo).ref_exists("refs/heads/main.w1")
    wts.exclude_exo()
    assert "/.exo/" in (repo / ".git" / "info" / "exclude").read_text().splitlines()
