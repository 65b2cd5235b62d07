"""The agents' lifecycle after spawn: kill, reap, attach, read (``exo doctor`` is in ``doctor.py``).

``kill`` stops processes only (worktrees, branches and records stay; status ``dead``);
``reap`` forgets dead agents and closes their windows (never touching a worktree); ``attach``
gives the command that shows an agent; ``read`` returns the tail of an agent's pane or log,
optionally only what is new since the reader's last read, or waiting for a pattern.
``reap`` remembers the worktrees it leaves behind (``reaped_worktrees``) for ``exo doctor``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exo_cli.errors import ExoError, InvalidInput, NotFound, StateError
from exo_cli.records import DEAD, DONE, LIVE_STATUSES, ROOT, Agent
from exo_cli.registry import op
from exo_cli.validate import check_name

if TYPE_CHECKING:
    from exo_cli.env import Env


def _get(env: Env, agent_id: str) -> Agent:
    check_name(agent_id, "agent name")  # an unsafe name is InvalidInput, not NotFound
    if agent_id == ROOT:
        raise StateError("The root cannot be killed: it is the human (or the lead) at the top of the tree",
                         hint="Kill its children one by one, or all of them with `exo kill <child>`.")
    rec = env.store.agent(agent_id) if env.has_state() else None
    if rec is None:
        raise NotFound(f"No agent named {agent_id!r}", hint="List agents with `exo agents`.", agent=agent_id)
    return rec


def descendants(agents: list[Agent], agent_id: str) -> list[Agent]:
    """``agent_id``'s descendants, deepest first."""
    children: dict[str, list[Agent]] = {}
    for a in agents:
        if a.parent:
            children.setdefault(a.parent, []).append(a)
    out: list[Agent] = []

    def walk(aid: str, seen: set[str]) -> None:
        for c in children.get(aid, []):
            if c.id in seen:
                continue
            seen.add(c.id)
            walk(c.id, seen)
            out.append(c)

    walk(agent_id, {agent_id})
    return out


def _in_subtree(agents: list[Agent], ancestor: str, agent_id: str) -> bool:
    by_id = {a.id: a for a in agents}
    cur = by_id.get(agent_id)
    hops = 0
    while cur is not None and hops < 1000:
        if cur.parent == ancestor:
            return True
        cur = by_id.get(cur.parent or "")
        hops += 1
    return False


# --------------------------------------------------------------------------- kill


@dataclass(frozen=True)
class KillResult:
    killed: list[str]
    already_dead: list[str]
    worktrees_kept: list[list[str]]


@op(
    "kill",
    cli="kill",
    tools=["kill"],
    roles=("tl",),
    destructive=True,
    idempotent=True,
    help={"agent": "The agent to stop, with all its descendants."},
)
def kill(env: Env, *, agent: str) -> KillResult:
    """Kill an agent and all its descendants; their worktrees are kept.

    Each process group gets SIGTERM, then SIGKILL after a grace period; panes stay readable
    (remain-on-exit) until `exo reap`. Records stay, with status dead; branches and worktrees
    are never touched. The root cannot be killed, and a team lead may only kill its own subtree.
    """
    from exo_cli.adapters.mux import Location
    from exo_cli.ops import agentctl

    target = _get(env, agent)
    everyone = current_agents(env)
    caller = env.caller
    if not caller.is_human and caller.agent_id != target.id and not _in_subtree(everyone, caller.agent_id, target.id):
        raise StateError(f"{target.id} is not in your subtree", hint="You may only kill agents you (or your children) spawned.",
                         agent=target.id, caller=caller.agent_id)
    killed: list[str] = []
    dead: list[str] = []
    kept: list[list[str]] = []
    for a in [*descendants(everyone, target.id), target]:
        a = env.store.agent(a.id) or a
        svc = a.spec.get("services_location") or {}
        if svc.get("mux"):
            with contextlib.suppress(ExoError, OSError):
                loc = Location.from_dict(svc)
                agentctl.mux_for(env, loc.mux).kill(loc, grace=2.0)
        if a.status == DONE:
            dead.append(a.id)
            continue
        was_alive = agentctl.stop_agent(env, a, reason="killed")
        (killed if was_alive or a.status in LIVE_STATUSES else dead).append(a.id)
        if a.worktree and a.spec.get("worktree_created"):
            kept.append([a.id, a.worktree])
    if target.parent:
        env.store.post("event", target.id, target.parent, f"[KILLED {target.id}] and {len(killed) - 1 if target.id in killed else len(killed)} descendant(s)",
                       data={"event": "killed", "agent": target.id, "killed": killed})
    release_runtime(env)
    return KillResult(killed=killed, already_dead=dead, worktrees_kept=kept)


# --------------------------------------------------------------------------- retire


