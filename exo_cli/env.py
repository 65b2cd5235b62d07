"""The context every operation runs in: cwd, environment, repository, config, store, caller.

Everything is computed lazily and cached, so a command pays only for what it uses
(``exo --help`` touches none of it; ``exo status`` one git call and one SQLite open).
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

from exo_cli.lite import NamedTuple
from exo_cli.records import ROOT

TYPE_CHECKING = False
if TYPE_CHECKING:
    import threading
    from collections.abc import Mapping
    from typing import Any

    from exo_cli.adapters.git import Git, RepoInfo
    from exo_cli.adapters.store.base import Store
    from exo_cli.adapters.worktree import Worktrees
    from exo_cli.config import Config
    from exo_cli.records import Agent, AgentKey

# Same names as config.EnvVars (kept here so the hot path does not import tomllib).
AGENT_VAR = "EXO_AGENT"
STATE_DIR_VAR = "EXO_STATE_DIR"
ROLE_RANK = {"dev": 1, "tl": 2, "human": 3}


class Caller(NamedTuple):
    """Who is calling: an agent exo recorded, or the human at the root (a cheap record: hot path)."""

    agent_id: str  # "root" for the human
    role: str  # "human" | "tl" | "dev"
    via: str  # "ancestry" | "env" | "worktree" | "none"

    @property
    def is_human(self) -> bool:
        return self.agent_id == ROOT


class Env:
    """Lazily resolved context of one exo invocation (CLI command, hook, or MCP server)."""

    def __init__(
        self,
        cwd: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None,
        *,
        overrides: Mapping[str, Any] | None = None,
        role_cap: str | None = None,
        pid: int | None = None,
    ) -> None:
        self.cwd = Path(cwd if cwd is not None else os.getcwd()).absolute()
        self.environ: Mapping[str, str] = dict(os.environ if environ is None else environ)
        self.overrides = dict(overrides or {})
        self.role_cap = role_cap
        self.pid = pid if pid is not None else os.getpid()
        # Set by the MCP adapter so blocking operations can stop when the client cancels.
        self.cancel: threading.Event | None = None

    # -- repository and state ---------------------------------------------------------------
    @cached_property
    def repo(self) -> RepoInfo:
        from exo_cli.adapters.git import Git

        return Git(self.cwd).discover()

    @cached_property
    def state_dir(self) -> Path:
        override = self.environ.get(STATE_DIR_VAR)
        path = Path(override) if override else self.repo.common_dir / "exo"
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        return path

    @cached_property
    def repo_id(self) -> str:
        from exo_cli.adapters.files import sha1_hex

        return sha1_hex(str(self.state_dir.resolve()).encode())[:10]

    @cached_property
    def runtime_dir(self) -> Path:
        from exo_cli.adapters.files import runtime_dir_for

        return runtime_dir_for(str(self.state_dir.resolve()), self.environ)

    @cached_property
    def config(self) -> Config:
        from exo_cli.config import load as load_config

        try:
            root: Path | None = self.repo.root
        except Exception:  # config outside a repo: user config and env only
            root = None
        return load_config(repo_root=root, environ=self.environ, overrides=self.overrides)

    @cached_property
    def git(self) -> Git:
        """The git client of the main checkout."""
        from exo_cli.adapters.git import Git

        return Git(self.repo.root)

    @cached_property
    def worktrees(self) -> Worktrees:
        """Worktree creation and removal for this repository (serialized per repository)."""
        from exo_cli.adapters.worktree import Worktrees

        return Worktrees(self.git, self.state_dir, self.repo.common_dir)

    @cached_property
    def worktree_root(self) -> Path:
        """The folder exo creates worktrees in (hangar, ``worktree.root``, or ``.exo/worktrees``)."""
        from exo_cli.adapters.worktree import worktrees_folder

        return worktrees_folder(self.repo.root, hangar_override=self.environ.get("HANGAR_ROOT"),
                                configured=str(self.config.get("worktree.root") or "") or None)

    @cached_property
    def store(self) -> Store:
        from exo_cli.adapters.store import open_store

        return open_store(self.state_dir, lambda: self.runtime_dir)

    def has_state(self) -> bool:
        """True when the state database already exists (hooks must not create one)."""
        from exo_cli.adapters.store import has_state

        override = self.environ.get(STATE_DIR_VAR)
        return has_state(Path(override) if override else self.repo.common_dir / "exo")

    # -- identity -------------------------------------------------------------------------
    @cached_property
    def caller(self) -> Caller:
        return identify(self)

    @property
    def role(self) -> str:
        """The effective role: the caller's recorded role, lowered by ``exo mcp --role``."""
        role = self.caller.role
        if self.role_cap and ROLE_RANK[self.role_cap] < ROLE_RANK[role]:
            return self.role_cap
        return role

    def caller_agent(self) -> Agent | None:
        if self.caller.is_human:
            return None
        return self.store.agent(self.caller.agent_id)


def identify(env: Env) -> Caller:
    """Find the caller: process ancestry, then EXO_AGENT checked against records, then worktree.

    Roles come from exo's records, never from what a process claims. Only a process that
    is none of these is the human at the root. Each step asks the store only for the agents
    it can match (``Store.agent_keys``), so a hook costs about the same with 5 agents or 500.
    """
    try:
        if not env.has_state():
            return Caller(ROOT, "human", "none")
        store = env.store
        from exo_cli.adapters.proc import ancestors

        chain = ancestors(env.pid)
        by_pid: dict[int, AgentKey] = {}
        for a in store.agent_keys(pids=chain):  # oldest first: a pid's first recorded agent wins
            for pid in (a.pid, a.pgid):
                if a.id != ROOT and isinstance(pid, int) and pid > 1:
                    by_pid.setdefault(pid, a)
        for pid in chain:
            hit = by_pid.get(pid)
            if hit is not None:
                return Caller(hit.id, hit.role, "ancestry")
        claimed = env.environ.get(AGENT_VAR)
        if claimed and claimed != ROOT:
            for a in store.agent_keys(ids=[claimed]):
                return Caller(a.id, a.role, "env")
        everyone = [a for a in store.agent_keys() if a.id != ROOT and a.live and a.worktree]
    except Exception:
        return Caller(ROOT, "human", "none")
    cwd = str(env.cwd.resolve())
    inside = [a for a in everyone if cwd == a.worktree or cwd.startswith((a.worktree or "").rstrip("/") + "/")]
    for a in sorted(inside, key=lambda a: -len(a.worktree or "")):  # the deepest worktree first
        try:
            record = store.agent(a.id)
        except Exception:
            return Caller(ROOT, "human", "none")
        if record is not None and record.spec.get("worktree_created", True):
            return Caller(a.id, a.role, "worktree")
        # else: a human in a finished agent's folder, or in the repo itself, is the human
    return Caller(ROOT, "human", "none")
