"""``exo usage``: a custom agent tells exo the tokens it used (the three agent CLIs never may)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from exo_cli.errors import InvalidInput, StateError
from exo_cli.records import AGENT_CLIS, TEAM_BUDGET_KEY, Usage
from exo_cli.registry import Range, op

if TYPE_CHECKING:
    from exo_cli.env import Env

MAX_TOKENS = 10**12  # more than any turn could use: a bigger number is a mistake


@dataclass
class UsageReport:
    agent_id: str
    turn: int  # the turn it is counted in (the one under way)
    model: str
    input: int
    output: int
    cache_write: int
    cache_read: int
    tokens: int  # the agent's tokens now, every kind and model


@op(
    "report_usage",
    cli="usage",
    tools=["report_usage"],
    roles=("tl", "dev"),
    help={"model": "The model the tokens were used with, as its price is named (`[prices.\"MODEL\"]`).",
          "input": "Input tokens, without the cache reads and writes.",
          "output": "Output tokens (reasoning included).",
          "cache_write": "Tokens written to the prompt cache.",
          "cache_read": "Tokens read from the prompt cache."},
)
def report_usage(env: Env, *, model: str, input: Annotated[int, Range(0)] = 0,  # noqa: A002 - the kind's public name
                 output: Annotated[int, Range(0)] = 0, cache_write: Annotated[int, Range(0)] = 0,
                 cache_read: Annotated[int, Range(0)] = 0) -> UsageReport:
    """Report tokens you used with a model: for custom agents, whose CLI exo cannot read.

    Counted in your current turn, by kind, and shown by `exo cost`. Refused for agents run by
    Claude Code, Gemini CLI or Codex CLI: exo reads their tokens from the CLI's own record.
    """
    from exo_cli.ops.messages import caller_agent
    from exo_cli.validate import check_text

    me = caller_agent(env, "report its usage")
    if me.backend in AGENT_CLIS:
        raise StateError(f"{me.name} runs {me.backend}: exo reads its tokens from {me.backend}'s own record",
                         hint="Only custom agents report their usage.", agent=me.id, backend=me.backend)
    model = check_text(model, "model", max_len=200)
    if any(ord(c) < 32 or ord(c) == 127 for c in model) or model != model.strip():
        raise InvalidInput("Invalid model: control characters or surrounding spaces", field="model")
    counts = {"input": input, "output": output, "cache_write": cache_write, "cache_read": cache_read}
    for kind, n in counts.items():
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_TOKENS:
            raise InvalidInput(f"Invalid {kind}: expected a whole number of tokens from 0 to {MAX_TOKENS}",
                               field=kind)
    usage = Usage(model, input, output, cache_write, cache_read)
    if not usage.total:
        raise InvalidInput("Nothing to report: every count is 0", hint="Give at least one of --input, --output, "
                           "--cache-write, --cache-read.")
    turn = me.turns + 1
    env.store.record_usage(me.id, turn, [usage])
    if env.store.kv_get(TEAM_BUDGET_KEY):  # it may have taken the team over its budget
        from exo_cli.ops.teambudget import after_usage

        after_usage(env, me)
    after = env.store.agent(me.id)
    return UsageReport(me.id, turn, model, input, output, cache_write, cache_read,
                       after.tokens if after else me.tokens + usage.total)
