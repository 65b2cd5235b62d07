"""Where recorded agents run: their multiplexer, their location, one batched observation.

The low floor of agent control, with no other operation module below it, so that every
operation can find an agent's pane or process (delivery, spawn, ``agentctl``) without
import circles. ``agentctl`` builds the watching and stopping on top of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from exo_cli.records import DEAD, DONE, Agent

if TYPE_CHECKING:
    from exo_cli.adapters.mux import Location, Mux, PaneState
    from exo_cli.env import Env

TMUX_SESSION = "exo"


def mux_for(env: Env, kind: str) -> Mux:
    """The multiplexer backend of this repository for ``kind`` (private tmux socket per repo)."""
    from exo_cli.adapters.mux import get_mux

    return get_mux(kind, repo_id=env.repo_id, runtime_dir=env.runtime_dir, session=TMUX_SESSION)


def runner_state(env: Env, loc: Location) -> dict[str, Any]:
    """What a headless agent's runner last wrote (state, mode, program...); {} for any other location."""
    from exo_cli.adapters.mux.headless import Headless

    mux = mux_for(env, loc.mux) if loc.mux == "headless" else None
    return mux.runner_state(loc) if isinstance(mux, Headless) else {}


def location(agent: Agent) -> Location | None:
    """The agent's recorded location, or None when it never started."""
    if not agent.location or not agent.location.get("mux"):
        return None
    from exo_cli.adapters.mux import Location

    return Location.from_dict(agent.location)


def service_locations(agent: Agent) -> list[Location]:
    """Where the agent's services run (a tmux window or headless process; Zellij side panes)."""
    from exo_cli.adapters.mux import Location
    from exo_cli.errors import InvalidInput

    raw = [agent.spec.get("services_location"), *(agent.spec.get("services_locations") or [])]
    out = []
    for d in raw:
        if isinstance(d, dict) and d.get("mux"):
            try:
                out.append(Location.from_dict(d))
            except (InvalidInput, TypeError):
                continue
    return out


def capture(env: Env, locs: list[Location], lines: int) -> list[str]:
    """The last ``lines`` lines of each location, in order: one call per multiplexer kind where it can batch."""
    by_kind: dict[str, list[int]] = {}
    for i, loc in enumerate(locs):
        by_kind.setdefault(loc.mux, []).append(i)
    out = [""] * len(locs)
    for kind, idx in by_kind.items():
        mux = mux_for(env, kind)
        batch = getattr(mux, "capture_many", None)
        texts = batch([locs[i] for i in idx], lines) if batch else [mux.capture(locs[i], lines) for i in idx]
        for i, text in zip(idx, texts, strict=True):
            out[i] = text
    return out


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
        listing = mux_for(env, kind).list_states([loc for _, loc in pairs])
        for a, loc in pairs:
            out[a.id] = listing.get(loc.key)
    return out


def alive_ids(env: Env, agents: Iterable[Agent]) -> set[str]:
    """Ids of the agents whose pane or process runs, or that have not started yet (no writes).

    For counting and ownership questions (the agent limit, who works on a bead); recording
    what changed is ``agentctl.refresh``'s.
    """
    agents = [a for a in agents if a.status not in (DEAD, DONE)]
    elsewhere = {a.id for a in agents if not env.runs_here(a)}  # observed by exo there: live as recorded
    observed = states(env, [a for a in agents if a.id not in elsewhere])
    return elsewhere | {a.id for a in agents if location(a) is None or ((st := observed.get(a.id)) is not None
                                                                       and st.alive)}
