"""Conflict foresight: would an agent's branch conflict with a live sibling's branch, or with its base?

After each of an agent's turns the stop hook checks (``hooks._foresight_due``) whether the
agent's branch, its base or a live sibling's branch moved since the last check (read from the
ref files: no git process); when one did, it starts ``exo conflicts AGENT --check`` in the
background (``turnend.after_exit``: one ``posix_spawn``, shared with the turn's checkpoint; the
hook's answer never waits for it). That check runs ``git merge-tree --write-tree`` of the
branch against its base and against each live sibling's branch (no checkout is touched),
records the conflicting paths under ``conflicts:<agent>`` and, once per new conflict with a
sibling, posts an event to both agents that they get at their next turn (a conflict with the
base is recorded and shown; the stop hook's own rebase onto the base tells the agent).
``exo conflicts`` (tool ``list_conflicts``) and the board show what is recorded.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from exo_cli.records import DEAD, DONE, ROOT, Agent
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.env import Env
    from exo_cli.ops.turnend import Later

KEY = "conflicts:{agent}"
TOLD = "conflict-told:{digest}"


@dataclass(frozen=True)
class Conflict:
    agent: str
    other: str  # a sibling agent's id, or "base"
    branch: str
    other_branch: str
    paths: list[str]
    since: float


@dataclass(frozen=True)
class ConflictsResult:
    conflicts: list[Conflict]
    checked: list[str]  # the agents whose branches were merged just now (with check)
    told: list[str]  # agents told about a new conflict just now


def _siblings(agents: list[Agent], me: Agent) -> list[Agent]:
    """Live siblings with a branch of their own: one working on the base itself (``--no-worktree``) or on
    this agent's branch is not a sibling branch (conflicts with the base are the stop hook's rebase's)."""
    return [a for a in agents if a.parent == me.parent and a.id != me.id and a.id != ROOT and a.branch
            and a.branch not in (me.branch, me.base_branch) and a.status not in (DEAD, DONE)]


def recorded(env: Env, agent_id: str) -> dict[str, Any]:
    """What the last check of ``agent_id`` found: {other: {branch, other_branch, paths, since}}."""
    raw = env.store.kv_get(KEY.format(agent=agent_id))
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def check_command(agent: Agent) -> Later:
    """The background job of the check (``exo conflicts AGENT --check``, run by ``turnend.after_exit``)."""
    from exo_cli.ops import turnend

    return turnend.Later("conflicts", {"agent": agent.id, "check": True},
                 ["-C", agent.repo or agent.worktree or "/", "conflicts", agent.id, "--check"])


def _merge(git: Any, ours: str, theirs: str) -> list[str] | None:
    """The conflicting paths of merging ``theirs`` into ``ours`` (refs/heads names), None when either is gone."""
    from exo_cli.errors import ExoError

    if not (git.ref_exists(f"refs/heads/{ours}") and git.ref_exists(f"refs/heads/{theirs}")):
        return None
    try:
        result = git.merge_tree(f"refs/heads/{ours}", f"refs/heads/{theirs}")
    except ExoError:
        return None
    return sorted(set(result.conflicts))


def run_check(env: Env, agent: Agent) -> tuple[dict[str, Any], list[str]]:
    """Merge ``agent``'s branch with its base and each live sibling's; record and tell; (found, told)."""
    from exo_cli.adapters.git import Git
    from exo_cli.ops import checkout
    from exo_cli.ops import delivery as msgs

    checkout.sync_owners(env, [str(agent.branch)])  # an agent's clone: its branch as the clone has it
    git = Git(env.repo.root)
    before = recorded(env, agent.id)
    found: dict[str, Any] = {}
    now = time.time()
    pairs: list[tuple[str, str, Agent | None]] = []
    if agent.base_branch and agent.branch:
        pairs.append(("base", agent.base_branch, None))
    for s in _siblings(env.store.agents(), agent):
        pairs.append((s.id, str(s.branch), s))
    told: list[str] = []
    for other, other_branch, sibling in pairs:
        paths = _merge(git, other_branch, str(agent.branch))
        if not paths:
            continue
        since = (before.get(other) or {}).get("since", now) if (before.get(other) or {}).get("paths") == paths else now
        found[other] = {"branch": agent.branch, "other_branch": other_branch, "paths": paths, "since": since}
        if sibling is None:
            continue  # recorded and shown; the stop hook's rebase onto the base tells the agent itself
        import hashlib

        digest = hashlib.sha1(json.dumps([sorted([agent.id, other]), paths]).encode()).hexdigest()[:20]
        if not env.store.kv_claim(TOLD.format(digest=digest), str(now)):
            continue  # told already (by this check or the sibling's)
        listed = ", ".join(paths[:10]) + (f" and {len(paths) - 10} more" if len(paths) > 10 else "")
        for me, them, mine, theirs in ((agent, sibling, agent.branch, other_branch),
                                       (sibling, agent, other_branch, agent.branch)):
            msgs.post_notice(env, msgs.EVENT, agent.id, me.id,
                      f"Heads-up: your branch {mine} conflicts with {them.name}'s branch {theirs} in: {listed}. "
                      f"Whoever merges second will have to resolve it: agree with {them.name} "
                      f"(`exo send {them.id} ...`) who changes what, or ask your parent.",
                      data={"event": "conflict", "other": them.id, "paths": paths})
            told.append(me.id)
    env.store.kv_set(KEY.format(agent=agent.id), json.dumps(found, separators=(",", ":")))
    return found, told


