"""Forges: where pull requests live (the built-in local forge, or GitHub through ``gh``).

``get_forge(env)`` picks the repository's forge from ``forge.kind`` (``auto``: GitHub when the
``forge.remote`` remote is a GitHub URL and ``gh`` is installed, else local); ``forge_named``
returns the forge a recorded PR was filed on.
"""

from __future__ import annotations

from exo_cli.adapters.forge.base import Forge, GhRunner, MergeOutcome, RemoteState, forge_named, get_forge

__all__ = ["Forge", "GhRunner", "MergeOutcome", "RemoteState", "forge_named", "get_forge"]
