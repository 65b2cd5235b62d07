"""Which branch is the base: one decision for PRs, the stop hook's rebase, beads and ``complete``.

``base_branch(env, agent, head)`` is the branch ``head`` merges into and rebases onto:
the agent's recorded parent branch, else ``head`` minus its last ``.segment`` when that
branch exists (``main.feature.auth`` merges into ``main.feature``), else the repository's main branch. ``base_branch(env)`` alone is
the main branch: config ``worktree.base`` (``EXO_BASE_BRANCH``), else the branch the main
checkout has checked out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exo_cli.errors import StateError

if TYPE_CHECKING:
    from exo_cli.env import Env
    from exo_cli.records import Agent


def base_ref(agent: Agent | None, base: str) -> str:
    """The ref that holds ``base`` for the agent: its parent's branch as fetched from the shared remote
    when the parent works on another host (recorded at spawn as ``base_ref``), else the local branch."""
    ref = agent.spec.get("base_ref") if agent is not None else None
    if isinstance(ref, str) and ref.startswith("refs/remotes/") and ref.endswith("/" + base):
        return ref
    return base if base.startswith("refs/") else f"refs/heads/{base}"


def base_branch(env: Env, agent: Agent | None = None, head: str | None = None) -> str:
    """The branch ``head`` (of ``agent``) merges into; without either, the repository's main branch.

    A StateError when nothing names one (no config, the main checkout on a detached HEAD, or
    ``head`` being the main checkout's own branch).
    """
    if agent is not None and agent.base_branch:
        return agent.base_branch  # recorded at spawn: no git, no config (the stop hook's hot path)
    from exo_cli.adapters.git import Git

    root = Git(env.repo.root)
    if head and "." in head:
        stem = head.rsplit(".", 1)[0]
        if stem and root.ref_exists(f"refs/heads/{stem}"):
            return stem
    configured = env.config.get("worktree.base")
    if configured:
        return str(configured)
    main = root.current_branch()
    if main and main != head:
        return main
    if head is None:
        raise StateError("Cannot tell the main branch: the main checkout is on a detached HEAD",
                         hint="Set worktree.base in exo.toml (or EXO_BASE_BRANCH), e.g. main.")
    raise StateError(f"{head} is the main branch: there is no branch above it to merge it into",
                     hint="Work on a task branch (spawn an agent, or git switch -c NAME) and file from there; "
                          f"if {head} does merge into another branch, set worktree.base in exo.toml.", branch=head)
