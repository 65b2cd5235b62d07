"""What was used against a budget (an agent's, or the team's): ``Spent``, and the team's budget as the store
holds it; shared by ``ops/budget.py``, ``ops/teambudget.py`` and ``ops/cost.py``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from exo_cli.records import TEAM_BUDGET_KEY

if TYPE_CHECKING:
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
    team: bool = False  # the whole team's spending against the team's budget (ops/teambudget.py)

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
        return ("the team used " if self.team else "") + "; ".join(parts)


def team_record(env: Env) -> dict[str, Any]:
    """The stored team budget (``usd``, ``tokens``, ``config``); {} when none was ever set."""
    if not env.has_state():
        return {}
    try:
        value = json.loads(env.store.kv_get(TEAM_BUDGET_KEY) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def team_limits(env: Env) -> dict[str, Any] | None:
    """The team's budget in force (``usd`` and/or ``tokens``), or None."""
    import math

    rec = team_record(env)
    out = {k: v for k in ("usd", "tokens") if isinstance(v := rec.get(k), int | float) and not isinstance(v, bool)
           and math.isfinite(v) and v > 0}  # what the store holds is read as untrusted: a bad value is none
    return out or None
