"""What the parts of a spawn share: the names, the per-call state (``Call``) and the last step.

A spawn call runs several tasks at once; ``Call`` holds what they look up once and share
(the beads source, the multiplexer, the local branches, resolved commits, checked backends,
the agent starter). ``finish`` marks a started agent spawned: a task ends with it, and so
does a retry or ``exo doctor`` finishing a spawn interrupted after its agent started.
The other parts of ``ops/spawn/`` import this module and it imports none of them but the
starter, so the imports run one way: op -> pending -> task -> recovery/result/context ->
plan -> call -> starter.
"""

from __future__ import annotations

import shutil
import threading
from typing import TYPE_CHECKING, Any

from exo_cli.errors import EnvironmentError_, InvalidInput
from exo_cli.ops.spawn.starter import Starter
from exo_cli.records import AGENT_CLI_INSTALL, ROOT, STARTING, WORKING, Agent

if TYPE_CHECKING:
    from exo_cli.adapters.beads import BeadsSource
    from exo_cli.adapters.mux import Mux
    from exo_cli.env import Env
    from exo_cli.ops.spawn.plan import Common, Request

# Spec phases, in order: recorded, worktree, prepared, started, spawned (complete); an agent
# spawned with `after` is "pending" until it may start.
PENDING = "pending"
# Environment variables of the caller that never pass to an agent (identity is exo's to set;
# a TL's proof must never reach its children).
DROP_VARS = ("EXO_AGENT", "EXO_AGENT_PROOF", "EXO_PARENT", "EXO_ROLE", "EXO_SOCKET", "EXO_FAULT", "TMUX_PANE")


class Call:
    """State shared by the tasks of one spawn call."""

    def __init__(self, env: Env, common: Common) -> None:
        self.env = env
        self.common = common
        self.warnings: list[str] = []
        self._lock = threading.Lock()
        self._beads: BeadsSource | None = None
        self._mux: Mux | None = None
        self._heads: set[str] | None = None
        self._commits: dict[str, str | None] = {}
        self._backends_ok: set[str] = set()
        self._starter: Starter | None = None
        self._exclude_lock = threading.Lock()
        self._excluded = False

    def warn(self, text: str) -> None:
        with self._lock:
            if text not in self.warnings:
                self.warnings.append(text)

    def beads(self) -> BeadsSource:
        with self._lock:
            if self._beads is None:
                from exo_cli.ops import tasks

                self._beads = tasks.open_repo_beads(self.env)
            return self._beads

    def heads(self) -> set[str]:
        """The repository's local branch names, listed once per call."""
        with self._lock:
            if self._heads is None:
                self._heads = set(self.env.git.branches())
            return self._heads

    def commit(self, ref: str) -> str | None:
        """The commit ``ref`` names, resolved once per call."""
        with self._lock:
            if ref not in self._commits:
                self._commits[ref] = self.env.git.rev(ref)
            return self._commits[ref]

    def check_backend(self, name: str) -> None:
        """``check_backend`` once per backend and call (its config and PATH do not change)."""
        if name in self._backends_ok:
            return
        check_backend(self.env, name)
        with self._lock:
            self._backends_ok.add(name)

    def exclude_exo(self) -> None:
        """Put ``/.exo/`` in the repository's info/exclude once per call, before any task writes there."""
        with self._exclude_lock:
            if not self._excluded:
                self.env.worktrees.exclude_exo()
                self._excluded = True

    def mux(self) -> Mux:
        with self._lock:
            if self._mux is None:
                self._mux = check_mux(self.env, self.common.mux)
            return self._mux

    def starter(self) -> Starter:
        """The call's agent starter (batched windows on tmux)."""
        mux = self.mux()
        with self._lock:
            if self._starter is None:
                self._starter = Starter(mux)
            return self._starter


def check_mux(env: Env, kind: str) -> Mux:
    """The multiplexer for ``kind``, or EnvironmentError_ when it cannot run here."""
    from exo_cli.ops import panes

    if kind == "tmux" and shutil.which("tmux") is None:
        raise EnvironmentError_("tmux is not installed or not on PATH", hint="Install tmux, or use --mux headless.")
    if kind == "zellij":
        from exo_cli.adapters.mux.zellij import Zellij

        return Zellij(None, runtime_dir=env.runtime_dir, environ=env.environ)
    return panes.mux_for(env, kind)


