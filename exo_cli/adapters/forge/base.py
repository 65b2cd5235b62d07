"""The forge interface: what filing, merging and viewing a pull request returns.

A forge is built from plain values: the git client at the main checkout (and, for GitHub,
the remote's name, a ``gh`` runner and the environment ``gh`` runs with). Which forge a
repository uses is picked by name in ``exo_cli.adapters.forge``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import subprocess

    from exo_cli.adapters.git import Git
    from exo_cli.records import PullRequest

# Runs ``gh`` (argv without the program name) in a folder with an environment; injectable for tests.
GhRunner = Callable[[Sequence[str], str, "dict[str, str]"], "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class Filed:
    """What a forge reports after filing (or updating) a pull request."""

    url: str | None = None
    remote_number: int | None = None
    pushed: bool = False
    base_pushed: bool = False  # the base branch was not on the remote, so it was pushed first


@dataclass(frozen=True)
class MergeOutcome:
    """What a forge did to merge a pull request."""

    merge_commit: str
    base_worktree: str | None  # the worktree whose checkout was updated, None when none has the base
    local_updated: bool = True
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class BaseSync:
    """What bringing the local base branch up to its remote copy did."""

    base: str
    updated: bool  # the local base is now at the remote's tip (it may have been there already)
    moved: bool  # it moved
    head: str | None  # the remote's tip
    worktree: str | None  # the checkout that was updated, None when none has the base
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RemoteState:
    """A pull request as the forge sees it now (GitHub only)."""

    state: str  # open | merged | closed
    review: str | None  # approved | changes_requested | review_required | None
    checks: str | None  # pending | success | failure | None
    reviews: int  # how many latest reviews are posted
    merge_commit: str | None
    merged_at: str | None
    draft: bool
    url: str | None
    raw: dict[str, Any]


class Forge:
    """One place pull requests are filed and merged, for the repository ``git`` works in."""

    kind = "base"

    def __init__(self, git: Git) -> None:
        self.git = git

    def file(self, *, head: str, base: str, title: str, body: str, draft: bool,
             existing: PullRequest | None, worktree: str | None) -> Filed:
        """File (or, with ``existing``, update) the pull request of ``head`` into ``base``."""
        raise NotImplementedError

    def merge(self, pr: PullRequest, *, strategy: str, message: str, head_ref: str | None = None) -> MergeOutcome:
        """Merge ``pr`` with ``strategy`` (squash | merge) and bring the local base up to date."""
        raise NotImplementedError

    def view(self, pr: PullRequest) -> RemoteState | None:
        """The forge's current view of ``pr`` (None for a forge that has no remote state)."""
        return None

    def sync_base(self, base: str, *, reason: str) -> BaseSync:
        """Bring the local ``base`` up to the forge's copy after a merge there (nothing to do locally)."""
        return BaseSync(base=base, updated=True, moved=False, head=None, worktree=None)


_SLUG = re.compile(
    r"^(?:https?://(?:[^@/]+@)?|ssh://(?:[^@/]+@)?|git@)(?P<host>[^/:]+)(?::\d+)?[:/]"
    r"(?P<owner>[A-Za-z0-9_.-]+)/(?P<name>[A-Za-z0-9_.-]+?)(?:\.git)?/?$"
)


def github_slug(url: str, *, strict: bool = False) -> str | None:
    """``HOST/OWNER/REPO`` of a GitHub remote URL; ``strict`` accepts only github.com."""
    m = _SLUG.match(url.strip())
    if not m:
        return None
    host = m.group("host").lower()
    if strict and host not in ("github.com", "www.github.com"):
        return None
    return f"{host}/{m.group('owner')}/{m.group('name')}"
