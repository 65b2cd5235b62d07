"""The GitHub forge driven through the REAL ``gh`` binary against a fake GitHub on 127.0.0.1.

``gh`` sends every API call for the host ``github.localhost`` to ``http://api.github.localhost``
through ``HTTP_PROXY``, which is the fake server of ``gh_fake``; git pushes and fetches go to a
local bare repository (``url.<bare>.insteadOf``). Nothing reaches the network.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from gh_fake import FakeGitHub
from pr_helpers import commit, env_for, git, make_agent

from conftest import Exo, agent_vars, write_trusted
from exo_cli import registry
from exo_cli.adapters.forge import github_slug
from exo_cli.ops.pr import forge_for

pytestmark = pytest.mark.skipif(shutil.which("gh") is None, reason="gh is not installed")

URL = "https://github.localhost/o/r.git"


@pytest.fixture
def github(repo: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    git(repo, "remote", "add", "origin", URL)
    git(repo, "config", f"url.{bare}.insteadOf", URL)
    git(repo, "push", "-q", "origin", "main")
    write_trusted(repo, '[forge]\nkind = "github"\n')
    git(repo, "add", "exo.toml")
    git(repo, "commit", "-q", "-m", "exo.toml")
    git(repo, "push", "-q", "origin", "main")
    with FakeGitHub() as fake:

        def on_merge(pr: dict, method: str) -> str:
            base, head = f"refs/heads/{pr['base']}", f"refs/heads/{pr['head']}"
            tree = git(bare, "merge-tree", "--write-tree", base, head).splitlines()[0]
            parents = ["-p", git(bare, "rev-parse", base)]
            if method == "MERGE":
                parents += ["-p", git(bare, "rev-parse", head)]
            sha = git(bare, "commit-tree", tree, *parents, "-m", f"{pr['title']} (#{pr['number']})")
            git(bare, "update-ref", base, sha)
            return sha

        fake.on_merge = on_merge
        fake.bare = bare  # type: ignore[attr-defined]
        fake.extra = fake.env(str(tmp_path / "gh-config"))  # type: ignore[attr-defined]
        yield fake
    # every request went to the fake server, with the dummy token
    assert all(r["auth"] == "token dummy-token" for r in fake.requests)


def test_slug_and_auto_detection(repo: Path, tmp_path: Path) -> None:
    assert github_slug("git@github.com:acme/widgets.git", strict=True) == "github.com/acme/widgets"
    assert github_slug("https://github.com/acme/widgets", strict=True) == "github.com/acme/widgets"
    assert github_slug("ssh://git@github.com/acme/widgets.git") == "github.com/acme/widgets"
    assert github_slug("https://gitlab.com/acme/widgets.git", strict=True) is None
    assert github_slug("/srv/git/widgets.git") is None
    assert forge_for(env_for(repo)).kind == "local"  # no remote
    git(repo, "remote", "add", "origin", "git@github.com:acme/widgets.git")
    assert forge_for(env_for(repo)).kind == "github"
    assert forge_for(env_for(repo, extra={"PATH": str(tmp_path)})).kind == "local"  # no gh on PATH
    assert forge_for(env_for(repo, extra={"EXO_FORGE": "local"})).kind == "local"


def test_file_and_merge_through_real_gh(repo: Path, github: FakeGitHub) -> None:
    a = make_agent(repo, "w1", parent="root")
    commit(a.worktree, "a.txt", "a\n", "add a")
    extra = github.extra  # type: ignore[attr-defined]
    r = registry.invoke("pr_file", env_for(a.worktree, "w1", extra), title="Add a", body="--body-like text", draft=False)
    assert r.created and r.pushed and r.pr.forge == "github"
    assert r.pr.remote_number == 7 and r.pr.url == "https://github.localhost/o/r/pull/7"
    bare = github.bare  # type: ignore[attr-defined]
    assert git(bare, "rev-parse", "refs/heads/main.w1") == git(a.worktree, "rev-parse", "HEAD")
    assert git(a.worktree, "rev-parse", "--abbrev-ref", "@{upstream}") == "origin/main.w1"
    create = next(q for q in github.requests if q.get("op") == "PullRequestCreate")
    assert create["variables"]["input"] == {
        "baseRefName": "main", "body": "--body-like text", "draft": False, "headRefName": "main.w1",
        "maintainerCanModify": True, "repositoryId": "R_1", "title": "Add a"}
    # filing again pushes and edits the same PR
    commit(a.worktree, "a2.txt", "a2\n")
    again = registry.invoke("pr_file", env_for(a.worktree, "w1", extra), title="Add a (v2)", body="B2", draft=False)
    assert not again.created and again.pr.remote_number == 7
    assert github.prs[7]["title"] == "Add a (v2)"
    assert git(bare, "rev-parse", "refs/heads/main.w1") == git(a.worktree, "rev-parse", "HEAD")
    # merge: gh pr merge --squash, then the local main fast-forwards to origin/main
    m = registry.invoke("pr_merge", env_for(repo, extra=extra), number=again.pr.number)
    assert m.strategy == "squash" and m.local_updated and not m.warnings
    assert github.prs[7]["mergeMethod"] == "SQUASH"
    assert git(repo, "rev-parse", "main") == git(bare, "rev-parse", "main") == m.merge_commit
    assert (repo / "a.txt").read_text() == "a\n" and (repo / "a2.txt").read_text() == "a2\n"
    assert m.notified == ["w1"]
    ops = [q.get("op") for q in github.requests]
    assert "PullRequestMerge" in ops and "PullRequestUpdate" in ops


def test_local_base_dirty_after_github_merge_is_a_warning(repo: Path, github: FakeGitHub) -> None:
    a = make_agent(repo, "w1", parent="root")
    commit(a.worktree, "a.txt", "a\n")
    extra = github.extra  # type: ignore[attr-defined]
    n = registry.invoke("pr_file", env_for(a.worktree, "w1", extra), title="A", body="", draft=False).pr.number
    (repo / "README.md").write_text("local edit\n")
    head = git(repo, "rev-parse", "HEAD")
    m = registry.invoke("pr_merge", env_for(repo, extra=extra), number=n, strategy="merge")
    assert github.prs[7]["mergeMethod"] == "MERGE"
    assert not m.local_updated and "not updated" in m.warnings[0]
    assert git(repo, "rev-parse", "HEAD") == head and (repo / "README.md").read_text() == "local edit\n"
    assert env_for(repo).store.pr(n).state == "merged"  # type: ignore[union-attr]


def test_nested_worker_pr_pushes_its_leads_branch_first(repo: Path, github: FakeGitHub) -> None:
    """A worker's PR targets its TL's branch, which nobody pushed: exo pushes it (and says so)."""
    extra = github.extra  # type: ignore[attr-defined]
    bare = github.bare  # type: ignore[attr-defined]
    lead = make_agent(repo, "lead2", parent="root", role="tl")
    commit(lead.worktree, "plan.txt", "plan\n", "the lead's own commit")
    w = make_agent(repo, "w1", parent="lead2", base="main.lead2")
    commit(w.worktree, "w.txt", "w\n", "the worker's commit")
    assert git(bare, "branch", "--list", "main.lead2") == ""
    r = registry.invoke("pr_file", env_for(w.worktree, "w1", extra), title="W", body="", draft=False)
    assert r.created and r.base_pushed and r.pr.base == "main.lead2" and r.pr.remote_number == 7
    assert git(bare, "rev-parse", "refs/heads/main.lead2") == git(repo, "rev-parse", "main.lead2")
    create = next(q for q in github.requests if q.get("op") == "PullRequestCreate")
    assert create["variables"]["input"]["baseRefName"] == "main.lead2"
    # the lead's own PR into main: main is on the remote, nothing else is pushed
    r2 = registry.invoke("pr_file", env_for(lead.worktree, "lead2", extra), title="L", body="", draft=False)
    assert r2.created and not r2.base_pushed
    human = Exo(w.worktree)("pr", "file", "--title", "W2", env={**agent_vars(repo, "w1"), **extra})
    assert human.exit_code == 0 and "Pushed the base branch" not in human.stdout  # already there now


def test_exos_tracker_commits_on_main_are_replayed_after_a_remote_merge(repo: Path, github: FakeGitHub) -> None:
    """Beads kept in git: exo committed a claim on the local main, which GitHub lacks. After a merge on
    GitHub, watch replays that commit on top of the fetched main (nothing lost, complete works); a commit
    of the user's own that GitHub lacks still stops it, with a warning."""
    import json

    extra = github.extra  # type: ignore[attr-defined]
    a = make_agent(repo, "w1", parent="root")
    commit(a.worktree, "a.txt", "a\n", "add a")
    registry.invoke("pr_file", env_for(a.worktree, "w1", extra), title="Add a", body="", draft=False)
    (repo / ".beads").mkdir(exist_ok=True)
    commit(repo, ".beads/issues.jsonl", '{"id":"t-1","status":"in_progress"}\n', "beads: t-1 claimed by w1")
    pr = github.prs[7]
    sha = github.on_merge(pr, "SQUASH")  # type: ignore[misc] - someone merges it on GitHub
    pr.update(state="MERGED", mergedAt="2026-01-01T00:00:00Z", mergeCommit={"oid": sha})
    r = Exo(repo)("watch", "--once", "--json", env=extra)
    assert r.exit_code == 0, r.stdout + r.stderr
    kinds = [json.loads(x).get("kind") for x in r.stdout.splitlines()[:-1]]
    assert kinds == ["pr-merged", "base-updated"], r.stdout
    assert git(repo, "rev-parse", "main~1") == sha  # the remote's main, then exo's claim on top
    assert git(repo, "log", "-1", "--format=%s", "main") == "beads: t-1 claimed by w1"
    assert (repo / ".beads/issues.jsonl").read_text() == '{"id":"t-1","status":"in_progress"}\n'
    assert (repo / "a.txt").read_text() == "a\n" and git(repo, "status", "--porcelain") == ""
    done = registry.invoke("complete", env_for(repo, extra=extra), target="w1")
    assert done.removal == "removed" and done.branch_deleted
    # A commit of the user's own that GitHub lacks: never rebased by exo.
    b = make_agent(repo, "w2", parent="root")
    commit(b.worktree, "b.txt", "b\n", "add b")
    registry.invoke("pr_file", env_for(b.worktree, "w2", extra), title="Add b", body="", draft=False)
    commit(repo, "mine.txt", "mine\n", "my own work")
    mine = git(repo, "rev-parse", "main")
    pr2 = github.prs[max(github.prs)]
    sha2 = github.on_merge(pr2, "SQUASH")  # type: ignore[misc]
    pr2.update(state="MERGED", mergedAt="2026-01-01T00:00:00Z", mergeCommit={"oid": sha2})
    r = Exo(repo)("watch", "--once", "--json", env=extra)
    assert git(repo, "rev-parse", "main") == mine  # untouched
    assert "lacks; not updated" in r.stdout


