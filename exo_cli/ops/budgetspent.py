"""What was used against a budget (an agent's, or the team's): ``Spent``, shared by ``ops/budget.py`` and
``ops/teambudget.py``."""

from __future__ import annotations

from dataclasses import dataclass

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
