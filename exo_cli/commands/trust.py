"""``exo trust [--show]``."""

from __future__ import annotations

import json
from typing import Any

import click

from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.ops.trust import TrustResult
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def render_trust(out: Out, result: TrustResult) -> None:
    if result.pinned:
        head = f"Trusted {len(result.entries)} value(s) of {result.file}" if result.entries else \
            f"{result.file} sets nothing that needs trust"
    else:
        head = f"Values of {result.file} that need trust" if result.entries else \
            f"{result.file} sets nothing that needs trust"
    out.line(head)
    if result.entries:
        out.table(["KEY", "STATE", "VALUE", "PINNED"],
                  [[e.key, e.state, _shown(e.current), "" if e.pinned is None else _shown(e.pinned)]
                   for e in result.entries])
    if not result.pinned and any(e.state != "trusted" for e in result.entries):
        out.line("Run `exo trust` to trust these values.")


@click.command(help=op_help("trust") + "\n\n\b\nExamples:\n  exo trust --show\n  exo trust\n  exo trust --show --json")
@op_option("trust", "show", "--show", is_flag=True)
@json_option
@click.pass_obj
def trust(env: Any, show: bool, as_json: bool) -> None:
    emit(invoke("trust", env, show=show), as_json=as_json, human=render_trust)
