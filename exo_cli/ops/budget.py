"""An agent's budget in dollars or tokens: told at 80%, stopped at the end of the turn that reaches it.

The operation ``exo budget`` is in ``ops/budgetset.py``. The budget lives in the agent's record (``spec["budget"]``: ``usd``, ``tokens``, ``warned``), set
and raised by ``exo budget``. The stop hook calls ``verdict`` with the usage of the turn that just
ended: at 100% the agent is not continued, its status is ``over-budget`` (alive and idle at its
input; messages to it are held), and its parent and the human are told; at 80% it and its parent
are told once. ``exo budget AGENT +N`` raises it and hands the held messages over. A turn is never
cut short: the one that crosses the line may overrun it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from exo_cli.records import Agent, Usage

if TYPE_CHECKING:
    from collections.abc import Sequence

    from exo_cli.env import Env

WARN_AT = 0.8


@dataclass
class Spent:
    """What an agent has used against its budget, and the budget."""

    usd: float | None  # None: a model it used has no price
    tokens: int
    budget_usd: float | None
    budget_tokens: int | None
    unpriced: list[str]

    @property
    def share(self) -> float:
        """The largest share of a budget used (1.0 and more: over), counting an unknown price as over."""
        shares = [0.0]
        if self.budget_tokens is not None:
            shares.append(self.tokens / self.budget_tokens if self.budget_tokens else float("inf"))
        if self.budget_usd is not None:
            shares.append(float("inf") if self.usd is None else
                          self.usd / self.budget_usd if self.budget_usd else float("inf"))
        return max(shares)

    def text(self) -> str:
        parts = []
        if self.budget_tokens is not None:
            parts.append(f"{self.tokens:,} of {self.budget_tokens:,} tokens")
        if self.budget_usd is not None:
            used = "price unknown (" + ", ".join(self.unpriced) + ")" if self.usd is None else f"${self.usd:.2f}"
            parts.append(f"{used} of ${self.budget_usd:.2f}")
        return "; ".join(parts)


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
    """At the end of a turn: ("over", spent) at 100%, ("warn", spent) at 80% not yet told, else (None, ...)."""
    if limits(agent) is None:
        return None, None
    s = spent(env, agent, turn)
    if s.share >= 1.0:
        return "over", s
    if s.share >= WARN_AT and not (limits(agent) or {}).get("warned"):
        return "warn", s
    return None, s


def with_warned(agent: Agent, warned: bool) -> dict[str, Any]:
    """The agent's spec with its budget's ``warned`` flag set."""
    return {**agent.spec, "budget": {**(limits(agent) or {}), "warned": warned}}


def budget_for(env: Env, target: Env, backend: str, *, usd: float | None, tokens: int | None) -> dict[str, Any]:
    """The budget each agent of a spawn gets: the one given, else ``[budget] agent_usd`` / ``agent_tokens``.

    A team lead with a budget gives a child at most what it has left of it, and by default just
    that. A custom agent has no stop hook to stop it: a budget for one is refused.
    """
    from exo_cli.errors import StateError

    given = {"usd": usd if usd is not None else (target.config.get("budget.agent_usd") or None),
             "tokens": tokens if tokens is not None else (target.config.get("budget.agent_tokens") or None)}
    lead = env.caller_agent()
    own = limits(lead) if lead is not None else None
    if lead is not None and own is not None:
        s = spent(env, lead)
        for kind, used in (("usd", s.usd), ("tokens", s.tokens)):
            if own.get(kind) is None:
                continue
            if used is None:
                raise StateError("Your dollar budget cannot be measured (a model you used has no price): you cannot "
                                 "give a child a part of it", hint='Set the price with [prices."MODEL"].')
            left = max(0, own[kind] - used)
            if given[kind] is not None and given[kind] > left:
                raise StateError(f"You have {left:,} {'dollars' if kind == 'usd' else 'tokens'} left of your budget: "
                                 f"a child cannot get {given[kind]:,}", hint="Give less, or ask your parent for more.",
                                 left=left)
            if given[kind] is None:
                given[kind] = round(left, 6) if kind == "usd" else int(left)
    out = {k: v for k, v in given.items() if v is not None}
    if out and backend == "custom":
        raise StateError("A custom agent cannot have a budget: exo cannot stop it at the end of a turn",
                         hint="Spawn it without --budget-usd/--budget-tokens (or set [budget] for the other agents).")
    return out