def retire(env: Env, agent: Agent) -> str | None:
    """Keep a finished agent as history under ``<name>@<n>``, so that its name is free again.

    Its record, messages, events and PRs move to the new id (``exo agents --all`` lists it);
    what exo kept per agent for it (hook state, MCP readiness, bead snapshot, read cursors)
    is forgotten, so a new agent of that name starts fresh. Returns the new id, or None when
    the record is gone (or already retired).
    """
    from exo_cli.ops.tasks import SNAPSHOT_KEY, SYNCED_KEY
    from exo_cli.records import HOOK_STATE_KEY, MCP_READY_KEY, RETIRED_SEP

    if agent.retired or agent.id == ROOT:
        return None
    keys = [k.format(agent=agent.id) for k in (HOOK_STATE_KEY, MCP_READY_KEY, SNAPSHOT_KEY)]
    prefixes = [SYNCED_KEY.format(agent=agent.id, rel=""), _CURSOR.format(reader=agent.id, agent="")]
    stamp = int(agent.created_at or time.time())
    for n in range(100):
        new_id = f"{agent.id}{RETIRED_SEP}{stamp}" + (f".{n}" if n else "")
        if env.store.retire_agent(agent.id, new_id, forget_keys=keys, forget_prefixes=prefixes):
            return new_id
        if env.store.agent(agent.id) is None:
            return None
    return None


def release_runtime(env: Env) -> bool:
    """Remove the repository's runtime folder once no agent of it runs and nobody waits on a doorbell.

    Called when agents finish (``complete``, ``kill``, ``reap``). Checked under the lock a spawn
    takes to record a new agent, so a spawn either is seen here or makes the folder again.
    True when the folder is gone.
    """
    from exo_cli.adapters import worktree as wt
    from exo_cli.adapters.files import release_runtime_dir

    if not env.has_state():
        return False
    with wt.repo_lock(env.state_dir, "slots"):
        if any(a.status in LIVE_STATUSES for a in current_agents(env)):
            return False
        return release_runtime_dir(env.runtime_dir)


def current_agents(env: Env) -> list[Agent]:
    """The recorded agents that are not history (retired) nor the root."""
    return [a for a in env.store.agents() if a.id != ROOT and not a.retired] if env.has_state() else []


# --------------------------------------------------------------------------- reap


@dataclass(frozen=True)
class ReapResult:
    reaped: list[str]
    closed: list[str]
    kept: list[str]


REAPED_KEY = "reaped-worktrees"


def reaped_worktrees(env: Env) -> dict[str, Any]:
    """Worktrees of reaped agents, left for the human: realpath -> {agent, branch, at}."""
    with contextlib.suppress(ValueError, TypeError):
        data = json.loads(env.store.kv_get(REAPED_KEY) or "{}")
        if isinstance(data, dict):
            return data
    return {}


def remember_reaped(env: Env, path: str, info: dict[str, Any] | None) -> None:
    """Add (or with ``info`` None, drop) a reaped agent's worktree in the kv list doctor consults."""
    from exo_cli.adapters import worktree as wt

    with wt.repo_lock(env.state_dir, "slots"):
        data = reaped_worktrees(env)
        key = os.path.realpath(path)
        if info is None:
            data.pop(key, None)
        else:
            data[key] = info
        env.store.kv_set(REAPED_KEY, json.dumps(data))


@op("reap", cli="reap", roles=("human",), destructive=True, idempotent=True, help={})
def reap(env: Env) -> ReapResult:
    """Clear finished agents (dead or done) and close their windows; worktrees are never touched.

    Liveness is checked first (one batched multiplexer call), so an agent whose pane or
    process is gone counts as dead. Files exo wrote outside its state for the agent (trust
    entries, a project settings file it replaced) are restored. Each cleared agent is kept as
    history (`exo agents --all`) and its name is free again; a worktree it leaves behind is
    remembered for `exo doctor`.
    """
    from exo_cli.adapters import agents as backends
    from exo_cli.ops import agentctl

    if not env.has_state():
        return ReapResult([], [], [])
    agents = agentctl.refresh(env, current_agents(env))
    done = agentctl.states(env, [a for a in agents if a.status == DONE])  # one listing call per kind
    reaped: list[str] = []
    closed: list[str] = []
    kept: list[str] = []
    for a in agents:
        if a.status not in (DEAD, DONE):
            continue
        running = done.get(a.id)
        if running is not None and running.alive:
            kept.append(a.id)  # marked done by itself and still finishing its turn
            continue
        from exo_cli.ops.spawn.recovery import is_stale

        if is_stale(env, a):
            kept.append(a.id)  # an interrupted spawn: `exo doctor` cleans it
            continue
        if agentctl.close_windows(env, a):
            closed.append(a.id)
        if a.undo:
            with contextlib.suppress(Exception):
                backends.cleanup(list(a.undo))
        agent_dir = a.spec.get("agent_dir")
        if agent_dir and Path(agent_dir).parent == env.state_dir / "agents":
            shutil.rmtree(agent_dir, ignore_errors=True)
        if a.worktree and a.spec.get("worktree_created") and os.path.isdir(a.worktree):
            remember_reaped(env, a.worktree, {"agent": a.id, "branch": a.branch, "at": time.time(),
                                              "created_files": a.spec.get("created_files") or []})
        env.store.event("reaped", a.id, {"worktree": a.worktree})
        retire(env, a)
        reaped.append(a.id)
    release_runtime(env)
    return ReapResult(reaped=reaped, closed=closed, kept=kept)


