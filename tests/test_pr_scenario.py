"""The issue's scenario: a lead with three workers; two PRs merged (squash, merge), one conflicts.

Real git worktrees, real headless agent processes, the local forge. Siblings are told and
rebased; ``complete`` cleans up the merged two and refuses the third with what would be lost.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pr_helpers import commit, env_for, git, make_agent, snapshot

from exo_cli import registry
from exo_cli.errors import StateError
from exo_cli.ops.rebase import rebase_onto_base

AGENT = ["python3", "-c", "import time; time.sleep(300)"]


def test_three_workers(repo: Path) -> None:
    lead = make_agent(repo, "lead", role="tl", parent="root", base="main")
    commit(lead.worktree, "README.md", "# demo\nline two\n", "lead: readme")
    workers = {n: make_agent(repo, n, parent="lead", base="main.lead", branch=f"main.lead.{n}", start=AGENT)
               for n in ("w1", "w2", "w3")}
    commit(workers["w1"].worktree, "README.md", "# demo\nline two, by w1\n", "w1: readme")
    commit(workers["w1"].worktree, "w1.txt", "w1\n", "w1: file")
    commit(workers["w2"].worktree, "w2.txt", "w2\n", "w2: file")
    commit(workers["w3"].worktree, "README.md", "# demo\nline two, by w3\n", "w3: readme")
    prs = {n: registry.invoke("pr_file", env_for(w.worktree, n), title=f"{n} work", body="", draft=False).pr
           for n, w in workers.items()}
    assert {p.base for p in prs.values()} == {"main.lead"}
    lead_env = env_for(lead.worktree, "lead")
    assert len(lead_env.store.messages(recipient="lead", kinds=["pr-filed"])) == 3

    m1 = registry.invoke("pr_merge", lead_env, number=prs["w1"].number, strategy=None)
    assert m1.strategy == "squash" and m1.base_worktree == lead.worktree  # the parent's own worktree
    assert (Path(lead.worktree) / "w1.txt").exists()
    assert sorted(m1.notified) == ["w1", "w2", "w3"]

    # w2's stop hook rebases it onto the moved parent; w3's conflicts and is left as it was
    store = lead_env.store
    assert rebase_onto_base(lead_env, store.agent("w2")).status == "rebased"  # type: ignore[arg-type]
    w3_head = git(workers["w3"].worktree, "rev-parse", "HEAD")
    rb = rebase_onto_base(lead_env, store.agent("w3"))  # type: ignore[arg-type]
    assert rb.status == "conflict" and rb.files == ["README.md"]
    assert git(workers["w3"].worktree, "rev-parse", "HEAD") == w3_head

    m2 = registry.invoke("pr_merge", lead_env, number=prs["w2"].number, strategy="merge")
    assert len(git(lead.worktree, "rev-list", "--parents", "-n", "1", "HEAD").split()) == 3
    assert sorted(m2.notified) == ["w1", "w2", "w3"]

    before = snapshot(lead.worktree)
    with pytest.raises(StateError, match="conflicts") as info:
        registry.invoke("pr_merge", lead_env, number=prs["w3"].number, strategy=None)
    assert info.value.data["files"] == ["README.md"]
    assert snapshot(lead.worktree) == before
    assert store.pr(prs["w3"].number).state == "open"  # type: ignore[union-attr]
    told = [m.data["pr"] for m in store.messages(recipient="w3", kinds=["pr-merged"])]
    assert told == [prs["w1"].number, prs["w2"].number]

    for n in ("w1", "w2"):
        r = registry.invoke("complete", lead_env, target=n, force=False)
        assert r.removal == "removed" and r.stopped and not Path(r.worktree or "").exists()
    with pytest.raises(StateError, match="would lose work") as info:
        registry.invoke("complete", lead_env, target="w3", force=False)
    lost = info.value.data["would_lose"]["unmerged_commits"]
    assert [c.split(" ", 1)[1] for c in lost] == ["w3: readme"]
    assert Path(workers["w3"].worktree).exists()
    assert git(repo, "rev-parse", "--verify", "main.lead.w3")
    registry.invoke("kill", lead_env, agent="w3")  # its process goes with the test