def test_exos_tracker_commits_wait_for_a_rebase_the_user_paused_on_main(repo: Path, github: FakeGitHub) -> None:
    """A rebase the user paused in the main checkout (clean files, `break`) is theirs: exo neither replays
    its tracker commits there nor aborts that rebase; it says why and leaves everything as it was."""
    import os

    extra = github.extra  # type: ignore[attr-defined]
    a = make_agent(repo, "w1", parent="root")
    commit(a.worktree, "a.txt", "a\n", "add a")
    registry.invoke("pr_file", env_for(a.worktree, "w1", extra), title="Add a", body="", draft=False)
    (repo / ".beads").mkdir(exist_ok=True)
    commit(repo, ".beads/issues.jsonl", '{"id":"t-1","status":"in_progress"}\n', "beads: t-1 claimed by w1")
    pr = github.prs[7]
    sha = github.on_merge(pr, "SQUASH")  # type: ignore[misc]
    pr.update(state="MERGED", mergedAt="2026-01-01T00:00:00Z", mergeCommit={"oid": sha})
    env = {**os.environ, "GIT_SEQUENCE_EDITOR": "sed -i '1i break'"}
    subprocess.run(["git", "rebase", "-i", "HEAD~1"], cwd=repo, env=env, check=True, capture_output=True)
    assert (repo / ".git" / "rebase-merge").is_dir()
    r = Exo(repo)("watch", "--once", "--json", env=extra)
    assert "not updated" in r.stdout, r.stdout  # during the rebase no checkout has main: nothing is replayed
    assert (repo / ".git" / "rebase-merge").is_dir()  # the user's rebase is still there to continue
    subprocess.run(["git", "rebase", "--continue"], cwd=repo, check=True, capture_output=True)