def check_backend(env: Env, name: str) -> None:
    """EnvironmentError_ when the backend's program cannot be found on the caller's PATH."""
    from exo_cli.adapters import agents as backends

    if name == "demo":
        import importlib.util

        if importlib.util.find_spec("exo_cli.demo_agent") is None:
            raise EnvironmentError_(
                "The demo agent (exo_cli.demo_agent) is not part of this exo build",
                hint="Use --agent custom with agent.command in exo.toml, or another backend.",
            )
        return
    if name == "custom":
        cmd = env.config.get("agent.command") or None
        if cmd is None:
            raise InvalidInput(
                "The custom backend needs a command: set agent.command in exo.toml",
                hint='For example: [agent]\ncommand = ["my-agent", "{prompt}"]',
                key="agent.command",
            )
        if backends.available("custom", env.environ.get("PATH"), command=cmd) is None:
            from exo_cli.adapters.agents.custom import parse_template

            prog = parse_template(cmd)[0]
            raise EnvironmentError_(f"{prog} is not installed or not on PATH", hint="Fix agent.command in exo.toml.")
        return
    if backends.available(name, env.environ.get("PATH")) is None:
        install = AGENT_CLI_INSTALL.get(name)
        raise EnvironmentError_(
            f"{name} is not installed or not on PATH",
            hint=(f"Install it ({install}, then log in), or" if install else "Install it, or")
            + " spawn another agent with "
            "--agent: --agent demo is exo's scripted agent, nothing to install. agent.default in exo.toml sets "
            "the agent a plain `exo spawn` starts.",
            binary=name,
        )


def agent_env(env: Env) -> dict[str, str]:
    """The spawning call's environment minus identity variables exo sets itself.

    A Claude agent's own environment holds its API key under another name (see the Claude
    backend): what it spawns gets it back as ``ANTHROPIC_API_KEY``.
    """
    from exo_cli.adapters.agents.claude import restore_api_key

    out = {k: v for k, v in env.environ.items() if k not in DROP_VARS}
    restore_api_key(out)
    out["PATH"] = exo_first(env, out.get("PATH"))
    return out


def exo_first(env: Env, path: str | None) -> str:
    """``path`` with this exo first: a folder of exo's state holding only ``exo``, which runs this very exo.

    An agent (and what it runs: a custom command, a post-create command, a service) calls
    ``exo`` by name; the spawner's PATH may not hold it (exo run by a full path, or by ssh
    from another host, whose login PATH seldom has it). The folder holds nothing else, so
    the user's own python, pip and the like stay first as they were.
    """
    import os

    from exo_cli.adapters.files import command_folder
    from exo_cli.selfcmd import exo_command

    folder = str(command_folder(env.state_dir / "bin", "exo", exo_command()))
    rest = [p for p in (path if path is not None else os.defpath).split(os.pathsep) if p and p != folder]
    return os.pathsep.join([folder, *rest])


def host_fields(env: Env) -> dict[str, Any]:
    """What an agent's spec records of where it runs: its host, and when its parent is on another
    host, that host and the ref of the parent's branch as fetched from the shared remote.

    Only a shared store records hosts (with SQLite every agent runs here, whatever this machine
    is called later), and the name it records is kept in the state folder (``host-name``), so a
    renamed machine still knows its agents as its own.
    """
    if not env.store_url:
        return {}
    from exo_cli.env import HOST_NAME_FILE

    name = env.host_name
    path = env.state_dir / HOST_NAME_FILE
    if not path.exists():
        from exo_cli.adapters.files import atomic_write

        atomic_write(path, name + "\n", mode=0o600)
    out: dict[str, Any] = {"host": name}
    if env.via_host is not None:
        out["parent_host"] = env.via_host.get("from_host")
        out["base_ref"] = env.via_host.get("base_ref")
        if env.via_host.get("settings"):  # the spawning host's choices stay with the agent (``agentctl.setting``)
            out["settings"] = dict(env.via_host["settings"])
    return out


def finish(env: Env, req: Request, agent: Agent, spec: dict[str, Any]) -> Agent:
    """Mark a started agent spawned: status, the ``spawned`` event and the parent's message."""
    spec["phase"] = "spawned"
    status, reason = STARTING, "started"
    if req.agent == "custom":
        status, reason = WORKING, "no hooks: status from liveness only"
    env.store.update_agent(agent.id, spec=spec, status=status, status_reason=reason)
    data = {"event": "spawned", "agent": agent.id, "branch": agent.branch, "worktree": agent.worktree,
            "parent": agent.parent, "location": dict(agent.location), "backend": req.agent}
    env.store.event("spawned", agent.id, data)
    env.store.post("event", agent.id, agent.parent or ROOT,
                   f"[SPAWNED {agent.id}] {agent.role} on branch {agent.branch} in {agent.worktree}", data=data)
    return env.store.agent(agent.id) or agent
