"""exo on several machines: the configured hosts, and the operations that run on an agent's host.

Every agent records the host it runs on. An operation on an agent of another host (``read``,
``send``'s delivery, ``attach``, ``kill``, ``diff``, ``complete``, liveness) is carried out by
exo on that host, over ssh (``adapters.ssh``): the request, the caller's proof and any secret
go on the remote exo's stdin, the remote exo proves the caller against the shared store and
runs the very same operation, and its answer comes back as the operation's own result (or
the same error). ``answer`` is the remote side (``exo host-call``).
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from exo_cli.errors import ExoError, InvalidInput, NotFound, StateError
from exo_cli.records import RETIRED_SEP, ROOT, UNREACHABLE, Agent, to_jsonable
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.adapters.ssh import Host
    from exo_cli.env import Env
    from exo_cli.ops.spawn.result import SpawnResult

PROTOCOL = 1
# Variables an agent CLI needs that a remote agent gets from its spawner (besides [hosts.NAME] env).
AGENT_SECRETS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL",
                 "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "GEMINI_API_KEY", "GOOGLE_API_KEY",
                 "GOOGLE_GEMINI_BASE_URL", "GOOGLE_CLOUD_PROJECT", "OPENAI_API_KEY", "OPENAI_BASE_URL")
# The variables that prove who calls (they travel so the remote exo checks the caller itself).
PROOF_VARS = ("EXO_AGENT", "EXO_AGENT_PROOF")
FORWARDED = "_exo_forwarded"  # set on an Env serving another host's request: it never forwards again


# --------------------------------------------------------------------------- configuration


def configured(env: Env) -> dict[str, Host]:
    """The ``[hosts.NAME]`` entries, resolved (ssh client, master folder, exo command)."""
    from exo_cli.adapters.ssh import Host, split_command

    table = env.config.get("hosts") or {}
    if not table:
        return {}
    ssh = split_command(env.environ.get("EXO_SSH_COMMAND") or env.config.get("ssh.command"))
    persist = int(env.config.get("ssh.persist"))
    control = str(env.runtime_dir)
    return {name: Host(name=name, dest=entry["ssh"], path=entry["path"],
                       exo=split_command(entry.get("exo") or "exo"), ssh=ssh, control_dir=control, persist=persist,
                       env=tuple(entry.get("env") or ())) for name, entry in sorted(table.items())}


def get_host(env: Env, name: str) -> Host:
    """The configured host ``name``; NotFound (naming the configured ones) when there is none."""
    hosts = configured(env)
    if name in hosts:
        return hosts[name]
    known = ", ".join(hosts) or "none"
    raise NotFound(f"No host named {name!r} in the configuration (configured: {known})",
                   hint="Add it as [hosts.NAME] with ssh and path in exo.toml or your user config.", host=name)


def is_local(env: Env, agent: Agent) -> bool:
    """Whether the agent runs on this machine (records made before hosts always do)."""
    return agent.host in ("", env.host_name)


def host_of(env: Env, agent: Agent) -> Host | None:
    """The host to reach the agent on, or None when it runs here.

    StateError when the agent runs on a host this machine's configuration does not name, or
    when this call itself came from another host (a request is never passed on again).
    """
    if is_local(env, agent):
        return None
    if env.__dict__.get(FORWARDED):
        raise StateError(f"Agent {agent.id} runs on host {agent.host}, not on this host ({env.host_name})",
                         hint="Check that [hosts] names each machine the way its own clone knows itself "
                         "(the clone's .git/exo/host-name, or EXO_HOST).", agent=agent.id, host=agent.host)
    hosts = configured(env)
    if agent.host not in hosts:
        raise StateError(f"Agent {agent.id} runs on host {agent.host}, which this machine's configuration does not "
                         "name", hint=f"Add [hosts.{agent.host}] (ssh and path) to reach it from here, or run exo on "
                         f"{agent.host}.", agent=agent.id, host=agent.host)
    return hosts[agent.host]


def shared_store(env: Env) -> bool:
    return bool(env.store_url)


def agent_for(env: Env, ref: Any) -> Agent | None:
    """The agent a parameter names (id, then name, then bead), when the store has it; else None."""
    if not isinstance(ref, str) or not ref or ref == ROOT or RETIRED_SEP in ref:
        return None
    try:
        found = env.store.agent(ref)
        if found is not None:
            return found
        agents = [a for a in env.store.agents() if a.id != ROOT and not a.retired]
    except ExoError:
        return None
    for attr in ("name", "bead"):
        hits = [a for a in agents if getattr(a, attr) == ref]
        if hits:
            live = [a for a in hits if a.live] or hits
            return max(live, key=lambda a: a.created_at)
    return None


# --------------------------------------------------------------------------- the calling side


def request(env: Env, host: Host, operation: str, args: Mapping[str, Any], *,
            secrets: Mapping[str, str] | None = None, via: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The request that runs ``operation`` with ``args`` on ``host`` for this caller."""
    carried: dict[str, str] = {}
    if not env.caller.is_human:
        for var in PROOF_VARS:
            if not env.environ.get(var):
                raise StateError(f"{env.caller.agent_id} cannot act on host {host.name} without its proof",
                                 hint="Run exo from the agent's own session (its pane, hooks or MCP server).",
                                 host=host.name)
            carried[var] = env.environ[var]
    carried.update(secrets or {})
    from exo_cli.adapters.store import pointed_team

    team = pointed_team(env.state_path) or getattr(env.store, "repo", None)
    return {"v": PROTOCOL, "op": operation, "args": to_jsonable(dict(args)), "as_host": host.name,
            "from_host": env.host_name, "store": {"url": env.store_url, "team": team}, "env": carried,
            **({"via": dict(via)} if via else {})}


