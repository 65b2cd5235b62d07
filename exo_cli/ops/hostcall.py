"""The answering side of another host's request (``exo host-call``): prove, join, run, answer.

The caller's exo sends one JSON request on stdin (``ops.remote``): this clone joins the
caller's shared store (as the caller's team) and learns its own host name on the first
call, the caller is proven by the proof that came with the request, and the operation runs
through the registry as any other call; its result or error goes back as one JSON line.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from exo_cli.errors import ExoError, InvalidInput, NotFound, StateError
from exo_cli.ops.hostgit import fetch_parent
from exo_cli.ops.hosts import AGENT_SETTINGS, FORWARDED, PROOF_VARS, PROTOCOL, Hello, carried, is_local
from exo_cli.records import Agent, to_jsonable

if TYPE_CHECKING:
    from exo_cli.env import Env

# --------------------------------------------------------------------------- the answering side


def answer(raw: str, *, cwd: str, environ: Mapping[str, str],
           gone: threading.Event | None = None) -> tuple[dict[str, Any], int]:
    """Serve one request from another host (``exo host-call``): the JSON answer and the exit status.

    ``gone`` is set when the caller goes away before the answer (the front end watches the
    rest of stdin when the request says ``hold``): the operation sees it as ``cancel.cancelled()``
    and stops before anything it cannot undo (``exo complete`` removes nothing then).
    """
    from exo_cli import cancel

    try:
        req = json.loads(raw)
        if not isinstance(req, dict) or not isinstance(req.get("args", {}), dict):
            raise ValueError("not an object")
    except ValueError as exc:
        err = InvalidInput(f"A host call must be one JSON object on stdin: {exc}")
        return {"ok": False, "error": err.to_dict()["error"]}, err.exit_code
    try:
        with cancel.scope(gone or threading.Event()):
            result = _serve(req, cwd=cwd, environ=environ)
    except ExoError as exc:
        return {"ok": False, "error": exc.to_dict()["error"]}, exc.exit_code
    return {"ok": True, "result": to_jsonable(result)}, 0


def _serve(req: dict[str, Any], *, cwd: str, environ: Mapping[str, str]) -> Any:
    from exo_cli import __version__
    from exo_cli.env import Env

    args = dict(req.get("args") or {})
    if req.get("op") == "" and args.get("hello"):
        return _hello(_trusting(Env(cwd, environ), _pins(req)), __version__)
    if req.get("v") != PROTOCOL:
        theirs = f"protocol {req['v']}" if isinstance(req.get("v"), int) else "no protocol version exo knows"
        raise StateError(f"exo {__version__} here speaks host protocol {PROTOCOL}, the caller {theirs}",
                         hint="Install the same exo version on every host.", protocol=PROTOCOL)
    name, extra = _checked(req)
    pins = _pins(req)
    merged = {**environ, **extra, "EXO_HOST": name} if name else {**environ, **extra}
    # joined before anything opens the store: a store named by [store] url would otherwise be opened
    # (and pointed to) as a team of this clone's own
    probe = _trusting(Env(cwd, {k: v for k, v in merged.items() if k not in PROOF_VARS}), pins)
    _join(probe, req.get("store") or {})
    here = _trusting(Env(cwd, environ), pins)
    if not here.caller.is_human:  # over ssh nothing calls but the other host's exo (proven below, if an agent)
        raise StateError(f"exo host-call answers other hosts' exo over ssh; {here.caller.agent_id} is an agent "
                         "of this host", hint="Run the operation itself (exo read, exo kill, ...).",
                         caller=here.caller.agent_id)
    _pin_here(here, pins)
    if name:
        _learn_name(probe, name)
    via = req.get("via") if req.get("op") == "spawn" else None
    settings = _settings(via)
    env = _trusting(Env(cwd, merged, overrides=settings), pins)
    env.__dict__[FORWARDED] = True
    if via is not None:
        env.config  # noqa: B018 - a carried setting of the wrong type is InvalidInput naming it, before anything
        env.via_host = {**fetch_parent(env, via), "settings": settings}
    if req.get("op") == "":
        ids = args.get("refresh")
        if isinstance(ids, list) and all(isinstance(i, str) for i in ids):
            return _refresh_here(env, ids)
        fetch = args.get("fetch_base")
        if isinstance(fetch, list) and all(isinstance(i, str) for i in fetch):
            return _fetch_here(env, fetch)
        msg_id = args.get("deliver")
        if isinstance(msg_id, int) and not isinstance(msg_id, bool) and isinstance(args.get("agent"), str):
            return _deliver_here(env, msg_id, args["agent"])
        raise InvalidInput("Unknown host request")
    from exo_cli.registry import get, invoke
    from exo_cli.schema import check_call

    operation = str(req.get("op"))
    try:
        spec = get(operation)
    except KeyError:
        raise NotFound(f"exo {__version__} on this host has no operation {operation!r}", op=operation) from None
    return invoke(operation, env, **check_call(spec, args))


def _checked(req: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The request's host name for this clone and the variables it carries, checked (InvalidInput otherwise).

    A request carries the caller's proof and an agent's keys, never a variable that steers exo
    or this process (its state folder, store, configuration, programs or home).
    """
    import re

    from exo_cli.config import HOST_NAME

    name = req.get("as_host") or ""
    if not isinstance(name, str) or name and not re.fullmatch(HOST_NAME, name):
        raise InvalidInput("A host call's as_host must be a host name", field="as_host")
    for key in ("store", "via"):
        if req.get(key) is not None and not isinstance(req[key], dict):
            raise InvalidInput(f"A host call's {key} must be an object", field=key)
    store = req.get("store") or {}
    if not all(isinstance(store.get(k), str | None) for k in ("url", "team")):
        raise InvalidInput("A host call's store must name a url and a team", field="store")
    extra = req.get("env") or {}
    if not isinstance(extra, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in extra.items()):
        raise InvalidInput("A host call's env must map names to strings", field="env")
    refused = sorted(k for k in extra if not carried(k))
    if refused:
        raise InvalidInput(f"A host call cannot set {', '.join(refused)}", hint="A request carries the caller's "
                           "proof and the keys an agent needs, nothing that steers exo or this host.", field="env")
    return name, extra


