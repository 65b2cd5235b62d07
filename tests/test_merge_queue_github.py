"""The merge queue on GitHub (issue 34 item 6): the REAL ``gh`` against the fake GitHub, a local bare remote.

``tests/gh_fake.py`` is the test boundary standing in for GitHub's API (it serves the PRs, their
close and comment mutations and the commit statuses ``gh api`` sets); git pushes go to a bare
repository on disk, whose ``pre-receive`` hook plays a protected branch.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from gh_fake import FakeGitHub
from pr_helpers import commit, env_for, git, make_agent
from test_merge_queue import GATE, entry, passed
from test_pr_github import github  # noqa: F401 - the fixture

from exo_cli import registry
from exo_cli.ops.queuerun import advance

pytestmark = pytest.mark.skipif(shutil.which("gh") is None, reason="gh is not installed")


def gated(repo: Path, tmp_path: Path) -> None:
    import json

    from exo_cli.adapters.git import add_exclude

    add_exclude(repo / ".git", "/.exo/")
    (repo / ".exo").mkdir(exist_ok=True)
    (tmp_path / "gates").mkdir(exist_ok=True)
    gate = GATE.format(log=tmp_path / "gates" / "gates.log", verdict="ran")
    (repo / ".exo" / "config.toml").write_text(
        f"[merge]\nwindow = 0\n[[merge.gates]]\ncommand = {json.dumps(gate)}\ntimeout = 60\n"
        f"[sandbox]\npaths = [{json.dumps(str(tmp_path / 'gates'))}]\n")


def filed(repo: Path, fake: FakeGitHub, name: str, files: dict[str, str]) -> int:
    a = make_agent(repo, name, parent="root")
    for path, text in files.items():
        commit(a.worktree or "", path, text)
    got = registry.invoke("pr_file", env_for(a.worktree or "", name, fake.extra), title=f"{name} work",  # type: ignore[attr-defined]
                          body="", draft=False)
    return int(got.pr.number)


def queued(repo: Path, fake: FakeGitHub, number: int, **kw: Any) -> Any:
    env = env_for(repo, extra=fake.extra)  # type: ignore[attr-defined]
    env.queue_runner = lambda *_: True  # type: ignore[attr-defined]  # the test advances the queue itself
    return registry.invoke("pr_merge", env, number=number, **kw)


def statuses(fake: FakeGitHub, sha: str) -> list[str]:
    return [s["state"] for s in fake.statuses if s["sha"] == sha and s["context"] == "exo/merge-queue"]  # type: ignore[attr-defined]


def test_lands_by_a_fast_forward_push_closes_squashes_and_sets_statuses(repo: Path, tmp_path: Path,
                                                                       github: FakeGitHub) -> None:  # noqa: F811
    gated(repo, tmp_path)
    bare = github.bare  # type: ignore[attr-defined]
    squash, merge = filed(repo, github, "w0", {"a.txt": "a\n"}), filed(repo, github, "w1", {"b.txt": "b\n"})
    got = [queued(repo, github, squash), queued(repo, github, merge, strategy="merge")]
    assert [g.state for g in got] == ["queued", "queued"]
    start = git(bare, "rev-parse", "main")
    assert advance(env_for(repo, extra=github.extra), "main") == 2  # type: ignore[attr-defined]
    tip = git(bare, "rev-parse", "main")
    assert tip != start and tip in passed(repo)  # the remote's base moved to exactly what passed
    assert git(bare, "merge-base", "--is-ancestor", start, tip, check=False) == ""  # a fast-forward
    assert git(repo, "rev-parse", "main") == tip  # the local base followed
    s, m = entry(repo, squash), entry(repo, merge)
    assert (s["pr_state"], m["pr_state"]) == ("merged", "merged")
    # squashed: closed on GitHub with a comment naming the commit
    pr_s = next(p for p in github.prs.values() if p["head"] == "main.w0")
    assert pr_s["state"] == "CLOSED" and any(s["merge_commit"] in c for c in pr_s.get("comments", []))
    # merged: the pushed commit contains the PR's head, which is how GitHub marks it merged
    head_m = git(bare, "rev-parse", "refs/heads/main.w1")
    assert git(bare, "merge-base", "--is-ancestor", head_m, tip, check=False) == ""
    pr_m = next(p for p in github.prs.values() if p["head"] == "main.w1")
    assert pr_m["state"] == "OPEN" and not pr_m.get("comments")  # never closed by exo
    for e in (s, m):
        assert statuses(github, e["pinned"]) == ["pending", "pending", "success"]  # queued, testing, landed


def refuse(bare: str, script: str) -> None:
    """The bare remote's ``pre-receive`` hook: ``script`` (sh) reads the refs pushed and may refuse them."""
    hook = Path(bare) / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\n" + script)
    hook.chmod(0o755)


def gate_runs(tmp_path: Path) -> list[str]:
    log = tmp_path / "gates" / "gates.log"
    return log.read_text().splitlines() if log.exists() else []


