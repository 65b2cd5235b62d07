"""Controlling recorded agents through their multiplexer: find, observe (batched), stop.

Every place that needs an agent's pane or process goes through here, so there is one
way to turn a record into a ``Location`` and one batched liveness check per refresh.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from exo_cli.records import BLOCKED_ON_DIALOG, DEAD, DONE, PANE_MUXES, STARTING, Agent

if TYPE_CHECKING:
    from exo_cli.adapters.mux import Location, Mux, PaneState
    from exo_cli.env import Env

TMUX_SESSION = "exo"
# Startup dialogs an agent CLI may show that exo could not pre-empt (field-lessons F5).
DIALOG_STRINGS = ("trust this folder", "quick safety check", "do you trust the contents", "bypass permissions")


def mux_for(env: Env, kind: str) -> Mux:
    """The multiplexer backend of this repository for ``kind`` (private tmux socket per repo)."""
    from exo_cli.adapters.mux import get_mux

    return get_mux(kind, repo_id=env.repo_id, runtime_dir=env.runtime_dir, session=TMUX_SESSION)


def location(agent: Agent) -> Location | None:
    """The agent's recorded location, or None when it never started."""
    if not agent.location or not agent.location.get("mux"):
        return None
    from exo_cli.adapters.mux import Location

    return Location.from_dict(agent.location)


def states(env: Env, agents: Iterable[Agent], locations: dict[str, Location | None] | None = None
           ) -> dict[str, PaneState | None]:
    """Observe every agent with one listing call per multiplexer kind; None = no location.

    ``locations`` (agent id -> ``location(agent)``), when given, is used instead of reading
    each record's location again.
    """
    by_kind: dict[str, list[tuple[Agent, Location]]] = {}
    out: dict[str, PaneState | None] = {}
    for a in agents:
        loc = locations[a.id] if locations is not None else location(a)
        if loc is None:
            out[a.id] = None
        else:
            by_kind.setdefault(loc.mux, []).append((a, loc))
    for kind, pairs in by_kind.items():
        mux = mux_for(env, kind)
        if kind == "tmux":
            listing = mux.list_states()
        else:
            listing = mux.list_states([loc for _, loc in pairs])  # type: ignore[call-arg]
        for a, loc in pairs:
            out[a.id] = listing.get(loc.key)
    return out


def refresh(env: Env, agents: list[Agent]) -> list[Agent]:
    """Status from hooks first, liveness second: a live-status agent whose pane or process is gone is dead."""
    locations = {a.id: location(a) for a in agents}
    observed = states(env, [a for a in agents if a.status not in (DEAD, DONE)], locations)
    out: list[Agent] = []
    for a in agents:
        if a.id in observed and locations[a.id] is not None:
            st = observed[a.id]
            if st is None or not st.alive:
                reason = "pane gone" if st is None else f"process exited ({st.dead_status})"
                env.store.update_agent(a.id, status=DEAD, status_reason=reason)
                env.store.event("dead", a.id, {"reason": reason})
                if a.parent:
                    env.store.bell.ring(a.parent)
                a = env.store.agent(a.id) or a
        out.append(a)
    return check_dialogs(env, out, observed)


def check_dialogs(env: Env, agents: list[Agent], observed: dict[str, PaneState | None]) -> list[Agent]:
    """Mark agents stuck in ``starting`` past ``agent.start_timeout`` that show a startup dialog.

    Only agents still starting after the timeout, alive, and in a pane are looked at, with
    one screen capture each; everyone else costs nothing.
    """
    import time

    candidates = [
        a for a in agents
        if a.status == STARTING and a.spec.get("phase") == "spawned" and a.mux in PANE_MUXES
        and (st := observed.get(a.id)) is not None and st.alive
    ]  # fmt: skip
    if not candidates:
        return agents
    configured = env.config.get("agent.start_timeout")
    timeout = float(60 if configured is None else configured)
    now = time.time()
    changed: dict[str, Agent] = {}
    for a in candidates:
        if now - (a.status_at or a.created_at) < timeout:
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
        env.store.update_agent(a.id, status=BLOCKED_ON_DIALOG, status_reason=reason)
        env.store.event("blocked-on-dialog", a.id, {"dialog": hit})
        if a.parent:
            env.store.post("event", a.id, a.parent, f"[BLOCKED {a.id}] its CLI shows a dialog: {hit}",
                           data={"event": "blocked-on-dialog", "dialog": hit})
        changed[a.id] = env.store.agent(a.id) or a
    return [changed.get(a.id, a) for a in agents]


def stop_agent(env: Env, agent: Agent, *, reason: str = "killed", status: str = DEAD) -> bool:
    """Stop the agent's process group (pane kept readable); record ``status``; True if it was alive."""
    loc = location(agent)
    was_alive = False
    if loc is not None:
        mux = mux_for(env, loc.mux)
        was_alive = mux.alive(loc)
        if was_alive:
            mux.kill(loc)
    if agent.status not in (DONE,) or status == DONE:
        env.store.update_agent(agent.id, status=status, status_reason=reason)
    env.store.event(reason, agent.id, {"was_alive": was_alive})
    if agent.parent:
        env.store.bell.ring(agent.parent)
    return was_alive