def _pins(req: dict[str, Any]) -> dict[str, Any]:
    """The values the caller's human trusted (``exo trust`` there), checked: keys that need trust only."""
    from exo_cli.trust import needs_trust

    pins = req.get("trust") or {}
    if not isinstance(pins, dict) or not all(isinstance(k, str) and needs_trust(k) for k in pins):
        raise InvalidInput("A host call's trust must map keys that need trust to their values", field="trust")
    return pins


def _trusting(env: Env, pins: dict[str, Any]) -> Env:
    """``env`` trusting the caller's pins as well as this clone's own."""
    if pins:
        env.config.carry(pins)
    return env


def _pin_here(env: Env, pins: dict[str, Any]) -> None:
    """Record the caller's pins as this clone's (the human's trust, carried by its exo), so this host's broker
    and hooks trust what the call trusted; only once the caller is known to be no agent of this host."""
    from exo_cli.ops.trust import write_pins
    from exo_cli.trust import canonical, pins_path, read_pins

    if not pins:
        return
    root = env.repo.root
    path = pins_path(env.environ, root)
    own = read_pins(path)
    if any(k not in own or canonical(own[k]) != canonical(v) for k, v in pins.items()):
        write_pins(root, path, {**own, **pins})


def _settings(via: Any) -> dict[str, Any]:
    """The agent settings a spawn request carries from the spawning side (only ``AGENT_SETTINGS``)."""
    settings = via.get("settings") if isinstance(via, dict) else None
    if settings is None:
        return {}
    if not isinstance(settings, dict) or not set(settings) <= set(AGENT_SETTINGS):
        raise InvalidInput(f"A spawn request's settings may name only {', '.join(AGENT_SETTINGS)}", field="settings")
    return dict(settings)


