"""The MCP server, generated from the operation registry (the only module importing ``mcp``).

Each operation's tools become ``MCPServer`` tools whose input schema is the operation's
keyword parameters (or, for a tool whose arguments another tool family fixed, its adapter's) with the registry's
help as descriptions, and whose structured output is exactly the CLI's ``--json`` object.
ExoErrors reach the model as tool errors whose text is exactly the error object (the
CLI's ``--json`` error); errors the model cannot fix (``protocol = True``) are JSON-RPC
errors with exo's codes. Only the protocol is written to stdout: the SDK's stdio
transport points fd 1 at stderr while it serves, and the server is built with
``sys.stdout`` redirected to stderr; logs go to stderr.

Roles: ``auto`` serves the caller's recorded role (the human's own session is the
root TL); ``--role`` may lower it, never raise it. A tool the role does not list is
not registered, and ``registry.invoke`` refuses it anyway if it is reached.
"""

from __future__ import annotations

import contextlib
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
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from exo_cli import __version__, cancel, registry
from exo_cli.env import ROLE_RANK, Env
from exo_cli.errors import ExoError
from exo_cli.records import to_jsonable
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


# Background starters for the root TL's server (e.g. the forge poller that notices PRs merged or
# reviewed on GitHub). Modules append ``fn(env)``; each runs in its own daemon thread and must take
# its own per-repository lock so only one runs per repository.
def _default_background() -> list[Callable[[Env], None]]:
    from exo_cli.ops.watch import background_poller  # the forge poller (one per repo, by a lock)

    return [background_poller]


BACKGROUND: list[Callable[[Env], None]] = _default_background()


def serving_role(env: Env, requested: str) -> str:
    """Return the role to serve: the caller's recorded role, lowered (never raised) by --role.

    The human at the root is served as the root TL (``tl``). A request above the
    recorded role is ignored with a warning on stderr.
    """
    if requested not in ("auto", *ROLE_RANK):
        raise ValueError(f"unknown role {requested!r}")
    recorded = env.caller.role
    base = "tl" if recorded == "human" else recorded  # the human's agent is the root TL
    if requested == "auto":
        return base
    if ROLE_RANK[requested] > ROLE_RANK[base]:
        log.warning(
            "--role %s ignored: the caller %s is recorded as %s; serving %s tools",
            requested, env.caller.agent_id, base, base,
        )
        return base
    return requested


def lists_tool(op: Op, tool: Tool, role: str) -> bool:
    """True when a server for ``role`` lists ``tool`` (a tl server lists dev tools too)."""
    roles = op.tool_roles(tool)
    return role in roles or (role == "tl" and "dev" in roles)


def tool_description(op: Op, tool: Tool) -> str:
    """The tool's description: its own (tools named after another family's), else the operation's, else its docstring."""
    return tool.description or op.description or op.doc


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


