"""``exo cost [AGENT] [--tree]``: tokens and dollars per agent, subtree and team."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._complete import completer
from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.ops import completion as kinds
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.cost import render_cost


@click.command(help=op_help("cost") + "\n\n\b\nExamples:\n  exo cost\n  exo cost w1\n  exo cost lead --tree\n"
               "  exo cost --json")
@click.argument("agent", required=False, shell_complete=completer(kinds.AGENT))
@op_option("cost", "tree", "--tree", is_flag=True)
@json_option
@click.pass_obj
def cost(env: Any, agent: str | None, tree: bool, as_json: bool) -> None:
    emit(invoke("cost", env, agent=agent, tree=tree), as_json=as_json, human=render_cost)


def _render_report(out: Any, r: Any) -> None:
    out.line(f"Counted in turn {r.turn}: {r.input + r.output + r.cache_write + r.cache_read:,} tokens of {r.model} "
             f"({r.input:,} / {r.output:,} / {r.cache_write:,} / {r.cache_read:,}); {r.tokens:,} in all.")


@click.command(help=op_help("report_usage") + "\n\n\b\nExamples:\n  exo usage --model my-model --input 1200 "
               "--output 300\n  exo usage --model my-model --cache-read 5000 --json")
@op_option("report_usage", "model", "--model", required=True, metavar="MODEL")
@op_option("report_usage", "input", "--input", type=click.IntRange(min=0), default=0, metavar="N")
@op_option("report_usage", "output", "--output", type=click.IntRange(min=0), default=0, metavar="N")
@op_option("report_usage", "cache_write", "--cache-write", type=click.IntRange(min=0), default=0, metavar="N")
@op_option("report_usage", "cache_read", "--cache-read", type=click.IntRange(min=0), default=0, metavar="N")
@json_option
@click.pass_obj
def report_usage(env: Any, model: str, input: int, output: int, cache_write: int,  # noqa: A002
                 cache_read: int, as_json: bool) -> None:
    result = invoke("report_usage", env, model=model, input=input, output=output, cache_write=cache_write,
                    cache_read=cache_read)
    emit(result, as_json=as_json, human=_render_report)


def _render_budget(out: Any, r: Any) -> None:
    limits = [f"{r.budget_tokens:,} tokens" if r.budget_tokens is not None else "",
              f"${r.budget_usd:.2f}" if r.budget_usd is not None else ""]
    used = f"{r.tokens:,} tokens" + ("" if r.budget_usd is None else
                                     ", price unknown" if r.usd is None else f", ${r.usd:.2f}")
    out.line(f"{r.name}: budget {' and '.join(x for x in limits if x) or 'none'}; used {used}; status {r.status}.")
    if r.agents:
        out.line(f"Released: {', '.join(r.agents)} may work again.")
    elif r.released:
        out.line(f"Released: it may work again ({len(r.delivered)} held message(s) handed over now).")


@click.command(help=op_help("budget") + "\n\n\b\nExamples:\n  exo budget w1 5\n  exo budget w1 +5\n"
               "  exo budget w1 +200000 --tokens\n  exo budget --team +20")
@click.argument("agent", required=False, shell_complete=completer(kinds.AGENT))
@click.argument("amount", required=False)
@op_option("budget", "tokens", "--tokens", is_flag=True)
@op_option("budget", "team", "--team", is_flag=True)
@json_option
@click.pass_obj
def budget(env: Any, agent: str | None, amount: str | None, tokens: bool, team: bool, as_json: bool) -> None:
    if team and amount is None:  # `exo budget --team AMOUNT`: the one argument is the amount
        agent, amount = None, agent
    if amount is None:
        raise click.UsageError("Missing argument 'AMOUNT' (`exo budget AGENT AMOUNT` or `exo budget --team AMOUNT`).")
    emit(invoke("budget", env, agent=agent, amount=amount, tokens=tokens, team=team), as_json=as_json,
         human=_render_budget)
