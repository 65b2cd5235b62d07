"""exo's git runs no hook, has a deadline that ends everything it started, and removes only its own locks.

An agent can point ``core.hooksPath`` anywhere from its worktree (``git config``, in the shared
config or with ``extensions.worktreeConfig`` in its own), or write into ``.git/hooks``: a hook
that hangs held ``exo pr merge`` for 120 s and then left its processes and ``ORIG_HEAD.lock``
behind. Each exo git path runs here under such hooks (every hook name: it records its name, then
hangs): none may run. A git call ended at its deadline leaves no process and no lock of its own;
another process's lock stays.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pr_helpers import env_for, make_agent
from pr_helpers import git as plain_git

from conftest import wait_for
from exo_cli import registry
from exo_cli.adapters.git import Git

HOOKS = ("applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit", "prepare-commit-msg",
         "commit-msg", "post-commit", "pre-rebase", "post-checkout", "post-merge", "pre-push", "pre-auto-gc",
         "post-rewrite", "reference-transaction", "push-to-checkout", "post-index-change", "fsmonitor-watchman")
HANG = os.environ.get("EXO_TEST_HOOKS_HANG", "1") == "1"  # 0: the hooks only record (to show them run without the fix)


def git(cwd: Path | str, *args: str) -> str:
    """The test's own git (setting things up, looking): with the hooks off, as exo's, or the hostile hooks would hang it."""
    return subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", *args], cwd=cwd,
                          check=True, capture_output=True, text=True, timeout=120).stdout.strip()


def commit(wt: Path | str, name: str, text: str, msg: str) -> None:
    (Path(wt) / name).write_text(text)
    git(wt, "add", name)
    git(wt, "commit", "-q", "-m", msg)


def hostile_hooks(folder: Path, marker: Path) -> Path:
    """Every hook git knows: append its name to ``marker``, then hang."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in HOOKS:
        hook = folder / name
        hook.write_text(f"#!/bin/sh\necho {name} >> {marker}\n" + ("sleep 600\n" if HANG else "") + "exit 0\n")
        hook.chmod(0o755)
    return folder