# --------------------------------------------------------------------------- attach


@dataclass(frozen=True)
class AttachResult:
    agent: str
    argv: list[str]
    location: dict[str, Any]


@op("attach", cli="attach", roles=("human",), read_only=True, idempotent=True,
    help={"agent": "The agent whose pane (or log, when headless) to show."})
def attach(env: Env, *, agent: str) -> AttachResult:
    """Switch the terminal to an agent's pane (or follow its log when headless)."""
    from exo_cli.ops import agentctl

    rec = _get(env, agent)
    loc = agentctl.location(rec)
    if loc is None:
        raise StateError(f"Agent {rec.id} has not started yet ({rec.status_reason or rec.status})", agent=rec.id)
    argv = agentctl.mux_for(env, loc.mux).attach_argv(loc)
    return AttachResult(agent=rec.id, argv=argv, location=loc.to_dict())


# --------------------------------------------------------------------------- read


@dataclass(frozen=True)
class ReadResult:
    agent: str
    status: str
    text: str
    lines: int
    since_last: bool
    pattern: str | None
    matched: bool | None


_CURSOR = "read-cursor:{reader}:{agent}"
_CURSOR_LINES = 5
_SINCE_CAPTURE = 5000


def _after_cursor(lines: list[str], tail: list[str]) -> list[str]:
    """The lines after the last occurrence of ``tail`` (all of them when it is not found)."""
    if not tail:
        return lines
    n = len(tail)
    for end in range(len(lines), n - 1, -1):
        if lines[end - n:end] == tail:
            return lines[end:]
    return lines


@op(
    "read",
    cli="read",
    tools=["read_from_agent"],
    roles=("tl",),
    read_only=True,
    blocking=True,
    help={
        "agent": "The agent to read.",
        "lines": "How many lines of the tail to return.",
        "since_last": "Only what is new since your last read of this agent.",
        "wait_for": "Wait until this regular expression appears (in what would be returned).",
        "timeout": "Seconds to wait for the pattern.",
    },
)
def read(env: Env, *, agent: str, lines: int = 50, since_last: bool = False, wait_for: str | None = None,
         timeout: float = 30.0) -> ReadResult:
    """Read the tail of an agent's pane, or its log when headless.

    With since_last, only the lines that appeared since the caller's previous read of that
    agent (a cursor per reader). With wait_for, poll the screen until the regular expression
    matches or the timeout passes (matched false); a client's cancellation stops the wait.
    """
    from exo_cli import cancel
    from exo_cli.ops import agentctl

    if lines < 1:
        raise InvalidInput(f"Invalid lines {lines!r}: expected at least 1", field="lines")
    if timeout < 0:
        raise InvalidInput(f"Invalid timeout {timeout!r}", field="timeout")
    pattern = None
    if wait_for is not None:
        try:
            pattern = re.compile(wait_for, re.MULTILINE)
        except re.error as exc:
            raise InvalidInput(f"Invalid pattern {wait_for!r}: {exc}", field="wait_for") from exc
    rec = _get(env, agent)
    loc = agentctl.location(rec)
    if loc is None:
        raise StateError(f"Agent {rec.id} has not started yet ({rec.status_reason or rec.status})", agent=rec.id)
    mux = agentctl.mux_for(env, loc.mux)
    key = _CURSOR.format(reader=env.caller.agent_id, agent=rec.id)
    tail: list[str] = []
    if since_last:
        with contextlib.suppress(ValueError, TypeError):
            tail = list(json.loads(env.store.kv_get(key) or "[]"))

    def grab() -> tuple[list[str], list[str]]:
        text = mux.capture(loc, _SINCE_CAPTURE if since_last else lines)
        rows = text.rstrip("\n").split("\n") if text.strip() else []
        shown = _after_cursor(rows, tail) if since_last else rows
        return rows, shown[-lines:] if not since_last else shown

    rows, shown = grab()
    matched: bool | None = None
    if pattern is not None:
        deadline = time.monotonic() + timeout
        while not pattern.search("\n".join(shown)):
            if time.monotonic() >= deadline or cancel.cancelled():
                break
            time.sleep(0.2)
            rows, shown = grab()
        matched = bool(pattern.search("\n".join(shown)))
    if since_last:
        env.store.kv_set(key, json.dumps(rows[-_CURSOR_LINES:]))
    current = env.store.agent(rec.id) or rec
    return ReadResult(agent=rec.id, status=current.status, text="\n".join(shown) + ("\n" if shown else ""),
                      lines=len(shown), since_last=since_last, pattern=wait_for, matched=matched)