def error_result(exc: ExoError) -> CallToolResult:
    """A tool error whose text is exactly exo's error object (what ``--json`` prints)."""
    text = json.dumps(exc.to_dict(), ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _map_error(tool: str, exc: ExoError) -> CallToolResult:
    if exc.protocol:  # the model cannot fix it: a JSON-RPC error with exo's code
        raise MCPError(exc.rpc_code, exc.message, exc.to_dict()["error"]) from exc
    log.info("tool %s failed: %s", tool, exc.message)
    return error_result(exc)


def make_tool(env: Env, op: Op, tool: Tool) -> Callable[..., Any]:
    """Build the tool function: adapt arguments, invoke the operation (role-checked), map errors.

    Blocking operations run in a worker thread inside ``cancel.scope``; when the client
    cancels the call the scope's event is set, the tool returns at once and the
    operation sees ``cancel.cancelled()`` at its next short wait.
    """

    def call(kwargs: dict[str, Any]) -> dict[str, Any] | CallToolResult:
        try:
            kw = tool.adapt(**kwargs) if tool.adapt else kwargs
            return typing.cast(dict[str, Any], to_jsonable(registry.invoke(op.name, env, **kw)))
        except ExoError as exc:
            return _map_error(tool.name, exc)

    if op.blocking:

        async def fn(**kwargs: Any) -> dict[str, Any] | CallToolResult:
            event = threading.Event()

            def run() -> dict[str, Any] | CallToolResult:
                with cancel.scope(event):
                    return call(kwargs)

            try:
                return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
            except anyio.get_cancelled_exc_class():
                event.set()
                raise

    else:

        async def fn(**kwargs: Any) -> dict[str, Any] | CallToolResult:
            return await anyio.to_thread.run_sync(call, kwargs)

    fn.__name__ = tool.name
    fn.__doc__ = tool_description(op, tool)
    fn.__signature__ = _signature(op, tool)  # type: ignore[attr-defined]
    return fn


class _Server(MCPServer):
    """An MCPServer that calls ``on_listed`` once, when it first answers tools/list."""

    on_listed: Callable[[], None] | None = None

    async def list_tools(self) -> Any:
        tools = await super().list_tools()
        callback, self.on_listed = self.on_listed, None
        if callback is not None:
            try:
                callback()
            except Exception:  # readiness is best effort; never fail the client's tools/list
                log.exception("recording MCP readiness failed")
        return tools


def build_server(env: Env, role: str = "auto") -> MCPServer:
    """An MCPServer listing the registry's tools that ``role`` may use.

    An agent's server records, once its client has listed the tools, that it is ready
    (``hooks.mark_mcp_ready``): the Claude agent's session-start hook waits for that.
    """
    served = serving_role(env, role)
    env.role_cap = served
    server = _Server("exo", version=__version__, instructions=INSTRUCTIONS)
    if not env.caller.is_human:
        from exo_cli.ops.hooks import mark_mcp_ready

        agent_id = env.caller.agent_id
        server.on_listed = lambda: mark_mcp_ready(env, agent_id)
    for op in registry.load_all().values():
        for tool in op.tools:
            if not lists_tool(op, tool, served):
                continue
            server.add_tool(
                make_tool(env, op, tool),
                name=tool.name,
                description=tool_description(op, tool),
                annotations=ToolAnnotations(
                    read_only_hint=op.read_only,
                    destructive_hint=op.destructive,
                    idempotent_hint=op.idempotent,
                    open_world_hint=False,
                ),
                structured_output=True,
            )
    return server


def start_background_tasks(env: Env, role: str) -> list[threading.Thread]:
    """Start the registered background starters when serving the root TL.

    Only the human's own session (the root of the tree) served as ``tl`` runs them; each
    starter gets a daemon thread (it dies with the server) and a failure is logged to
    stderr, never raised. Returns the started threads.
    """
    if role != "tl" or not env.caller.is_human:
        return []
    threads = []
    for starter in list(BACKGROUND):

        def run(fn: Callable[[Env], None] = starter) -> None:
            try:
                fn(env)
            except Exception:
                log.exception("background task %s failed", getattr(fn, "__name__", fn))

        t = threading.Thread(target=run, name=f"exo-bg-{getattr(starter, '__name__', 'task')}", daemon=True)
        t.start()
        threads.append(t)
    return threads


def serve(env: Env, role: str) -> None:
    """Run the server over stdio until the client disconnects.

    Logs go to stderr (``EXO_DEBUG=1`` for debug level). Nothing but JSON-RPC reaches
    stdout: anything printed while building the server goes to stderr, and while
    serving the SDK points fd 1 (inherited by child processes too) at stderr.
    """
    debug = env.environ.get("EXO_DEBUG") == "1"
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if debug else logging.WARNING,
                        format="exo mcp: %(levelname)s %(message)s")
    try:
        with contextlib.redirect_stdout(sys.stderr):
            server = build_server(env, role)
            start_background_tasks(env, env.role_cap or role)
    except ExoError as exc:
        from exo_cli.main import report

        report(exc, as_json=False)
        raise SystemExit(exc.exit_code) from exc
    server.run("stdio")