def test_watch_prints_a_remote_merge_and_fast_forwards_main_for_complete(repo: Path, github: FakeGitHub) -> None:
    """Merged on GitHub (not by exo): `exo watch` prints it as a JSON line, fetches main, and complete works."""
    import json

    extra = github.extra  # type: ignore[attr-defined]
    bare = github.bare  # type: ignore[attr-defined]
    a = make_agent(repo, "w1", parent="root")
    commit(a.worktree, "a.txt", "a\n", "add a")
    registry.invoke("pr_file", env_for(a.worktree, "w1", extra), title="Add a", body="", draft=False)
    pr = github.prs[7]
    sha = github.on_merge(pr, "SQUASH")  # type: ignore[misc] - someone merges it on GitHub
    pr.update(state="MERGED", mergedAt="2026-01-01T00:00:00Z", mergeCommit={"oid": sha})
    before = git(repo, "rev-parse", "main")
    assert before != git(bare, "rev-parse", "main")
    r = Exo(repo)("watch", "--once", "--json", env=extra)
    assert r.exit_code == 0, r.stdout + r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    kinds = [x.get("kind") for x in lines[:-1]]
    assert kinds == ["pr-merged", "base-updated"], lines
    assert lines[-1]["rounds"] == 1 and [c["kind"] for c in lines[-1]["changes"]] == kinds
    assert git(repo, "rev-parse", "main") == git(bare, "rev-parse", "main") == sha  # no manual git fetch
    assert (repo / "a.txt").read_text() == "a\n"
    done = registry.invoke("complete", env_for(repo, extra=extra), target="w1")
    assert done.removal == "removed" and done.branch_deleted
    human = Exo(repo)("watch", "--once", env=extra)
    assert human.exit_code == 0 and human.stdout.strip().endswith("; polled once (--once)")