def call(env: Env, host: Host, operation: str, args: Mapping[str, Any], *,
         secrets: Mapping[str, str] | None = None, timeout: float | None = None,
         via: Mapping[str, Any] | None = None) -> Any:
    """Run ``operation`` on ``host``; its JSON result, or the very error it raised there."""
    from exo_cli.adapters.ssh import DEFAULT_TIMEOUT
    from exo_cli.wire import error_from

    if not shared_store(env):
        raise StateError(f"Reaching host {host.name} needs a store both hosts share: this repository keeps its "
                         "state in SQLite", hint="Move it to PostgreSQL first: exo store migrate --to postgresql://...",
                         host=host.name)
    answer = host.call(request(env, host, operation, args, secrets=secrets, via=via),
                       timeout=timeout if timeout is not None else DEFAULT_TIMEOUT)
    if not answer.get("ok"):
        raise error_from(answer.get("error"), host=host.name)
    return answer.get("result")


def forward(env: Env, host: Host, operation: str, args: Mapping[str, Any], *,
            secrets: Mapping[str, str] | None = None, via: Mapping[str, Any] | None = None) -> Any:
    """Run the registered operation on ``host`` and return its result as this side's result class."""
    from exo_cli.registry import get
    from exo_cli.wire import from_jsonable

    spec = get(operation)
    timeout = None
    if spec.blocking:  # a blocking operation's own timeout, plus time for the trip
        raw = args.get("timeout")
        timeout = float(raw) + 60.0 if isinstance(raw, int | float) and not isinstance(raw, bool) else 3600.0
    result = call(env, host, operation, args, secrets=secrets, timeout=timeout, via=via)
    return from_jsonable(spec.result_type(), result)


