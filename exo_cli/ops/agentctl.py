"""Controlling recorded agents through their multiplexer: find, observe (batched), watch, stop.

Every place that needs an agent's pane or process goes through here, so there is one
way to turn a record into a ``Location`` and one batched liveness check per refresh.

``refresh`` is also the watcher for everything hooks cannot report. Whoever observes the
team runs it: ``exo agents`` and ``exo status``, and, without anyone running those, every
blocked ``exo wait`` (and the MCP ``wait`` tool), which refreshes the agents it waits for,
or all of the caller's live children, every ``LIVENESS_EVERY`` seconds. A refresh

- marks an agent whose pane or process is gone ``dead`` (a custom agent that exited 0
  ``done`` with its last output), tells its parent, and fails the agents waiting
  ``--after`` it (or starts them, when it is done);
- lets a custom agent (no hooks) go ``idle`` by quiet output (``watch_custom``);
- marks an agent stuck at a startup dialog ``blocked-on-dialog`` (``check_dialogs``);
- hands a resting agent a message that is still queued for it (``delivery.deliver_pending``).
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import TYPE_CHECKING, Any

from exo_cli.ops.panes import (
    TMUX_SESSION,
    capture,
    location,
    mux_for,
    runner_state,
    service_locations,
    states,
)
from exo_cli.records import (
    AT_REST,
    BLOCKED_ON_DIALOG,
    DEAD,
    DONE,
    IDLE,
    OVER_BUDGET,
    PANE_MUXES,
    STARTING,
    WORKING,
    Agent,
)

if TYPE_CHECKING:
    from exo_cli.adapters.mux import PaneState
    from exo_cli.env import Env

__all__ = ["TMUX_SESSION", "capture", "location", "mux_for", "refresh", "service_locations", "states", "stop_agent"]

# Startup dialogs an agent CLI may show that exo could not pre-empt.
DIALOG_STRINGS = (
    "trust this folder",
    "quick safety check",
    "do you trust the contents",
    "bypass permissions",
    "detected a custom api key",  # Claude Code: an ANTHROPIC_API_KEY it has not been told to use
    "hooks need review",  # Codex: hooks whose trust it has not recorded
)
# A custom agent that prints this after its answer goes idle at once, the answer being its output.
FENCE_OPEN = "[exo-output]"
FENCE_CLOSE = "[/exo-output]"
SETTLE = 2.0  # seconds of quiet output before a custom agent's screen is read for the fence or pattern
OUTPUT_LINES = 40  # lines of screen kept as a custom agent's output


def refresh(env: Env, agents: list[Agent]) -> list[Agent]:
    """Status from hooks first, observation second (see the module docstring); the agents as they are now.

    Agents of other hosts are observed by exo on their host (``ops.hosts.refresh_remote``), never
    here: this machine's panes and processes say nothing about them.
    """
    elsewhere = [a for a in agents if not env.runs_here(a)]
    if elsewhere:
        from exo_cli.ops import remote

        seen = remote.refresh_remote(env, elsewhere)
        here = refresh(env, [a for a in agents if env.runs_here(a)])
        by_id = {a.id: a for a in here}
        return [by_id.get(a.id) or seen.get(a.id, a) for a in agents]
    locations = {a.id: location(a) for a in agents}  # each record's location read once
    observed = states(env, [a for a in agents if a.status not in (DEAD, DONE)], locations)
    out: list[Agent] = []
    for a in agents:
        if a.id in observed and locations[a.id] is not None:
            st = observed[a.id]
            if st is None or not st.alive:
                a = ended(env, a, st)
            elif a.backend == "custom":
                a = watch_custom(env, a, st)
            elif unheard_rebuilt(a):
                a = watch_rebuilt(env, a, st)
            elif a.backend == "codex" and a.status == WORKING:
                a = watch_codex_turn(env, a)
        out.append(a)
    out = check_dialogs(env, out, observed)
    out = settle_pending(env, out)
    resting = [a for a in out if a.status in AT_REST and a.id in observed]
    if resting:
        from exo_cli.ops.delivery import deliver_pending

        try:
            deliver_pending(env, resting)
        except Exception:  # noqa: BLE001 - a message that cannot be handed over waits for a hook or the next look
            pass
    return out


# -------------------------------------------------------------------------------- an agent ended


def ended(env: Env, agent: Agent, st: PaneState | None) -> Agent:
    """Record that the agent's pane or process is gone; tell its parent; settle its dependents.

    A custom agent (no hooks) that exited 0 is ``done`` with the end of its screen or log as
    its output, and the agents waiting ``--after`` it start; any other agent is ``dead``
    (reason: its exit status) and the agents waiting for it fail. Done once, whoever sees it.
    """
    status = st.dead_status if st is not None else None
    if agent.backend == "custom" and status == 0:
        output = _screen_output(env, agent) or agent.output
        if not env.store.update_agent(agent.id, if_status=agent.status, status=DONE, status_reason="exited (0)",
                                      output=output, completed_at=time.time()):
            return env.store.agent(agent.id) or agent
        finished = env.store.agent(agent.id) or agent
        env.store.event("completed", agent.id, {"output": (output or "")[:2000], "exit": 0})
        env.store.post("done", agent.id, agent.parent or "root", output or "(done, no output)",
                       data={"event": "done", "from_name": agent.name, "exit": 0})
        from exo_cli.ops import attention

        attention.signal(env, "done", finished, output or "", exit=0)
        start_ready(env, finished)
        return finished
    if st is None:
        reason = "pane gone"
    elif agent.backend == "custom" and status is not None:
        reason = f"exited with status {status}"
    else:
        reason = f"process exited ({status})"
    if not env.store.update_agent(agent.id, if_status=agent.status, status=DEAD, status_reason=reason):
        return env.store.agent(agent.id) or agent
    died(env, agent, reason)
    return env.store.agent(agent.id) or agent


def died(env: Env, agent: Agent, reason: str, *, tell_parent: bool = True, **data: Any) -> None:
    """After an agent was marked dead: the event, its parent told, the agents waiting for it failed, the human told.

    Every path that marks an agent dead ends here (or tells the same itself, as the
    session-end hook does), so each death raises exactly one attention event.
    """
    from exo_cli.ops import attention
    from exo_cli.ops.delivery import fail_dependents, notify_parent

    if tell_parent:
        notify_parent(env, agent, "dead", f"{agent.name} is dead: {reason}", reason=reason, **data)
    fail_dependents(env, agent, f"{agent.name} is dead ({reason})")
    attention.signal(env, "dead", agent, reason, reason=reason)


def settle_pending(env: Env, agents: list[Agent]) -> list[Agent]:
    """Agents waiting ``--after`` others: fail the ones whose dependency died, start the ready ones.

    The hooks and operations that end a turn or an agent do this as it happens; this catches
    what happened otherwise (an agent completed, or marked dead by another path).
    """
    pending = [a for a in agents if a.status == STARTING and a.spec.get("phase") == "pending"]
    if not pending:
        return agents
    from exo_cli.ops.delivery import fail_pending, pending_verdict

    ready: list[tuple[str, str]] = []
    for a in pending:
        fresh = env.store.agent(a.id)
        if fresh is None or fresh.status != STARTING or fresh.spec.get("phase") != "pending":
            continue  # started or failed meanwhile
        verdict, detail = pending_verdict(env, fresh)
        if verdict == "dead":
            fail_pending(env, a, detail)
        elif verdict == "ready":
            ready.append((a.id, detail))
    if ready:
        from exo_cli.ops.spawn.pending import start_dependents

        start_dependents(env, "watcher", ready)
    return [env.store.agent(a.id) or a if a in pending else a for a in agents]


def start_ready(env: Env, agent: Agent) -> list[str]:
    """Start the agents spawned ``--after`` ``agent`` that may start now (it is idle or done)."""
    from exo_cli.ops.delivery import ready_dependents

    ready = ready_dependents(env, agent.id)
    if not ready:
        return []
    from exo_cli.ops.spawn.pending import start_dependents

    return start_dependents(env, agent.id, ready)


_DEAD_PANE = re.compile(r"^Pane is dead \(.*\)\s*$")  # what tmux writes under a dead pane (remain-on-exit)


def _screen_output(env: Env, agent: Agent) -> str | None:
    """The end of the agent's screen or log (the fenced part when it printed one), or None."""
    loc = location(agent)
    if loc is None:
        return None
    try:
        text = mux_for(env, loc.mux).capture(loc, 10 * OUTPUT_LINES)
    except Exception:  # noqa: BLE001 - a pane that vanished has no output to give
        return None
    return fenced(text) or last_lines(text) or None


