"""Which files of an agent's worktree are work: the rules ``complete`` and the checkpoints share.

``cleanup.regenerable`` (ignored files that come back by themselves), ``cleanup.max_keep_mb``
(the most exo copies), and what exo itself put into the worktree (never the agent's work).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exo_cli.adapters import keep

if TYPE_CHECKING:
    from exo_cli.env import Env
    from exo_cli.records import Agent


def cleanup_policy(env: Env) -> tuple[list[str], int]:
    """``cleanup.regenerable`` and ``cleanup.max_keep_mb`` (in bytes)."""
    patterns = env.config.get("cleanup.regenerable")
    limit = env.config.get("cleanup.max_keep_mb")
    return (list(keep.DEFAULT_REGENERABLE) if patterns is None else list(patterns),
            (keep.DEFAULT_LIMIT_MB if limit is None else int(limit)) << 20)


def exo_owned(env: Env, agent: Agent) -> set[str]:
    """What exo itself put into the agent's worktree (``keep.exo_files``)."""
    written = [r["path"] for r in agent.undo if isinstance(r, dict) and isinstance(r.get("path"), str)]
    return keep.exo_files(agent.worktree or "", copies=agent.spec.get("created_files") or [],
                          source_root=str(env.repo.root), written=written)