def _join(env: Env, store: Mapping[str, Any]) -> None:
    """Make this clone use the caller's shared store, as the caller's team.

    A clone whose exo only looked so far (``[store] url`` in a committed exo.toml makes every
    clone point at the same database, each as a team of its own) joins: its own rows hold no
    agent, message or pull request. One with work of its own, or another store, is refused.
    """
    from exo_cli.adapters.store import has_state, point_to, pointed_url, same_store

    url, team = store.get("url"), store.get("team")
    state = env.state_path
    if url:
        mine = env.store_url  # where this clone keeps (or is configured to keep) its state; StateError on a conflict
        if mine is None and has_state(state):
            raise StateError(f"This clone ({env.repo.root}) keeps exo state of its own in SQLite, so it cannot join "
                             f"the team in {url}", hint="Move it first (exo store migrate there), or use another "
                             "clone for [hosts] path.", store=url)
        if mine is not None and not same_store(mine, url):
            raise StateError(f"This clone ({env.repo.root}) keeps its exo state in {mine}, not in the caller's "
                             f"store {url}", hint="Point [hosts] path at a clone of the same team, or give both "
                             "the same [store] url.", store=mine)
        own = team_of(env)
        if team and own is not None and own != team:
            raise StateError(f"This clone ({env.repo.root}) keeps a team of its own in {url}, with agents, messages "
                             "or pull requests", hint="Point [hosts] path at another clone of the repository.", store=url)
        if team and own is None or pointed_url(state) is None:
            point_to(env.state_dir, pointed_url(state) or url, team)


def _learn_name(env: Env, name: str) -> None:
    """Record the name the caller's configuration gives this clone's host (once; StateError when it differs)."""
    from exo_cli.adapters.files import atomic_write
    from exo_cli.env import HOST_NAME_FILE

    path = env.state_path / HOST_NAME_FILE
    try:
        known = path.read_text().strip()
    except OSError:
        known = ""
    if known and known != name:
        raise StateError(f"This clone knows itself as host {known!r}, not {name!r}",
                         hint=f"Name it {known} in [hosts], or remove {path}.", host=known)
    if not known:
        atomic_write(env.state_dir / HOST_NAME_FILE, name + "\n", mode=0o600)


def team_of(env: Env) -> str | None:
    """The team this clone's state belongs to in its shared store; None when it belongs to none yet.

    The team its store pointer names, else (a pointer without one) this clone's own when its
    rows hold any work; a clone that only looked belongs to none and joins the first caller's.
    """
    from exo_cli.adapters.store import holds_work, pointed_team, pointed_url, repo_identity

    state = env.state_path
    url = pointed_url(state)
    if url is None:
        return None
    own = repo_identity(state)
    return pointed_team(state) or (own if holds_work(url, own) else None)


def _hello(env: Env, version: str) -> Hello:
    """This clone as another host's ``exo hosts`` sees it (nothing is opened, created or pointed)."""
    from exo_cli.adapters.git import Git
    from exo_cli.adapters.store import has_state

    got: dict[str, Any] = {"protocol": PROTOCOL, "version": version, "python": sys.version.split()[0]}
    try:
        state = env.state_path
        got["store"] = env.store_url or ("sqlite" if has_state(state) else None)
        got["team"] = team_of(env) if env.store_url else None
        got["host_name"] = env.host_name
        got["origin"] = Git(env.repo.root).remote_url(str(env.config.get("forge.remote")))
    except ExoError as exc:
        got["error"] = exc.message
    return Hello(**got)


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


def _fetch_here(env: Env, ids: list[str]) -> list[str]:
    """Fetch the parent branch of this host's agents whose parent works elsewhere (a merge there moved it),
    so their next stop rebases onto it; the warnings of those that could not."""
    from exo_cli.ops.hostgit import fetch_base

    out: list[str] = []
    for agent in (env.store.agent(i) for i in ids):
        if agent is not None and is_local(env, agent):
            warning = fetch_base(env, agent)
            if warning:
                out.append(f"{agent.id}: {warning}")
    return out


def _refresh_here(env: Env, ids: list[str]) -> list[Agent]:
    from exo_cli.ops import agentctl

    agents = [a for a in (env.store.agent(i) for i in ids) if a is not None and is_local(env, a)]
    return agentctl.refresh(env, agents)