def last_lines(text: str, n: int = OUTPUT_LINES) -> str:
    """The last ``n`` lines of a screen that has any text, without the blank rows below it."""
    rows = [r.rstrip() for r in text.splitlines() if not _DEAD_PANE.match(r)]
    while rows and not rows[-1]:
        rows.pop()
    return "\n".join(rows[-n:]).strip()


# -------------------------------------------------------------------------------- custom agents


def fenced(text: str) -> str | None:
    """What a custom agent printed between ``[exo-output]`` and ``[/exo-output]`` last, if it closed it."""
    end = text.rfind(FENCE_CLOSE)
    if end < 0:
        return None
    start = text.rfind(FENCE_OPEN, 0, end)
    if start < 0:
        return None
    return text[start + len(FENCE_OPEN):end].strip()


def _quiet_key(agent_id: str) -> str:
    return f"quiet:{agent_id}"


def _quiet(env: Env, agent: Agent, st: PaneState, now: float) -> tuple[dict[str, Any], str | None, float, bool]:
    """(the quiet state kept for the agent, its stored text, seconds its output has been quiet, whether it changed).

    Quiet is measured from the multiplexer's activity: a time (tmux: the window's last
    activity; headless: the log's modification time) is used as it is; a fingerprint
    (Zellij: what the agent's processes wrote) counts from the first look that saw it.
    """
    key = _quiet_key(agent.id)
    raw = env.store.kv_get(key)
    try:
        state: dict[str, Any] = json.loads(raw) if raw else {}
    except ValueError:
        state = {}
    if not isinstance(state, dict):
        state = {}
    fingerprint, since = _mark(st, state, now)
    changed = state.get("fp") != fingerprint
    state.update(fp=fingerprint, since=since)
    return state, raw, now - since, changed


