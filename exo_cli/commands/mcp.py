"""``exo mcp``: the MCP server over stdio (the only command that imports the MCP SDK)."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.records import MCP_COMPAT


@click.command()
@click.option(
    "--role",
    type=click.Choice(["auto", "tl", "dev"]),
    default="auto",
    show_default=True,
    help="Tools to serve: auto takes the caller's recorded role; tl/dev can lower it, never raise it.",
)
@click.option(
    "--compat",
    type=click.Choice(MCP_COMPAT),
    multiple=True,
    help="Also serve that tool family's names and arguments (repeatable; default: mcp.compat in exo.toml).",
)
@click.pass_obj
def mcp(env: Any, role: str, compat: tuple[str, ...]) -> None:
    """Serve exo's operations as MCP tools over stdio.

    Every tool is generated from the same operation registry as the CLI, so a tool and its
    command take the same arguments and return the same object. Only the protocol is
    written to stdout; logs go to stderr. Run from your own agent session, the server
    makes it the team lead at the root of the tree, which may spawn, answer and merge
    (`exo init --agent claude` writes that wiring for you).
    `--compat claude-team|termtile|ikigai` adds that tool family's names and arguments
    to exo's own compact set, on the same operations.

    \b
    Examples:
      exo init --agent claude
      claude mcp add exo -- exo mcp --role auto
      exo mcp --role dev
      exo mcp --compat termtile --compat ikigai
    """
    if env.relayed:  # an agent with a socket: its broker serves the session (no SDK here)
        import sys

        from exo_cli import relay_mcp

        sys.exit(relay_mcp.serve(env.environ, role, list(compat)))
    from exo_cli.mcp_server import serve

    serve(env, role, compat)
