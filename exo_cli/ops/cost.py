"""``exo cost``: tokens and dollars per agent, subtree and team, from the usage the agents' CLIs recorded.

The numbers live in this module's records so every front end shows the same ones: ``exo cost``,
the MCP tool ``cost``, ``exo agents`` (``cost_usd``), the board and the web board (``team_costs``).
A model without a price (``exo_cli/prices.py``, ``[prices."MODEL"]``) is "price unknown": its
tokens are counted and its dollars are not, and a total that includes it has no dollar figure.
"""

from __future__ import annotations

from exo_cli.lite import NamedTuple
from exo_cli.records import ROOT, Agent, Usage
from exo_cli.registry import op

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from exo_cli.env import Env

Price = tuple[float, float, float, float]


class ModelUsage(NamedTuple):
    """Tokens of one agent (or a sum) with one model, by kind, and what they cost."""

    model: str
    input: int
    output: int
    cache_write: int
    cache_read: int
    tokens: int
    usd: float | None  # None: price unknown
    price: str  # "default" (exo's table of prices.DATE), "configured" ([prices."MODEL"]) or "unknown"


class CostTotal(NamedTuple):
    """Tokens by kind and dollars of a set of usage rows."""

    tokens: int
    input: int
    output: int
    cache_write: int
    cache_read: int
    usd: float | None  # None when some of the tokens have no price ("price unknown")
    priced_usd: float  # the dollars of the tokens that have a price
    unpriced: list[str]  # the models without a price


class AgentCost(NamedTuple):
    id: str
    name: str
    parent: str | None
    status: str
    retired: bool
    total: CostTotal
    models: list[ModelUsage]


class CostResult(NamedTuple):
    agents: list[AgentCost]
    subtree: CostTotal | None  # the agent and its descendants (retired ones too), with tree
    team: CostTotal  # every agent, retired ones too
    prices: str  # where the prices come from: "default prices of <date>" and the configured models
    team_budget: dict[str, float | int] | None = None  # the team's budget in force (usd, tokens: ops/teambudget.py)


class Prices(NamedTuple):
    """The price table in force: exo's defaults and the configured overrides."""

    configured: dict[str, Price]

    def of(self, model: str) -> tuple[Price, str] | None:
        """The price of ``model`` and where it comes from, or None (price unknown)."""
        from exo_cli.prices import DEFAULTS

        for name in _names(model):
            if name in self.configured:
                return self.configured[name], "configured"
        for name in _names(model):
            if name in DEFAULTS:
                return DEFAULTS[name], "default"
        return None

    def describe(self) -> str:
        from exo_cli.prices import DATE

        text = f"default prices of {DATE}"
        return text + (f"; configured: {', '.join(sorted(self.configured))}" if self.configured else "")


def _names(model: str) -> list[str]:
    """The names a model's price is looked up under: itself, then its family without a date suffix."""
    import re

    base = re.sub(r"(-\d{8}|@\d{8}|-latest)$", "", model)
    return [model] if base == model else [model, base]


def prices(env: Env) -> Prices:
    """The price table of the configuration (``[prices."MODEL"]``) over exo's defaults.

    The configuration is loaded only when one of its files mentions prices (or it is loaded
    already): `exo agents` shows every agent's dollars, and stays as fast as it was.
    """
    if "config" not in vars(env) and not _mentions_prices(env):
        return Prices({})
    table = env.config.get("prices") or {}
    return Prices({str(k): (float(v["input"]), float(v["output"]), float(v["cache_write"]), float(v["cache_read"]))
                   for k, v in table.items()})


def _mentions_prices(env: Env) -> bool:
    from exo_cli.config_paths import config_files

    try:
        root = env.repo.root
    except Exception:  # noqa: BLE001 - outside a repository: the user's file only
        root = None
    for path in config_files(env.environ, root):
        try:
            if b"prices" in path.read_bytes():
                return True
        except OSError:
            continue
    return False


