"""``exo hosts``: the configured hosts, reached over ssh."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._complete import completer
from exo_cli.commands._options import json_option, op_help
from exo_cli.ops import completion as kinds
from exo_cli.ops.hosts import HostsResult
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def _yes(v: bool | None) -> str | None:
    return None if v is None else ("yes" if v else "NO")


def render_hosts(out: Out, result: HostsResult) -> None:
    rows = [[h.name, h.ssh, h.path, "yes" if h.reachable else "NO", h.version, h.store, _yes(h.same_store),
             _yes(h.same_origin), f"{h.agents} ({h.sandboxed} sandboxed)" if h.sandboxed else h.agents, h.error]
            for h in result.hosts]
    out.table(["HOST", "SSH", "PATH", "REACHABLE", "EXO", "STORE", "SAME STORE", "SAME ORIGIN", "AGENTS", "PROBLEM"],
              rows, empty="No hosts. Add [hosts.NAME] with ssh and path to exo.toml or your user config.")
    out.line(f"This host: {result.this_host}")


@click.command(help=op_help("hosts") + "\n\n\b\nExamples:\n  exo hosts\n  exo hosts gpu1 --json")
@click.argument("name", nargs=-1, shell_complete=completer(kinds.HOST))
@json_option
@click.pass_obj
def hosts(env: Any, name: tuple[str, ...], as_json: bool) -> None:
    emit(invoke("hosts", env, name=list(name) or None), as_json=as_json, human=render_hosts)
