"""The team's budget in dollars and tokens: every agent's usage (retired ones too, every host of a shared store).

It lives in the store (``KEY``: ``usd``, ``tokens``, and ``config``, the configuration's values last
taken), so the stop hooks of every host read the same one. ``[budget] team_usd`` / ``team_tokens``
are taken into it by ``exo spawn`` and ``exo budget --team`` on the human's side when they changed
since they were last taken; ``exo budget --team AMOUNT`` sets it at once. The last one set wins.

At 80% the human is told once (an event to the root and a ``budget-warning`` notification); at 100%
every agent stops at the end of its current turn exactly as one over its own budget does (status
``over-budget`` with the team as the reason, messages held), the agents resting at their input stop
at once, and new spawns are refused. Raising it releases every agent it held.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from exo_cli.ops.budgetspent import WARN_AT, Spent, team_limits, team_record
from exo_cli.records import AT_REST, IDLE, OVER_BUDGET, ROOT, TEAM_BUDGET_KEY, TEAM_OVER, Agent

if TYPE_CHECKING:
    from collections.abc import Sequence
    from contextlib import AbstractContextManager

    from exo_cli.env import Env
    from exo_cli.ops.cost import CostTotal
    from exo_cli.records import Usage

KEY = TEAM_BUDGET_KEY
REASON = TEAM_OVER
record = team_record  # the stored record (``usd``, ``tokens``, ``config``)
limits = team_limits  # the team's budget in force, or None
HINT = "Raise it with `exo budget --team +N` (dollars) or `exo budget --team +N --tokens` (the human)."


def write(env: Env, rec: dict[str, Any]) -> None:
    env.store.kv_set(KEY, json.dumps(rec, separators=(",", ":")))


def locked(env: Env) -> AbstractContextManager[bool]:
    """The lock of the team's budget record (every host): its read-modify-writes never lose one another."""
    return env.store.named_lock("budget-team", host=env.host_name, wait=None)


def take_config(env: Env) -> None:
    """Take ``[budget] team_usd`` / ``team_tokens`` into the store when they changed since last taken.

    Run on the human's side (``exo spawn``, ``exo budget --team``), never by a hook: a kind whose
    configured value changed takes it (0: none); a value set by ``exo budget --team`` stays until then.
    A raise releases the agents the team's budget held. Only the human's own call takes it: an agent
    spawning reads its worktree's exo.toml, which it may have written itself.
    """
    if not env.caller.is_human:
        return
    if not (env.config.get("budget.team_usd") or env.config.get("budget.team_tokens") or record(env)):
        return  # no team budget now nor ever: nothing to take (and no lock to wait for)
    with locked(env):
        take_config_locked(env)


def take_config_locked(env: Env) -> None:
    """``take_config`` with ``locked`` held."""
    cfg = {"usd": env.config.get("budget.team_usd") or None, "tokens": env.config.get("budget.team_tokens") or None}
    rec = record(env)
    raw = rec.get("config")
    was: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if was == cfg or (not rec and not any(cfg.values())):
        return
    for kind, value in cfg.items():
        if was.get(kind) != value:
            rec[kind] = value
    rec["config"] = cfg
    write(env, rec)
    release(env)


def used(env: Env, turn: Sequence[Usage] = ()) -> CostTotal:
    """Every agent's tokens and dollars (retired ones too; with ``turn``, a turn not yet recorded)."""
    from exo_cli.ops.cost import model_usage, prices, team_costs, total

    table = prices(env)
    rows = [r for agent_rows in team_costs(env).values() for r in agent_rows]
    return total([*rows, *(model_usage(u, table) for u in turn)])


def team_spent(env: Env, turn: Sequence[Usage] = ()) -> Spent | None:
    """What the whole team used against its budget (with ``turn``, a turn not yet recorded); None without one."""
    b = limits(env)
    if b is None:
        return None
    t = used(env, turn)
    return Spent(t.usd if b.get("usd") is not None else None, t.tokens, b.get("usd"), b.get("tokens"),
                 t.unpriced, team=True)


def over(env: Env) -> Spent | None:
    """The team's spending when it reached its budget, else None."""
    s = team_spent(env)
    return s if s is not None and s.share >= 1.0 else None


def verdict(env: Env, agent: Agent, turn: Sequence[Usage]) -> tuple[str | None, Spent | None]:
    """At the end of ``agent``'s turn: ("over", spent) when the team reached its budget; the human told at 80%."""
    s = team_spent(env, turn)
    if s is None:
        return None, None
    if s.share >= 1.0:
        return "over", s
    if s.share >= WARN_AT and env.store.kv_claim(_told("warned", s), "1"):
        from exo_cli.ops import attention
        from exo_cli.ops.delivery import EVENT, post

        text = f"The team has used 80% of its budget ({s.text()}); at 100% every agent stops at the end of its turn."
        post(env, EVENT, agent.id, ROOT, text, data={"event": "budget-warning", "team": True})
        attention.signal(env, "budget-warning", agent, text, team=True)
    return None, s