def route(env: Env, operation: Any, kwargs: Mapping[str, Any]) -> tuple[Host | None, Any]:
    """Where a call of ``operation`` runs: (None, None) here, else (host, the agent it is about).

    Only operations that name the agent they act on (``Op.on_host``) travel, and only when the
    state is in a shared store (with SQLite every agent runs here).
    """
    param = operation.on_host
    if not param or env.__dict__.get(FORWARDED) or not shared_store(env):
        return None, None
    ref = kwargs.get(param)
    refs = [ref] if isinstance(ref, str) else list(ref) if isinstance(ref, list | tuple) else []
    agents = [a for a in (agent_for(env, r) for r in refs) if a is not None]
    remote = {a.host for a in agents if not is_local(env, a)}
    if not remote:
        return None, None
    if len(remote) > 1 or len(agents) != len(remote) and any(is_local(env, a) for a in agents):
        raise InvalidInput(f"{operation.cli or operation.name} acts on agents of one host per call; these run on "
                           f"{', '.join(sorted({a.host or env.host_name for a in agents}))}",
                           hint="Call it once per host.", field=param)
    return host_of(env, agents[0]), agents[0]


def secrets_for(env: Env, host: Host) -> dict[str, str]:
    """The variables a remote agent gets from its spawner: the agent CLIs' keys and ``[hosts.NAME] env``."""
    from exo_cli.adapters.agents.claude import restore_api_key

    source = dict(env.environ)
    restore_api_key(source)
    out = {k: source[k] for k in AGENT_SECRETS if source.get(k)}
    for pattern in host.env:
        for k, v in source.items():
            if fnmatch.fnmatchcase(k, pattern) and not k.startswith("EXO_"):
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
    agents need travel on ssh's stdin.
    """
    from exo_cli.adapters.git import Git
    from exo_cli.errors import UsageError
    from exo_cli.ops.spawn.plan import caller_context

    host = get_host(env, name)
    for key, why in _NOT_WITH_HOST.items():
        if args.get(key):
            raise UsageError(f"--{key.replace('_', '-')} cannot go with --host: {why}", field=key)
    if not shared_store(env):
        raise StateError(f"Spawning on host {host.name} needs a store both hosts share: this repository keeps its "
                         "state in SQLite", hint="Move it to PostgreSQL first: exo store migrate --to postgresql://...",
                         host=host.name)
    info = caller_context(env, from_branch=args.get("from_branch"), no_worktree=False)
    branch, start = info["parent_branch"], info["base"] or info["parent_branch"]
    if not branch:
        raise StateError("Cannot spawn on another host from a detached HEAD: there is no branch to share",
                         hint="Check out a branch (or pass --from BRANCH).")
    git = Git(env.repo.root)
    remote = str(env.config.get("forge.remote"))
    for b in dict.fromkeys([start, branch]):
        if not git.ref_exists(f"refs/heads/{b}"):
            raise InvalidInput(f"--from {b!r} with --host must name a branch: it reaches the other host through "
                               f"{remote}", field="from_branch")
        pushed = git.push_as_is(remote, b)
        if not pushed.ok:
            from exo_cli.validate import visible

            raise StateError(f"Cannot push {b} to {remote} for host {host.name}: "
                             f"{visible(pushed.stderr.strip().splitlines()[-1] if pushed.stderr.strip() else 'failed')}",
                             hint=f"Bring {b} up to date with {remote}/{b} (git pull), then spawn again.", branch=b)
    rest = {k: v for k, v in args.items() if k not in _NOT_WITH_HOST and k != "from_branch" and v not in (None, [], False)}
    via = {"base_branch": branch, "start": start, "from_host": env.host_name}
    result: SpawnResult = forward(env, host, "spawn", rest, secrets=secrets_for(env, host), via=via)
    return result


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
            seen = call(env, host, "", {"refresh": [a.id for a in group]}, timeout=60.0)
        except ExoError as exc:
            why = exc.message
            for a in group:
                out[a.id] = a._replace(status=UNREACHABLE, status_reason=why[:300])
            return
        from exo_cli.wire import from_jsonable

        for raw in seen or []:
            rec = from_jsonable(Agent, raw)
            out[rec.id] = rec

    if len(by_host) == 1:
        [(name, group)] = by_host.items()
        one(name, group)
        return out
    import threading

    threads = [threading.Thread(target=one, args=item, daemon=True) for item in by_host.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
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


def deliver_there(env: Env, agent: Agent, msg_id: int) -> str:
    """Have exo on the agent's host type a stored message into its pane; "queued" when it cannot now.

    The message is in the shared store already: whatever happens here, the agent's own hooks
    hand it over at its next turn.
    """
    try:
        host = host_of(env, agent)
        if host is None:
            return "queued"
        got = call(env, host, "", {"deliver": int(msg_id), "agent": agent.id}, timeout=60.0)
    except ExoError:
        return "queued"
    return str(got) if isinstance(got, str) else "queued"


# --------------------------------------------------------------------------- exo hosts


@dataclass(frozen=True)
class HostView:
    """One configured host as seen from here."""

    name: str
    ssh: str
    path: str
    reachable: bool
    version: str | None = None
    host_name: str | None = None  # how that clone knows itself
    store: str | None = None  # the store that clone uses ("sqlite" or a URL)
    same_store: bool | None = None
    origin: str | None = None
    same_origin: bool | None = None
    compatible: bool | None = None  # its exo speaks this exo's protocol
    agents: int = 0  # agents recorded on it
    error: str | None = None


@dataclass(frozen=True)
class HostsResult:
    this_host: str
    hosts: list[HostView]


def probe(env: Env, host: Host) -> HostView:
    """Reach ``host`` and compare its clone with this one (origin, store, version)."""
    from exo_cli import __version__
    from exo_cli.adapters.git import Git

    try:
        mine = Git(env.repo.root).remote_url(str(env.config.get("forge.remote")))
    except ExoError:
        mine = None
    agents = 0
    if env.has_state():
        agents = sum(1 for a in env.store.agents() if a.host == host.name and a.id != ROOT and not a.retired)
    base: dict[str, Any] = {"name": host.name, "ssh": host.dest, "path": host.path, "agents": agents}
    try:
        proc = host.run(["host-call"], stdin=json.dumps({"v": PROTOCOL, "op": "", "args": {"hello": True}}) + "\n",
                        timeout=60.0)
        line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{")), "")
        answer = json.loads(line) if line else {}
    except ExoError as exc:
        return HostView(**base, reachable=False, error=exc.message)
    except ValueError:
        answer = {}
    if not answer.get("ok"):
        err = answer.get("error") or {}
        why = err.get("message") if isinstance(err, dict) else None
        return HostView(**base, reachable=True, error=why or f"exo did not answer there (exit status {proc.returncode}): "
                        + (proc.stderr.strip().splitlines() or [""])[-1][:300])
    hello = answer.get("result") or {}
    theirs_store = hello.get("store") or "sqlite"
    ours = env.store_url or "sqlite"
    same_store = theirs_store == ours and (hello.get("team") in (None, _team(env)))
    origin = hello.get("origin")
    same_origin = None if not (mine and origin) else _same_remote(mine, origin)
    problems = []
    if hello.get("protocol") != PROTOCOL:
        problems.append(f"exo {hello.get('version')} there speaks another protocol than exo {__version__} here")
    if theirs_store != "sqlite" and not same_store:
        problems.append(f"its clone uses another store ({theirs_store})")
    if same_origin is False:
        problems.append(f"its clone's origin ({origin}) is not this clone's ({mine})")
    if hello.get("error"):
        problems.append(str(hello["error"]))
    return HostView(**base, reachable=True, version=hello.get("version"), host_name=hello.get("host_name"),
                    store=theirs_store, same_store=same_store, origin=origin, same_origin=same_origin,
                    compatible=hello.get("protocol") == PROTOCOL, error="; ".join(problems) or None)


def _team(env: Env) -> str | None:
    from exo_cli.adapters.store import pointed_team

    if not env.store_url:
        return None
    return pointed_team(env.state_path) or getattr(env.store, "repo", None)


def _same_remote(a: str, b: str) -> bool:
    def norm(url: str) -> str:
        url = url.strip().rstrip("/")
        url = url[:-4] if url.endswith(".git") else url
        return os.path.normpath(url) if url.startswith("/") else url

    return norm(a) == norm(b)


@op(
    "hosts",
    cli="hosts",
    tools=["list_hosts"],
    roles=("tl",),
    read_only=True,
    idempotent=True,
    help={"name": "Only these hosts (default: every configured host)."},
)
def hosts(env: Env, *, name: list[str] | None = None) -> HostsResult:
    """List the configured hosts with reachability, exo version and store.

    Each `[hosts.NAME]` is reached over ssh (one shared connection per host) and its clone is
    compared with this one: the same origin, the same store, an exo that speaks the same
    protocol. A host that cannot be reached is listed with the reason, never an error.
    """
    table = configured(env)
    wanted = list(name or table)
    for n in wanted:
        get_host(env, n)
    views: dict[str, HostView] = {}

    def one(n: str) -> None:
        views[n] = probe(env, table[n])

    import threading

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in wanted]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return HostsResult(this_host=env.host_name, hosts=[views[n] for n in wanted])


# --------------------------------------------------------------------------- the answering side


def answer(raw: str, *, cwd: str, environ: Mapping[str, str]) -> tuple[dict[str, Any], int]:
    """Serve one request from another host (``exo host-call``): the JSON answer and the exit status."""
    try:
        req = json.loads(raw)
        if not isinstance(req, dict) or not isinstance(req.get("args", {}), dict):
            raise ValueError("not an object")
    except ValueError as exc:
        err = InvalidInput(f"A host call must be one JSON object on stdin: {exc}")
        return {"ok": False, "error": err.to_dict()["error"]}, err.exit_code
    try:
        result = _serve(req, cwd=cwd, environ=environ)
    except ExoError as exc:
        return {"ok": False, "error": exc.to_dict()["error"]}, exc.exit_code
    return {"ok": True, "result": to_jsonable(result)}, 0


def _serve(req: dict[str, Any], *, cwd: str, environ: Mapping[str, str]) -> Any:
    from exo_cli import __version__
    from exo_cli.env import Env

    args = dict(req.get("args") or {})
    if req.get("op") == "" and args.get("hello"):
        return _hello(Env(cwd, environ), __version__)
    if req.get("v") != PROTOCOL:
        raise StateError(f"exo {__version__} here speaks host protocol {PROTOCOL}, the caller {req.get('v')!r}",
                         hint="Install the same exo version on every host.", protocol=PROTOCOL)
    name = str(req.get("as_host") or "")
    extra = req.get("env") or {}
    if not isinstance(extra, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in extra.items()):
        raise InvalidInput("A host call's env must map names to strings")
    merged = {**environ, **extra, "EXO_HOST": name} if name else {**environ, **extra}
    probe_env = Env(cwd, {k: v for k, v in merged.items() if k not in PROOF_VARS})
    _join(probe_env, req.get("store") or {}, name)
    env = Env(cwd, merged)
    env.__dict__[FORWARDED] = True
    if req.get("op") == "spawn" and isinstance(req.get("via"), dict):
        env.via_host = _fetch_parent(env, req["via"])
    if req.get("op") == "":
        ids = args.get("refresh")
        if isinstance(ids, list):
            return _refresh_here(env, [str(i) for i in ids])
        if isinstance(args.get("deliver"), int) and isinstance(args.get("agent"), str):
            return _deliver_here(env, args["deliver"], args["agent"])
        raise InvalidInput("Unknown host request")
    from exo_cli.registry import get, invoke

    operation = str(req.get("op"))
    try:
        get(operation)
    except KeyError:
        raise NotFound(f"exo {__version__} on this host has no operation {operation!r}", op=operation) from None
    return invoke(operation, env, **args)


def _join(env: Env, store: Mapping[str, Any], name: str) -> None:
    """Make this clone use the caller's shared store (as the caller's team) and know its own host name."""
    from exo_cli.adapters.files import atomic_write
    from exo_cli.adapters.store import has_state, point_to, pointed_team, pointed_url, repo_identity
    from exo_cli.env import HOST_NAME_FILE

    url, team = store.get("url"), store.get("team")
    state = env.state_path
    if url:
        pointed = pointed_url(state)
        if pointed is None:
            if has_state(state):
                raise StateError(f"This clone ({env.repo.root}) keeps exo state of its own in SQLite, so it cannot join "
                                 f"the team in {url}", hint="Move it first (exo store migrate there), or use another "
                                 "clone for [hosts] path.", store=url)
            point_to(env.state_dir, url, team)
        elif pointed != url:
            raise StateError(f"This clone ({env.repo.root}) keeps its exo state in {pointed}, not in the caller's "
                             f"store {url}", hint="Point [hosts] path at a clone of the same team.", store=pointed)
        elif team and (pointed_team(state) or repo_identity(state)) != team:
            raise StateError(f"This clone ({env.repo.root}) keeps a team of its own in {url}",
                             hint="Point [hosts] path at another clone of the repository.", store=url)
    if name:
        path = state / HOST_NAME_FILE
        try:
            known = path.read_text().strip()
        except OSError:
            known = ""
        if known and known != name:
            raise StateError(f"This clone knows itself as host {known!r}, not {name!r}",
                             hint=f"Name it {known} in [hosts], or remove {path}.", host=known)
        if not known:
            atomic_write(env.state_dir / HOST_NAME_FILE, name + "\n", mode=0o600)


def _fetch_parent(env: Env, via: Mapping[str, Any]) -> dict[str, Any]:
    """Fetch the parent's branch (and the start branch) from the shared remote: what a spawn here starts from."""
    from exo_cli.adapters.git import Git
    from exo_cli.validate import check_branch, visible

    branch, start = str(via.get("base_branch") or ""), str(via.get("start") or via.get("base_branch") or "")
    for b in dict.fromkeys([start, branch]):
        check_branch(b, "parent branch")
    remote = str(env.config.get("forge.remote"))
    git = Git(env.repo.root)
    for b in dict.fromkeys([start, branch]):
        got = git.fetch(remote, f"+refs/heads/{b}:refs/remotes/{remote}/{b}")
        if not got.ok:
            raise StateError(f"Cannot fetch {b} from {remote}: "
                             f"{visible(got.stderr.strip().splitlines()[-1] if got.stderr.strip() else 'failed')}",
                             hint=f"Check that this clone's {remote} is the shared remote.", branch=b)
    return {"base_branch": branch, "base_ref": f"refs/remotes/{remote}/{start}", "from_host": via.get("from_host")}


