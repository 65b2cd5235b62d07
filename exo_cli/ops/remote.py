"""Operations on another host's agents: the request over ssh, and the result or error it brings back.

The request, the caller's proof and any secret go on the remote exo's stdin (``adapters.ssh``);
exo there proves the caller against the shared store and runs the very same operation
(``ops.hostcall``), and its answer comes back as the operation's own result class (or the
same error).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from exo_cli import registry
from exo_cli.errors import ExoError, InvalidInput, StateError, UsageError
from exo_cli.ops.hosts import (
    AGENT_SECRETS,
    AGENT_SETTINGS,
    FORWARDED,
    PROOF_VARS,
    PROTOCOL,
    agent_for,
    ask,
    carried,
    configured,
    get_host,
    host_of,
    in_parallel,
    is_local,
    shared_store,
    team,
)
from exo_cli.records import UNREACHABLE, Agent, to_jsonable

# What another host's look at its agent (``refresh``) may change in the record shown here.
OBSERVED = ("status", "status_reason", "status_at", "updated_at", "output", "session_id", "turns", "tool_calls",
            "tokens", "completed_at")

if TYPE_CHECKING:
    from exo_cli.adapters.ssh import Host
    from exo_cli.env import Env
    from exo_cli.ops.spawn.result import SpawnResult

# --------------------------------------------------------------------------- the calling side


def request(env: Env, host: Host, operation: str, args: Mapping[str, Any], *,
            secrets: Mapping[str, str] | None = None, via: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The request that runs ``operation`` with ``args`` on ``host`` for this caller."""
    sent: dict[str, str] = {}
    if not env.caller.is_human:
        for var in PROOF_VARS:
            if not env.environ.get(var):
                raise StateError(f"{env.caller.agent_id} cannot act on host {host.name} without its proof",
                                 hint="Run exo from the agent's own session (its pane, hooks or MCP server).",
                                 host=host.name)
            sent[var] = env.environ[var]
    sent.update(secrets or {})
    return {"v": PROTOCOL, "op": operation, "args": to_jsonable(dict(args)), "as_host": host.name,
            "from_host": env.host_name, "store": {"url": env.store_url, "team": team(env)}, "env": sent,
            "trust": dict(env.config.pins),  # the values the human trusted here: trusted in the clone there too
            **({"via": dict(via)} if via else {})}


def need_shared_store(env: Env, host: Host) -> None:
    """StateError unless the state is in a store both hosts share (PostgreSQL)."""
    if not shared_store(env):
        raise StateError(f"Reaching host {host.name} needs a store both hosts share: this repository keeps its "
                         "state in SQLite", hint="Move it to PostgreSQL first: exo store migrate --to postgresql://...",
                         host=host.name)


def call(env: Env, host: Host, operation: str, args: Mapping[str, Any], expect: Any, *,
         secrets: Mapping[str, str] | None = None, timeout: float | None = None,
         via: Mapping[str, Any] | None = None) -> Any:
    """Run ``operation`` on ``host``; its result as ``expect``, or the very error it raised there."""
    need_shared_store(env, host)
    return ask(host, request(env, host, operation, args, secrets=secrets, via=via), expect, timeout=timeout)


def forward(env: Env, host: Host, operation: str, args: Mapping[str, Any], *,
            secrets: Mapping[str, str] | None = None, via: Mapping[str, Any] | None = None) -> Any:
    """Run the registered operation on ``host`` and return its result as this side's result class."""
    from exo_cli.registry import get

    spec = get(operation)
    timeout = None
    if spec.blocking:  # a blocking operation's own timeout, plus time for the trip
        raw = args.get("timeout")
        timeout = float(raw) + 60.0 if isinstance(raw, int | float) and not isinstance(raw, bool) else 3600.0
    return call(env, host, operation, args, spec.result_type(), secrets=secrets, timeout=timeout, via=via)


def route(env: Env, operation: Any, kwargs: Mapping[str, Any]) -> Host | None:
    """Where a call of ``operation`` runs: None here, else the host of the agent it is about.

    Only operations that name the agent they act on (``Op.on_host``) travel, and only when the
    state is in a shared store (with SQLite every agent runs here).
    """
    param = operation.on_host
    if not param or env.__dict__.get(FORWARDED) or not shared_store(env):
        return None
    ref = kwargs.get(param)
    refs = [ref] if isinstance(ref, str) else list(ref) if isinstance(ref, list | tuple) else []
    agents = [a for a in (agent_for(env, r) for r in refs) if a is not None]
    remote = {a.host for a in agents if not is_local(env, a)}
    if not remote:
        return None
    if len(remote) > 1 or len(agents) != len(remote) and any(is_local(env, a) for a in agents):
        raise InvalidInput(f"{operation.cli or operation.name} acts on agents of one host per call; these run on "
                           f"{', '.join(sorted({a.host or env.host_name for a in agents}))}",
                           hint="Call it once per host.", field=param)
    return host_of(env, agents[0])