def test_a_clone_agents_pr_is_pushed_from_the_repository_never_the_clone(repo: Path, github: FakeGitHub,
                                                                         tmp_path: Path) -> None:
    import os
    import time

    from exo_cli.adapters.clones import record_home
    from exo_cli.config_paths import user_config_dir
    from exo_cli.records import IDLE, Agent

    env = env_for(repo)
    clone = repo / ".exo" / "worktrees" / "w1"
    env.worktrees.create_clone(path=clone, branch="main.w1", base_commit=git(repo, "rev-parse", "main"),
                               agent_id="w1")
    record_home(user_config_dir(os.environ), clone, repo)
    now = time.time()
    env.store.insert_agent(Agent(id="w1", name="w1", role="dev", parent="root", status=IDLE, backend="demo",
                                 mux="headless", worktree=str(clone), branch="main.w1", base_branch="main",
                                 repo=str(repo), created_at=now, updated_at=now, status_at=now,
                                 spec={"worktree_created": True, "layout": "clone"}))
    evil = tmp_path / "evil.git"
    git(tmp_path, "init", "-q", "--bare", str(evil))
    marker = tmp_path / "ran"
    with open(clone / ".git" / "config", "a") as fh:  # the clone's own config would push elsewhere, and run things
        fh.write(f'[url "{evil}"]\n\tinsteadOf = {URL}\n[credential]\n\thelper = "!touch {marker}; false"\n'
                 f'[core]\n\tsshCommand = "touch {marker}; false"\n')
    commit(clone, "a.txt", "a\n", "add a")
    r = registry.invoke("pr_file", env_for(clone, "w1", github.extra), title="Add a")  # type: ignore[attr-defined]
    assert r.pushed and r.pr.forge == "github"
    bare = github.bare  # type: ignore[attr-defined]
    assert git(bare, "rev-parse", "refs/heads/main.w1") == git(clone, "rev-parse", "HEAD")
    assert git(evil, "for-each-ref") == "" and not marker.exists()