def test_a_push_refused_by_branch_protection_bounces_the_batch_with_gits_message(repo: Path, tmp_path: Path,
                                                                               github: FakeGitHub) -> None:  # noqa: F811
    gated(repo, tmp_path)
    bare = github.bare  # type: ignore[attr-defined]
    numbers = [filed(repo, github, f"w{i}", {f"{i}.txt": "a\n"}) for i in range(2)]
    refuse(bare, "echo 'GH006: Protected branch update failed for refs/heads/main.' >&2\nexit 1\n")
    for n in numbers:
        queued(repo, github, n)
    start = git(bare, "rev-parse", "main")
    assert advance(env_for(repo, extra=github.extra), "main") == 0  # type: ignore[attr-defined]
    for n in numbers:  # about the branch, not an entry: all bounced at once, no entry tested again alone
        e = entry(repo, n)
        assert (e["pr_state"], e["state"]) == ("open", "bounced") and "GH006: Protected branch" in e["reason"]
        assert statuses(github, e["pinned"])[-1] == "failure"
    assert len(gate_runs(tmp_path)) == 1
    assert git(bare, "rev-parse", "main") == start and git(repo, "rev-parse", "main") == start


def test_a_pre_receive_refusal_of_one_entry_bounces_it_alone_and_lands_the_others(repo: Path, tmp_path: Path,
                                                                                 github: FakeGitHub) -> None:  # noqa: F811
    gated(repo, tmp_path)
    bare = github.bare  # type: ignore[attr-defined]
    numbers = [filed(repo, github, f"w{i}", {f"{i}.txt": "x\n", **({"FORBIDDEN": "x\n"} if i == 1 else {})})
               for i in range(3)]
    refuse(bare, 'while read old new ref; do\n'
                 '  if git diff --name-only "$old" "$new" | grep -qx FORBIDDEN; then\n'
                 '    echo "refusing $ref: FORBIDDEN may not land" >&2; exit 1\n  fi\ndone\n')
    for n in numbers:
        queued(repo, github, n)
    start = git(bare, "rev-parse", "main")
    assert advance(env_for(repo, extra=github.extra), "main") == 2  # type: ignore[attr-defined]
    states = [(entry(repo, n)["pr_state"], entry(repo, n)["state"]) for n in numbers]
    assert states == [("merged", "merged"), ("open", "bounced"), ("merged", "merged")]
    assert "FORBIDDEN may not land" in entry(repo, numbers[1])["reason"]
    # each landing a tested commit, one by one in order, never the refused one
    moves = git(bare, "rev-list", "--first-parent", f"{start}..main").split()
    assert len(moves) == 2 and set(moves) <= passed(repo)
    assert "FORBIDDEN" not in git(bare, "ls-tree", "--name-only", "main").split()
    assert git(repo, "rev-parse", "main") == moves[0]
    assert len(gate_runs(tmp_path)) == 4  # the batch, then each entry alone
    told = [m for m in env_for(repo).store.messages(kinds=["pr-bounced"])]
    assert any("FORBIDDEN may not land" in m.body for m in told)


def test_watch_does_not_report_a_landing_under_way_as_an_outside_merge(repo: Path, tmp_path: Path,
                                                                       github: FakeGitHub) -> None:  # noqa: F811
    from exo_cli.ops import mergequeue as mq
    from exo_cli.ops.watch import poll_once

    gated(repo, tmp_path)
    n = filed(repo, github, "w0", {"a.txt": "a\n"})
    env = env_for(repo, extra=github.extra)  # type: ignore[attr-defined]
    env.queue_runner = lambda *_: True  # type: ignore[attr-defined]
    pr = env.store.pr(n)
    assert pr is not None
    mq.set_entry(env, pr, state="tested")  # pushed, its record not yet marked merged (a runner killed there)
    next(p for p in github.prs.values() if p["head"] == "main.w0").update(state="MERGED")
    result = poll_once(env)
    assert not [c for c in result.changes if c.kind == "pr-merged"]


@pytest.mark.parametrize("point", ["queue.landing", "queue.landed"])
def test_kill_9_around_the_push_lands_it_once_and_closes_it(repo: Path, tmp_path: Path, point: str,
                                                            github: FakeGitHub) -> None:  # noqa: F811
    from conftest import run_exo

    gated(repo, tmp_path)
    bare = github.bare  # type: ignore[attr-defined]
    n = filed(repo, github, "w0", {"a.txt": "a\n"})
    queued(repo, github, n)
    start = git(bare, "rev-parse", "main")
    extra = github.extra  # type: ignore[attr-defined]
    died = run_exo("pr", "queue", "--run", "--base", "main", cwd=repo, env={**extra, "EXO_FAULT": point},
                   timeout=180)
    assert died.returncode == 137, died.stderr
    assert entry(repo, n)["pr_state"] == "open"  # not recorded
    assert (git(bare, "rev-parse", "main") == start) == (point == "queue.landing")  # pushed only after the point
    done = run_exo("pr", "queue", "--run", "--base", "main", "--json", cwd=repo, env=extra, timeout=180)
    assert done.returncode == 0, done.stderr
    pushed = git(bare, "rev-parse", "main")
    assert pushed != start and pushed in passed(repo)
    e = entry(repo, n)
    assert (e["pr_state"], e["merge_commit"]) == ("merged", pushed)
    assert git(bare, "rev-list", "--count", f"{start}..main") == "1"  # landed once: never built and pushed again
    pr = next(p for p in github.prs.values() if p["head"] == "main.w0")
    assert pr["state"] == "CLOSED" and len(pr.get("comments", [])) == 1
