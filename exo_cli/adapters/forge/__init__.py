"""Forges: where pull requests live (the built-in local forge, or GitHub through ``gh``).

``forge_named`` builds the forge called by name (local | github); ``get_forge`` resolves
``auto`` first: GitHub when the remote is a GitHub URL and ``gh`` is on ``PATH``, else local.
The subclasses are imported here, by name, so ``base`` never imports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from exo_cli.adapters.forge.base import (
    BaseSync,
    Filed,
    Forge,
    GhRunner,
    MergeOutcome,
    RemoteState,
    github_slug,
)
from exo_cli.errors import InvalidInput

if TYPE_CHECKING:
    from exo_cli.adapters.git import Git

KINDS = ("local", "github")


def detect_kind(git: Git, remote: str, path: str | None) -> str:
    """``github`` when ``remote`` is a github.com URL and ``gh`` is on ``path``, else ``local``."""
    from exo_cli.adapters.proc import which

    url = git.remote_url(remote)
    return "github" if url and github_slug(url, strict=True) and which("gh", path) else "local"


def forge_named(kind: str, *, git: Git, remote: str = "origin", runner: GhRunner | None = None,
                environ: Mapping[str, str] | None = None) -> Forge:
    """The forge called ``kind`` (local | github) for the repository ``git`` works in."""
    if kind == "local":
        from exo_cli.adapters.forge.local import LocalForge

        return LocalForge(git)
    if kind == "github":
        from exo_cli.adapters.forge.github import GitHubForge

        return GitHubForge(git, remote=remote, runner=runner, environ=environ)
    raise InvalidInput(f"Unknown forge {kind!r}", hint="Set forge.kind to auto, local or github.", forge=kind)


def get_forge(kind: str, *, git: Git, remote: str = "origin", runner: GhRunner | None = None,
              environ: Mapping[str, str] | None = None) -> Forge:
    """The forge ``kind`` names, ``auto`` resolved by the remote's URL and ``gh`` on ``environ``'s PATH."""
    if kind == "auto":
        kind = detect_kind(git, remote, (environ or {}).get("PATH"))
    return forge_named(kind, git=git, remote=remote, runner=runner, environ=environ)


__all__ = ["KINDS", "BaseSync", "Filed", "Forge", "GhRunner", "MergeOutcome", "RemoteState", "detect_kind",
           "forge_named", "get_forge", "github_slug"]
