"""exo on several machines: the configured hosts, which agent runs where, and ``exo hosts``.

Every agent records the host it runs on (``Agent.host``; this machine is ``Env.host_name``).
An operation on an agent of another host is carried out by exo on that host over ssh
(``ops.remote`` sends it, ``ops.hostcall`` answers it there); the branches travel through
the shared git remote (``ops.hostgit``).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from exo_cli.errors import ExoError, NotFound, StateError
from exo_cli.lite import NamedTuple
from exo_cli.records import RETIRED_SEP, ROOT, Agent, pick_agent
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.adapters.ssh import Host
    from exo_cli.env import Env

T = TypeVar("T")
PROTOCOL = 1
# Variables an agent CLI needs that a remote agent gets from its spawner (besides [hosts.NAME] env).
AGENT_SECRETS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL",
                 "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "GEMINI_API_KEY", "GOOGLE_API_KEY",
                 "GOOGLE_GEMINI_BASE_URL", "GOOGLE_CLOUD_PROJECT", "OPENAI_API_KEY", "OPENAI_BASE_URL")
# The agent settings a spawn on another host carries from the spawning side's configuration (with the
# backend and skip_permissions, as arguments): they override the host's own for that spawn and stay
# with its agents (their record's ``settings``).
AGENT_SETTINGS = ("agent.command", "agent.args", "agent.idle_quiet_seconds", "agent.idle_pattern",
                  "agent.start_timeout", "demo.script", "budget.agent_usd", "budget.agent_tokens")
# The variables that prove who calls (they travel so the remote exo checks the caller itself).
PROOF_VARS = ("EXO_AGENT", "EXO_AGENT_PROOF")
FORWARDED = "_exo_forwarded"  # set on an Env serving another host's request: it never forwards again
# Variables that steer exo or the remote process itself (where its state, config, programs and home are):
# a request never carries them, whatever [hosts.NAME] env matches.
_NEVER_CARRIED = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "TMPDIR", "IFS", "ENV",
                            "BASH_ENV", "ZDOTDIR", "NODE_OPTIONS", "PERL5LIB", "RUBYLIB", "TERM"})
_NEVER_CARRIED_PREFIXES = ("EXO_", "LD_", "PYTHON", "GIT_", "TMUX", "XDG_", "SSH_", "ZELLIJ")
# What the ssh client itself may use (Kerberos, X11), kept in its environment whatever [hosts.NAME] env says.
_SSH_NEEDS = ("KRB5", "DISPLAY", "XAUTHORITY")


def carried(name: str) -> bool:
    """Whether the variable ``name`` may travel in a request to another host's exo (the caller's proof,
    and an agent's keys); never one that would steer exo or the process there."""
    if name in PROOF_VARS:
        return True
    return name not in _NEVER_CARRIED and not name.startswith(_NEVER_CARRIED_PREFIXES)


# --------------------------------------------------------------------------- configuration


def configured(env: Env) -> dict[str, Host]:
    """The ``[hosts.NAME]`` entries, resolved (ssh client, master folder, exo command)."""
    from exo_cli.adapters.ssh import Host, split_command

    table = env.config.get("hosts") or {}
    if not table:
        return {}
    ssh = split_command(env.config.get("ssh.command"))  # EXO_SSH_COMMAND is applied by the configuration
    persist = int(env.config.get("ssh.persist"))
    control = str(env.runtime_dir)
    # what ssh itself never gets: exo's own variables (an agent's proof and identity, a Claude agent's key
    # under exo's name) and what any host's agents get (never what ssh needs: PATH, HOME, SSH_AUTH_SOCK, ...)
    patterns = [p for entry in table.values() for p in entry.get("env") or ()]
    hide = ("EXO_*", *sorted(k for k in env.environ if k in AGENT_SECRETS or carried(k) and not k.startswith(
        _SSH_NEEDS) and any(fnmatch.fnmatchcase(k, p) for p in patterns)))
    return {name: Host(name=name, dest=entry["ssh"], path=entry["path"],
                       exo=split_command(entry.get("exo") or "exo"), ssh=ssh, control_dir=control, persist=persist,
                       env=tuple(entry.get("env") or ()), hide=hide) for name, entry in sorted(table.items())}


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
    return env.runs_here(agent)


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
    if not agent.host:
        raise StateError(f"Agent {agent.id} was recorded without a host, by the clone that started it; this clone "
                         "joined that team later and cannot reach it", hint="Run exo on the machine that started it.",
                         agent=agent.id)
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
        return env.store.agent(ref) or pick_agent([a for a in env.store.agents() if a.id != ROOT and not a.retired], ref)
    except ExoError:
        return None


