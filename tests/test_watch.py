"""The forge poller: changes delivered to the owning agent, the one-poller lock, Ctrl-C."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from gh_fake import FakeGitHub
from pr_helpers import env_for, git, make_agent

from conftest import ROOT, write_trusted
from exo_cli import registry
from exo_cli.ops import watch


class Gh:
    """A stand-in ``gh`` runner answering ``pr view`` from a list of states, recording argv."""

    def __init__(self, views: list[dict[str, Any]]) -> None:
        self.views = views
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], cwd: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        data = self.views.pop(0) if len(self.views) > 1 else self.views[0]
        if isinstance(data, BaseException):
            raise data
        return subprocess.CompletedProcess(["gh", *argv], 0, json.dumps(data), "")


def _setup(repo: Path) -> int:
    git(repo, "remote", "add", "origin", "git@github.com:o/r.git")
    write_trusted(repo, '[forge]\nkind = "github"\n')
    make_agent(repo, "w1", parent="tl1")
    env = env_for(repo)
    return env.store.insert_pr(forge="github", title="T", body="", head="main.w1", base="main", author="w1",
                               state="open", remote_number=7, url="https://github.com/o/r/pull/7")


def view(**kw: Any) -> dict[str, Any]:
    base = {"number": 7, "url": "https://github.com/o/r/pull/7", "state": "OPEN", "isDraft": False,
            "reviewDecision": "", "latestReviews": [], "statusCheckRollup": [], "mergedAt": None, "mergeCommit": None}
    return {**base, **kw}


def test_poll_delivers_review_checks_and_merge(repo: Path) -> None:
    n = _setup(repo)
    env = env_for(repo)
    gh = Gh([view(statusCheckRollup=[{"__typename": "CheckRun", "status": "IN_PROGRESS", "conclusion": ""}],
                  reviewDecision="REVIEW_REQUIRED")])
    r = watch.poll_once(env, runner=gh)
    assert r.pending and [c.kind for c in r.changes] == ["pr-review", "pr-checks"]
    assert gh.calls[0] == ["pr", "view", "7", "--repo", "github.com/o/r", "--json",
                           "number,url,state,isDraft,reviewDecision,latestReviews,statusCheckRollup,mergedAt,mergeCommit"]
    pr = env.store.pr(n)
    assert pr is not None and (pr.review_state, pr.checks_state) == ("review_required", "pending")
    assert watch.poll_once(env, runner=gh).changes == []  # nothing new
    gh.views = [view(reviewDecision="CHANGES_REQUESTED", latestReviews=[{"state": "CHANGES_REQUESTED"}],
                     statusCheckRollup=[{"__typename": "StatusContext", "state": "SUCCESS"}])]
    r = watch.poll_once(env, runner=gh)
    assert not r.pending and [c.kind for c in r.changes] == ["pr-review", "pr-checks"]
    texts = [m.body for m in env.store.messages(recipient="w1")]
    assert any("review was posted" in t for t in texts) and any("checks success" in t for t in texts)
    gh.views = [view(state="MERGED", mergedAt="2026-01-01T00:00:00Z", mergeCommit={"oid": "a" * 40})]
    r = watch.poll_once(env, runner=gh)
    assert [c.kind for c in r.changes] == ["pr-merged"]
    pr = env.store.pr(n)
    assert pr is not None and pr.state == "merged" and pr.merge_commit == "a" * 40
    assert watch.poll_once(env, runner=gh).polled == 0  # merged PRs are no longer polled
    assert any(m.kind == "pr-merged" for m in env.store.messages(recipient="w1"))


def test_closed_outside_exo_and_gh_failure_is_reported(repo: Path) -> None:
    _setup(repo)
    env = env_for(repo)
    def bad(argv: Sequence[str], cwd: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(["gh", *argv], 1, "", "HTTP 401: Bad credentials")

    r = watch.poll_once(env, runner=bad)
    assert r.errors and "401" in r.errors[0]
    r = watch.poll_once(env, runner=Gh([view(state="CLOSED")]))
    assert [c.kind for c in r.changes] == ["pr-closed"]


def test_poll_with_the_real_gh(repo: Path, tmp_path: Path) -> None:
    if shutil.which("gh") is None:
        pytest.skip("gh is not installed")
    git(repo, "remote", "add", "origin", "https://github.localhost/o/r.git")
    write_trusted(repo, '[forge]\nkind = "github"\n')
    make_agent(repo, "w1", parent="tl1")
    with FakeGitHub() as fake:
        fake.prs[7] = {"id": "PR_7", "number": 7, "title": "T", "body": "", "base": "main", "head": "main.w1",
                       "isDraft": False, "state": "OPEN", "reviewDecision": "APPROVED",
                       "reviews": [{"id": "RV1", "state": "APPROVED", "author": {"login": "copilot"}, "body": "ok",
                                    "submittedAt": "2026-01-01T00:00:00Z", "authorAssociation": "NONE",
                                    "includesCreatedEdit": False, "reactionGroups": []}]}
        env = env_for(repo, extra=fake.env(str(tmp_path / "ghc")))
        env.store.insert_pr(forge="github", title="T", body="", head="main.w1", base="main", author="w1",
                            state="open", remote_number=7)
        r = watch.poll_once(env)
        assert r.errors == [], r.errors
        assert [c.kind for c in r.changes] == ["pr-review"]
        assert env.store.prs()[0].review_state == "approved"


def test_one_poller_per_repository(repo: Path) -> None:
    _setup(repo)
    env = env_for(repo)
    stop = watch.start_poller(env, runner=Gh([view()]), interval_idle=3600)
    assert stop is not None
    assert watch.start_poller(env_for(repo), runner=Gh([view()])) is None  # same process, second env
    # another process cannot take it either
    code = ("import sys; from exo_cli.env import Env; from exo_cli.ops.watch import PollerLock; "
            "sys.exit(0 if PollerLock(Env()).acquire() else 9)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 9, proc.stderr
    with pytest.raises(Exception, match="Another forge poller"):
        registry.invoke("watch", env_for(repo), once=True)
    stop.set()
    for t in threading.enumerate():
        if t.name == "exo-forge-poller":
            t.join(60)
    assert watch.PollerLock(env_for(repo)).acquire()  # released


def test_no_poller_for_a_local_forge(repo: Path) -> None:
    assert watch.start_poller(env_for(repo)) is None


def test_watch_stops_cleanly_on_ctrl_c(repo: Path) -> None:
    _setup(repo)
    env = env_for(repo)
    env.gh_runner = Gh([view(), KeyboardInterrupt()])  # type: ignore[attr-defined]
    r = registry.invoke("watch", env, once=False, interval_pending=1, interval_idle=1)
    assert r.stopped_by == "interrupt" and r.rounds == 1
    lock = watch.PollerLock(env_for(repo))
    assert lock.acquire()
    lock.release()
    env.gh_runner = Gh([view()])  # type: ignore[attr-defined]
    once = registry.invoke("watch", env, once=True, interval_pending=1, interval_idle=1)
    assert once.rounds == 1 and once.stopped_by == "once"


def test_watch_hands_each_change_over_as_it_happens(repo: Path) -> None:
    _setup(repo)
    env = env_for(repo)
    seen: list[tuple[str, int]] = []
    env.watch_observer = lambda change: seen.append((change.kind, len(seen)))  # type: ignore[attr-defined]
    rounds: list[int] = []

    class Stop(Gh):
        def __call__(self, argv: Sequence[str], cwd: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
            rounds.append(len(seen))  # what the observer had when the next round began
            return super().__call__(argv, cwd, environ)

    env.gh_runner = Stop([view(reviewDecision="APPROVED", latestReviews=[{"state": "APPROVED"}]),  # type: ignore[attr-defined]
                          KeyboardInterrupt()])
    r = registry.invoke("watch", env, once=False, interval_pending=1, interval_idle=1)
    assert r.stopped_by == "interrupt" and [c.kind for c in r.changes] == ["pr-review"]
    assert seen == [("pr-review", 0)] and rounds == [0, 1]  # printed before the second round, not at the end


def test_watch_on_the_local_forge_says_at_once_there_is_nothing_to_poll(repo: Path) -> None:
    """It printed nothing and polled nothing until Ctrl-C. A GitHub PR still open from before the forge changed
    is still polled."""
    from conftest import run_exo

    write_trusted(repo, '[forge]\nkind = "local"\n')
    r = run_exo("watch", cwd=repo, timeout=60)
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    assert r.stdout.startswith("Nothing to poll: this repository's forge is local"), r.stdout
    r = run_exo("watch", "--json", cwd=repo, timeout=60)
    assert r.returncode == 0 and [json.loads(line) for line in r.stdout.splitlines()] == [
        {"rounds": 0, "changes": [], "stopped_by": "nothing-to-poll"}], r.stdout
    assert watch.start_poller(env_for(repo)) is None  # nor does the root TL's server start a poller
    _setup(repo)
    write_trusted(repo, '[forge]\nkind = "local"\n')  # the forge changed; its GitHub PR is still open
    assert watch.pollable(env_for(repo))