def secrets_for(env: Env, host: Host) -> dict[str, str]:
    """The variables a remote agent gets from its spawner: the agent CLIs' keys and ``[hosts.NAME] env``."""
    from exo_cli.adapters.agents.claude import restore_api_key

    source = dict(env.environ)
    restore_api_key(source)
    out = {k: source[k] for k in AGENT_SECRETS if source.get(k)}
    for pattern in host.env:
        for k, v in source.items():
            if fnmatch.fnmatchcase(k, pattern) and carried(k) and k not in PROOF_VARS:
                out[k] = v
    return out


# --------------------------------------------------------------------------- spawn on another host

_NOT_WITH_HOST = {
    "repo": "a host's agents work in that host's clone of this repository",
    "fork_session": "a conversation cannot be forked across hosts",
    "no_worktree": "a remote agent always works in a worktree of its own",
    "after": "an agent on another host starts at once",
}


def spawn_there(env: Env, name: str, args: Mapping[str, Any]) -> SpawnResult:
    """``spawn --host NAME``: push the parent's branch to the shared remote, then spawn through exo there.

    The remote exo fetches that branch, makes the worktrees from it, starts the agents in its
    own multiplexer and records them (with their host) in the shared store; the API keys the
    agents need travel on ssh's stdin. The agent is chosen here, as for a spawn here: the
    backend, whether it may skip permissions, and its settings (``AGENT_SETTINGS``, the demo
    script) come from this side's arguments and configuration, never from the host's.
    """
    from exo_cli.ops.hostgit import share_branch
    from exo_cli.ops.spawn.plan import caller_context

    host = get_host(env, name)
    for key, why in _NOT_WITH_HOST.items():
        if args.get(key):
            raise UsageError(f"--{key.replace('_', '-')} cannot go with --host: {why}", field=key)
    need_shared_store(env, host)
    rest, settings = _agent_choice(env, args)
    info = caller_context(env, from_branch=args.get("from_branch"), no_worktree=False)
    branch, start = info["parent_branch"], info["base"] or info["parent_branch"]
    if not branch:
        raise StateError("Cannot spawn on another host from a detached HEAD: there is no branch to share",
                         hint="Check out a branch (or pass --from BRANCH).")
    for b in dict.fromkeys([start, branch]):
        share_branch(env, b, host.name)
    via = {"base_branch": branch, "start": start, "from_host": env.host_name, "settings": settings}
    result: SpawnResult = forward(env, host, "spawn", rest, secrets=secrets_for(env, host), via=via)
    return _named(result, host.name)


