"""The human view of ``exo cost``: tokens always beside dollars, "price unknown" rather than a guess."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from exo_cli.ops.cost import CostResult, CostTotal
    from exo_cli.render.text import Out


def usd(value: float | None) -> str:
    """Dollars as the views show them ("price unknown" for None)."""
    if value is None:
        return "price unknown"
    return f"${value:,.2f}" if value >= 1 or value == 0 else f"${value:.4f}"


def _kinds(t: CostTotal) -> str:
    return f"{t.input:,} / {t.output:,} / {t.cache_write:,} / {t.cache_read:,}"


def _money(t: CostTotal) -> str:
    if t.usd is not None:
        return usd(t.usd)
    known = f"{usd(t.priced_usd)} + " if t.priced_usd else ""
    return f"{known}price unknown ({', '.join(t.unpriced)})"


def render_cost(out: Out, result: CostResult) -> None:
    rows = []
    for a in result.agents:
        rows.append([a.id, a.status, f"{a.total.tokens:,}", _kinds(a.total), _money(a.total)])
        if len(a.models) > 1:
            for m in a.models:
                rows.append([f"  {m.model}", "", f"{m.tokens:,}", f"{m.input:,} / {m.output:,} / {m.cache_write:,} / "
                             f"{m.cache_read:,}", usd(m.usd)])
        elif a.models:
            rows[-1][1] = f"{a.status} ({a.models[0].model})"
    out.table(["AGENT", "STATUS (MODEL)", "TOKENS", "INPUT / OUTPUT / CACHE WRITE / CACHE READ", "COST"], rows,
              empty="No agents.")
    if result.subtree is not None:
        out.line(f"subtree: {result.subtree.tokens:,} tokens ({_kinds(result.subtree)}), {_money(result.subtree)}")
    budget = result.team_budget or {}
    of = " and ".join(x for x in (f"{budget['tokens']:,} tokens" if "tokens" in budget else "",
                                  f"${budget['usd']:.2f}" if "usd" in budget else "") if x)
    out.line(f"team: {result.team.tokens:,} tokens ({_kinds(result.team)}), {_money(result.team)}"
             + (f"; its budget: {of}" if of else ""))
    out.line(f"({result.prices}; set a model's price with [prices.\"MODEL\"])")
