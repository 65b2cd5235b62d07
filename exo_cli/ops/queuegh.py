"""The merge queue on GitHub: the base that counts is the remote's, and a landing is a push.

For a batch of GitHub PRs the runner builds the candidate on the remote's base (fetched first:
``remote_base``), and lands it by a fast-forward push of the tested commit from the repository
itself (``land``: never forced, never from a clone). Then a PR landed by squash is closed with a
comment naming the commit (GitHub marks a PR merged only when its head is in the base), and one
landed by merge is marked merged by GitHub itself, since the pushed commit contains its head.
A push the remote refuses for the branch (branch protection) bounces the batch with git's
message; any other refusal lands the batch's entries one by one (``queuerun.push``), bouncing
only the one refused; one refused because the remote's base moved means rebuild and re-test.
The local base follows by ``sync_base`` (fetch and fast-forward, never forced). The queue's
state of each PR shows as the commit status ``exo/merge-queue`` of its pinned head
(``status``), through ``gh api``.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from exo_cli.errors import ExoError
from exo_cli.ops import mergequeue as mq

if TYPE_CHECKING:
    from exo_cli.adapters.forge.github import GitHubForge
    from exo_cli.env import Env
    from exo_cli.records import PullRequest


def forge(env: Env, prs: list[PullRequest]) -> GitHubForge | None:
    """The GitHub forge when the PRs of a batch live there, else None (the local forge: the base is local)."""
    if not prs or prs[0].forge != "github":
        return None
    from exo_cli.adapters.forge import get_forge
    from exo_cli.adapters.forge.github import GitHubForge
    from exo_cli.adapters.git import Git

    got = get_forge("github", git=Git(env.repo.root), remote=env.config.get("forge.remote"),
                    runner=getattr(env, "gh_runner", None), environ=env.environ)  # as ``pr.forge_for``
    return got if isinstance(got, GitHubForge) else None


def remote_base(env: Env, gh: GitHubForge, base: str) -> str | None:
    """Fetch ``base`` from the remote (the local branch follows when it can) and return the remote's commit."""
    gh.sync_base(base, reason=f"exo: merge queue fetched {base}")
    from exo_cli.adapters.git import Git

    return Git(env.repo.root).rev(f"refs/remotes/{gh.remote}/{base}")


def status(env: Env, pr: PullRequest, state: str, description: str) -> None:
    """Show the queue's state of ``pr`` as the commit status of its pinned head (GitHub PRs only).

    A status is a display: when ``gh`` cannot set it, the queue goes on (the entry's state in
    ``exo pr queue`` is the truth)."""
    pinned = mq.entry(env.store.pr(pr.number) or pr).get("pinned")
    if pr.forge != "github" or not pinned:
        return
    gh = forge(env, [pr])
    if gh is not None:
        with contextlib.suppress(ExoError):
            gh.set_status(str(pinned), state, description)


def after_landing(env: Env, pr: PullRequest, made: str) -> None:
    """Once ``pr`` landed as ``made`` on GitHub: close it with a comment when it was squashed, status success."""
    gh = forge(env, [pr])
    if gh is None:
        return
    strategy = str(mq.entry(pr).get("strategy") or pr.strategy or "squash")
    try:
        if strategy == "squash":
            gh.close_landed(pr, made)
    except ExoError as exc:
        from exo_cli.ops.delivery import post_notice
        from exo_cli.records import ROOT

        post_notice(env, "pr-merged", ROOT, ROOT,
                    f"PR #{pr.number} landed in {pr.base} as {made[:12]}, but closing it on GitHub failed: "
                    f"{exc.message}. Close it there by hand.", data={"pr": pr.number, "commit": made})
    status(env, pr, "success", f"landed in {pr.base} as {made[:12]}")