def ask(host: Host, req: Mapping[str, Any], expect: Any, *, timeout: float | None = None) -> Any:
    """Send ``req`` to exo on ``host``; its result checked and built as ``expect``, or the error it answered.

    Every answer from another host goes through ``wire`` (its shape checked before anything
    here uses it): one that does not fit is an ExternalFailure naming the host.
    """
    from exo_cli import cancel
    from exo_cli.adapters.ssh import DEFAULT_TIMEOUT
    from exo_cli.wire import envelope, result_of

    got = host.call(req, timeout=timeout if timeout is not None else DEFAULT_TIMEOUT, cancelled=cancel.cancelled)
    answer = envelope(got.stdout, host=host.name, returncode=got.returncode, stderr=got.stderr)
    return result_of(answer, expect, host=host.name)


def in_parallel(fn: Callable[[T], None], items: Iterable[T]) -> None:
    """``fn`` on every item at once, one thread each (one ssh session per host), back when all are done."""
    import threading

    threads = [threading.Thread(target=fn, args=(item,), daemon=True) for item in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# --------------------------------------------------------------------------- exo hosts


class HostView(NamedTuple):
    """One configured host as seen from here.

    The result records of this module are NamedTuples (``exo_cli.lite``'s), not dataclasses: every
    ``exo status`` imports this module (``ops.remote`` routes it), and a dataclass costs several
    times more to define (see ``ops.status.AgentView``).
    """

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
    sandboxed: int = 0  # of those, the ones that run in bubblewrap
    error: str | None = None


class Hello(NamedTuple):
    """What exo on a host says of itself and its clone (the answer to a ``hello`` request)."""

    protocol: int
    version: str
    python: str | None = None
    store: str | None = None  # "sqlite", the store's URL, or None: no exo state there yet
    team: str | None = None
    host_name: str | None = None
    origin: str | None = None
    error: str | None = None


class HostsResult(NamedTuple):
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
    there = [a for a in env.store.agents() if a.host == host.name and a.id != ROOT and not a.retired] \
        if env.has_state() else []
    base: dict[str, Any] = {"name": host.name, "ssh": host.dest, "path": host.path, "agents": len(there),
                            "sandboxed": sum(1 for a in there if a.spec.get("sandboxed"))}
    try:
        hello: Hello = ask(host, {"v": PROTOCOL, "op": "", "args": {"hello": True}, "trust": dict(env.config.pins)}, Hello, timeout=60.0)
    except ExoError as exc:  # unreachable, no exo there, an answer that is no exo's, or exo's error there
        return HostView(**base, reachable=exc.data.get("reason") != "unreachable", error=exc.message)
    from exo_cli.adapters.store import same_store as same_db

    theirs_store = hello.store  # None: no exo state there yet (it joins this team at the first call)
    # the same database, and this team or none yet (a clone that only looked joins this team at the first call)
    same_store = None if theirs_store is None else (same_db(theirs_store, env.store_url)
                                                    and hello.team in (None, team(env)))
    origin = hello.origin
    same_origin = None if not (mine and origin) else _same_remote(mine, origin)
    problems = []
    if hello.protocol != PROTOCOL:
        problems.append(f"exo {hello.version} there speaks another protocol than exo {__version__} here")
    if same_store is False:
        problems.append("its clone keeps a team of its own in this store: it cannot join this team"
                        if same_db(theirs_store, env.store_url) else
                        f"its clone keeps its state in another store ({theirs_store}): it cannot join this team")
    if same_origin is False:
        problems.append(f"its clone's origin ({origin}) is not this clone's ({mine})")
    if hello.error:
        problems.append(hello.error)
    return HostView(**base, reachable=True, version=hello.version, host_name=hello.host_name, store=theirs_store,
                    same_store=same_store, origin=origin, same_origin=same_origin,
                    compatible=hello.protocol == PROTOCOL, error="; ".join(problems) or None)


def team(env: Env) -> str | None:
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

    in_parallel(one, wanted)
    return HostsResult(this_host=env.host_name, hosts=[views[n] for n in wanted])