def fetch_base(env: Env, agent: Agent) -> str | None:
    """Fetch the agent's parent branch from the shared remote into its ``base_ref``; a warning when it cannot."""
    from exo_cli.adapters.git import Git
    from exo_cli.validate import visible

    ref, base = agent.spec.get("base_ref"), agent.base_branch
    if not isinstance(ref, str) or not base or not ref.startswith("refs/remotes/"):
        return None
    remote = ref[len("refs/remotes/"):].split("/", 1)[0]
    got = Git(env.repo.root).fetch(remote, f"+refs/heads/{base}:{ref}")
    if got.ok:
        return None
    return f"Cannot fetch {base} from {remote}: " + visible((got.stderr.strip().splitlines() or ["failed"])[-1])


def push_head(env: Env, head: str) -> None:
    """Push an agent's branch to the shared remote (its own branch: forced, it may have been rebased)."""
    from exo_cli.adapters.git import Git
    from exo_cli.validate import visible

    remote = str(env.config.get("forge.remote"))
    got = Git(env.repo.root).push_as_is(remote, head, force=True)
    if not got.ok:
        raise StateError(f"Cannot push {head} to {remote}: "
                         + visible((got.stderr.strip().splitlines() or ["failed"])[-1]),
                         hint=f"Your parent works on another host and merges from {remote}: check that this clone "
                         "can push there.", branch=head)


