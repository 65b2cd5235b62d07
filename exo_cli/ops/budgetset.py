"""``exo budget AGENT AMOUNT``: set or raise an agent's budget; one over its budget works again (``ops/budget.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from exo_cli.errors import InvalidInput, StateError
from exo_cli.ops.budget import WARN_AT, limits, spent
from exo_cli.records import OVER_BUDGET, ROOT, in_subtree
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.env import Env


@dataclass
class BudgetResult:
    agent_id: str
    name: str
    budget_usd: float | None
    budget_tokens: int | None
    usd: float | None  # what it used (None: price unknown)
    tokens: int
    status: str
    released: bool  # it was over budget and may work again
    delivered: list[int]  # the held messages handed over at once (the rest at its next rest)


def _amount(text: str, tokens: bool) -> tuple[bool, float]:
    raw = str(text).strip()
    relative = raw.startswith("+")
    try:
        value = float(raw[1:] if relative else raw)
    except ValueError:
        value = -1.0
    if not (value >= 0 and value < 1e15) or (tokens and value != int(value)):
        what = "a whole number of tokens" if tokens else "a number of dollars"
        raise InvalidInput(f"Invalid amount {raw[:40]!r}: expected {what}, or +N to raise it by N", field="amount")
    return relative, value


@op(
    "budget",
    cli="budget",
    tools=["budget"],
    roles=("tl",),
    help={"agent": "The agent whose budget to set or raise (a team lead: one of its descendants).",
          "amount": "The new budget, or +N to raise it by N: dollars, or tokens with {--tokens}.",
          "tokens": "The amount is tokens, not dollars."},
    flags={"tokens": "--tokens"},
)
def budget(env: Env, *, agent: str, amount: str, tokens: bool = False) -> BudgetResult:
    """Set or raise an agent's budget in dollars or tokens; an agent over its budget works again.

    At 80% of a budget the agent and its parent are told once; at 100% exo starts no new turn: the
    agent stays alive and idle with status `over-budget`, messages to it are held, and its parent
    and the human are told. Raising the budget above what it used releases it and hands the held
    messages over. The turn that crosses the line may overrun it. A team lead may budget its
    descendants only; a dollar budget needs a price for every model the agent used. A custom
    agent has no stop hook to stop it: refused.
    """
    from exo_cli.ops.messages import find_agent

    target = find_agent(env, agent)
    if target.id == ROOT:
        raise InvalidInput("The root has no budget", hint="Budget an agent: `exo budget AGENT 5`.")
    if target.backend == "custom":  # budgets stop an agent at its stop hook: a custom agent has none
        raise StateError(f"{target.name} is a custom agent: exo cannot stop it at the end of a turn",
                         hint="Budgets apply to agents run by Claude Code, Gemini CLI, Codex CLI or the demo agent.",
                         agent=target.id)
    caller = env.caller
    if not caller.is_human and not in_subtree(env.store.agents(), caller.agent_id, target.id):
        raise StateError(f"{target.name} is not one of your descendants: you may budget only those",
                         hint="Ask your parent, or the human, to raise it.", agent=target.id)
    relative, value = _amount(amount, tokens)
    key = "tokens" if tokens else "usd"
    b = dict(limits(target) or {})
    before = b.get(key)
    new: float | int = (float(before or 0) + value) if relative else value
    b[key] = int(new) if tokens else round(float(new), 6)
    updated = target._replace(spec={**target.spec, "budget": b})
    s = spent(env, updated)
    if not tokens and s.usd is None:
        raise StateError(f"{target.name} used a model without a price ({', '.join(s.unpriced)}): a dollar "
                         "budget cannot be measured", hint='Set its price with [prices."MODEL"], or budget '
                         "tokens with --tokens.", agent=target.id, models=s.unpriced)
    b["warned"] = s.share >= WARN_AT
    env.store.update_agent(target.id, spec={**target.spec, "budget": b})
    released = False
    delivered: list[int] = []
    if target.status == OVER_BUDGET and s.share < 1.0:
        from exo_cli.records import IDLE

        released = env.store.update_agent(target.id, if_status=OVER_BUDGET, status=IDLE, status_reason=None)
        if released:
            from exo_cli.ops.delivery import deliver_pending

            fresh = env.store.agent(target.id)
            delivered = deliver_pending(env, [fresh]) if fresh else []
    after = env.store.agent(target.id) or target
    return BudgetResult(target.id, target.name, b.get("usd"), b.get("tokens"), s.usd, s.tokens, after.status,
                        released, delivered)