def model_usage(u: Usage, table: Prices) -> ModelUsage:
    found = table.of(u.model)
    usd = None
    if found is not None:
        p = found[0]
        usd = (u.input * p[0] + u.output * p[1] + u.cache_write * p[2] + u.cache_read * p[3]) / 1e6
    return ModelUsage(u.model, u.input, u.output, u.cache_write, u.cache_read, u.total,
                      usd, found[1] if found else "unknown")


def total(rows: Iterable[ModelUsage]) -> CostTotal:
    rows = list(rows)
    unpriced = sorted({r.model for r in rows if r.usd is None and r.tokens})
    priced = float(sum(r.usd or 0.0 for r in rows))
    return CostTotal(sum(r.tokens for r in rows), sum(r.input for r in rows), sum(r.output for r in rows),
                     sum(r.cache_write for r in rows), sum(r.cache_read for r in rows),
                     None if unpriced else priced, priced, unpriced)


def team_costs(env: Env, agent_ids: Iterable[str] | None = None) -> dict[str, list[ModelUsage]]:
    """Every agent's usage per model with its cost (only ``agent_ids``' when given): one read of the store."""
    if not env.has_state():
        return {}
    rows = env.store.usage(None if agent_ids is None else list(agent_ids))
    if not rows:
        return {}
    table = prices(env)
    out: dict[str, list[ModelUsage]] = {}
    for agent_id, u in rows:
        out.setdefault(agent_id, []).append(model_usage(u, table))
    return out


def agent_usd(costs: Mapping[str, list[ModelUsage]], agent_id: str) -> float | None:
    """One agent's dollars (0.0 without usage; None: price unknown)."""
    return total(costs.get(agent_id, [])).usd


def _descendants(agents: list[Agent], top: str) -> list[Agent]:
    kids: dict[str | None, list[Agent]] = {}
    for a in agents:
        kids.setdefault(a.parent, []).append(a)
    out: list[Agent] = []
    todo = [top]
    seen = {top}
    while todo:
        for a in kids.get(todo.pop(0), []):
            if a.id not in seen:
                seen.add(a.id)
                out.append(a)
                todo.append(a.id)
    return out


@op(
    "cost",
    cli="cost",
    tools=["cost"],
    roles=("tl", "dev"),
    read_only=True,
    idempotent=True,
    help={"agent": "Show this agent only (with tree: and its descendants). Default: every agent.",
          "tree": "With an agent: also its descendants, retired ones included, and their total."},
    flags={"tree": "--tree"},
)
def cost(env: Env, *, agent: str | None = None, tree: bool = False) -> CostResult:
    """Show the tokens and dollars each agent used, by model and kind, with the team's total.

    Tokens come from each agent CLI's own record (Claude's transcript, Gemini's session file,
    Codex's rollout file) at the end of every turn; dollars from exo's dated default prices or
    `[prices."MODEL"]`. A model without a price shows "price unknown", never a guess. With
    an agent, that agent only; with {--tree}, its descendants too (retired ones included) and their total.
    """
    from exo_cli.errors import InvalidInput, NotFound

    env.repo  # noqa: B018 - fail early outside a repository
    records = [a for a in env.store.agents()] if env.has_state() else []
    if tree and not agent:
        raise InvalidInput("--tree needs an agent", hint="Name the agent whose subtree to total: `exo cost AGENT --tree`.")
    chosen = records
    if agent:
        from exo_cli.validate import check_name

        if agent != ROOT:
            check_name(agent, "agent name")
        top = next((a for a in records if a.id == agent), None)
        if top is None:
            raise NotFound(f"No agent named {agent!r}", hint="List agents with `exo agents --all`.", agent=agent)
        chosen = [top, *(_descendants(records, agent) if tree else [])]
    costs = team_costs(env)
    shown = [AgentCost(a.id, a.name, a.parent, a.status, a.retired, total(costs.get(a.id, [])), costs.get(a.id, []))
             for a in chosen if a.id != ROOT or costs.get(ROOT)]
    everyone = [r for rows in costs.values() for r in rows]
    from exo_cli.ops.budgetspent import team_limits

    return CostResult(agents=shown, subtree=total(r for a in shown for r in a.models) if tree else None,
                      team=total(everyone), prices=prices(env).describe(), team_budget=team_limits(env))