def _mark(st: PaneState, state: dict[str, Any], now: float) -> tuple[str, float]:
    """(fingerprint of the agent's output, since when it has been so) from the multiplexer's activity."""
    mark = st.activity
    if isinstance(mark, int | float):
        return f"t{mark}", float(mark)
    fingerprint = str(mark)
    return fingerprint, float(state["since"]) if state.get("fp") == fingerprint and "since" in state else now


def seed_quiet(env: Env, agent: Agent, st: PaneState) -> None:
    """Start the quiet watch of a rebuilt agent from what its multiplexer shows now (a stale one is replaced)."""
    fingerprint, since = _mark(st, {}, time.time())
    state = {"fp": fingerprint, "since": since, **({"idle_fp": fingerprint} if agent.status == IDLE else {})}
    env.store.kv_set(_quiet_key(agent.id), json.dumps(state, separators=(",", ":")))


def _resumed(env: Env, agent: Agent, state: dict[str, Any], changed: bool, reason: str) -> Agent:
    """An idle agent whose output changed since it went idle is working again."""
    if changed and state.get("idle_fp") not in (None, state["fp"]):
        env.store.update_agent(agent.id, if_status=IDLE, status=WORKING, status_reason=reason)
        return env.store.agent(agent.id) or agent
    return agent


