"""The built-in demo agent (``python -m exo_cli.demo_agent``), used by ``exo demo`` and tests."""

from __future__ import annotations

import sys
from collections.abc import Mapping

from exo_cli.adapters.agents.base import Backend, Launch, LaunchContext


class DemoBackend(Backend):
    """Exo's scripted demo agent; it talks to exo directly (its own status too), so no hooks or MCP files."""

    name = "demo"
    binary = None

    def __init__(self, script: str | None = None) -> None:
        self.script = script

    def prepare(self, ctx: LaunchContext, identity_env: Mapping[str, str]) -> Launch:
        """Return ``[python, -m, exo_cli.demo_agent, (--script FILE), *extra_args]``."""
        self.no_resume(ctx)
        env = self.base_env(ctx, identity_env)
        argv = [sys.executable, "-m", "exo_cli.demo_agent"]
        if self.script:
            argv += ["--script", str(self.script)]
        return Launch(argv=[*argv, *ctx.extra_args], env=env, cwd=str(ctx.worktree))
