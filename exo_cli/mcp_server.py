"""The MCP server, generated from the operation registry (the only module importing ``mcp``).

Each operation's tools become ``MCPServer`` tools whose input schema is the operation's
keyword parameters (or the tool's seed-fixed adapter parameters) with the registry's
help as descriptions, and whose structured output is exactly the CLI's ``--json`` object.
ExoErrors reach the model as tool errors carrying the error object; errors the model
cannot fix (``protocol = True``) are JSON-RPC errors with exo's codes.
"""

from __future__ import annotations

import inspect
import json
import logging
import sys
import threading
import typing
from collections.abc import Callable
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import ToolAnnotations
from pydantic import Field

from exo_cli import __version__, cancel, registry
from exo_cli.core.models import to_jsonable
from exo_cli.env import ROLE_RANK, Env
from exo_cli.errors import ExoError
from exo_cli.registry import Op, Tool

log = logging.getLogger("exo.mcp")

INSTRUCTIONS = (
    "exo coordinates a team of coding agents on one git repository. Each agent works in its own "
    "git worktree and branch. Report progress to your parent with `note`, ask with `question` "
    "(blocks until answered), file your work with `file_pr`. A team lead (tl role) splits work "
    "with `spawn_workers` (concrete leaf tasks) or `spawn_subtree` (sub-problems needing further "
    "decomposition), collects results with `wait`, answers with `answer_question`, and merges "
    "with `merge_pr`."
)


def serving_role(env: Env, requested: str) -> str:
    """The role the server runs as: the caller's recorded role, lowered (never raised) by --role."""
    recorded = env.caller.role
    base = "tl" if recorded == "human" else recorded  # the human's agent is the root TL
    if requested == "auto":
        return base
    if ROLE_RANK[requested] > ROLE_RANK[base]:
        log.warning("--role %s ignored: the caller's recorded role is %s", requested, base)
        return base
    return requested


def lists_tool(op: Op, tool: Tool, role: str) -> bool:
    roles = op.tool_roles(tool)
    return role in roles or (role == "tl" and "dev" in roles)


def _signature(op: Op, tool: Tool) -> inspect.Signature:
    source: Callable[..., Any] = tool.adapt or op.func
    helps = {**op.help, **tool.help}
    params = []
    for p in inspect.signature(source).parameters.values():
        if p.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        ann = p.annotation
        if isinstance(ann, str):  # postponed annotations: resolve in the function's module
            ann = eval(ann, vars(sys.modules[source.__module__]), {})  # noqa: S307 - our own source
        if ann is inspect.Parameter.empty:
            ann = Any
        desc = helps.get(p.name)
        if desc is None:
            raise TypeError(f"tool {tool.name}: parameter {p.name!r} has no help text")
        params.append(
            inspect.Parameter(
                p.name, inspect.Parameter.KEYWORD_ONLY, default=p.default, annotation=Annotated[ann, Field(description=desc)]
            )
        )
    return inspect.Signature(params, return_annotation=dict[str, Any])


def _raise_for(exc: ExoError) -> typing.NoReturn:
    if exc.protocol:
        raise MCPError(exc.rpc_code, exc.message, exc.to_dict()["error"]) from exc
    raise ToolError(json.dumps(exc.to_dict(), ensure_ascii=False)) from exc


def make_tool(env: Env, op: Op, tool: Tool) -> Callable[..., Any]:
    """The tool function: adapt arguments, invoke the operation (with role check), map errors."""

    def call(kwargs: dict[str, Any]) -> dict[str, Any]:
        try:
            kw = tool.adapt(**kwargs) if tool.adapt else kwargs
            return typing.cast(dict[str, Any], to_jsonable(registry.invoke(op.name, env, **kw)))
        except ExoError as exc:
            _raise_for(exc)

    if op.blocking:

        async def fn(**kwargs: Any) -> dict[str, Any]:
            event = threading.Event()

            def run() -> dict[str, Any]:
                with cancel.scope(event):
                    return call(kwargs)

            try:
                return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
            except anyio.get_cancelled_exc_class():
                event.set()
                raise

    else:

        async def fn(**kwargs: Any) -> dict[str, Any]:
            return await anyio.to_thread.run_sync(call, kwargs)

    fn.__name__ = tool.name
    fn.__doc__ = tool.description or op.doc
    fn.__signature__ = _signature(op, tool)  # type: ignore[attr-defined]
    return fn


def build_server(env: Env, role: str = "auto") -> MCPServer:
    """An MCPServer listing the registry's tools that ``role`` may use."""
    served = serving_role(env, role)
    env.role_cap = served
    server: MCPServer = MCPServer("exo", version=__version__, instructions=INSTRUCTIONS)
    for op in registry.load_all().values():
        for tool in op.tools:
            if not lists_tool(op, tool, served):
                continue
            server.add_tool(
                make_tool(env, op, tool),
                name=tool.name,
                description=tool.description or op.doc,
                annotations=ToolAnnotations(
                    read_only_hint=op.read_only,
                    destructive_hint=op.destructive,
                    idempotent_hint=op.idempotent,
                    open_world_hint=False,
                ),
                structured_output=True,
            )
    return server


def serve(env: Env, role: str) -> None:
    """Run the server over stdio until the client disconnects."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="exo mcp: %(message)s")
    try:
        server = build_server(env, role)
    except ExoError as exc:
        sys.stderr.write(f"Error: {exc.message}\n")
        if exc.hint:
            sys.stderr.write(f"Hint: {exc.hint}\n")
        raise SystemExit(exc.exit_code) from exc
    server.run("stdio")
