"""Spawn's sandbox step: whether the call's agents run in bubblewrap, and each agent's command wrapped in it.

``decide`` settles it once per call from ``--sandbox/--no-sandbox`` and ``[sandbox] mode``
(``auto``, the default: wherever bubblewrap works; ``on``: every agent, an error where it does not;
``off``: none). ``--layout worktree`` and ``--no-worktree`` ask for an unsandboxed agent
under ``auto``; an agent with services runs unsandboxed there too, with a warning (its services
run in a sandbox of their own with no network it shares).
A sandboxed agent works in its own ``git clone --shared`` (the only layout that can be
sandboxed). ``--skip-permissions`` (or a CLI's bypass flag in ``agent.args``) with a mode other
than ``off`` is refused where bubblewrap does not work, unless ``--no-sandbox``: never silently
unsandboxed. ``wrap`` fills the agent's private HOME and turns its launch into the ``bwrap``
command line (adapters/sandbox.py); the record says ``sandboxed``. Every backend runs inside
(the real Claude Code, Gemini CLI and Codex: every lifecycle in tests/e2e/ runs sandboxed).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exo_cli.errors import EnvironmentError_, UsageError

if TYPE_CHECKING:
    from exo_cli.adapters.agents import Launch
    from exo_cli.env import Env

BYPASS_FLAGS = ("--dangerously-skip-permissions", "--dangerously-bypass-approvals-and-sandbox", "--yolo", "-y",
                "--approval-mode=yolo")
HINT = "Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), or spawn with --no-sandbox."


SERVICES_NOTE = ("its services ([services]) run in a sandbox of their own, with no network the agent shares: it "
                 "could not reach them")


def decide(target: Env, *, flag: bool | None, layout: str, explicit_layout: bool, no_worktree: bool,
           skip_permissions: bool, backend: str, inherited: bool = False, warnings: list[str] | None = None) -> bool:
    """Whether the call's agents run sandboxed (see the module); UsageError or EnvironmentError when they cannot.

    ``inherited``: the caller is a sandboxed agent, whose children are sandboxed whatever the mode
    (an unsandboxed child would be its way out); ``--no-sandbox`` from it is refused.
    """
    if inherited:
        if flag is False:
            raise UsageError("a sandboxed agent's children run sandboxed: --no-sandbox is refused",
                             hint="Ask your parent (or the human) to spawn it unsandboxed.")
        flag = True
    mode = str(target.config.get("sandbox.mode") or "auto")
    bypass = skip_permissions or any(a in BYPASS_FLAGS for a in (target.config.get("agent.args") or {}).get(backend, []))
    if flag is False or (flag is None and mode == "off"):
        return False
    required = flag is True or mode == "on"
    from exo_cli.ops import broker

    if not broker.enabled(target):  # the state is hidden from a sandbox: its agent reaches exo only by its socket
        if required:
            raise UsageError("a sandboxed agent reaches exo only through the team broker, which is off ([broker] "
                             "enabled = false or EXO_BROKER=0)", hint="Turn the broker on, or spawn with --no-sandbox.")
        if bypass:
            raise _unsandboxed_bypass("agents are sandboxed only with the team broker on, and it is off",
                                      "Turn the broker on, or spawn with --no-sandbox to run them unsandboxed anyway.")
        return False
    other_layout = no_worktree or (explicit_layout and layout != "clone")
    if flag is None and not required and not other_layout and target.config.get("services"):
        # auto: an agent with services runs unsandboxed, said once (`--sandbox` or mode "on" wall both in)
        if bypass:
            raise _unsandboxed_bypass(f"under [sandbox] mode \"auto\" an agent with services runs unsandboxed "
                                      f"({SERVICES_NOTE})",
                                      "Spawn with --sandbox (its services unreachable) or --no-sandbox (unsandboxed anyway).")
        if warnings is not None:
            warnings.append(f"Agents run unsandboxed: {SERVICES_NOTE}. --sandbox walls them in all the same")
        return False
    if required and other_layout:
        raise UsageError("a sandboxed agent works in its own clone: --sandbox (or [sandbox] mode = \"on\") excludes "
                         + ("--no-worktree" if no_worktree else "--layout worktree (or worktree.layout = \"worktree\")"),
                         hint="Drop one of them, or spawn with --no-sandbox.")
    if other_layout and not bypass:  # auto, and the call asked for an unsandboxed layout: no need to look
        return False
    from exo_cli.ops.sandbox import sandbox_status

    status = sandbox_status(target)
    if required and not status.available:
        raise EnvironmentError_(f"Cannot sandbox the agents: {status.detail}", hint=HINT, detail=status.detail)
    if not status.available or other_layout:
        if bypass:
            raise _unsandboxed_bypass(status.detail if not status.available else "they work in the repository itself"
                                      if no_worktree else "they work in a worktree",
                                      "Spawn with --no-sandbox to run them unsandboxed anyway."
                                      + ("" if status.available else " " + HINT))
        return False
    return True


def _unsandboxed_bypass(why: str, hint: str) -> EnvironmentError_:
    """The refusal of --skip-permissions (or a bypass flag) for agents that would run unsandboxed: never silently."""
    return EnvironmentError_("Refusing to let agents run tools without asking (--skip-permissions or a bypass flag in "
                             f"agent.args) outside a sandbox: {why}", hint=hint)


def private_places(agent_dir: Path) -> tuple[Path, Path]:
    """(the private HOME, the cache) of a sandboxed agent, in exo's folder for it."""
    return agent_dir / "home", agent_dir / "cache"