def setting(env: Env, agent: Agent, key: str) -> Any:
    """The agent's setting ``key``: the one it was spawned with from another host (its record's ``settings``),
    else this clone's configuration."""
    carried = agent.spec.get("settings")
    if isinstance(carried, dict) and key in carried:
        return carried[key]
    return env.config.get(key)


def watch_custom(env: Env, agent: Agent, st: PaneState) -> Agent:
    """Let a custom agent (no hooks) go idle by its output by tiers (a fence or pattern at once, else quiet output with no child process); back to working when it prints.

    Quiet is measured from the multiplexer's activity (tmux: the window's last activity;
    headless: the log's modification time; Zellij: what the agent's processes wrote, from
    /proc). Once its output has settled for ``SETTLE`` seconds, its screen is read once
    (per settled state): a closed fence (``[exo-output]...[/exo-output]``) or a line
    matching ``agent.idle_pattern`` at the bottom makes it idle at once. Otherwise it goes
    idle after ``agent.idle_quiet_seconds`` of quiet, unless it still runs child processes
    (a build, a test run). Idle means: status ``idle``, its output recorded, an ``idle``
    event to its parent, and the agents waiting ``--after`` it started.
    """
    if agent.status not in (WORKING, IDLE):
        return agent
    key = _quiet_key(agent.id)
    state, raw, quiet, changed = _quiet(env, agent, st, time.time())
    fingerprint = state["fp"]
    if agent.status == IDLE:
        agent = _resumed(env, agent, state, changed, "output resumed")
        _save(env, key, raw, state)
        return agent
    limit = quiet_limit(env, agent)
    output: str | None = None
    reason = ""
    if quiet >= min(SETTLE, limit) and state.get("read") != fingerprint:
        state["read"] = fingerprint
        output, reason = _rest_signal(env, agent)
    if not reason and quiet >= limit and not _busy(agent, st):
        reason = f"quiet for {int(quiet)}s"
        output = _screen_output(env, agent)
    if reason:
        state["idle_fp"] = fingerprint
        _save(env, key, raw, state)
        return went_idle(env, agent, output, reason)
    _save(env, key, raw, state)
    return agent


def _save(env: Env, key: str, raw: str | None, state: dict[str, Any]) -> None:
    text = json.dumps(state, separators=(",", ":"))
    if text != raw:
        env.store.kv_set(key, text)


def _rest_signal(env: Env, agent: Agent) -> tuple[str | None, str]:
    """(output, reason) when the bottom of the screen says the agent rests: a closed fence, or the idle pattern."""
    loc = location(agent)
    if loc is None:
        return None, ""
    try:
        text = mux_for(env, loc.mux).capture(loc, OUTPUT_LINES)
    except Exception:  # noqa: BLE001 - the next refresh looks again
        return None, ""
    rows = [r for r in text.splitlines() if r.strip()]
    last = rows[-1] if rows else ""
    if last.rstrip().endswith(FENCE_CLOSE):
        return fenced(text), "fence"
    pattern = str(setting(env, agent, "agent.idle_pattern") or "")
    if pattern:
        try:
            if re.search(pattern, last):
                return last_lines(text) or None, "idle pattern"
        except re.error:
            return None, ""
    return None, ""


def _busy(agent: Agent, st: PaneState) -> bool:
    """Whether the agent runs child processes: a build is not idleness."""
    from exo_cli.adapters.proc import children_of

    pid = st.pid or (location(agent).pid if location(agent) else None)  # type: ignore[union-attr]
    if not pid:
        return False
    if agent.spec.get("sandboxed"):  # bwrap and its init run the agent; its network's bridge is no build
        from exo_cli.adapters.sandboxprocs import sandbox_of, sandboxed_children

        # a pane's launcher execs bwrap (its broker keeper stays its child); the headless runner starts it
        return bool(sandboxed_children(sandbox_of(pid)))
    if agent.mux != "tmux":  # Zellij's launcher and the headless runner run the agent as their child
        inner = children_of(pid)
        if len(inner) != 1:
            return len(inner) > 1
        pid = inner[0]
    return bool(children_of(pid))


