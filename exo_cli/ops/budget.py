"""An agent's budget in dollars or tokens: told at 80%, stopped at the end of the turn that reaches it.

The operation ``exo budget`` is in ``ops/budgetset.py``, the team's budget in ``ops/teambudget.py``. The
budget lives in the agent's record (``spec["budget"]``: ``usd``, ``tokens``, ``warned``), set at spawn
(here or on another host: ``budget_for``) and raised by ``exo budget``. The stop hook (a custom agent:
``agentctl.went_idle``, on the usage it reported) calls ``verdict`` with the usage of the turn that
just ended: at 100% of its budget or the team's the agent is not continued, its status is
``over-budget`` (alive and idle at its input; messages to it are held), and its parent and the human
are told (``tell``); at 80% of its own it and its parent are told once. ``exo budget AGENT +N``
raises it and hands the held messages over. A turn is never cut short: the one that crosses the line
may overrun it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from exo_cli.ops.budgetspent import WARN_AT, Spent
from exo_cli.records import Agent, Usage

if TYPE_CHECKING:
    from collections.abc import Sequence

    from exo_cli.env import Env

def limits(agent: Agent) -> dict[str, Any] | None:
    """The agent's budget (``usd``, ``tokens``, ``warned``), or None."""
    b = agent.spec.get("budget")
    return b if isinstance(b, dict) and (b.get("usd") is not None or b.get("tokens") is not None) else None


def spent(env: Env, agent: Agent, turn: Sequence[Usage] = ()) -> Spent:
    """What ``agent`` used (with ``turn``, the usage of a turn not yet recorded) against its budget."""
    b = limits(agent) or {}
    tokens = agent.tokens + sum(u.total for u in turn)
    usd: float | None = None
    unpriced: list[str] = []
    if b.get("usd") is not None:
        from exo_cli.ops.cost import model_usage, prices, team_costs, total

        table = prices(env)
        rows = [*team_costs(env, [agent.id]).get(agent.id, []), *(model_usage(u, table) for u in turn)]
        t = total(rows)
        usd, unpriced = t.usd, t.unpriced
    return Spent(usd, tokens, b.get("usd"), b.get("tokens"), unpriced)


def verdict(env: Env, agent: Agent, turn: Sequence[Usage]) -> tuple[str | None, Spent | None]:
    """At the end of a turn: ("over", spent) at 100% of its budget or the team's, ("warn", spent) at 80% of
    its own not yet told, else (None, ...). The human is told of the team's 80% here (once)."""
    from exo_cli.ops import teambudget

    own: tuple[str | None, Spent | None] = (None, None)
    if limits(agent) is not None:
        s = spent(env, agent, turn)
        if s.share >= 1.0:
            return "over", s
        own = ("warn" if s.share >= WARN_AT and not (limits(agent) or {}).get("warned") else None), s
    team = teambudget.verdict(env, agent, turn)
    from exo_cli import fault

    fault.point("budget.judged", env.environ)
    return team if team[0] == "over" else own


def tell(env: Env, agent: Agent, budget: str, s: Spent) -> str:
    """Tell the agent and its parent it used 80% of its budget, or its parent and the human it is over
    (the team's: the human once, and every agent resting at its input stops too)."""
    from exo_cli.ops import delivery as msgs
    from exo_cli.records import OVER_BUDGET, ROOT

    spent_text = s.text()
    if budget == "warn":
        msgs.post(env, msgs.EVENT, agent.parent or ROOT, agent.id, f"You have used 80% of your budget ({spent_text}); "
                  "at 100% exo starts no new turn until it is raised.", data={"event": "budget-warning"})
        msgs.notify_parent(env, agent, "budget-warning", f"{agent.name} used 80% of its budget: {spent_text}")
        return "budget-warning"
    if s.team:
        from exo_cli.ops import teambudget

        teambudget.stopped(env, agent, s)
        if agent.status != OVER_BUDGET and (agent.parent or ROOT) != ROOT:  # the human heard it once, above
            msgs.notify_parent(env, agent, OVER_BUDGET, f"{agent.name} stopped: the team is over its budget "
                               f"({spent_text})")
        return OVER_BUDGET
    if agent.status != OVER_BUDGET:  # told once when it stops, not at each overrun turn the human starts
        msgs.notify_parent(env, agent, OVER_BUDGET, f"{agent.name} is over its budget: {spent_text}. Raise it with "
                           f"`exo budget {agent.id} +N` (dollars) or `+N --tokens`.")
        from exo_cli.ops import attention

        attention.signal(env, OVER_BUDGET, agent, f"over its budget: {spent_text}")
    return OVER_BUDGET