def _told(what: str, s: Spent) -> str:
    """The key claimed once per budget (a raised budget is told again at its own 80% and 100%)."""
    return f"{KEY}:{what}:{s.budget_usd}:{s.budget_tokens}"


def stopped(env: Env, agent: Agent, s: Spent) -> None:
    """The team reached its budget at the end of ``agent``'s turn: the human is told once and every agent
    resting at its input stops now (the others at the end of their turn, by their own stop hook). When the
    human raised it since the turn was judged, whatever was just held is released instead."""
    reason = f"over budget: {s.text()}"[:500]
    for other in env.store.agents():
        if other.id not in (ROOT, agent.id) and other.live and other.status in AT_REST:  # failed-turn rests too
            env.store.update_agent(other.id, if_status=other.status, status=OVER_BUDGET, status_reason=reason)
    if over(env) is None:  # raised meanwhile: `exo budget --team` released before these were held
        release(env)
        return
    if env.store.kv_claim(_told("over", s), "1"):
        from exo_cli.ops import attention
        from exo_cli.ops.delivery import EVENT, post

        text = f"The team is over its budget: {s.text()}. Every agent stops at the end of its turn. {HINT}"
        post(env, EVENT, agent.id, ROOT, text, data={"event": OVER_BUDGET, "team": True})
        attention.signal(env, OVER_BUDGET, agent, f"the team is over its budget: {s.text()}", team=True)


def after_usage(env: Env, agent: Agent) -> None:
    """A custom agent reported usage (``exo usage``): when that took the team over its budget, the agents
    resting at their input stop now and the human is told (the reporter stops when it comes to rest)."""
    s = over(env)
    if s is not None:
        stopped(env, agent, s)


def settle(env: Env, rested: Agent | None, budget: str | None, spent: Spent | None) -> tuple[str | None, Spent | None]:
    """A stop hook's second look: ("over", spent) when the team went over its budget since the hook judged the
    turn (another agent's turn recorded meanwhile), else ``budget, spent`` as they were. With ``rested`` (the
    agent the hook has recorded idle), that agent's status becomes ``over-budget`` (unless it changed)."""
    s = over(env)
    if s is None or rested is not None and not env.store.update_agent(
            rested.id, if_status=IDLE, status=OVER_BUDGET, status_reason=f"over budget: {s.text()}"[:500]):
        return budget, spent
    return "over", s


def held_by(agent: Agent, delivery: str) -> str | None:
    """Whose budget held a message to ``agent`` (its record before the message): "team", "agent", or None."""
    if delivery != "held":
        return None
    return "team" if agent.status != OVER_BUDGET or holds(agent) else "agent"


def holds(agent: Agent) -> bool:
    """Whether ``agent`` is held by the team's budget (rather than its own)."""
    return agent.status == OVER_BUDGET and (agent.status_reason or "").startswith(REASON)


def release(env: Env) -> list[str]:
    """Release the agents the team's budget held, when it no longer is over; the ids released."""
    if over(env) is not None:
        return []
    out = []
    for a in env.store.agents():
        if holds(a) and release_one(env, a) is not None:
            out.append(a.id)
    return out


def release_one(env: Env, agent: Agent) -> list[int] | None:
    """Let an agent over a budget work again (status ``idle``) and hand it its oldest held message, on its
    host; None when another process changed its status first, else the ids of the messages handed over."""
    from exo_cli.records import IDLE, OVER_BUDGET

    if not env.store.update_agent(agent.id, if_status=OVER_BUDGET, status=IDLE, status_reason=None):
        return None
    fresh = env.store.agent(agent.id)
    if fresh is None:
        return []
    if env.runs_here(fresh):
        from exo_cli.ops.delivery import deliver_pending

        return deliver_pending(env, [fresh])
    from exo_cli.ops.delivery import TYPED_KINDS
    from exo_cli.ops.remote import deliver_there

    held = env.store.messages(recipient=fresh.id, kinds=list(TYPED_KINDS), unconsumed=True, undelivered=True,
                              limit=1)
    return [m.id for m in held if deliver_there(env, fresh, m.id) == "typed"]


def refuse_spawn(env: Env) -> None:
    """A spawn while the team is over its budget: StateError with the hint to raise it."""
    s = over(env)
    if s is not None:
        from exo_cli.errors import StateError

        raise StateError(f"The team is over its budget ({s.text()}): no new agent starts", hint=HINT,
                         budget_usd=s.budget_usd, budget_tokens=s.budget_tokens, tokens=s.tokens, usd=s.usd)


def would_hold(env: Env, recipient: Agent) -> bool:
    """Whether a message to ``recipient`` resting at its input is held because the team is over its budget."""
    return recipient.id != ROOT and recipient.status in AT_REST and over(env) is not None