def went_idle(env: Env, agent: Agent, output: str | None, reason: str) -> Agent:
    """A custom agent came to rest: status ``idle``, its output, its parent told, its dependents started.

    Its budget and the team's are judged as a stop hook judges them, on the usage it reported
    (``exo usage``) this turn: at 100% it is ``over-budget`` instead (its messages held, nobody
    started), at 80% it and its parent are told once.
    """
    from exo_cli.ops.budget import tell, verdict, with_warned
    from exo_cli.ops.delivery import notify_parent

    budget, spent = verdict(env, env.store.agent(agent.id) or agent, ())
    over = budget == "over" and spent is not None
    changes: dict[str, Any] = {"status": OVER_BUDGET, "status_reason": f"over budget: {spent.text()}"[:500]} \
        if over and spent is not None else {"status": IDLE, "status_reason": reason}
    if output is not None:
        changes["output"] = output
    if budget == "warn":
        changes["spec"] = with_warned(agent, True)
    if not env.store.update_agent(agent.id, if_status=agent.status, **changes):
        return env.store.agent(agent.id) or agent
    env.store.bump_agent(agent.id, turns=1)
    now = env.store.agent(agent.id) or agent
    from exo_cli.ops import turnend

    if turnend.mark_due(env, now, turn=now.turns):  # its turn's checkpoint, in the background
        turnend.after_exit(env, [turnend.due_command(now)])
    if budget is not None and spent is not None:
        tell(env, agent, budget, spent)
    if over:  # it rests with its messages held: no idle event, no dependents
        return env.store.agent(agent.id) or now
    short = " ".join((output or "").split())
    notify_parent(env, now, "idle", f"{now.name} is idle" + (f": {short[:200]}" if short else ""),
                  output=(output or "")[:4000])
    start_ready(env, now)
    return env.store.agent(agent.id) or now


# -------------------------------------------------------------------------------- rebuilt records

REBUILT = "record rebuilt by exo doctor"  # how a rebuilt agent's status_reason starts until its hooks report


def quiet_limit(env: Env, agent: Agent) -> float:
    """``agent.idle_quiet_seconds`` (the agent's own setting, see ``setting``): how long its output must stay
    quiet before it counts as idle."""
    return float(setting(env, agent, "agent.idle_quiet_seconds") or 0)


def rest_by_output(env: Env, agent: Agent, st: PaneState, quiet: float | None) -> tuple[str, str]:
    """(status, reason) of a live agent known only by what it shows: ``idle`` or ``working``.

    A headless CLI that runs one turn per process says it itself (its runner waits between
    turns). Otherwise the agent is idle when its pane or log has been quiet for
    ``agent.idle_quiet_seconds`` (a custom agent: and it runs no child process, as its
    watcher wants), working when it wrote something more recently or when that is not known
    (``quiet`` None: the watcher measures from its first look).
    """
    loc = st.location
    if loc.mux == "headless":
        runner = runner_state(env, loc)
        if runner.get("mode") == "resume" and runner.get("state") in ("waiting", "running"):
            return (IDLE, "waiting between turns") if runner["state"] == "waiting" else (WORKING, "in a turn")
    if quiet is None:
        return WORKING, "output not measured yet"
    if quiet >= quiet_limit(env, agent) and not (agent.backend == "custom" and _busy(agent, st)):
        return IDLE, f"quiet for {int(quiet)}s"
    return WORKING, f"output {int(quiet)}s ago"


def unheard_rebuilt(agent: Agent) -> bool:
    """A record ``exo doctor`` rebuilt whose agent has not ended a turn or run a tool since (its hooks said nothing)."""
    return bool(agent.spec.get("rebuilt")) and not agent.turns and not agent.tool_calls


