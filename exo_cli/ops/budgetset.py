"""``exo budget AGENT AMOUNT``: set or raise an agent's budget; one over its budget works again (``ops/budget.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from exo_cli.errors import InvalidInput, StateError
from exo_cli.ops.budget import limits, spent
from exo_cli.ops.budgetspent import WARN_AT
from exo_cli.ops.teambudget import release_one
from exo_cli.records import OVER_BUDGET, ROOT, in_subtree
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.env import Env
    from exo_cli.ops.budgetspent import Spent
    from exo_cli.records import Agent


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
    agents: list[str] = field(default_factory=list)  # with team: the agents its raise released


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
          "tokens": "The amount is tokens, not dollars.",
          "team": "Set or raise the whole team's budget instead of an agent's (the human only)."},
    flags={"tokens": "--tokens", "team": "--team"},
)
def budget(env: Env, *, amount: str, agent: str | None = None, tokens: bool = False,
           team: bool = False) -> BudgetResult:
    """Set or raise an agent's budget, or with {--team} the team's, in dollars or tokens; what it held works again.

    At 80% of an agent's budget the agent and its parent are told once; at 100% exo starts no new
    turn: the agent stays alive and idle with status `over-budget`, messages to it are held, and its
    parent and the human are told. The team's budget counts every agent (retired ones too): at 80%
    the human is told once, at 100% every agent stops at the end of its turn and no new one is
    spawned. Raising a budget above what was used releases what it held and hands the held messages
    over. The turn that crosses the line may overrun it. A team lead may budget its descendants
    only; a dollar budget needs a price for every model used.
    """
    relative, value = _amount(amount, tokens)
    key = "tokens" if tokens else "usd"
    if team:
        if agent:
            raise InvalidInput("Give an agent or --team, not both", hint="`exo budget --team +5` raises the team's.",
                               field="agent")
        return _team(env, key, relative, value)
    if not agent:
        raise InvalidInput("Name the agent whose budget to set, or pass --team", field="agent",
                           hint="`exo budget w1 +5`, or `exo budget --team +5`.")
    from exo_cli.ops.messages import find_agent

    target = find_agent(env, agent)
    if target.id == ROOT:
        raise InvalidInput("The root has no budget", hint="Budget an agent (`exo budget AGENT 5`) or the team "
                           "(`exo budget --team 5`).")
    caller = env.caller
    if not caller.is_human and not in_subtree(env.store.agents(), caller.agent_id, target.id):
        raise StateError(f"{target.name} is not one of your descendants: you may budget only those",
                         hint="Ask your parent, or the human, to raise it.", agent=target.id)
    b = dict(limits(target) or {})
    before = b.get(key)
    new: float | int = (float(before or 0) + value) if relative else value
    b[key] = int(new) if tokens else round(float(new), 6)
    updated = target._replace(spec={**target.spec, "budget": b})
    s = spent(env, updated)
    _within_lead(env, target, key, b[key], s)
    if not tokens and s.usd is None:
        raise StateError(f"{target.name} used a model without a price ({', '.join(s.unpriced)}): a dollar "
                         "budget cannot be measured", hint='Set its price with [prices."MODEL"], or budget '
                         "tokens with --tokens.", agent=target.id, models=s.unpriced)
    b["warned"] = s.share >= WARN_AT
    env.store.update_agent(target.id, spec={**target.spec, "budget": b})
    released = False
    delivered: list[int] = []
    if target.status == OVER_BUDGET and s.share < 1.0:
        from exo_cli.ops import teambudget

        held = teambudget.over(env)
        if held is not None:  # its own budget no longer stops it; the team's still does
            env.store.update_agent(target.id, if_status=OVER_BUDGET, status_reason=f"over budget: {held.text()}"[:500])
        else:
            got = release_one(env, target)
            released, delivered = got is not None, got or []
    after = env.store.agent(target.id) or target
    return BudgetResult(target.id, target.name, b.get("usd"), b.get("tokens"), s.usd, s.tokens, after.status,
                        released, delivered)


def _within_lead(env: Env, target: Agent, key: str, new: float, s: Spent) -> None:
    """A team lead gives a descendant at most what it has left itself: what the descendant may still spend after
    the change (its budget less what it used) is refused above the lead's own remainder."""
    from exo_cli.ops.budget import lead_left

    if env.caller.is_human:
        return
    left = lead_left(env, key)
    used = s.usd if key == "usd" else s.tokens
    if left is None or used is None or new - used <= left:
        return
    unit = "dollars" if key == "usd" else "tokens"
    raise StateError(f"You have {left:,} {unit} left of your budget: {target.name} cannot be given "
                     f"{max(0, new - used):,} more to spend", hint="Give less, or ask your parent for more.",
                     agent=target.id, left=left)


def _team(env: Env, key: str, relative: bool, value: float) -> BudgetResult:
    """``exo budget --team``: the human sets or raises the team's budget; the agents it held work again."""
    from exo_cli.ops import teambudget

    if not env.caller.is_human:
        raise StateError("Only the human sets the team's budget", hint="Ask the human to raise it.")
    env.repo  # noqa: B018 - fail early outside a repository
    with teambudget.locked(env):
        teambudget.take_config_locked(env)
        rec = teambudget.record(env)
        new = (float(rec.get(key) or 0) + value) if relative else value
        rec[key] = (int(new) if key == "tokens" else round(float(new), 6)) or None
        if key == "usd" and rec[key] is not None and teambudget.used(env).usd is None:
            unpriced = teambudget.used(env).unpriced
            raise StateError(f"The team used models without a price ({', '.join(unpriced)}): a dollar budget "
                             "cannot be measured", hint='Set their price with [prices."MODEL"], or budget tokens '
                             "with --tokens.", models=unpriced)
        teambudget.write(env, rec)
    s = teambudget.team_spent(env)
    released = teambudget.release(env)
    b = teambudget.limits(env) or {}
    return BudgetResult("", "team", b.get("usd"), b.get("tokens"), s.usd if s else None,
                        s.tokens if s else 0, OVER_BUDGET if teambudget.over(env) else "ok", bool(released), [],
                        released)