def _rows(agent_id: str, data: dict[str, Any], live: set[str]) -> list[Conflict]:
    """The recorded conflicts of ``agent_id`` with its base or with a sibling still live."""
    return [Conflict(agent=agent_id, other=other, branch=str(v.get("branch")), other_branch=str(v.get("other_branch")),
                     paths=list(v.get("paths") or []), since=float(v.get("since") or 0))
            for other, v in data.items() if other == "base" or other in live]


def foreseen(env: Env, live: set[str]) -> dict[str, list[Conflict]]:
    """Each live agent's foreseen conflicts, a conflict between two siblings on both sides.

    The check of one agent records a conflict under that agent only (``conflicts:<agent>``)
    until the sibling's own check runs; here the sibling gets the mirrored entry too
    (``agent`` it, ``other`` the one that found it), so neither side of a pair looks clear.
    An agent's own record comes first; a pair both recorded shows once per side.
    """
    own = {aid: _rows(aid, recorded(env, aid), live) for aid in sorted(live)}
    out: dict[str, dict[str, Conflict]] = {aid: {c.other: c for c in rows} for aid, rows in own.items()}
    for aid, rows in own.items():
        for c in rows:
            if c.other != "base":
                mirror = Conflict(agent=c.other, other=aid, branch=c.other_branch, other_branch=c.branch,
                                  paths=c.paths, since=c.since)
                out.setdefault(c.other, {}).setdefault(aid, mirror)
    return {aid: list(found.values()) for aid, found in out.items() if found}


@op(
    "conflicts",
    cli="conflicts",
    tools=["list_conflicts"],
    roles=("tl", "dev"),
    idempotent=True,
    help={
        "agent": "Only this agent's conflicts (default: every agent's).",
        "check": "Merge the agent's branch with its base and its live siblings' branches now (git merge-tree).",
    },
)
def conflicts(env: Env, *, agent: str | None = None, check: bool = False) -> ConflictsResult:
    """List the conflicts foreseen between agents' branches, and with their base branches.

    After each turn of an agent, exo merges its branch (without touching any checkout) with
    its base and with each live sibling's branch, and records the files that would conflict;
    both agents get a note once per new conflict. With {--check}, that check runs now for
    the agent.
    """
    from exo_cli.errors import InvalidInput, NotFound

    if check and agent is None:
        raise InvalidInput("Name the agent to check", field="agent")
    everyone = [a for a in env.store.agents() if a.id != ROOT] if env.has_state() else []
    live = {a.id for a in everyone if a.status not in (DEAD, DONE)}
    checked: list[str] = []
    told: list[str] = []
    if agent is not None:
        rec = next((a for a in everyone if a.id == agent), None)
        if rec is None:
            raise NotFound(f"No agent named {agent!r}", hint="List agents with `exo agents`.", agent=agent)
        if check:
            _, told = run_check(env, rec)
            checked.append(rec.id)
        rows = _rows(rec.id, recorded(env, rec.id), live)
        rows += [c for a in everyone if a.id != rec.id and a.id in live
                 for c in _rows(a.id, recorded(env, a.id), live) if c.other == rec.id]
    else:
        rows = [c for a in everyone if a.id in live for c in _rows(a.id, recorded(env, a.id), live)]
    return ConflictsResult(conflicts=rows, checked=checked, told=told)