def _agent_choice(env: Env, args: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The spawn's arguments for another host with the agent chosen here, and the agent settings it carries."""
    import json
    from pathlib import Path

    from exo_cli.ops.spawn.plan import choose_backend

    rest = {k: v for k, v in args.items()
            if k not in _NOT_WITH_HOST and k not in ("from_branch", "demo_script") and v not in (None, [], False)}
    rest["agent"] = choose_backend(env, args.get("agent"))
    skip = args.get("skip_permissions")
    rest["skip_permissions"] = bool(env.config.get("agent.skip_permissions")) if skip is None else bool(skip)
    settings = {k: env.config.get(k) for k in AGENT_SETTINGS}
    script = args.get("demo_script")
    if script:  # a file here: its steps travel (the host has no such file)
        try:
            steps = json.loads(Path(script).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InvalidInput(f"Cannot read the demo script {script}: {exc}", field="demo_script") from exc
        if not isinstance(steps, list):
            raise InvalidInput(f"The demo script {script} must be a JSON list of steps", field="demo_script")
        settings["demo.script"] = steps
    return rest, settings


def _named(result: SpawnResult, host: str) -> SpawnResult:
    """A spawn result from ``host`` whose errors name that host (rebuilt as any error from there is)."""
    import dataclasses

    from exo_cli.ops.spawn.result import error_obj
    from exo_cli.wire import error_from

    errors = [error_obj(e["id"], error_from({**e, "data": {}}, host=host)) for e in result.errors]
    return dataclasses.replace(result, errors=errors, failed=[[e["id"], e["message"]] for e in errors])


# --------------------------------------------------------------------------- liveness across hosts


def refresh_remote(env: Env, agents: list[Agent]) -> dict[str, Agent]:
    """The agents of other hosts as their hosts see them now (one call per host, in parallel).

    An agent of a host that cannot be reached is shown ``unreachable`` (never recorded: it may
    well be working); one of a host this machine does not know keeps its recorded status.
    """
    by_host: dict[str, list[Agent]] = {}
    for a in agents:
        if a.live:  # a finished one (done, dead) stays as recorded: there is nothing to observe
            by_host.setdefault(a.host, []).append(a)
    if not by_host:
        return {}
    hosts = configured(env)
    out: dict[str, Agent] = {}

    def one(name: str, group: list[Agent]) -> None:
        host = hosts.get(name)
        if host is None or env.__dict__.get(FORWARDED):
            return
        try:
            seen: list[Agent] = call(env, host, "", {"refresh": [a.id for a in group]}, list[Agent], timeout=60.0)
        except ExoError as exc:  # a host that cannot be reached shows its agents so; any other failure says why
            lost = exc.data.get("reason") in ("unreachable", "timeout")
            for a in group:
                out[a.id] = a._replace(status=UNREACHABLE if lost else a.status, status_reason=exc.message[:300])
            return
        by_id = {rec.id: rec for rec in seen}
        for a in group:  # what the host observed; who and where the agent is stays as recorded here
            rec = by_id.get(a.id)
            if rec is not None:
                out[a.id] = a._replace(**{k: getattr(rec, k) for k in OBSERVED})

    in_parallel(lambda item: one(*item), list(by_host.items()))
    return out


def attach_there(env: Env, host: Host, agent: Agent) -> tuple[str, list[str], str | None]:
    """How to show an agent of another host: (mode, argv, hint): ssh into it, where exo attaches.

    Inside the user's own tmux the session opens in a popup (closing it comes back); elsewhere
    the terminal becomes the ssh session. Nothing secret is on the command line: the
    remote command is exo's own, with the agent's id.
    """
    import shlex

    from exo_cli.adapters.ssh import interactive

    argv = interactive(host, ["attach", agent.id])
    hint = f"Detach (C-b d) to end the ssh session to {host.name}."
    if env.environ.get("TMUX"):
        return "popup", ["tmux", "display-popup", "-E", "-w", "90%", "-h", "90%", shlex.join(argv)], hint
    return "ssh", argv, hint


def kill_there(env: Env, agent: Agent) -> tuple[Any, str | None]:
    """Stop an agent of another host through exo there: (its KillResult or None, why it could not)."""
    try:
        host = host_of(env, agent)
        if host is None:
            return None, None
        return forward(env, host, "kill", {"agent": agent.id}), None
    except ExoError as exc:
        return None, f"{agent.id} on host {agent.host} was not stopped: {exc.message}"


def reap_there(env: Env, name: str) -> Any:
    """``reap`` by exo on host ``name`` (its own finished agents); None when it cannot be reached or asked."""
    try:
        return forward(env, get_host(env, name), "reap", {})
    except ExoError:
        return None


def fetch_bases_there(env: Env, agents: list[Agent]) -> list[str]:
    """Have each host of ``agents`` fetch their parent branch after a merge here (one call per host);
    warnings for those that could not (their next fetch brings it: spawn, pr file, complete)."""
    by_host: dict[str, list[str]] = {}
    for a in agents:
        if a.spec.get("base_ref"):
            by_host.setdefault(a.host, []).append(a.id)
    out: list[str] = []
    for name, ids in sorted(by_host.items()):
        try:
            out += call(env, get_host(env, name), "", {"fetch_base": ids}, list[str], timeout=120.0)
        except ExoError as exc:
            out.append(f"{', '.join(ids)} on host {name} will see the merge at their next fetch: {exc.message}")
    return out


def deliver_there(env: Env, agent: Agent, msg_id: int) -> str:
    """Have exo on the agent's host type a stored message into its pane; "queued" when it cannot now.

    The message is in the shared store already: whatever happens here, the agent's own hooks
    hand it over at its next turn.
    """
    try:
        host = host_of(env, agent)
        if host is None:
            return "queued"
        got: str = call(env, host, "", {"deliver": int(msg_id), "agent": agent.id}, Literal["typed", "queued"],
                        timeout=60.0)
    except ExoError:
        return "queued"
    return got


def _route_call(env: Env, operation: Any, kwargs: Mapping[str, Any]) -> Any:
    """The registry's router: the call run on its agent's host, or ``registry.NOT_ROUTED`` to run it here."""
    host = route(env, operation, kwargs)
    if host is None:
        return registry.NOT_ROUTED
    return forward(env, host, operation.name, kwargs)


registry.ROUTER = _route_call