def fetch_head(env: Env, head: str) -> str:
    """Fetch a PR's branch pushed by an agent of another host; the ref it is now under here."""
    from exo_cli.adapters.git import Git
    from exo_cli.validate import visible

    remote = str(env.config.get("forge.remote"))
    ref = f"refs/remotes/{remote}/{head}"
    got = Git(env.repo.root).fetch(remote, f"+refs/heads/{head}:{ref}")
    if not got.ok:
        raise StateError(f"Cannot fetch {head} from {remote}: "
                         + visible((got.stderr.strip().splitlines() or ["failed"])[-1]),
                         hint="Its author works on another host and pushes it when it files the PR: ask it to "
                         "file again.", branch=head)
    return ref


def push_base(env: Env, base: str) -> list[str]:
    """Push a base branch after a merge so other hosts see it; warnings when the remote refuses."""
    from exo_cli.adapters.git import Git
    from exo_cli.validate import visible

    remote = str(env.config.get("forge.remote"))
    got = Git(env.repo.root).push_as_is(remote, base)
    if got.ok:
        return []
    return [f"{base} was merged here but not pushed to {remote}: "
            + visible((got.stderr.strip().splitlines() or ["failed"])[-1])
            + f"; agents on other hosts see the merge once {base} is pushed"]


def unpush(env: Env, branch: str, sha: str) -> list[str]:
    """Delete an agent's branch from the shared remote after ``complete`` (only while it is at ``sha``)."""
    from exo_cli.adapters.git import Git
    from exo_cli.validate import visible

    remote = str(env.config.get("forge.remote"))
    git = Git(env.repo.root)
    if not git.ref_exists(f"refs/remotes/{remote}/{branch}"):
        return []
    got = git.push_as_is(remote, branch, delete_at=sha)
    if got.ok:
        return []
    return [f"branch {branch} is still on {remote}: " + visible((got.stderr.strip().splitlines() or ["failed"])[-1])]


