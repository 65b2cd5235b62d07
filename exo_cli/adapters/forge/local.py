"""The built-in local forge: PR records in exo's state, merged with real git.

A merge is computed first without touching any checkout (``git merge-tree --write-tree``):
a conflict is refused before anything is written. The result becomes one commit (squash:
one parent; merge: two) which the base branch then fast-forwards to, in the worktree that
has it checked out (see ``base.fast_forward``), or by a compare-and-swap of the ref when no
worktree has it. Either the base moves to the finished merge or nothing changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exo_cli.adapters import git as gitutil
from exo_cli.adapters.forge.base import Filed, Forge, MergeOutcome, fast_forward, rev
from exo_cli.errors import NotFound, StateError

if TYPE_CHECKING:
    from exo_cli.env import Env
    from exo_cli.records import PullRequest


class LocalForge(Forge):
    """Pull requests recorded by exo and merged locally."""

    kind = "local"

    def file(self, env: Env, *, head: str, base: str, title: str, body: str, draft: bool,
             existing: PullRequest | None, worktree: str | None) -> Filed:
        return Filed()

    def merge(self, env: Env, pr: PullRequest, *, strategy: str, message: str) -> MergeOutcome:
        cwd = env.repo.root
        head_sha = rev(cwd, f"refs/heads/{pr.head}")
        if head_sha is None:
            raise NotFound(f"Branch {pr.head} of PR #{pr.number} does not exist", branch=pr.head, pr=pr.number)
        base_sha = rev(cwd, f"refs/heads/{pr.base}")
        if base_sha is None:
            raise NotFound(f"Base branch {pr.base} of PR #{pr.number} does not exist", branch=pr.base, pr=pr.number)
        new = merge_commit(cwd, pr, base_sha=base_sha, head_sha=head_sha, strategy=strategy, message=message)
        if new == base_sha:
            return MergeOutcome(merge_commit=base_sha, base_worktree=None, local_updated=False,
                                warnings=[f"{pr.head} has nothing that {pr.base} lacks; nothing to merge"])
        wt = fast_forward(cwd, pr.base, base_sha, new, reason=f"exo: merge PR #{pr.number} ({strategy})",
                          what=f"merge PR #{pr.number} into {pr.base}")
        return MergeOutcome(merge_commit=new, base_worktree=wt)


def merge_commit(cwd: object, pr: PullRequest, *, base_sha: str, head_sha: str, strategy: str,
                 message: str) -> str:
    """Build the merge (or squash) commit of ``head_sha`` onto ``base_sha``; refuse on conflicts.

    Writes only git objects (no ref, no checkout). Returns ``base_sha`` when the merge
    would not change the base.
    """
    if gitutil.git(["merge-base", "--is-ancestor", head_sha, base_sha], cwd=cwd, check=False).returncode == 0:
        return base_sha
    proc = gitutil.git(["merge-tree", "--write-tree", "--name-only", "--no-messages", base_sha, head_sha],
                       cwd=cwd, check=False)
    lines = proc.stdout.splitlines()
    if proc.returncode == 1:
        files = [ln for ln in lines[1:] if ln]
        raise StateError(
            f"PR #{pr.number} conflicts with {pr.base}: {', '.join(files) or 'conflicting changes'}",
            hint=f"Ask the author to rebase {pr.head} onto {pr.base} and resolve the conflicts, then merge again.",
            pr=pr.number, files=files, reason="conflict",
        )
    if proc.returncode != 0 or not lines:
        from exo_cli.errors import external

        raise external("git merge-tree", proc, hint="exo needs git 2.38 or newer to merge.")
    tree = lines[0].strip()
    base_tree = gitutil.out(["rev-parse", f"{base_sha}^{{tree}}"], cwd=cwd)
    if tree == base_tree and strategy == "squash":
        return base_sha
    parents = ["-p", base_sha] + (["-p", head_sha] if strategy == "merge" else [])
    return gitutil.git(["commit-tree", tree, *parents, "-F", "-"], cwd=cwd, input=message).stdout.strip()
