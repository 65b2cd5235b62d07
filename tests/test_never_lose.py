"""Never lose work beyond one ``exo complete``: merges into one base.

- Merges into one base run one at a time; a refused or failed merge leaves the target checkout
  exactly as it was, however many run at once (real ``exo pr merge`` processes).
- No merge while a checkout of the base has a rebase, merge, cherry-pick, revert or bisect
  in progress (a paused rebase detaches HEAD: the base must still count as checked out).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from pr_helpers import commit, env_for, git, make_agent

from conftest import ROOT
from exo_cli import registry
from exo_cli.errors import StateError


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
