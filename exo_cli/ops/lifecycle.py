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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from exo_cli.adapters.rmtree import remove_tree
from exo_cli.errors import ExoError, InvalidInput, NotFound, StateError
from exo_cli.ops import remote as _remote  # noqa: F401 - routes on_host operations to their agent's host
from exo_cli.ops.history import CURSOR_KEY, retire
from exo_cli.records import DEAD, DONE, LIVE_STATUSES, ROOT, Agent, in_subtree
from exo_cli.registry import Range, op
from exo_cli.validate import check_name, check_timeout

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


# --------------------------------------------------------------------------- kill


@dataclass(frozen=True)
class KillResult:
    killed: list[str]
    already_dead: list[str]
    worktrees_kept: list[list[str]]
    warnings: list[str] = field(default_factory=list)  # agents of other hosts that could not be stopped


@op(
    "kill",
    cli="kill",
    tools=["kill"],
    roles=("tl",),
    destructive=True,
    idempotent=True,
    help={"agent": "The agent to stop, with all its descendants."},
    on_host="agent",
)
def kill(env: Env, *, agent: str) -> KillResult:
    """Kill an agent and all its descendants; their worktrees are kept.

    Each process group gets SIGTERM, then SIGKILL after a grace period, and so do the
    services exo started for it; panes stay readable (remain-on-exit) until `exo reap`. Records
    stay, with status dead (a done agent whose process still ran stays done); branches and
    worktrees are never touched. Agents spawned to start after a killed one (`exo spawn
    --after`) will not start: they are marked dead and their parent is told. The root cannot be killed, and a team lead may
    only kill its own subtree.
    """
    from exo_cli.ops import agentctl

    target = _get(env, agent)
    everyone = current_agents(env)
    caller = env.caller
    if not caller.is_human and caller.agent_id != target.id and not in_subtree(everyone, caller.agent_id, target.id):
        raise StateError(f"{target.id} is not in your subtree", hint="You may only kill agents you (or your children) spawned.",
                         agent=target.id, caller=caller.agent_id)
    killed: list[str] = []
    dead: list[str] = []
    kept: list[list[str]] = []
    warnings: list[str] = []
    for a in [*descendants(everyone, target.id), target]:
        a = env.store.agent(a.id) or a
        if not env.runs_here(a):  # exo on its host stops it (and its own descendants there)
            if a.id in killed or a.id in dead:
                continue
            from exo_cli.ops.remote import kill_there

            got, why = kill_there(env, a)
            killed += [i for i in got.killed if i not in killed] if got else []
            dead += [i for i in got.already_dead if i not in dead] if got else []
            kept += got.worktrees_kept if got else []
            warnings += [why] if why else []
            continue
        # Stops the agent's process group and its services; a done agent whose process still
        # runs is stopped too (its status stays done).
        was_alive = agentctl.stop_agent(env, a, reason="killed", settle_dependents=True)
        (killed if was_alive or a.status in LIVE_STATUSES else dead).append(a.id)
        if a.worktree and a.spec.get("worktree_created"):
            kept.append([a.id, a.worktree])
    if target.parent:
        env.store.post("event", target.id, target.parent, f"[KILLED {target.id}] and {len(killed) - 1 if target.id in killed else len(killed)} descendant(s)",
                       data={"event": "killed", "agent": target.id, "killed": killed})
    release_runtime(env)
    return KillResult(killed=killed, already_dead=dead, worktrees_kept=kept, warnings=warnings)


def release_runtime(env: Env) -> bool:
    """Once no agent of the repository runs, stop what exo runs for it: its tmux server (when no dead
    agent's screen is left to read either) and its runtime folder (unless someone waits on a doorbell).

    Called when agents finish (``complete``, ``kill``, ``reap``, ``doctor``). Checked under the
    lock a spawn takes to record a new agent, so a spawn either is seen here (a live agent) or
    starts the server and makes the folder again. True when the folder is gone.
    """
    from exo_cli.adapters import worktree as wt
    from exo_cli.adapters.files import release_runtime_dir

    if not env.has_state():
        return False
    with wt.repo_lock(env.state_dir, "slots"):
        if any(a.status in LIVE_STATUSES for a in current_agents(env)):
            return False
        stop_idle_tmux(env)
        return release_runtime_dir(env.runtime_dir)


def stop_idle_tmux(env: Env) -> bool:
    """Stop the repository's tmux server when only its placeholder window is left; True when none runs."""
    from exo_cli.adapters.mux.tmux import Tmux
    from exo_cli.ops import panes

    mux = panes.mux_for(env, "tmux")
    if not isinstance(mux, Tmux):
        return True
    try:
        return mux.stop_if_idle()
    except ExoError:  # tmux missing or failing: nothing of ours to stop, or nothing exo can do here
        return False


def current_agents(env: Env) -> list[Agent]:
    """The recorded agents that are not history (retired) nor the root."""
    return [a for a in env.store.agents() if a.id != ROOT and not a.retired] if env.has_state() else []


# --------------------------------------------------------------------------- reap