_IDENTITIES: dict[tuple[str, ...], tuple[float, dict[str, str]]] = {}
_IDENTITIES_LOCK = threading.Lock()


def _git_identity(root: Path, environ: dict[str, str]) -> dict[str, str]:
    """git's user name and e-mail for the agents' private ``.gitconfig``: one ``git config`` for the agents of
    one spawn (its tasks run at once), asked again after a few seconds (a long-lived broker sees a change)."""
    from exo_cli.adapters.agents.gemini import git_identity_env

    key = (str(root), *(environ.get(k, "") for k in ("HOME", "XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL",
                                                      "GIT_CONFIG_NOSYSTEM", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL")))
    with _IDENTITIES_LOCK:
        at, found = _IDENTITIES.get(key, (0.0, {}))
        if time.monotonic() - at > 5.0:
            found = git_identity_env(root, environ)
            _IDENTITIES.clear()
            _IDENTITIES[key] = (time.monotonic(), found)
    return dict(found)


def make_home(env: Env, *, backend: str, path: Path, agent_dir: Path,
              environ: dict[str, str]) -> tuple[Path, list[tuple[str, str]]]:
    """Fill the agent's private HOME before its backend writes its files; (the HOME, the credential binds).

    The backend then runs with that HOME (its trust entries and Codex's folder go there), and
    ``environ`` loses ``CLAUDE_CONFIG_DIR`` and ``CODEX_HOME`` (the user's folders, hidden inside).
    """
    from exo_cli.adapters.files import ensure_private_dir
    from exo_cli.adapters.sandbox_home import make_home as fill

    home = Path(env.environ.get("HOME") or os.path.expanduser("~"))
    private, cache = private_places(agent_dir)
    ensure_private_dir(cache, parents=True)
    identity = {"name": environ.get("GIT_AUTHOR_NAME", ""), "email": environ.get("GIT_AUTHOR_EMAIL", "")}
    if not identity["name"] or not identity["email"]:
        found = _git_identity(env.repo.root, environ)
        identity = {"name": identity["name"] or found.get("GIT_AUTHOR_NAME", ""),
                    "email": identity["email"] or found.get("GIT_AUTHOR_EMAIL", "")}
    binds = fill(private, real_home=home, cli=backend, clone=str(path), environ=environ, identity=identity)
    environ.pop("CLAUDE_CONFIG_DIR", None)
    environ.pop("CODEX_HOME", None)
    return private, binds


def parent_transcripts(env: Env, parent: str) -> tuple[Path, bool]:
    """(the Claude folder holding ``parent``'s transcripts, whether it is a sandboxed parent's own) for a sandboxed
    child's ``--fork-session``: the child's private HOME gets a copy of the one transcript it forks."""
    from exo_cli.adapters.agents.claude import config_dir

    record = env.store.agent(parent) if parent else None
    if record is not None and record.spec.get("sandboxed") and record.spec.get("sandbox_home"):
        return Path(str(record.spec["sandbox_home"])) / ".claude", True
    return config_dir(env.environ, Path(env.environ.get("HOME") or os.path.expanduser("~"))), False


def network_for(env: Env, spec: dict[str, Any]) -> Any:
    """The sandbox's network of a recorded agent: its allow-list proxy bridged in (``ops/network``), or none.

    The broker opened the proxy's socket with the agent's own (the allow-list is in the record,
    ``network.NET_FIELD``); an agent with no socket or no allow-list gets no network at all.
    """
    from exo_cli.adapters import netpolicy, sandbox
    from exo_cli.ops import broker, network

    key, entries = spec.get(broker.KEY_FIELD), spec.get(network.NET_FIELD)
    if not isinstance(key, str) or not key or not isinstance(entries, list):
        return sandbox.Network("none")
    policy = netpolicy.parse(entries, key=network.NET_FIELD)
    return sandbox.Network.bridge(network.plan(env, socket_key=key, policy=policy))


def plan_for(env: Env, *, backend: str, path: Path, agent_dir: Path, argv: list[str], environ: dict[str, str],
             tty: bool, binds: list[tuple[str, str]], net: Any = None, ports: dict[str, int] | None = None) -> Any:
    """The ``sandbox.Plan`` that runs ``argv`` as this agent (its clone, its HOME, its socket), ``environ`` allow-listed.

    exo's own variables pass: ``EXO_*``, ``BEADS_DIR``, ``CODEX_HOME`` and the ``<SERVICE>_PORT`` of
    the agent's allocated ``ports`` (its services listen there; the agent must know where).
    """
    from dataclasses import replace

    from exo_cli.adapters import sandbox
    from exo_cli.adapters.mux import tmux_socket
    from exo_cli.adapters.worktree import port_env

    home = Path(env.environ.get("HOME") or os.path.expanduser("~"))
    private, cache = private_places(agent_dir)
    git_config = sandbox.write_clean_git_config(env.repo.common_dir, agent_dir / "git-config")
    socket = environ.get("EXO_SOCKET")
    places = sandbox.Agent(
        clone=str(path), repository=str(env.repo.root), state_dir=str(env.state_dir), runtime_dir=str(env.runtime_dir),
        home=str(home), private_home=str(private), cache=str(cache),
        empty=sandbox.ensure_empty_file(agent_dir / "empty"), socket_dir=os.path.dirname(socket) if socket else None,
        checkouts=str(env.worktree_root), git_config=str(git_config), credentials=tuple(binds),
    )  # fmt: skip
    own = {"BEADS_DIR", "CODEX_HOME", *port_env(ports or {})}
    mine = {k: v for k, v in environ.items() if k.startswith("EXO_") or k in own}
    config = env.config
    keep = list(config.get("sandbox.env") or [])
    if backend == "codex" and environ.get("CODEX_HOME"):  # the key of the provider the user's Codex config selects
        from exo_cli.adapters.netpolicy import codex_provider_key

        keep += [k for k in [codex_provider_key(Path(environ["CODEX_HOME"]))] if k]
    plan = sandbox.assemble(
        places, argv, cli=backend, environ=environ, store_url=env.store_url,
        tmux_socket=tmux_socket.pinned(env.runtime_dir, f"exo-{env.repo_id}"), paths=config.get("sandbox.paths"),
        hide=config.get("sandbox.hide"), env=keep, devices=config.get("sandbox.devices"),
        network=net, tty=tty, set_env=mine,
    )  # fmt: skip
    # exo's files for this agent (the CLI's settings, the `exo` command folder) are read inside; the
    # Codex folder is written there
    import exo_cli

    # ... and exo's own code, which the agent's `exo` command and the demo agent run (a checkout under /tmp, hidden
    # otherwise)
    readable = [str(agent_dir), str(env.state_dir / "bin"), os.path.dirname(os.path.abspath(exo_cli.__file__))]
    writable = [str(agent_dir / d) for d in ("codex-home",) if (agent_dir / d).is_dir()]
    return replace(plan, readable=(*plan.readable, *readable), writable=(*plan.writable, *writable))


def command(plan: Any, argv: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """``plan``'s bwrap command line and environment (running ``argv`` instead of its own when given)."""
    from dataclasses import replace

    from exo_cli.adapters import sandbox

    found = sandbox.bwrap_path(plan.env) or sandbox.bwrap_path()
    if found is None:
        raise EnvironmentError_("bubblewrap is not installed (no bwrap on PATH)", hint=HINT)
    return sandbox.build(plan if argv is None else replace(plan, argv=tuple(argv)), bwrap=found)


def wrap(env: Env, *, backend: str, path: Path, agent_dir: Path, launch: Launch, tty: bool,
         binds: list[tuple[str, str]], net: Any = None, ports: dict[str, int] | None = None) -> Launch:
    """``launch`` run inside the agent's sandbox: its argv (and a headless agent's next turns) behind ``bwrap``."""
    from exo_cli.adapters.agents import Launch

    plan = plan_for(env, backend=backend, path=path, agent_dir=agent_dir, argv=list(launch.argv),
                    environ=launch.env, tty=tty, binds=binds, net=net, ports=ports)
    argv, inner_env = command(plan)
    channel = dict(launch.channel)
    if channel.get("mode") == "resume":  # each next turn of a headless agent starts a new process: sandboxed too
        channel["resume"] = command(plan, list(channel["resume"]))[0]
    return Launch(argv=argv, env=inner_env, cwd=launch.cwd, files=list(launch.files), undo=list(launch.undo),
                  channel=channel)


def around(env: Env, spec: dict[str, Any], path: Path, argv: list[str], environ: dict[str, str], *,
           tty: bool) -> tuple[list[str], dict[str, str]]:
    """A command exo runs beside a sandboxed agent (its post-create command, its services), in its sandbox.

    They run code the agent may have written, so they get its walls, with no CLI's variables.
    """
    binds = [(str(a), str(b)) for a, b in spec.get("sandbox_binds") or []]
    plan = plan_for(env, backend="custom", path=path, agent_dir=Path(spec["agent_dir"]), argv=argv, environ=environ,
                    tty=tty, binds=binds, net=network_for(env, spec), ports=spec.get("ports") or {})
    return command(plan)


def describe(spec: dict[str, Any]) -> bool:
    """Whether an agent's record says it runs sandboxed."""
    return bool(spec.get("sandboxed"))
