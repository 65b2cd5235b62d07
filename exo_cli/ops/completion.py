"""Shell completion: the values a TAB offers (agents, PRs, beads, configuration keys).

Not an operation (no ``@op``): the CLI's completion calls these directly. A TAB must be fast
and must never create anything, so every lookup first checks that the repository already has
exo state, reads only what it lists, and answers nothing (never an error) when anything is
missing or fails.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exo_cli.adapters.store import peek

# What a TAB can complete: the kind of value an argument or option takes. Each command offers
# what it can act on.
AGENT = "agent"  # an agent not reaped, dead ones too (their pane, diff and output can still be visited)
LIVE_AGENT = "live-agent"  # a running agent (exo kill)
LIVE_AGENTS = "live-agents"  # several running agents separated by commas (exo send)
ASKING_AGENT = "asking-agent"  # an agent whose question waits for its answer (exo answer)
AGENT_OR_BEAD = "agent-or-bead"  # an agent not done (or done by itself, its removal left to its parent), or an open bead
BEAD = "bead"  # any bead of the tracker (exo beads show)
READY_BEAD = "ready-bead"  # a bead that can be spawned now (exo spawn)
PR = "pr"  # any pull request number
OPEN_PR = "open-pr"  # an open pull request number (exo pr merge)
CONFIG_KEY = "config-key"
HOST = "host"  # a configured [hosts.NAME]
KINDS = (AGENT, LIVE_AGENT, LIVE_AGENTS, ASKING_AGENT, AGENT_OR_BEAD, BEAD, READY_BEAD, PR, OPEN_PR, CONFIG_KEY, HOST)

Candidate = tuple[str, str]  # (value, short description)
# Copies of names of env.py and records.py (tests/test_completion.py holds them equal): a TAB does
# without those modules' imports.
STATE_DIR_VAR = "EXO_STATE_DIR"
RETIRED_SEP = "@"  # in the id of a reaped agent, kept as history
DONE, DEAD = "done", "dead"  # the statuses of an agent that no longer runs; every other one is live
REMOVAL_DEFERRED = "completed by itself; removal deferred"  # a done agent whose worktree its parent removes


def candidates(kind: str, incomplete: str, *, cwd: str | None = None,
               environ: Mapping[str, str] | None = None) -> list[Candidate]:
    """The values of ``kind`` that start with ``incomplete``, each with a short description.

    Outside a repository, in one without exo state, or on any error: an empty list.
    """
    environ = os.environ if environ is None else environ
    try:
        if kind == CONFIG_KEY:
            return _config_keys(incomplete)
        if kind == HOST:
            return _hosts(cwd, environ, incomplete)
        if kind == LIVE_AGENTS:
            head, _, last = incomplete.rpartition(",")
            prefix = head + "," if head else ""
            taken = set(head.split(",")) if head else set()
            return [(prefix + v, h) for v, h in _agents(cwd, environ, last, kind) if v not in taken]
        if kind in (AGENT, LIVE_AGENT, ASKING_AGENT):
            return _agents(cwd, environ, incomplete, kind)
        if kind in (PR, OPEN_PR):
            return _prs(cwd, environ, incomplete, open_only=kind == OPEN_PR)
        if kind in (BEAD, READY_BEAD):
            return _beads(cwd, environ, incomplete, ready_only=kind == READY_BEAD)
        if kind == AGENT_OR_BEAD:
            agents = _agents(cwd, environ, incomplete, kind)
            named = {v for v, _ in agents}
            beads = _beads(cwd, environ, incomplete, ready_only=False, open_only=True)
            return agents + [c for c in beads if c[0] not in named]
    except Exception:  # noqa: BLE001 - a TAB shows nothing rather than an error
        return []
    return []


def _hosts(cwd: str | None, environ: Mapping[str, str], incomplete: str) -> list[Candidate]:
    """The configured hosts (read from the configuration files; nothing is reached)."""
    from exo_cli.env import Env

    table = Env(cwd, environ).config.peek("hosts") or {}  # names to complete: nothing is used
    return [(name, _short(str(entry.get("ssh")))) for name, entry in sorted(table.items()) if name.startswith(incomplete)]


def _short(text: str | None, n: int = 50) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _where(cwd: str | None, environ: Mapping[str, str]) -> peek.Where | None:
    """Where the state of the repository around ``cwd`` is, when it has any (found without running git)."""
    from exo_cli.adapters.gitdir import common_dir
    from exo_cli.adapters.store import peek

    if environ.get(STATE_DIR_VAR):
        state = Path(environ[STATE_DIR_VAR])
    else:
        common = common_dir(cwd or os.getcwd(), environ)
        if common is None:
            return None
        state = common / "exo"
    return peek.locate(state)


def _acts_on(kind: str, agent: peek.AgentRow, asking: set[str]) -> bool:
    """Whether a command completing ``kind`` can act on ``agent`` (never a reaped one)."""
    if RETIRED_SEP in agent.id:
        return False
    if kind in (LIVE_AGENT, LIVE_AGENTS):
        return agent.status not in (DONE, DEAD)
    if kind == ASKING_AGENT:
        return agent.id in asking
    if kind == AGENT_OR_BEAD:
        return agent.status != DONE or agent.status_reason == REMOVAL_DEFERRED
    return True


def _agents(cwd: str | None, environ: Mapping[str, str], incomplete: str, kind: str) -> list[Candidate]:
    from exo_cli.adapters.store import peek

    where = _where(cwd, environ)
    if where is None:
        return []
    asking = peek.asking(where) if kind == ASKING_AGENT else set()
    out: dict[str, str] = {}
    for a in peek.agents(where):
        if a.name.startswith(incomplete) and a.name not in out and _acts_on(kind, a, asking):
            out[a.name] = _short(f"{a.status} {a.role}: {a.task}".rstrip(": "))
    return list(out.items())


def _prs(cwd: str | None, environ: Mapping[str, str], incomplete: str, *, open_only: bool) -> list[Candidate]:
    from exo_cli.adapters.store import peek

    where = _where(cwd, environ)
    if where is None:
        return []
    return [(str(p.number), _short(f"{p.state}: {p.title}")) for p in peek.prs(where, open_only=open_only)
            if str(p.number).startswith(incomplete)]


def _beads(cwd: str | None, environ: Mapping[str, str], incomplete: str, *, ready_only: bool,
           open_only: bool = False) -> list[Candidate]:
    from exo_cli.adapters.beads import JsonlSource, short_id
    from exo_cli.env import Env

    try:
        # The tracker's JSONL export only: `bd` may start its daemon or import, and a TAB must not.
        folder = environ.get("BEADS_DIR") or str(Env(cwd=cwd, environ=environ).repo.root / ".beads")
        source = JsonlSource(folder)
        beads = source.ready() if ready_only else source.all()
        prefix = source.prefix
    except Exception:  # noqa: BLE001 - not in a repository, or no tracker: no beads to offer
        return []
    out = []
    for b in beads:
        if b.status == "tombstone" or (open_only and b.status == "closed"):
            continue
        short = short_id(b.id, prefix)
        # Offer the form the user started typing: the full id, or the id without the tracker's prefix.
        value = b.id if b.id.startswith(incomplete) else short if short.startswith(incomplete) else None
        if value is not None:
            out.append((value, _short(b.title)))
    return out


def _config_keys(incomplete: str) -> list[Candidate]:
    from exo_cli.config import SCHEMA

    return [(k, SCHEMA[k][1]) for k in sorted(SCHEMA) if k.startswith(incomplete)]