def with_warned(agent: Agent, warned: bool) -> dict[str, Any]:
    """The agent's spec with its budget's ``warned`` flag set."""
    return {**agent.spec, "budget": {**(limits(agent) or {}), "warned": warned}}


def lead_left(env: Env, kind: str) -> float | int | None:
    """What the calling team lead has left of its own budget of ``kind`` (``usd``/``tokens``); None when unbudgeted.

    A lead gives a child at most that, at spawn and when it raises the child's budget later.
    """
    from exo_cli.errors import StateError

    lead = env.caller_agent()
    own = limits(lead) if lead is not None else None
    if lead is None or own is None or own.get(kind) is None:
        return None
    s = spent(env, lead)
    used = s.usd if kind == "usd" else s.tokens
    if used is None:
        raise StateError("Your dollar budget cannot be measured (a model you used has no price): you cannot "
                         "give a child a part of it", hint='Set the price with [prices."MODEL"].')
    left = max(0, own[kind] - used)
    return round(left, 6) if kind == "usd" else int(left)


def budget_for(env: Env, target: Env, backend: str, *, usd: float | None, tokens: int | None) -> dict[str, Any]:
    """The budget each agent of a spawn gets: the one given, else ``[budget] agent_usd`` / ``agent_tokens``.

    A team lead with a budget gives a child at most what it has left of it, and by default just
    that. Refused while the team is over its budget, and a dollar budget when the model the agent
    will use is known now and has no price (``adapters/agentmodel.py``).
    """
    from exo_cli.errors import StateError
    from exo_cli.ops import teambudget

    if env.via_host is None:  # the human's side: a changed [budget] team_* takes effect now
        teambudget.take_config(target)
    teambudget.refuse_spawn(target)
    given = {"usd": usd if usd is not None else (target.config.get("budget.agent_usd") or None),
             "tokens": tokens if tokens is not None else (target.config.get("budget.agent_tokens") or None)}
    for kind in ("usd", "tokens"):
        left = lead_left(env, kind)
        if left is None:
            continue
        asked = given[kind]
        if asked is not None and asked > left:
            raise StateError(f"You have {left:,} {'dollars' if kind == 'usd' else 'tokens'} left of your budget: "
                             f"a child cannot get {asked:,}", hint="Give less, or ask your parent for more.",
                             left=left)
        if asked is None:
            given[kind] = left
    out = {k: v for k, v in given.items() if v is not None}
    if out.get("usd") is not None or (teambudget.limits(target) or {}).get("usd") is not None:
        refuse_unpriced(target, backend)
    return out


def refuse_unpriced(target: Env, backend: str) -> None:
    """A dollar budget (the agent's or the team's) for an agent whose model is known now and has no price:
    StateError naming it. A model that cannot be known before the agent starts is checked when it is used."""
    from exo_cli.adapters.agentmodel import known_model
    from exo_cli.ops.cost import prices

    args = list((target.config.get("agent.args") or {}).get(backend, []) or [])
    model = known_model(backend, args, target.environ, target.repo.root)
    if model is None or prices(target).of(model) is not None:
        return
    from exo_cli.errors import StateError

    raise StateError(f"{backend} will use the model {model!r}, which has no price: a dollar budget cannot be measured",
                     hint=f'Set its price with [prices."{model}"] (input, output, cache_write, cache_read per million '
                     "tokens), or give a token budget (--budget-tokens) instead.", model=model, backend=backend)
