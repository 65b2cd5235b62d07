"""Never lose work, beyond one ``exo complete``: merges, lost state, hostile settings, kill -9, races.

- Merges into one base run one at a time; a refused or failed merge leaves the target checkout
  exactly as it was, however many run at once (real ``exo pr merge`` processes).
- No merge while a checkout of the base has a rebase, merge, cherry-pick, revert or bisect
  in progress (a paused rebase detaches HEAD: the base must still count as checked out).
- ``exo doctor`` after the state database is lost (deleted, or corrupt and moved aside as the
  hint says) rebuilds the agents from git, exo's naming and exo's tmux session, and kills,
  removes and deletes nothing; a hostile ``worktree.root`` (a home folder) loses nothing.
- ``exo complete --force`` and ``exo pr merge`` killed (``EXO_FAULT``, exit 137) at each of their
  steps: nothing is lost, and running them again finishes the job (and the restore commands
  still restore). Two completes of one agent at once; names with spaces and newlines.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from pr_helpers import commit, env_for, git, make_agent
from test_complete_matrix import BR, SECRET, dirty, fingerprint, ignored, nested_top

from conftest import ROOT, Exo, run_exo, sandbox_works, write_trusted
from exo_cli import registry
from exo_cli.env import Env
from exo_cli.errors import StateError


def _restore(commands: list[str], cwd: Path) -> None:
    for cmd in commands:
        proc = subprocess.run(shlex.split(cmd), cwd=cwd, capture_output=True, text=True)
        assert proc.returncode == 0, (cmd, proc.stderr)


def _exo(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_exo(*args, cwd=cwd, env=env, timeout=120)


def _checkout_state(path: Path) -> tuple[str, str, dict[str, bytes]]:
    files = {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
             if p.is_file() and ".git" not in p.relative_to(path).parts and ".exo" not in p.relative_to(path).parts}
    return git(path, "rev-parse", "HEAD"), git(path, "status", "--porcelain=v1", "--untracked-files=all"), files


# --------------------------------------------------------------------------- merges


def _prs(repo: Path, names: list[str], conflicting: tuple[str, ...] = ()) -> dict[str, int]:
    out = {}
    for n in names:
        a = make_agent(repo, n)
        if n in conflicting:
            commit(a.worktree or "", "shared.txt", f"{n}'s version\n", f"{n}: shared")
        commit(a.worktree or "", f"{n}.txt", f"{n}\n", f"{n}: work")
        out[n] = registry.invoke("pr_file", env_for(a.worktree or "", n)).pr.number
    return out


@pytest.mark.parametrize("round_", range(4))
def test_parallel_merges_into_one_base_leave_the_checkout_clean(repo: Path, round_: int) -> None:
    """Six `exo pr merge` processes at once into main (two of them conflict): every outcome is all or nothing."""
    names = [f"m{i}" for i in range(6)]
    prs = _prs(repo, names, conflicting=("m1", "m4"))
    procs = {n: subprocess.Popen([*["python3", "-m", "exo_cli"], "pr", "merge", str(prs[n]), "--json"], cwd=repo,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for n in names}
    results = {n: (p.wait(120), p.stdout.read() if p.stdout else "") for n, p in procs.items()}
    merged = {n for n, (code, _) in results.items() if code == 0}
    refused = set(names) - merged
    assert merged >= {"m0", "m2", "m3", "m5"} and len({"m1", "m4"} & merged) == 1, results
    for n in refused:
        assert json.loads(results[n][1])["error"]["data"]["reason"] == "conflict"
    head, status, files = _checkout_state(repo)
    assert status == "" and head == git(repo, "rev-parse", "refs/heads/main")
    for n in names:  # exactly the merged PRs' files, nothing staged or left of the refused ones
        assert (f"{n}.txt" in files) == (n in merged), (n, sorted(files))
        assert env_for(repo).store.pr(prs[n]).state == ("merged" if n in merged else "open")  # type: ignore[union-attr]
    winner = next(iter({"m1", "m4"} & merged))
    assert files["shared.txt"] == f"{winner}'s version\n".encode()


def _pause(repo: Path, how: str) -> None:
    """Leave the main checkout (of main) in the middle of ``how``."""
    noedit = {"GIT_EDITOR": "true", "GIT_SEQUENCE_EDITOR": "sed -i -e 1s/^pick/edit/"}
    if how == "bisect":
        commit(repo, "b1.txt", "1\n")
        commit(repo, "b2.txt", "2\n")
        git(repo, "bisect", "start", "HEAD", "HEAD~2")
        return
    git(repo, "checkout", "-q", "-b", "side")
    commit(repo, "README.md", "# demo\nside\n", "side")
    git(repo, "checkout", "-q", "main")
    commit(repo, "README.md", "# demo\nmain\n", "main edit")
    commit(repo, "README.md" if how == "revert" else "m.txt", "# demo\nmain, again\n", "main more")
    cmd = {"rebase": ["rebase", "-q", "-i", "HEAD~1"], "merge": ["merge", "side"],
           "cherry-pick": ["cherry-pick", "side"], "revert": ["revert", "--no-edit", "HEAD~1"]}[how]
    subprocess.run(["git", *cmd], cwd=repo, env={**os.environ, **noedit}, capture_output=True)


@pytest.mark.parametrize("how", ["rebase", "merge", "cherry-pick", "revert", "bisect"])
def test_no_merge_while_a_checkout_of_the_base_is_mid_operation(repo: Path, how: str) -> None:
    prs = _prs(repo, ["w1"])
    _pause(repo, how)
    main_before = git(repo, "rev-parse", "refs/heads/main")
    state_before = _checkout_state(repo)
    with pytest.raises(StateError, match=f"{how} in progress") as info:
        registry.invoke("pr_merge", env_for(repo), number=prs["w1"])
    assert info.value.data["reason"] == "operation-in-progress" and info.value.data["worktree"] == str(repo)
    assert git(repo, "rev-parse", "refs/heads/main") == main_before and _checkout_state(repo) == state_before
    assert env_for(repo).store.pr(prs["w1"]).state == "open"  # type: ignore[union-attr]
    git(repo, "bisect", "reset") if how == "bisect" else git(repo, how, "--abort")
    r = registry.invoke("pr_merge", env_for(repo), number=prs["w1"])
    assert r.pr.state == "merged" and (repo / "w1.txt").exists()


def test_a_paused_rebase_in_a_linked_worktree_of_the_base_counts_too(repo: Path, tmp_path: Path) -> None:
    """The base is checked out in a linked worktree whose HEAD a paused rebase detached: still refused."""
    git(repo, "checkout", "-q", "--detach")
    other = tmp_path / "mine"
    git(repo, "worktree", "add", "-q", str(other), "main")
    prs = _prs(repo, ["w1"])
    commit(other, "o.txt", "o\n")
    commit(other, "o2.txt", "o2\n")
    subprocess.run(["git", "rebase", "-q", "-i", "HEAD~2"], cwd=other, capture_output=True,
                   env={**os.environ, "GIT_EDITOR": "true", "GIT_SEQUENCE_EDITOR": "sed -i -e 1s/^pick/edit/"})
    with pytest.raises(StateError, match="rebase in progress") as info:
        registry.invoke("pr_merge", env_for(repo), number=prs["w1"])
    assert info.value.data["worktree"] == str(other)


# --------------------------------------------------------------------------- lost state


def _windows(repo: Path) -> dict[str, str]:
    out = subprocess.run(["tmux", "-L", f"exo-{Env(cwd=repo).repo_id}", "list-panes", "-a", "-F",
                          "#{window_name} #{pane_dead}"], capture_output=True, text=True).stdout
    return dict(line.split() for line in out.splitlines() if not line.startswith("_exo "))  # not the placeholder


@pytest.mark.parametrize("how", ["deleted", "corrupt-moved-aside"])
def test_doctor_after_the_state_is_lost_rebuilds_and_kills_nothing(repo: Path, sleepers: Path, how: str) -> None:
    write_trusted(repo, '[agent]\ncommand = ["sleep", "600"]\nidle_quiet_seconds = 3600\n')
    exo = Exo(repo)
    r = exo("spawn", "--worker", "k1", "--worker", "k2", "--prompt", "x", "--agent", "custom", "--mux", "tmux",
            "--json")
    assert r.exit_code == 0, r.stdout
    r = exo("spawn", "--worker", "h1", "--prompt", "x", "--agent", "custom", "--mux", "headless", "--json")
    assert r.exit_code == 0, r.stdout
    assert exo("kill", "h1").exit_code == 0  # a worktree with no live agent
    root = repo / ".exo" / "worktrees"
    commit(root / "k1", "work.txt", "committed work\n")
    (root / "k2" / "draft.txt").write_text("unsaved\n")
    before = {n: fingerprint(root / n, repo) for n in ("k1", "k2", "h1")}
    state = Env(cwd=repo).state_dir
    db = state / "state.db"
    if how == "deleted":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    else:
        for suffix in ("-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        db.write_bytes(b"this is not a SQLite database\x00" * 200)
        r = exo("agents", "--json")
        err = json.loads(r.stdout)["error"]
        assert r.exit_code == 5 and "rebuilds" in err["hint"] and "removes nothing" in err["hint"]
        db.rename(f"{db}.broken")  # as the hint says
    (root / "stray").mkdir()  # an empty folder exo did not make
    r = exo("doctor", "--json")
    doc = json.loads(r.stdout)
    rebuilt = sorted(p["subject"] for p in doc["problems"] if p["kind"] == "lost-record" and p["repaired"])
    assert rebuilt == ["h1", "k1", "k2"], doc
    assert _windows(repo) == {"k1": "0", "k2": "0"}  # nothing killed
    assert (root / "stray").is_dir()
    for n in ("k1", "k2", "h1"):
        assert fingerprint(root / n, repo) == before[n]
    agents = {a["id"]: a for a in json.loads(exo("agents", "--json").stdout)["agents"]}
    # live ones: working (their output is recent by idle_quiet_seconds; the watcher judges them from now on)
    assert {n: agents[n]["status"] for n in ("k1", "k2", "h1")} == {"k1": "working", "k2": "working", "h1": "dead"}
    assert agents["k1"]["branch"] == "main.k1" and agents["k1"]["worktree"] == str(root / "k1")
    again = json.loads(exo("doctor", "--json").stdout)
    assert not [p for p in again["problems"] if p["kind"] in ("lost-record", "orphan-window", "orphan-worktree")]
    # and the rebuilt records work: complete refuses what would lose work, stops and removes what would not
    r = exo("complete", "k2", "--json")
    assert r.exit_code == 5 and json.loads(r.stdout)["error"]["data"]["would_lose"] == {"untracked": ["draft.txt"]}
    assert _windows(repo)["k2"] == "0"
    if sandbox_works():  # the default: rebuilt as what they are, sandboxed agents in their own clones
        assert all(agents[n]["sandboxed"] for n in ("k1", "k2")), agents
    # a look at k1's work brings its commits in (from its clone, sandboxed), and the human merges them
    assert exo("diff", "k1", "--json").exit_code == 0
    git(repo, "merge", "-q", "--ff-only", "main.k1")
    r = exo("complete", "k1", "--json")
    assert r.exit_code == 0, r.stdout
    assert json.loads(r.stdout)["stopped"] and not (root / "k1").exists()


@pytest.mark.parametrize("via", ["exo.toml", "EXO_WORKTREE_ROOT", "HANGAR_ROOT"])
def test_a_home_folder_as_worktree_root_loses_nothing(repo: Path, sleepers: Path, tmp_path: Path, via: str) -> None:
    """worktree.root pointing at a home folder (a cloned repository's exo.toml, say): doctor touches none of it."""
    home = tmp_path / "victim"
    for d in (".ssh", "Desktop", "mnt"):
        (home / d).mkdir(parents=True)
    (home / "notes.txt").write_text("mine\n")
    env: dict[str, str] = {}
    if via == "exo.toml":
        with open(repo / "exo.toml", "a") as fh:
            fh.write(f'[worktree]\nroot = "{home}"\n')
    elif via == "EXO_WORKTREE_ROOT":
        env["EXO_WORKTREE_ROOT"] = str(home)
    else:
        home = home / "worktrees"
        (home / ".ssh").mkdir(parents=True)
        env["HANGAR_ROOT"] = str(home.parent)
    listing = sorted(p.name for p in home.iterdir())
    for state in ("fresh", "after a spawn"):
        if state == "after a spawn":
            r = _exo("spawn", "--worker", "w1", "--prompt", "x", "--agent", "custom", "--mux", "headless", "--json",
                     cwd=repo, env=env)
            assert r.returncode == 0, r.stdout
            listing.append("w1")
        r = _exo("doctor", "--json", cwd=repo, env=env)
        doc = json.loads(r.stdout)
        assert not [p for p in doc["problems"] if p["repaired"]], doc
        assert sorted(p.name for p in home.iterdir()) == sorted(listing)
    assert (home / ".ssh").is_dir() and (tmp_path / "victim" / "notes.txt").read_text() == "mine\n"


# --------------------------------------------------------------------------- kill -9


COMPLETE_POINTS = ["complete.checked", "complete.stopped", "complete.archived", "complete.removed"]


@pytest.mark.parametrize("point", COMPLETE_POINTS)
def test_complete_killed_at_each_step_then_run_again(repo: Path, tmp_path: Path, point: str) -> None:
    a = make_agent(repo, "w1", start=["sleep", "300"])
    wt = Path(a.worktree or "")
    ignored(repo, wt, tmp_path)
    dirty(repo, wt, tmp_path)
    nested_top(repo, wt, tmp_path)
    before = fingerprint(wt, repo)
    r = _exo("complete", "w1", "--force", "--json", cwd=repo, env={"EXO_FAULT": point})
    assert r.returncode == 137, r.stdout + r.stderr
    if wt.exists():  # killed before the removal: all of it still there
        assert fingerprint(wt, repo) == before
    r = _exo("complete", "w1", "--force", "--json", cwd=repo)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(r.stdout)
    assert not wt.exists() and res["status"] == "done"
    assert not git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{BR}", check=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _restore(res["restore"], elsewhere)
    assert fingerprint(wt, repo) == before


@pytest.mark.parametrize("point", ["merge.locked", "merge.moved"])
def test_merge_killed_at_each_step_then_run_again(repo: Path, point: str) -> None:
    prs = _prs(repo, ["w1"])
    base = git(repo, "rev-parse", "main")
    r = _exo("pr", "merge", str(prs["w1"]), "--json", cwd=repo, env={"EXO_FAULT": point})
    assert r.returncode == 137
    assert git(repo, "status", "--porcelain") == ""
    moved = git(repo, "rev-parse", "main") != base
    assert moved == (point == "merge.moved")
    r = _exo("pr", "merge", str(prs["w1"]), "--json", cwd=repo)  # the lock died with the process
    assert r.returncode == 0, r.stdout
    assert (repo / "w1.txt").read_text() == "w1\n" and git(repo, "status", "--porcelain") == ""
    assert git(repo, "rev-list", "--count", f"{base}..main") == "1"  # merged once, not twice
    r = _exo("complete", "w1", "--json", cwd=repo)
    assert r.returncode == 0 and json.loads(r.stdout)["removal"] == "removed", r.stdout


# --------------------------------------------------------------------------- races and odd names


def test_two_completes_of_one_agent_at_once(repo: Path, tmp_path: Path) -> None:
    a = make_agent(repo, "w1")
    wt = Path(a.worktree or "")
    ignored(repo, wt, tmp_path)
    dirty(repo, wt, tmp_path)
    before = fingerprint(wt, repo)
    procs = [subprocess.Popen(["python3", "-m", "exo_cli", "complete", "w1", "--force", "--json"], cwd=repo,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [(p.wait(120), json.loads(p.stdout.read() if p.stdout else "{}")) for p in procs]
    assert [code for code, _ in outs] == [0, 0], outs
    assert sorted(o["removal"] for _, o in outs) == ["kept", "removed"]
    assert outs[0][1]["restore"] == outs[1][1]["restore"]  # the second reports the first's archive
    assert len([ref for ref in git(repo, "for-each-ref", "--format=%(refname)", "refs/exo/archive/").split()
                if ref.endswith("-wip") or "-wip." in ref]) == 1  # archived once
    _restore(outs[0][1]["restore"], tmp_path)
    assert fingerprint(wt, repo) == before


def test_paths_and_names_with_spaces_and_newlines(repo: Path, tmp_path: Path) -> None:
    """A worktree folder with a space and a newline, ignored files and a nested repository named oddly."""
    odd = tmp_path / "work trees\nwith newline" / "w1"
    odd.parent.mkdir()
    git(repo, "worktree", "add", "-q", "-b", BR, str(odd), "main")
    make_agent(repo, "w0")  # the record helper makes its own worktree: point a record at the odd one
    env = env_for(repo)
    rec = env.store.agent("w0")
    assert rec is not None
    env.store.insert_agent(rec._replace(id="w1", name="w1", worktree=str(odd), branch=BR))
    (repo / ".git" / "info" / "exclude").write_text("/.exo/\n*.secret\n")
    (odd / "a b\nc.secret").write_text(f"{SECRET}\n")
    (odd / "-rf").write_text("an option-looking name\n")
    v = odd / "sp ace\nrepo"
    v.mkdir()
    git(v, "init", "-q")
    commit(v, "x y.txt", "in the nested repo\n")
    before = fingerprint(odd, repo)
    with pytest.raises(StateError) as info:
        registry.invoke("complete", env_for(repo), target="w1")
    assert set(info.value.data["would_lose"]) == {"ignored", "untracked", "nested_repos"}
    r = registry.invoke("complete", env_for(repo), target="w1", force=True)
    assert not odd.exists() and r.kept_ignored == ["a b\nc.secret"] and r.kept_nested == ["sp ace\nrepo"]
    _restore(r.restore, tmp_path)
    assert fingerprint(odd, repo) == before


def test_a_link_to_a_huge_folder_is_kept_as_a_link(repo: Path, tmp_path: Path) -> None:
    """A symbolic link inside the worktree to something huge outside counts as one small entry, never followed."""
    big = tmp_path / "huge"
    big.mkdir()
    with open(big / "disk.img", "wb") as fh:
        fh.truncate(50 << 20)
    a = make_agent(repo, "w1")
    wt = Path(a.worktree or "")
    (repo / ".git" / "info" / "exclude").write_text("/.exo/\nbig\n")
    os.symlink(big, wt / "big")
    (repo / "exo.toml").write_text("[cleanup]\nmax_keep_mb = 1\n")
    r = registry.invoke("complete", env_for(repo), target="w1", force=True)
    assert r.kept_ignored == ["big"] and (big / "disk.img").stat().st_size == 50 << 20
    assert os.readlink(Path(r.archive_folder or "") / "ignored" / "big") == str(big)
    _restore(r.restore, tmp_path)
    assert os.readlink(wt / "big") == str(big)


def test_a_nested_git_link_to_a_big_repository_elsewhere_is_kept_as_a_link(repo: Path, tmp_path: Path) -> None:
    """``evil/.git`` a link to a big repository outside: its files are kept, its history is not copied or bundled."""
    big = tmp_path / "bigrepo"
    big.mkdir()
    git(big, "init", "-q")
    (big / "blob.bin").write_bytes(os.urandom(3 << 20))
    git(big, "add", "blob.bin")
    git(big, "commit", "-q", "-m", "big")
    a = make_agent(repo, "w1")
    wt = Path(a.worktree or "")
    (wt / "evil").mkdir()
    os.symlink(big / ".git", wt / "evil" / ".git")
    (wt / "evil" / "mine.txt").write_text("the agent's file\n")
    (repo / "exo.toml").write_text("[cleanup]\nmax_keep_mb = 1\n")
    before = fingerprint(wt, repo)
    r = registry.invoke("complete", env_for(repo), target="w1", force=True)
    assert r.kept_nested == ["evil"] and any("is a link" in w for w in r.warnings)
    assert not list(Path(r.archive_folder or "").rglob("*.bundle"))
    _restore(r.restore, tmp_path)
    assert os.readlink(wt / "evil" / ".git") == str(big / ".git")
    assert (wt / "evil" / "mine.txt").read_text() == "the agent's file\n"
    assert fingerprint(wt, repo)["files"] == before["files"]


def test_a_failed_copy_stops_the_archive_and_removes_nothing(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk (or an unreadable file) while archiving: a StateError, and the worktree untouched."""
    import errno
    import shutil

    a = make_agent(repo, "w1")
    wt = Path(a.worktree or "")
    (repo / ".git" / "info" / "exclude").write_text("/.exo/\n*.key\n")
    (wt / "a.key").write_text("secret\n")
    before = fingerprint(wt, repo)

    def full(*args: object, **kwargs: object) -> None:  # a full disk cannot be made here: fail the copy instead
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shutil, "copy2", full)
    with pytest.raises(StateError, match="nothing was removed") as info:
        registry.invoke("complete", env_for(repo), target="w1", force=True)
    assert info.value.data["reason"] == "archive-failed" and "No space left" in info.value.message
    monkeypatch.undo()
    assert fingerprint(wt, repo) == before
    assert env_for(repo).store.agent("w1").status != "done"  # type: ignore[union-attr]