def watch_rebuilt(env: Env, agent: Agent, st: PaneState) -> Agent:
    """Watch a rebuilt agent by its output until its hooks report: idle once quiet, working when it prints again.

    Its record was rebuilt mid-session, so no hook told exo where its turn stands; it goes
    idle as ``rest_by_output`` says (its parent gets the ``idle`` event, and a message
    queued meanwhile is handed over by ``refresh``), and its first stop or tool hook ends
    this watch.
    """
    if agent.status not in (WORKING, IDLE):
        return agent
    key = _quiet_key(agent.id)
    state, raw, quiet, changed = _quiet(env, agent, st, time.time())
    if agent.status == IDLE:
        agent = _resumed(env, agent, state, changed, f"{REBUILT}; output resumed")
        _save(env, key, raw, state)
        return agent
    status, why = rest_by_output(env, agent, st, quiet)
    if status == IDLE:
        state["idle_fp"] = state["fp"]
    _save(env, key, raw, state)
    if status != IDLE:
        return agent
    if not env.store.update_agent(agent.id, if_status=WORKING, status=IDLE, status_reason=f"{REBUILT}; {why}"):
        return env.store.agent(agent.id) or agent
    from exo_cli.ops.delivery import notify_parent

    now = env.store.agent(agent.id) or agent
    notify_parent(env, now, "idle", f"{now.name} is idle ({why})", output="")
    start_ready(env, now)
    return env.store.agent(agent.id) or now


# -------------------------------------------------------------------------------- failed turns


def watch_codex_turn(env: Env, agent: Agent) -> Agent:
    """A working Codex agent whose last turn ended with an error (Codex has no failure hook) is ``failed-turn``.

    Read from the session's rollout file (recorded by its session-start hook): the error of
    its last ``task_complete`` event, when that came after the agent started working.
    """
    from exo_cli.ops.hooks import load_state, turn_failed

    path = load_state(env, agent.id).get("transcript")
    if not isinstance(path, str) or not path:
        return agent
    try:
        if os.stat(path).st_mtime < (agent.status_at or 0) - 1.0:
            return agent  # nothing written since it started working
    except OSError:
        return agent
    from exo_cli.adapters.agents.codex import turn_error

    found = turn_error(path)
    if found is None or found[1] < (agent.status_at or 0) - 1.0:
        return agent
    turn_failed(env, agent, found[0], kind="api_error")
    return env.store.agent(agent.id) or agent


# -------------------------------------------------------------------------------- dialogs


def check_dialogs(env: Env, agents: list[Agent], observed: dict[str, PaneState | None]) -> list[Agent]:
    """Mark agents stuck in ``starting`` past ``agent.start_timeout`` that show a startup dialog.

    Only agents still starting after the timeout, alive, and in a pane are looked at, with
    one screen capture each; everyone else costs nothing. The parent gets a
    ``blocked-on-dialog`` event (its ``wait`` sees it; a waiting parent refreshes its children).
    """
    candidates = [
        a for a in agents
        if a.status == STARTING and a.spec.get("phase") == "spawned" and a.mux in PANE_MUXES
        and (st := observed.get(a.id)) is not None and st.alive
    ]  # fmt: skip
    if not candidates:
        return agents
    now = time.time()
    changed: dict[str, Agent] = {}
    for a in candidates:
        configured = setting(env, a, "agent.start_timeout")
        if now - (a.status_at or a.created_at) < float(60 if configured is None else configured):
            continue
        loc = location(a)
        if loc is None:
            continue
        try:
            screen = mux_for(env, loc.mux).capture(loc, 60).lower()
        except Exception:  # noqa: BLE001 - a pane that vanished meanwhile is the next refresh's business
            continue
        hit = next((d for d in DIALOG_STRINGS if d in screen), None)
        if hit is None:
            continue
        reason = f"startup dialog: {hit}"
        if not env.store.update_agent(a.id, if_status=STARTING, status=BLOCKED_ON_DIALOG, status_reason=reason):
            continue
        env.store.event("blocked-on-dialog", a.id, {"dialog": hit})
        env.store.post("event", a.id, a.parent or "root", f"[BLOCKED {a.id}] its CLI shows a dialog: {hit}",
                       data={"event": "blocked-on-dialog", "dialog": hit, "from_name": a.name})
        from exo_cli.ops import attention

        attention.signal(env, BLOCKED_ON_DIALOG, a, reason, dialog=hit)
        changed[a.id] = env.store.agent(a.id) or a
    return [changed.get(a.id, a) for a in agents]