def _hello(env: Env, version: str) -> dict[str, Any]:
    from exo_cli.adapters.git import Git
    from exo_cli.adapters.store import pointed_team, pointed_url

    out: dict[str, Any] = {"protocol": PROTOCOL, "version": version, "python": sys.version.split()[0]}
    try:
        state = env.state_path
        out["store"] = pointed_url(state) or ("sqlite" if env.has_state() else None)
        out["team"] = pointed_team(state)
        out["host_name"] = env.host_name
        out["origin"] = Git(env.repo.root).remote_url(str(env.config.get("forge.remote")))
    except ExoError as exc:
        out["error"] = exc.message
    return out


def _deliver_here(env: Env, msg_id: int, agent_id: str) -> str:
    """Type message ``msg_id`` into the pane of this host's agent ``agent_id`` if it rests (as ``send`` does here)."""
    from exo_cli.ops.delivery import deliver
    from exo_cli.records import AT_REST

    env.caller  # noqa: B018 - the caller is proven (its proof came with the request) before anything is typed
    agent = env.store.agent(agent_id)
    msg = env.store.message(msg_id) if agent is not None else None
    if agent is None or msg is None or msg.recipient != agent.id or not is_local(env, agent):
        raise NotFound(f"No message {msg_id} for agent {agent_id} on this host", agent=agent_id)
    if agent.status not in AT_REST or not agent.location:
        return "queued"
    return deliver(env, msg_id, agent)


def _refresh_here(env: Env, ids: list[str]) -> list[Agent]:
    from exo_cli.ops import agentctl

    agents = [a for a in (env.store.agent(i) for i in ids) if a is not None and is_local(env, a)]
    return agentctl.refresh(env, agents)