@dataclass(frozen=True)
class ReapResult:
    reaped: list[str]
    closed: list[str]
    kept: list[str]
    unreached: list[str] = field(default_factory=list)  # finished agents of hosts that cannot be reached now


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
    elsewhere: dict[str, list[str]] = {}
    unreached: list[str] = []
    for a in agents:
        if a.status not in (DEAD, DONE):
            continue
        if not env.runs_here(a):  # exo on its host reaps it (its windows and files are there)
            elsewhere.setdefault(a.host, []).append(a.id)
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
        agentctl.stop_sandbox(env, a)  # a sandbox killed as it started lingers outside its window
        if a.undo:
            with contextlib.suppress(Exception):
                backends.cleanup(list(a.undo))
        agent_dir = a.spec.get("agent_dir")
        if agent_dir and Path(agent_dir).parent == env.state_dir / "agents":
            with contextlib.suppress(OSError):
                remove_tree(agent_dir)
        if a.worktree and a.spec.get("worktree_created") and os.path.isdir(a.worktree):
            remember_reaped(env, a.worktree, {"agent": a.id, "branch": a.branch, "at": time.time(),
                                              "created_files": a.spec.get("created_files") or []})
        env.store.event("reaped", a.id, {"worktree": a.worktree})
        retire(env, a)
        reaped.append(a.id)
    if elsewhere:
        from exo_cli.ops.remote import reap_there

        for name, ids in sorted(elsewhere.items()):
            got = reap_there(env, name)
            if got is None:
                unreached += ids  # that host cannot be reached now: its agents wait for the next reap
            else:
                reaped, closed, kept = reaped + got.reaped, closed + got.closed, kept + got.kept
    release_runtime(env)
    return ReapResult(reaped=reaped, closed=closed, kept=kept, unreached=unreached)


# --------------------------------------------------------------------------- attach


@dataclass(frozen=True)
class AttachResult:
    agent: str
    argv: list[str]
    location: dict[str, Any]
    mode: str = "attach"  # attach | switch | popup | window | log
    command: str = ""  # argv as one line that pastes cleanly into a POSIX shell
    hint: str | None = None  # how to come back, when it is not the usual detach


@op("attach", cli="attach", roles=("human",), read_only=True, idempotent=True,
    help={"agent": "The agent whose pane (or log, when headless) to show."})
def attach(env: Env, *, agent: str) -> AttachResult:
    """Switch the terminal to an agent's pane (or follow its log when headless).

    Inside your own tmux, the agent opens in a popup of your session (tmux 3.2 and newer;
    a new window before that), with its window's size kept; outside tmux, a plain attach;
    inside exo's own tmux server, a switch to its window.
    """
    import shlex

    from exo_cli.ops import agentctl

    rec = _get(env, agent)
    loc = agentctl.location(rec)
    if loc is None:
        raise StateError(f"Agent {rec.id} has not started yet ({rec.status_reason or rec.status})", agent=rec.id)
    from exo_cli.ops.hosts import host_of
    from exo_cli.ops.remote import attach_there

    host = host_of(env, rec)
    if host is not None:  # an ssh session into that host, where exo attaches to its multiplexer
        mode, argv, hint = attach_there(env, host, rec)
        return AttachResult(agent=rec.id, argv=argv, location=loc.to_dict(), mode=mode, command=shlex.join(argv),
                            hint=hint)
    mux = agentctl.mux_for(env, loc.mux)
    mode, hint = ("log" if loc.mux == "headless" else "attach"), None
    from exo_cli.adapters.mux.tmux import Tmux

    if isinstance(mux, Tmux):
        from exo_cli.adapters.mux.tmux_attach import plan

        mode, argv, hint = plan(mux, loc, name=rec.name, environ=env.environ)
    else:
        argv = mux.attach_argv(loc)
    return AttachResult(agent=rec.id, argv=argv, location=loc.to_dict(), mode=mode, command=shlex.join(argv),
                        hint=hint)


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

    @property
    def exit_code(self) -> int:
        """5 (a state error) when the pattern waited for never appeared, else 0."""
        return 5 if self.matched is False else 0

    @property
    def tool_error(self) -> bool:
        return self.matched is False


@dataclass(frozen=True)
class ReadManyResult:
    """``read`` of several agents: one result each, in the order asked, captured together."""

    results: list[ReadResult]

    @property
    def exit_code(self) -> int:
        """5 when the pattern waited for is missing from any screen, else 0."""
        return max((r.exit_code for r in self.results), default=0)

    @property
    def tool_error(self) -> bool:
        """The pattern appeared in none of the screens (some: the result says which)."""
        return bool(self.results) and all(r.tool_error for r in self.results)


_CURSOR_LINES = 5
_SINCE_CAPTURE = 5000
# What ``clean`` removes: escape sequences (CSI, OSC, other ESC), bracketed-paste markers left as text,
# control characters but tab and newline, and lines that are only TUI borders.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]?|[\x80-\x9f]")
_PASTE_MARKS = re.compile(r"\^\[\[20[01]~|\[20[01]~")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_BORDER = frozenset("+-|=") | {chr(c) for c in range(0x2500, 0x25A0)}