# -------------------------------------------------------------------------------- stopping


def stop_sandbox(env: Env, agent: Agent) -> None:
    """Stop what is left of a sandboxed agent's sandbox: its inside leaves the agent's group (bwrap
    --new-session), and a sandbox whose bwrap was killed while starting stays asleep as its pid
    namespace's init, which only SIGKILL ends (``stop_marked`` sends it after a grace)."""
    if agent.spec.get("sandboxed"):
        from exo_cli.adapters.sandboxprocs import stop_marked
        from exo_cli.ops import broker

        marks = {"EXO_AGENT": agent.id, "EXO_STATE_DIR": str(env.state_dir)}
        key = agent.spec.get(broker.KEY_FIELD)
        if key:  # this spawn's own socket (random): a namesake spawned since is another agent, never stopped here
            marks["EXO_SOCKET"] = broker.socket_path(env, str(key))
        stop_marked(marks)


def stop_agent(env: Env, agent: Agent, *, reason: str = "killed", status: str = DEAD,
               settle_dependents: bool = False) -> bool:
    """Stop the agent's process group and every service exo started for it; record ``status``.

    Panes stay readable. True if the agent itself was alive. A ``done`` agent keeps its
    status unless ``status`` is done too. With ``settle_dependents`` (``exo kill``), one that
    becomes ``dead`` here fails the agents waiting ``--after`` it at once; otherwise (a
    ``complete`` that may still end ``done``) the next watcher settles them.
    """
    from exo_cli.errors import ExoError

    loc = location(agent)
    was_alive = False
    if loc is not None:
        mux = mux_for(env, loc.mux)
        was_alive = mux.alive(loc)
        if was_alive:
            mux.kill(loc)
    for svc in service_locations(agent):
        try:
            smux = mux_for(env, svc.mux)
            if smux.alive(svc):
                smux.kill(svc, grace=2.0)
        except (ExoError, OSError):
            continue
    stop_sandbox(env, agent)
    became_dead = False
    if agent.status not in (DONE,) or status == DONE:
        env.store.update_agent(agent.id, status=status, status_reason=reason)
        became_dead = settle_dependents and status == DEAD and agent.status != DEAD
    env.store.event(reason, agent.id, {"was_alive": was_alive})
    if became_dead:
        died(env, agent, reason, tell_parent=False)
    if agent.parent:
        env.store.bell.ring(agent.parent)
    return was_alive


def close_windows(env: Env, agent: Agent) -> list[str]:
    """Close the agent's window (or tab, or headless record) and its services' window; what was closed.

    Whatever still runs in them is stopped first (the process group, SIGTERM then SIGKILL).
    """
    import contextlib

    from exo_cli.adapters.mux import Location
    from exo_cli.errors import ExoError

    closed: list[str] = []
    for loc_dict in (agent.location, agent.spec.get("services_location") or {}):
        if not loc_dict or not loc_dict.get("mux"):
            continue
        loc = Location.from_dict(loc_dict)
        with contextlib.suppress(ExoError, OSError):
            mux = mux_for(env, loc.mux)
            mux.close(loc, force=True)
            closed.append(loc.name or loc.key)
    return closed
