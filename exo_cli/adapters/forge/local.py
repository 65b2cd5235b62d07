"""The built-in local forge: PR records in exo's state, merged with real git.

A merge is computed first without touching any checkout (``git merge-tree --write-tree``):
a conflict is refused before anything is written. The result becomes one commit (squash:
one parent; merge: two) which the base branch then fast-forwards to, in the worktree that
has it checked out (see ``Git.fast_forward``), or by a compare-and-swap of the ref when no
worktree has it. Either the base moves to the finished merge or nothing changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exo_cli.adapters.forge.base import Filed, Forge, MergeOutcome
from exo_cli.errors import NotFound, StateError

if TYPE_CHECKING:
    from exo_cli.adapters.git import Git
    from exo_cli.records import PullRequest


class LocalForge(Forge):
    """Pull requests recorded by exo and merged locally."""

    kind = "local"

    def file(self, *, head: str, base: str, title: str, body: str, draft: bool,
             existing: PullRequest | None, worktree: str | None) -> Filed:
        return Filed()

    def merge(self, pr: PullRequest, *, strategy: str, message: str, head_ref: str | None = None) -> MergeOutcome:
        """Merge ``head_ref`` (default: the local branch ``pr.head``; a branch fetched from another host) into the base."""
        git = self.git
        head_sha = git.rev(head_ref or f"refs/heads/{pr.head}")
        if head_sha is None:
            raise NotFound(f"Branch {pr.head} of PR #{pr.number} does not exist", branch=pr.head, pr=pr.number)
        base_sha = git.rev(f"refs/heads/{pr.base}")
        if base_sha is None:
            raise NotFound(f"Base branch {pr.base} of PR #{pr.number} does not exist", branch=pr.base, pr=pr.number)
        new = merge_commit(git, pr, base_sha=base_sha, head_sha=head_sha, strategy=strategy, message=message)
        if new == base_sha:
            return MergeOutcome(merge_commit=base_sha, base_worktree=None, local_updated=False,
                                warnings=[f"{pr.head} has nothing that {pr.base} lacks; nothing to merge"])
        wt = git.fast_forward(pr.base, base_sha, new, reason=f"exo: merge PR #{pr.number} ({strategy})",
                              what=f"merge PR #{pr.number} into {pr.base}")
        return MergeOutcome(merge_commit=new, base_worktree=wt)


def merge_commit(git: Git, pr: PullRequest, *, base_sha: str, head_sha: str, strategy: str, message: str) -> str:
    """Build the merge (or squash) commit of ``head_sha`` onto ``base_sha``; refuse on conflicts.

    Writes only git objects (no ref, no checkout). Returns ``base_sha`` when the merge
    would not change the base.
    """
    if git.is_ancestor(head_sha, base_sha):
        return base_sha
    merged = git.merge_tree(base_sha, head_sha)
    if merged.tree is None:
        files = merged.conflicts
        raise StateError(
            f"PR #{pr.number} conflicts with {pr.base}: {', '.join(files) or 'conflicting changes'}",
            hint=f"Ask the author to rebase {pr.head} onto {pr.base} and resolve the conflicts, then merge again.",
            pr=pr.number, files=files, reason="conflict",
        )
    if merged.tree == git.tree(base_sha) and strategy == "squash":
        return base_sha
    parents = [base_sha] + ([head_sha] if strategy == "merge" else [])
    return git.commit_tree(merged.tree, parents, message)