@pytest.fixture(params=["shared", "worktree"])
def hostile(request: pytest.FixtureRequest, repo: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    """(agent w1, marker): hooks set from w1's worktree, in the shared config and .git/hooks, or in its own config."""
    a = make_agent(repo, "w1")
    marker = tmp_path / "hooks-ran.txt"
    folder = hostile_hooks(tmp_path / "evil-hooks", marker)
    if request.param == "shared":
        git(a.worktree, "config", "core.hooksPath", str(folder))
        hostile_hooks(repo / ".git" / "hooks", marker)
        git(a.worktree, "config", "core.fsmonitor", str(folder / "fsmonitor-watchman"))
    else:
        git(a.worktree, "config", "extensions.worktreeConfig", "true")
        git(a.worktree, "config", "--worktree", "core.hooksPath", str(folder))
        git(a.worktree, "config", "--worktree", "core.fsmonitor", str(folder / "fsmonitor-watchman"))
    # the hooks really are there for a git of the agent's own (a control: they do run without exo)
    probe = subprocess.run(["git", "-C", a.worktree, "-c", f"core.hooksPath={folder}", "-c", "core.fsmonitor=false",
                            "update-ref", "refs/exo-probe", "HEAD"], timeout=60, env={**os.environ,
                            "PATH": os.environ["PATH"]}, capture_output=True) if not HANG else None
    if probe is not None:
        assert "reference-transaction" in marker.read_text()
        marker.unlink()
    return a, marker


def ran(marker: Path) -> list[str]:
    return marker.read_text().split() if marker.exists() else []


def test_pr_file_merge_and_complete_run_no_hook(repo: Path, hostile) -> None:  # type: ignore[no-untyped-def]
    a, marker = hostile
    commit(a.worktree, "a.txt", "a\n", "add a")
    n = registry.invoke("pr_file", env_for(a.worktree, "w1"), title="Add a").pr.number
    r = registry.invoke("pr_merge", env_for(repo), number=n, strategy="merge")
    assert r.local_updated and (repo / "a.txt").read_text() == "a\n"
    done = registry.invoke("complete", env_for(repo), target="w1", force=False)
    assert done.worktree_removed and done.branch_deleted, done
    assert ran(marker) == []
    assert not list((repo / ".git").glob("*.lock"))


def test_squash_merge_into_a_checked_out_base_runs_no_hook(repo: Path, hostile) -> None:  # type: ignore[no-untyped-def]
    a, marker = hostile
    commit(a.worktree, "b.txt", "b\n", "add b")
    n = registry.invoke("pr_file", env_for(a.worktree, "w1"), title="Add b").pr.number
    r = registry.invoke("pr_merge", env_for(repo), number=n, strategy="squash")
    assert r.local_updated and git(repo, "log", "-1", "--format=%s") == "Add b (#1)"
    assert ran(marker) == []


def test_the_stop_hooks_rebase_runs_no_hook(repo: Path, hostile) -> None:  # type: ignore[no-untyped-def]
    from exo_cli.ops.rebase import rebase_onto_base

    a, marker = hostile
    commit(a.worktree, "mine.txt", "mine\n", "agent work")
    commit(repo, "theirs.txt", "theirs\n", "main moved")
    env = env_for(repo)
    agent = env.store.agent("w1")
    assert agent is not None
    assert rebase_onto_base(env, agent).status == "rebased"
    assert git(a.worktree, "merge-base", "HEAD", "main") == git(repo, "rev-parse", "main")
    assert ran(marker) == []


def test_tracker_commits_and_worktree_creation_run_no_hook(repo: Path, hostile) -> None:  # type: ignore[no-untyped-def]
    from test_beads_ops import SETS

    from exo_cli.adapters.worktree import Worktrees
    from exo_cli.ops import tasks

    a, marker = hostile
    files, _, _ = SETS["small"]
    (repo / ".beads").mkdir()
    for dest, src in files.items():
        shutil.copyfile(src, repo / ".beads" / dest)
    git(repo, "add", ".beads")
    git(repo, "commit", "-q", "-m", "beads")
    source = tasks.open_repo_beads(env_for(repo))
    bead = next(iter(source.ready())).id
    source.claim(bead, "w1")
    assert git(repo, "log", "-1", "--format=%s").endswith(f"{bead} claimed by w1")
    env = env_for(repo)
    wts = Worktrees(env.git, env.state_dir, env.repo.common_dir)
    wts.create(path=repo / ".exo" / "worktrees" / "w2", branch="main.w2", base_commit=git(repo, "rev-parse", "HEAD"))
    assert git(repo / ".exo" / "worktrees" / "w2", "status", "--porcelain") == ""
    assert ran(marker) == [] and a.worktree


def test_push_and_fetch_run_no_hook(repo: Path, hostile, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The hosts' and GitHub's paths: push (pre-push, reference-transaction) and fetch, from the agent's worktree."""
    a, marker = hostile
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo, "remote", "add", "origin", str(remote))
    commit(a.worktree, "c.txt", "c\n", "add c")
    w = Git(a.worktree)
    assert w.push("origin", "main.w1").ok
    assert w.push_as_is("origin", "main.w1", force=True).ok
    assert w.fetch("origin", "+refs/heads/main.w1:refs/remotes/origin/main.w1").ok
    assert w.push_as_is("origin", "main.w1", delete_at=git(a.worktree, "rev-parse", "HEAD")).ok
    assert ran(marker) == []


def test_hooks_stay_off_against_git_config_from_the_environment(repo: Path, tmp_path: Path) -> None:
    """GIT_CONFIG_COUNT/KEY/VALUE in the caller's environment cannot turn the hooks back on."""
    marker = tmp_path / "ran.txt"
    folder = hostile_hooks(tmp_path / "hooks", marker)
    environ = {**os.environ, "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.hooksPath",
               "GIT_CONFIG_VALUE_0": str(folder)}
    assert Git(repo, environ=environ).run(["update-ref", "refs/heads/x", "HEAD"]).ok
    assert ran(marker) == []


# --------------------------------------------------------------------------- deadlines and locks


def slow_filter(repo: Path, tmp_path: Path, *, ignore_term: bool, lock: str | None = None) -> Path:
    """A clean filter (not a hook: exo cannot turn it off) that hangs; it writes its pid, and with ``lock`` it
    creates that lock file (relative to .git) and holds it open, as git's own lock would be."""
    pids = tmp_path / "filter.pids"
    script = tmp_path / "filter.py"
    script.write_text(
        "import os, signal, sys, time, subprocess\n"
        + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
        + f"open({str(pids)!r}, 'a').write(str(os.getpid()) + '\\n')\n"
        # a helper of its own that leaves the session (as a daemonizing credential helper would)
        + f"h = subprocess.Popen(['sleep', '600'], start_new_session=True); open({str(pids)!r}, 'a').write(str(h.pid) + '\\n')\n"
        + (f"fd = os.open({str(repo / '.git' / lock)!r} if {lock!r} else '/dev/null', os.O_CREAT | os.O_EXCL | os.O_RDWR)\n"
           if lock else "")
        + "time.sleep(600)\n")  # replaced by a test that adds a step before it
    (repo / ".gitattributes").write_text("*.slow filter=slow\n")
    git(repo, "config", "filter.slow.clean", f"{sys.executable} {script}")
    (repo / "x.slow").write_text("x\n")
    return pids


def alive(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return raw[raw.rfind(b")") + 2:][:1] not in (b"Z", b"X")


def test_a_git_call_ended_at_its_deadline_leaves_no_process_and_no_lock(repo: Path, tmp_path: Path) -> None:
    pids = slow_filter(repo, tmp_path, ignore_term=False)
    proc = Git(repo, timeout=3).run(["add", "x.slow"], check=False)
    assert proc.returncode != 0 and "timed out after 3" in proc.stderr and "were ended" in proc.stderr
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2 and not [p for p in started if alive(p)]
    assert not list((repo / ".git").glob("*.lock"))
    assert Git(repo).run(["update-ref", "refs/heads/after", "HEAD"]).ok  # the next git works


def test_locks_its_processes_made_go_a_foreign_lock_stays(repo: Path, tmp_path: Path) -> None:
    """git's own processes ignore SIGTERM here (the filter does): at SIGKILL nothing removes their locks but exo,
    which removes the one its call created and held, and leaves a lock that was there before (even when one of
    its processes opens it) and a lock another process takes meanwhile."""
    foreign = repo / ".git" / "refs" / "heads" / "foreign.lock"
    foreign.write_text("someone else's\n")
    pids = slow_filter(repo, tmp_path, ignore_term=True, lock="exo-test.lock")
    outsider = tmp_path / "outsider.py"
    outsider.write_text(f"import os, time\nos.open({str(repo / '.git' / 'packed-refs.lock')!r}, "
                        "os.O_CREAT | os.O_EXCL | os.O_RDWR)\ntime.sleep(600)\n")
    other = subprocess.Popen([sys.executable, str(outsider)])
    try:
        wait_for(lambda: (repo / ".git" / "packed-refs.lock").exists(), what="the outsider's lock")
        script = tmp_path / "filter.py"
        script.write_text(script.read_text().replace("time.sleep(600)", f"rd = open({str(foreign)!r})\ntime.sleep(600)"))
        proc = Git(repo, timeout=4).run(["add", "x.slow"], check=False)
        assert proc.returncode != 0 and "timed out" in proc.stderr
        assert "removed the lock files it had created" in proc.stderr and "exo-test.lock" in proc.stderr
        assert not (repo / ".git" / "exo-test.lock").exists() and not (repo / ".git" / "index.lock").exists()
        assert foreign.read_text() == "someone else's\n"
        assert (repo / ".git" / "packed-refs.lock").exists()  # the outsider's, taken during the call
        assert not [p for p in (int(x) for x in pids.read_text().split()) if alive(p)]
        assert other.poll() is None  # the outsider is nobody exo ends
    finally:
        other.kill()
        other.wait()


def test_a_program_that_exits_leaving_a_helper_on_its_pipes_returns_at_once(repo: Path, tmp_path: Path) -> None:
    """git exits, but a helper it started keeps stdout open: the call returns with git's output, not at the deadline."""
    from exo_cli.adapters.procrun import run_captured

    t0 = time.monotonic()
    pidfile = tmp_path / "helper.pid"
    got = run_captured(["sh", "-c", f"echo out; sleep 600 & echo $! > {pidfile}; exit 3"], dict(os.environ), 120, None)
    os.kill(int(pidfile.read_text()), 9)
    assert (got.code, got.out, got.timed_out) == (3, b"out\n", False)
    assert time.monotonic() - t0 < 60  # not the deadline (generous: a loaded machine)


# --------------------------------------------------------------------------- Git LFS


@pytest.mark.skipif(shutil.which("git-lfs") is None, reason="git-lfs is not installed")
def test_pushing_an_lfs_branch_uploads_its_objects_though_hooks_are_off(repo: Path, tmp_path: Path) -> None:
    """git-lfs uploads from its pre-push hook, which exo turns off: exo's push uploads them itself first."""
    remote = tmp_path / "remote.git"
    plain_git(tmp_path, "init", "-q", "--bare", str(remote))
    plain_git(repo, "remote", "add", "origin", str(remote))
    plain_git(repo, "lfs", "install", "--local")
    assert "git lfs pre-push" in (repo / ".git" / "hooks" / "pre-push").read_text()  # what git-lfs relies on
    plain_git(repo, "lfs", "track", "*.bin")
    plain_git(repo, "add", ".gitattributes")
    plain_git(repo, "commit", "-q", "-m", "large files through LFS")
    a = make_agent(repo, "w1")
    (Path(a.worktree) / "big.bin").write_bytes(os.urandom(4096))
    plain_git(a.worktree, "add", "big.bin")
    plain_git(a.worktree, "commit", "-q", "-m", "a large file")
    oid = plain_git(a.worktree, "lfs", "ls-files", "--long").split()[0]
    assert Git(a.worktree).push("origin", "main.w1").ok
    assert (remote / "lfs" / "objects" / oid[:2] / oid[2:4] / oid).is_file()
    # a clone gets the file's content, not a pointer
    clone = tmp_path / "clone"
    plain_git(tmp_path, "clone", "-q", "-b", "main.w1", str(remote), str(clone))
    plain_git(clone, "lfs", "install", "--local")
    plain_git(clone, "lfs", "pull")
    assert (clone / "big.bin").read_bytes() == (Path(a.worktree) / "big.bin").read_bytes()


def test_an_lfs_repository_without_git_lfs_is_refused_before_pushing(repo: Path, tmp_path: Path) -> None:
    from exo_cli.errors import EnvironmentError_

    (repo / ".git" / "lfs" / "objects").mkdir(parents=True)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    with pytest.raises(EnvironmentError_, match="git-lfs is not installed"):
        Git(repo, environ={**os.environ, "PATH": str(bindir)}).push("origin", "main")


def test_exos_empty_hooks_folder_with_something_in_it_is_refused(repo: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Something put a hook into the folder exo names as core.hooksPath: git is not run (EnvironmentError, exit 7,
    naming the folder), never with that hook; once it is removed, exo makes the folder again."""
    from exo_cli.adapters import files
    from exo_cli.errors import EnvironmentError_

    folder = tmp_path / "exo-empty"
    monkeypatch.setattr(files, "empty_path", lambda: folder)
    monkeypatch.setattr(files, "_EMPTY", None)
    assert Git(repo).run(["update-ref", "refs/heads/one", "HEAD"]).ok
    assert folder.is_dir() and oct(folder.stat().st_mode & 0o777) == "0o500" and not list(folder.iterdir())
    marker = tmp_path / "ran.txt"
    folder.chmod(0o700)
    hostile_hooks(folder, marker)
    with pytest.raises(EnvironmentError_, match="must be an empty folder") as err:
        Git(repo).run(["update-ref", "refs/heads/two", "HEAD"])
    assert err.value.exit_code == 7 and err.value.data["path"] == str(folder)
    assert ran(marker) == []
    shutil.rmtree(folder)
    assert not Git(repo).rev("refs/heads/two")  # the refused call did nothing
    assert Git(repo).run(["update-ref", "refs/heads/three", "HEAD"]).ok


def test_stopping_an_agent_ends_the_git_calls_its_exo_started(repo: Path, tmp_path: Path) -> None:
    """git runs in a session of its own, yet stopping the agent whose exo started it (its pane's session, or its
    headless group) ends that git and what git started: the call carries its starter's session in its token."""
    from exo_cli.adapters.proc import TOKEN_VAR, carrying
    from exo_cli.ops.agentctl import mux_for

    pids = slow_filter(repo, tmp_path, ignore_term=False)
    snippet = (f"from exo_cli.adapters.git import Git\nGit({str(repo)!r}, timeout=3000).run(['add', 'x.slow'], "
               "check=False)\n")
    env = env_for(repo)
    loc = mux_for(env, "headless").start("w9", [sys.executable, "-c", snippet], cwd=str(repo),
                                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    started = wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2 and
                       [int(p) for p in pids.read_text().split()], what="git's filter and its helper")
    calls = carrying(TOKEN_VAR, f"{loc.pgid}-", prefix=True)  # git, the filter and its helper
    assert calls and all(os.getsid(p) != loc.pgid for p in calls)  # in sessions of their own
    mux_for(env, "headless").kill(loc, grace=1.0)
    wait_for(lambda: not [p for p in [*started, *calls] if alive(p)], 30, "git, the filter and its helper ended")
    assert not (repo / ".git" / "index.lock").exists()
