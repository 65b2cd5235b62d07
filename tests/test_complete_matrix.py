"""Data-safety matrix of ``exo complete`` (and ``kill`` + ``reap`` + ``doctor``): never lose work.

One list of cases (``CASES``), each putting one kind of work into an agent's worktree on real
git: files (modified, staged, untracked, ignored, exo's own copies), commits (unmerged,
unpushed, on a detached HEAD, rewritten by a paused rebase, an autostash), operations in
progress (rebase, merge, cherry-pick, bisect), nested repositories (at the top, deep inside an
ignored or an untracked folder, a submodule) and a symbolic link pointing outside. Each case
runs through every way exo removes a worktree:

- ``refused``: ``exo complete`` refuses, listing exactly that kind of work, and touches nothing;
- ``running``: the same with the agent alive in a real tmux pane: refused before it is even
  stopped; then ``--force`` stops it and archives;
- ``force``: ``--force`` archives, removes, and the printed restore commands, run from
  elsewhere, bring back every byte, ref, nested repository and HEAD (and no ignored file's
  content ever lands in a git object);
- ``doctor``: ``exo kill``, ``exo reap``, ``exo doctor``: the worktree is removed only when
  nothing in it would be lost.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pr_helpers import commit, env_for, git, make_agent, snapshot

from conftest import wait_for
from exo_cli import registry
from exo_cli.errors import StateError
from exo_cli.ops.complete import CompleteResult
from exo_cli.records import Agent

BR = "main.w1"
SECRET = "SECRET-IGNORED-3b1f0c"  # in ignored files: must never reach a git object
WT_KINDS = {"uncommitted", "untracked", "ignored", "nested_repos", "off_branch_commits", "in_progress"}


def complete(repo: Path, target: str | None, force: bool = False) -> CompleteResult:
    return registry.invoke("complete", env_for(repo), target=target, force=force)


def run(cwd: Path | str, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    proc = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if check and proc.returncode:
        raise AssertionError(f"{args} failed: {proc.stderr}")
    return proc.stdout.strip()


def removed(repo: Path, r: CompleteResult) -> None:
    assert r.removal == "removed" and r.worktree_removed and r.branch_deleted
    assert not Path(r.worktree or "").exists()
    assert not git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{r.branch}", check=False)
    assert r.worktree not in git(repo, "worktree", "list")


# --------------------------------------------------------------------------- fingerprints


def _nested_state(path: Path) -> dict[str, Any]:
    return {
        "head": git(path, "rev-parse", "--verify", "--quiet", "HEAD", check=False),
        "symbolic": git(path, "symbolic-ref", "-q", "HEAD", check=False),
        "refs": git(path, "for-each-ref", "--format=%(refname) %(objectname)"),
        "stash": git(path, "stash", "list", "--format=%H", check=False),
    }


def fingerprint(wt: Path, repo: Path, *, status: bool = True) -> dict[str, Any]:
    """Every file (bytes, mode), link and nested repository (refs, HEAD, stash) of ``wt``, its HEAD and branch.

    Left out: the worktree's own ``.git``, exo's ``.exo/`` and regenerable folders (they are not kept).
    """
    files: dict[str, Any] = {}
    nested: dict[str, Any] = {}
    for folder, dirs, names in os.walk(wt):
        here = Path(folder)
        rel = here.relative_to(wt).as_posix()
        if rel != "." and (here / ".git").exists():
            nested[rel] = _nested_state(here)
        keep = []
        for d in sorted(dirs):
            p = here / d
            if d in ("__pycache__", "node_modules") or (rel == "." and d in (".git", ".exo")) or \
                    (d == ".git" and rel != "."):
                continue
            if p.is_symlink():
                files[f"{rel}/{d}"] = ("link", os.readlink(p))
            else:
                keep.append(d)
        dirs[:] = keep
        for n in names:
            p = here / n
            if n == ".git":  # the worktree's own; a nested repository's is compared through git (a submodule's
                continue  # comes back as a standalone repository: its .git file becomes its folder)
            if p.is_symlink():
                files[f"{rel}/{n}"] = ("link", os.readlink(p))
            elif not n.endswith(".pyc"):
                files[f"{rel}/{n}"] = (hashlib.sha256(p.read_bytes()).hexdigest(), stat.S_IMODE(p.stat().st_mode))
    out = {
        "files": files,
        "nested": nested,
        "head": git(wt, "rev-parse", "HEAD"),
        "symbolic": git(wt, "symbolic-ref", "-q", "HEAD", check=False),
        "branch": git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{BR}", check=False),
    }
    if status:
        out["status"] = git(wt, "status", "--porcelain=v1", "--untracked-files=all")
    return out


# --------------------------------------------------------------------------- the cases


def _merge(repo: Path) -> None:
    git(repo, "merge", "-q", "--ff-only", BR)


def _ignore(repo: Path, wt: Path, text: str) -> None:
    commit(wt, ".gitignore", text)
    _merge(repo)


def clean_merged(repo: Path, wt: Path, tmp: Path) -> None:
    commit(wt, "a.txt", "a\n")
    _merge(repo)


def dirty(repo: Path, wt: Path, tmp: Path) -> None:
    clean_merged(repo, wt, tmp)
    (wt / "a.txt").write_text("changed\n")
    (wt / "README.md").write_bytes(b"staged \x00\xff bytes\n")
    git(wt, "add", "README.md")


def untracked(repo: Path, wt: Path, tmp: Path) -> None:
    (wt / "notes").mkdir()
    (wt / "notes" / "idea.md").write_text("keep me\n")
    (wt / "with space\tand tab.txt").write_text("odd name\n")


def unmerged(repo: Path, wt: Path, tmp: Path) -> None:
    commit(wt, "a.txt", "a\n", "work in progress")


def unpushed(repo: Path, wt: Path, tmp: Path) -> None:
    bare = tmp / "origin.git"
    git(tmp, "init", "-q", "--bare", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    commit(wt, "a.txt", "a\n", "pushed")
    git(wt, "push", "-q", "-u", "origin", BR)
    commit(wt, "b.txt", "b\n", "not pushed")


def detached(repo: Path, wt: Path, tmp: Path) -> None:
    git(wt, "checkout", "-q", "--detach")
    commit(wt, "d.txt", "made on a detached HEAD\n")


def rebase_paused(repo: Path, wt: Path, tmp: Path) -> None:
    """``rebase -i --autostash`` stopped at an ``edit``, the commit amended: HEAD and the autostash are in no ref."""
    commit(wt, "c.txt", "c1\n", "c1")
    commit(wt, "c2.txt", "c2\n", "c2")
    (wt / "README.md").write_text("# demo\nautostashed edit\n")
    run(wt, "git", "-c", "rebase.autoStash=true", "rebase", "-q", "-i", "HEAD~2",
        env={"GIT_SEQUENCE_EDITOR": "sed -i -e 1s/^pick/edit/", "GIT_EDITOR": "true"})
    (wt / "c.txt").write_text("amended\n")
    git(wt, "commit", "-q", "-a", "--amend", "-m", "c1 amended")


def _side(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "side")
    commit(repo, "README.md", "# demo\nfrom side\n", "side")
    git(repo, "checkout", "-q", "main")


def merge_conflict(repo: Path, wt: Path, tmp: Path) -> None:
    _side(repo)
    commit(wt, "README.md", "# demo\nmine\n", "mine")
    git(wt, "merge", "side", check=False)
    assert (Path(git(wt, "rev-parse", "--git-dir")) / "MERGE_HEAD").exists() or \
        (wt / git(wt, "rev-parse", "--git-dir") / "MERGE_HEAD").exists()


def cherry_pick_conflict(repo: Path, wt: Path, tmp: Path) -> None:
    _side(repo)
    commit(wt, "README.md", "# demo\nmine\n", "mine")
    git(wt, "cherry-pick", "side", check=False)


def bisect(repo: Path, wt: Path, tmp: Path) -> None:
    for i in range(3):
        commit(wt, f"b{i}.txt", f"{i}\n", f"b{i}")
    git(wt, "bisect", "start", "HEAD", "HEAD~3")


def ignored(repo: Path, wt: Path, tmp: Path) -> None:
    _ignore(repo, wt, ".env\nbuild/\n*.log\n__pycache__/\nnode_modules/\n")
    (wt / ".env").write_text(f"TOKEN={SECRET}\n")
    (wt / "build" / "sub").mkdir(parents=True)
    (wt / "build" / "out.bin").write_bytes(bytes(range(256)) + SECRET.encode())
    (wt / "build" / "sub" / "x").write_text("x\n")
    os.chmod(wt / "build" / "out.bin", 0o751)
    (wt / "we ird\nname.log").write_text("newline in the name\n")
    (wt / "src" / "__pycache__").mkdir(parents=True)
    (wt / "src" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"regenerable")
    (wt / "node_modules" / "pkg").mkdir(parents=True)
    (wt / "node_modules" / "pkg" / "index.js").write_text("regenerable\n")


def regenerable_only(repo: Path, wt: Path, tmp: Path) -> None:
    _ignore(repo, wt, "__pycache__/\nnode_modules/\n*.pyc\n")
    (wt / "__pycache__").mkdir()
    (wt / "__pycache__" / "a.pyc").write_bytes(b"x")
    (wt / "node_modules" / "p").mkdir(parents=True)
    (wt / "node_modules" / "p" / "i.js").write_text("x\n")


def _exo_copy(repo: Path, wt: Path, text: str) -> None:
    _ignore(repo, wt, ".env\n")
    (repo / ".env").write_text("KEY=from the main checkout\n")
    (wt / ".env").write_text(text)
    env = env_for(repo)
    a = env.store.agent("w1")
    assert a is not None
    env.store.update_agent("w1", spec={**a.spec, "created_files": [str(wt / ".env")]})


def exo_copy(repo: Path, wt: Path, tmp: Path) -> None:
    _exo_copy(repo, wt, "KEY=from the main checkout\n")  # exo's copy, unchanged: not the agent's work


def exo_copy_changed(repo: Path, wt: Path, tmp: Path) -> None:
    _exo_copy(repo, wt, "KEY=changed by the agent\n")


def _nested_repo(path: Path, commits: int = 2) -> None:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "trunk")
    for i in range(commits):
        commit(path, f"n{i}.txt", f"{i}\n")


def nested_top(repo: Path, wt: Path, tmp: Path) -> None:
    v = wt / "vendored"
    _nested_repo(v)
    for i in range(2):  # two stash entries: the older one lives only in the stash's reflog
        (v / "n0.txt").write_text(f"stashed {i}\n")
        git(v, "stash", "-q")
    git(v, "checkout", "-q", "-b", "topic")
    (v / "loose.txt").write_text("untracked inside\n")


def nested_deep(repo: Path, wt: Path, tmp: Path) -> None:
    _ignore(repo, wt, "build/\n")
    _nested_repo(wt / "build" / "deps" / "lib", 1)
    (wt / "build" / "other.txt").write_text("ignored next to it\n")
    _nested_repo(wt / "tools" / "x", 1)
    (wt / "tools" / "readme.md").write_text("untracked next to it\n")


def submodule(repo: Path, wt: Path, tmp: Path) -> None:
    lib = tmp / "sublib"
    _nested_repo(lib, 1)
    git(wt, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "sub")
    git(wt, "commit", "-q", "-m", "add sub")
    _merge(repo)
    commit(wt / "sub", "local.txt", "only here\n", "unpushed in the submodule")


def symlink_out(repo: Path, wt: Path, tmp: Path) -> None:
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("not the agent's\n")
    _ignore(repo, wt, "link\n")
    os.symlink(outside, wt / "link")


@dataclass(frozen=True)
class Case:
    setup: Callable[[Path, Path, Path], None]
    kinds: frozenset[str]  # what `would_lose` names
    exact_status: bool = True  # `git status` is the same after a restore (not for operations in progress)

    @property
    def name(self) -> str:
        return self.setup.__name__

    @property
    def worktree_work(self) -> bool:
        return bool(self.kinds & WT_KINDS)


def _case(setup: Callable[[Path, Path, Path], None], *kinds: str, exact_status: bool = True) -> Case:
    return Case(setup, frozenset(kinds), exact_status)


CASES = [
    _case(clean_merged),
    _case(regenerable_only),
    _case(exo_copy),
    _case(dirty, "uncommitted"),
    _case(untracked, "untracked"),
    _case(unmerged, "unmerged_commits"),
    _case(unpushed, "unmerged_commits", "unpushed_commits"),
    _case(detached, "off_branch_commits"),
    _case(rebase_paused, "off_branch_commits", "in_progress", "unmerged_commits", exact_status=False),
    _case(merge_conflict, "uncommitted", "in_progress", "unmerged_commits", exact_status=False),
    _case(cherry_pick_conflict, "uncommitted", "in_progress", "unmerged_commits", exact_status=False),
    _case(bisect, "in_progress", "unmerged_commits", exact_status=False),
    _case(ignored, "ignored"),
    _case(exo_copy_changed, "ignored"),
    _case(nested_top, "nested_repos"),
    _case(nested_deep, "nested_repos", "ignored", "untracked"),
    _case(submodule, "nested_repos", "uncommitted", exact_status=False),
    _case(symlink_out, "ignored"),
]
IDS = [c.name for c in CASES]


@pytest.fixture
def tmux_server(repo: Path) -> Iterator[str]:
    from exo_cli.env import Env

    sock = f"exo-{Env(cwd=repo).repo_id}"
    yield sock
    subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)


def _agent(repo: Path, tmp: Path, case: Case, *, tmux: bool = False) -> tuple[Agent, Path]:
    a = make_agent(repo, "w1")
    wt = Path(a.worktree or "")
    if tmux:
        from exo_cli.ops import agentctl

        env = env_for(repo)
        loc = agentctl.mux_for(env, "tmux").start("w1", ["sleep", "300"], cwd=wt, env={"PATH": os.environ["PATH"]})
        env.store.update_agent("w1", mux="tmux", location=loc.to_dict())
    case.setup(repo, wt, tmp)
    return env_for(repo).store.agent("w1") or a, wt


def _gone(pid: int, timeout: float = 30.0) -> bool:
    """Whether ``pid`` stops running (a zombie tmux has not reaped yet counts as stopped)."""
    from exo_cli.adapters.proc import pid_alive

    deadline = time.monotonic() + timeout
    while pid_alive(pid, reap_child=False):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _status(repo: Path) -> str:
    a = env_for(repo).store.agent("w1")
    assert a is not None
    return a.status


def _restore(r: CompleteResult, cwd: Path) -> None:
    for cmd in r.restore:
        proc = subprocess.run(shlex.split(cmd), cwd=cwd, capture_output=True, text=True)
        assert proc.returncode == 0, (cmd, proc.stderr)


def _no_secret_in_objects(repo: Path) -> None:
    proc = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo, capture_output=True)
    assert SECRET.encode() not in proc.stdout


# --------------------------------------------------------------------------- the matrix


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_refused(repo: Path, tmp_path: Path, case: Case) -> None:
    """Without --force: refused with exactly that kind of work listed, nothing touched (or, with nothing, removed)."""
    _, wt = _agent(repo, tmp_path, case)
    if not case.kinds:
        r = complete(repo, "w1")
        removed(repo, r)
        assert not r.archived and not r.restore and not r.archive_folder
        return
    before = fingerprint(wt, repo)
    with pytest.raises(StateError) as info:
        complete(repo, "w1")
    assert set(info.value.data["would_lose"]) == case.kinds, info.value.data
    assert "Nothing was changed" in info.value.message
    assert fingerprint(wt, repo) == before
    assert _status(repo) == "idle"  # not done, not stopped: as it was


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_running(repo: Path, tmp_path: Path, case: Case, tmux_server: str) -> None:
    """The agent alive in tmux: a refusal leaves it running; --force stops it, then archives and removes."""
    a, wt = _agent(repo, tmp_path, case, tmux=True)
    pid = a.location["pid"]
    if case.kinds:
        before = fingerprint(wt, repo)
        with pytest.raises(StateError) as info:
            complete(repo, "w1")
        assert set(info.value.data["would_lose"]) == case.kinds
        assert info.value.data["stopped"] is False and "still running" in info.value.message
        os.kill(pid, 0)  # never stopped for a refusal
        assert _status(repo) == "idle" and fingerprint(wt, repo) == before
    r = complete(repo, "w1", force=True)
    assert r.stopped and r.status == "done"
    removed(repo, r)
    assert _gone(pid)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_force_restores(repo: Path, tmp_path: Path, case: Case) -> None:
    """--force archives everything; its restore commands, run from elsewhere, restore every byte and ref."""
    _, wt = _agent(repo, tmp_path, case)
    before = fingerprint(wt, repo, status=case.exact_status)
    outside = sorted(p.name for p in (tmp_path / "outside").iterdir()) if (tmp_path / "outside").exists() else None
    r = complete(repo, "w1", force=True)
    removed(repo, r)
    if case.worktree_work or "unmerged_commits" in case.kinds:
        assert r.archived and r.restore and all(ref.startswith("refs/exo/archive/") for ref in r.archived)
    else:
        assert not r.archived and not r.restore
        return
    if r.archive_folder:
        assert stat.S_IMODE(os.stat(r.archive_folder).st_mode) == 0o700
        assert Path(r.archive_folder, "RESTORE.txt").read_text().count("\n") >= len(r.restore)
    if "ignored" in case.kinds:
        assert r.kept_ignored
    if "nested_repos" in case.kinds:
        assert r.kept_nested
    _no_secret_in_objects(repo)
    # the worktree's HEAD is in a ref (so `git gc` keeps it), and so is a paused rebase's autostash
    assert git(repo, "for-each-ref", "--contains", before["head"], "--format=%(refname)")
    if case.setup is rebase_paused:
        assert [ref for ref in r.archived if ref.endswith("rebase-merge-autostash")]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _restore(r, elsewhere)
    assert fingerprint(wt, repo, status=case.exact_status) == before
    if outside is not None:  # a link pointing outside was kept as a link: its target never touched
        assert sorted(p.name for p in (tmp_path / "outside").iterdir()) == outside


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_kill_reap_doctor(repo: Path, tmp_path: Path, case: Case) -> None:
    """``kill``, ``reap``, ``doctor``: the worktree goes only when nothing in it would be lost (the branch stays)."""
    _, wt = _agent(repo, tmp_path, case)
    before = fingerprint(wt, repo)
    env = env_for(repo)
    registry.invoke("kill", env, agent="w1")
    assert registry.invoke("reap", env).reaped == ["w1"]
    doc = registry.invoke("doctor", env_for(repo))
    if case.worktree_work:
        assert doc.kept == [str(wt)]
        assert fingerprint(wt, repo) == before
    else:
        assert not wt.exists()
        assert git(repo, "rev-parse", "--verify", f"refs/heads/{BR}") == before["branch"]


# --------------------------------------------------------------------------- the agent as it was


def _bead(repo: Path) -> Path:
    """A beads JSONL with one bead in progress, committed; its folder."""
    beads = repo / ".beads"
    beads.mkdir()
    (beads / "issues.jsonl").write_text(json.dumps({
        "id": "bd-1", "title": "t", "status": "in_progress", "priority": 2, "issue_type": "task",
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}) + "\n")
    git(repo, "add", ".beads")
    git(repo, "commit", "-q", "-m", "beads")
    return beads


def test_second_check_refuses_and_the_agent_stays_resumable(repo: Path) -> None:
    """Clean when checked, but the agent writes on its way out: refused after stopping; dead, not done."""
    beads = _bead(repo)
    armed = repo.parent / "trap-set"  # outside the worktree, which must stay clean until the TERM
    script = f'trap "echo late > late.txt; exit 0" TERM; : > {shlex.quote(str(armed))}; while :; do sleep 0.05; done'
    a = make_agent(repo, "w1", start=["sh", "-c", script], bead="bd-1")
    wait_for(armed.exists, what="the agent's trap to be set")
    with pytest.raises(StateError) as info:
        complete(repo, "w1")
    err = info.value
    assert err.data["stopped"] is True and err.data["status"] == "dead"
    assert err.data["would_lose"] == {"untracked": ["late.txt"]}
    assert "not done" in err.message and "resumable" in err.message
    rec = env_for(repo).store.agent("w1")
    assert rec is not None and rec.status == "dead" and "refused" in (rec.status_reason or "")
    assert (Path(a.worktree or "") / "late.txt").read_text() == "late\n"
    assert json.loads((beads / "issues.jsonl").read_text().splitlines()[0])["status"] == "in_progress"
    r = complete(repo, "w1", force=True)  # and it can be completed later, as any stopped agent
    removed(repo, r)
    assert r.bead_closed


def test_live_agent_with_another_process_inside_is_refused_untouched(repo: Path) -> None:
    a = make_agent(repo, "w1", start=["sleep", "300"])
    pid = a.location["pid"]
    # someone else (a user's shell, an editor) works inside the worktree
    other = subprocess.Popen(["sleep", "300"], cwd=Path(a.worktree or "") / ".", start_new_session=True)
    try:
        with pytest.raises(StateError, match="Not removing") as info:
            complete(repo, "w1", force=True)  # even --force does not pull a folder from under a process
        procs = info.value.data["would_block"]["processes"]
        assert [p["pid"] for p in procs] == [other.pid]
        assert Path(a.worktree or "").exists()
        os.kill(pid, 0)  # the agent was left running: a refusal changes nothing
        assert _status(repo) == "idle"
    finally:
        other.kill()
        other.wait()
    r = complete(repo, "w1")
    assert r.stopped
    removed(repo, r)


# --------------------------------------------------------------------------- the rest of complete


def test_clean_merged_is_removed_and_bead_closed(repo: Path) -> None:
    beads = _bead(repo)
    a = make_agent(repo, "w1", bead="bd-1")
    commit(a.worktree or "", "a.txt", "a\n")
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
    commit(a.worktree or "", "a.txt", "a\n")
    commit(a.worktree or "", "b.txt", "b\n")
    n = registry.invoke("pr_file", env_for(a.worktree or "", "w1")).pr.number
    registry.invoke("pr_merge", env_for(repo), number=n, strategy=strategy)
    commit(repo, "later.txt", "base moved on\n")
    removed(repo, complete(repo, "w1"))


def test_a_merged_pr_counts_only_while_its_merge_is_in_the_base(repo: Path) -> None:
    """The PR says merged, but the merge was undone (a reset, an aborted rebase): the commits are unmerged again."""
    a = make_agent(repo, "w1")
    commit(a.worktree or "", "a.txt", "a\n", "the work")
    n = registry.invoke("pr_file", env_for(a.worktree or "", "w1")).pr.number
    before = git(repo, "rev-parse", "main")
    registry.invoke("pr_merge", env_for(repo), number=n, strategy="squash")
    git(repo, "reset", "-q", "--hard", before)  # the merge is gone from main
    assert env_for(repo).store.pr(n).state == "merged"  # type: ignore[union-attr]
    with pytest.raises(StateError) as info:
        complete(repo, "w1")
    assert [c.split(" ", 1)[1] for c in info.value.data["would_lose"]["unmerged_commits"]] == ["the work"]
    assert git(repo, "rev-parse", "--verify", "main.w1")


def test_squash_merged_outside_exo_counts_as_merged(repo: Path) -> None:
    a = make_agent(repo, "w1")
    commit(a.worktree or "", "a.txt", "a\n")
    commit(a.worktree or "", "a.txt", "a2\n")
    git(repo, "merge", "-q", "--squash", "main.w1")
    git(repo, "commit", "-q", "-m", "squashed by hand")
    commit(repo, "other.txt", "x\n")
    removed(repo, complete(repo, "w1"))


def test_uncommitted_are_listed_as_before(repo: Path) -> None:
    a = make_agent(repo, "w1")
    dirty(repo, Path(a.worktree or ""), repo)
    before = snapshot(a.worktree or "")
    with pytest.raises(StateError) as info:
        complete(repo, "w1")
    assert info.value.data["would_lose"]["uncommitted"] == ["M  README.md", " M a.txt"]
    assert snapshot(a.worktree or "") == before


def test_huge_ignored_folder_is_refused_not_skipped(repo: Path) -> None:
    """Over cleanup.max_keep_mb, --force refuses (saying what is big) instead of copying or skipping it."""
    a = make_agent(repo, "w1")
    wt = Path(a.worktree or "")
    _ignore(repo, wt, "data/\n")
    (wt / "data").mkdir()
    with open(wt / "data" / "big.bin", "wb") as fh:
        fh.truncate(3 << 20)  # sparse: 3 MiB
    for i in range(300):  # and many small files: each counts at least 4 KiB
        (wt / "data" / f"f{i}").write_text("x")
    (repo / "exo.toml").write_text("[cleanup]\nmax_keep_mb = 2\n")
    before = fingerprint(wt, repo)
    with pytest.raises(StateError, match="more than 2 MiB") as info:
        complete(repo, "w1", force=True)
    assert info.value.data["reason"] == "too-big" and "data/" in info.value.data["largest"][0]
    assert "cleanup.max_keep_mb" in (info.value.hint or "")
    assert fingerprint(wt, repo) == before and _status(repo) == "idle"
    assert not (env_for(repo).state_dir / "archive").exists()
    (repo / "exo.toml").write_text('[cleanup]\nmax_keep_mb = 2\nregenerable = ["data/"]\n')
    removed(repo, complete(repo, "w1"))  # declared regenerable: neither kept nor a reason to refuse


def test_live_agent_alone_is_stopped_and_removed(repo: Path) -> None:
    a = make_agent(repo, "w1", start=["sleep", "300"])
    r = complete(repo, "w1")
    assert r.stopped
    removed(repo, r)
    wait_for(lambda: not _alive(a.location["pid"]), what="the agent to be stopped")


def test_branch_checked_out_elsewhere_is_refused(repo: Path, tmp_path: Path) -> None:
    a = make_agent(repo, "w1")
    git(a.worktree or "", "checkout", "-q", "--detach")
    git(repo, "worktree", "add", "-q", str(tmp_path / "mine"), "main.w1")
    with pytest.raises(StateError, match="checked out elsewhere") as info:
        complete(repo, "w1", force=True)
    assert info.value.data["would_block"]["checked_out_elsewhere"] == [str(tmp_path / "mine")]
    assert Path(a.worktree or "").exists() and git(repo, "rev-parse", "--verify", "main.w1")


def test_self_complete_defers_removal(repo: Path) -> None:
    a = make_agent(repo, "w1", start=["sleep", "300"])
    r = registry.invoke("complete", env_for(a.worktree or "", "w1"), target=None, force=False)
    assert r.removal == "deferred" and r.status == "done" and not r.stopped
    assert Path(a.worktree or "").exists()
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
        registry.invoke("complete", env_for(b.worktree or "", "w2"), target="w1", force=False)


def test_git_refusal_is_not_retried_with_force(repo: Path) -> None:
    a = make_agent(repo, "w1")
    git(repo, "worktree", "lock", a.worktree or "", "--reason", "user lock")
    with pytest.raises(Exception, match="git worktree remove") as info:
        complete(repo, "w1")
    assert "does not retry" in (info.value.hint or "")  # type: ignore[attr-defined]
    assert Path(a.worktree or "").exists()
