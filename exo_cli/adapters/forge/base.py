"""The forge interface and the git plumbing the forges share (worktrees, safe fast-forwards)."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exo_cli.adapters import git as gitutil
from exo_cli.errors import InvalidInput, StateError

if TYPE_CHECKING:
    from exo_cli.env import Env
    from exo_cli.records import PullRequest

# Runs ``gh`` (argv without the program name) in a folder with an environment; injectable for tests.
GhRunner = Callable[[Sequence[str], str, "dict[str, str]"], subprocess.CompletedProcess]


@dataclass(frozen=True)
class Filed:
    """What a forge reports after filing (or updating) a pull request."""

    url: str | None = None
    remote_number: int | None = None
    pushed: bool = False


@dataclass(frozen=True)
class MergeOutcome:
    """What a forge did to merge a pull request."""

    merge_commit: str
    base_worktree: str | None  # the worktree whose checkout was updated, None when none has the base
    local_updated: bool = True
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
    """One place pull requests are filed and merged."""

    kind = "base"

    def file(self, env: Env, *, head: str, base: str, title: str, body: str, draft: bool,
             existing: PullRequest | None, worktree: str | None) -> Filed:
        """File (or, with ``existing``, update) the pull request of ``head`` into ``base``."""
        raise NotImplementedError

    def merge(self, env: Env, pr: PullRequest, *, strategy: str, message: str) -> MergeOutcome:
        """Merge ``pr`` with ``strategy`` (squash | merge) and bring the local base up to date."""
        raise NotImplementedError

    def view(self, env: Env, pr: PullRequest) -> RemoteState | None:
        """The forge's current view of ``pr`` (None for a forge that has no remote state)."""
        return None


def get_forge(env: Env, *, runner: GhRunner | None = None) -> Forge:
    """The forge configured for this repository (``forge.kind``, ``auto`` by the remote and ``gh``)."""
    kind = env.config.get("forge.kind")
    remote = env.config.get("forge.remote")
    if kind == "auto":
        url = remote_url(env, remote)
        path = env.environ.get("PATH")
        from exo_cli.adapters.proc import which

        kind = "github" if url and github_slug(url, strict=True) and which("gh", path) else "local"
    return forge_named(kind, remote=remote, runner=runner)


def forge_named(kind: str, *, remote: str = "origin", runner: GhRunner | None = None) -> Forge:
    """The forge called ``kind`` (local | github)."""
    if kind == "local":
        from exo_cli.adapters.forge.local import LocalForge

        return LocalForge()
    if kind == "github":
        from exo_cli.adapters.forge.github import GitHubForge

        return GitHubForge(remote=remote, runner=runner)
    raise InvalidInput(f"Unknown forge {kind!r}", hint="Set forge.kind to auto, local or github.", forge=kind)


def remote_url(env: Env, remote: str) -> str | None:
    """The configured URL of ``remote`` as written in git config (before any insteadOf rewriting)."""
    proc = gitutil.git(["config", "--get", f"remote.{remote}.url"], cwd=env.repo.root, check=False)
    return proc.stdout.strip() or None


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


# -- worktrees and safe updates of a checked-out branch --------------------------------------
def worktrees(cwd: str | os.PathLike[str]) -> list[dict[str, str]]:
    """``git worktree list --porcelain`` as dicts (worktree, HEAD, branch, detached, ...)."""
    out: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    for line in gitutil.git(["worktree", "list", "--porcelain"], cwd=cwd).stdout.splitlines():
        if not line:
            if cur:
                out.append(cur)
            cur = {}
            continue
        key, _, value = line.partition(" ")
        cur[key] = value
    if cur:
        out.append(cur)
    return out


def worktree_of(cwd: str | os.PathLike[str], branch: str) -> str | None:
    """The worktree that has ``branch`` checked out, or None."""
    for wt in worktrees(cwd):
        if wt.get("branch") == f"refs/heads/{branch}" and "prunable" not in wt:
            return wt["worktree"]
    return None


def rev(cwd: str | os.PathLike[str], ref: str) -> str | None:
    proc = gitutil.git(["rev-parse", "--verify", "--quiet", ref + "^{commit}"], cwd=cwd, check=False)
    return proc.stdout.strip() or None


def tracked_changes(worktree: str | os.PathLike[str]) -> list[str]:
    """Modified or staged tracked files of ``worktree`` (untracked files excluded)."""
    proc = gitutil.git(["status", "--porcelain=v1", "--untracked-files=no"], cwd=worktree)
    return [line for line in proc.stdout.splitlines() if line]


def fast_forward(cwd: str | os.PathLike[str], branch: str, old: str, new: str, *, reason: str,
                 what: str) -> str | None:
    """Move ``branch`` from ``old`` to ``new`` (a descendant), updating its checkout if it has one.

    With a checkout: refuse (StateError, nothing touched) when it has modified or staged
    tracked files, or when the update would overwrite an untracked or ignored file; git
    checks everything before it writes anything. Without one: a compare-and-swap of the ref.
    Returns the worktree that was updated, or None.
    """
    wt = worktree_of(cwd, branch)
    if wt is None:
        gitutil.git(["update-ref", "-m", reason, f"refs/heads/{branch}", new, old], cwd=cwd)
        return None
    dirty = tracked_changes(wt)
    if dirty:
        raise StateError(
            f"Cannot {what}: the worktree of {branch} ({wt}) has modified or staged files",
            hint=f"Commit or stash them in {wt}, then try again.",
            worktree=wt, files=dirty, reason="dirty",
        )
    head = rev(wt, "HEAD")
    if head != old:
        raise StateError(
            f"Cannot {what}: {branch} moved while merging (now {head and head[:12]})",
            hint="Try again.", worktree=wt, reason="moved",
        )
    proc = gitutil.git(["merge", "--ff-only", "--no-overwrite-ignore", "--no-stat", "-q", new], cwd=wt, check=False)
    if proc.returncode != 0:
        text = proc.stderr + proc.stdout
        files = [ln.strip() for ln in text.splitlines() if ln.startswith(("\t", "    "))]
        if "would be overwritten" in text:
            raise StateError(
                f"Cannot {what}: it would overwrite untracked files in {wt}",
                hint=f"Move these files out of {wt} (or commit them), then try again: {', '.join(files)}",
                worktree=wt, files=files, reason="untracked-overwrite",
            )
        raise StateError(f"Cannot {what}: git refused to update {wt}: {text.strip().splitlines()[-1:]}",
                         worktree=wt, stderr=text[-2000:], reason="git-refused")
    return wt


def repo_root(env: Env) -> Path:
    return env.repo.root