def clean_screen(text: str) -> str:
    """The screen text without escape sequences, paste markers, control characters or TUI chrome.

    Lines made only of box-drawing or border characters are dropped, borders around a line
    (``│ text │``) are stripped, runs of blank lines become one, and blank lines at both ends go.
    """
    text = _PASTE_MARKS.sub("", _ESCAPES.sub("", text.replace("\r\n", "\n")))
    out: list[str] = []
    for raw in text.split("\n"):
        line = _CONTROLS.sub("", raw.rsplit("\r", 1)[-1]).rstrip()
        core = line.strip()
        if core and all(c in _BORDER or c.isspace() for c in core):
            continue
        if len(core) > 1 and "\u2500" <= core[0] <= "\u259f" and "\u2500" <= core[-1] <= "\u259f":
            line = core[1:-1].strip()
        if not line.strip() and (not out or not out[-1].strip()):
            continue
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out) + ("\n" if out else "")


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
    on_host="agent",
    help={
        "agent": "The agent to read, or a list of agents to read in one call (then one result each).",
        "lines": "How many lines of the tail to return.",
        "since_last": "Only what is new since your last read of this agent.",
        "wait_for": "Wait until this regular expression appears (in what would be returned).",
        "timeout": "Seconds to wait for the pattern.",
        "clean": "Drop escape sequences, paste markers, control characters and TUI borders.",
    },
)
def read(env: Env, *, agent: str | list[str], lines: Annotated[int, Range(1)] = 50, since_last: bool = False,
         wait_for: str | None = None, timeout: Annotated[float, Range(0)] = 30.0,
         clean: bool = False) -> ReadResult | ReadManyResult:
    """Read the tail of an agent's pane, or its log when headless.

    With {--since_last}, only the lines that appeared since the caller's previous read of that
    agent (a cursor per reader). With {--wait_for}, poll the screen until the regular
    expression matches or {--timeout} passes (matched false); a client's cancellation stops
    the wait. Several agents are read together (one capture call per multiplexer), each with
    its own result; with {--wait_for}, until every one matches.
    """
    from exo_cli import cancel
    from exo_cli.ops import agentctl

    if isinstance(lines, bool) or lines < 1:
        raise InvalidInput(f"Invalid lines {lines!r}: expected at least 1", field="lines")
    timeout = check_timeout(timeout) or 0.0
    refs = [agent] if isinstance(agent, str) else list(agent)
    if not refs:
        raise InvalidInput("Give at least one agent to read", field="agent")
    if len(set(refs)) != len(refs):
        raise InvalidInput("An agent appears twice in the agents to read", field="agent")
    pattern = None
    if wait_for is not None:
        try:
            pattern = re.compile(wait_for, re.MULTILINE)
        except re.error as exc:
            raise InvalidInput(f"Invalid pattern {wait_for!r}: {exc}", field="wait_for") from exc
    recs = [_get(env, r) for r in refs]
    locs = []
    for rec in recs:
        loc = agentctl.location(rec)
        if loc is None:
            raise StateError(f"Agent {rec.id} has not started yet ({rec.status_reason or rec.status})", agent=rec.id)
        locs.append(loc)
    keys = [CURSOR_KEY.format(reader=env.caller.agent_id, agent=rec.id) for rec in recs]
    tails: list[list[str]] = [[] for _ in recs]
    if since_last:
        for i, key in enumerate(keys):
            with contextlib.suppress(ValueError, TypeError):
                tails[i] = list(json.loads(env.store.kv_get(key) or "[]"))

    def grab() -> tuple[list[list[str]], list[str]]:
        rows_all: list[list[str]] = []
        texts: list[str] = []
        for text, tail in zip(agentctl.capture(env, locs, _SINCE_CAPTURE if since_last else lines), tails,
                              strict=True):
            rows = text.rstrip("\n").split("\n") if text.strip() else []
            shown = _after_cursor(rows, tail) if since_last else rows[-lines:]
            body = "\n".join(shown) + ("\n" if shown else "")
            rows_all.append(rows)
            texts.append(clean_screen(body) if clean else body)
        return rows_all, texts

    rows_all, texts = grab()
    matched: list[bool | None] = [None] * len(recs)
    if pattern is not None:
        deadline = time.monotonic() + timeout
        while not all(pattern.search(t) for t in texts):
            if time.monotonic() >= deadline or cancel.cancelled():
                break
            time.sleep(0.2)
            rows_all, texts = grab()
        matched = [bool(pattern.search(t)) for t in texts]
    if since_last:
        for key, rows in zip(keys, rows_all, strict=True):
            env.store.kv_set(key, json.dumps(rows[-_CURSOR_LINES:]))
    results = []
    for rec, text, hit in zip(recs, texts, matched, strict=True):
        current = env.store.agent(rec.id) or rec
        results.append(ReadResult(agent=rec.id, status=current.status, text=text, lines=text.count("\n"),
                                  since_last=since_last, pattern=wait_for, matched=hit))
    return results[0] if isinstance(agent, str) else ReadManyResult(results=results)
