"""The MCP server, generated from the operation registry (the only module importing ``mcp``).

Each operation's tools become MCP tools. A tool's input schema is derived from its
arguments' types (``schema.input_schema``: enums, ranges, typed items, no unknown names)
and every call is checked against exactly that schema before anything runs: an argument
error (an unknown name, a wrong type, ``true`` for a number) is a ``UsageError`` (-32602)
naming the arguments. Its output schema is derived from the result class, and its
structured output is exactly the CLI's ``--json`` object. ExoErrors reach the model as
tool errors whose text is exactly the error object (the CLI's ``--json`` error); errors
the model cannot fix (``protocol = True``) are JSON-RPC errors with exo's codes. Only the
protocol is written to stdout: the SDK's stdio transport points fd 1 at stderr while it
serves, and the server is built with ``sys.stdout`` redirected to stderr; logs go to stderr.

Roles: ``auto`` serves the caller's recorded role (the human's own session is the
root TL); ``--role`` may lower it, never raise it. A tool the role does not list is
not registered, and ``registry.invoke`` refuses it anyway if it is reached. Other tool families'
compatible tool sets (``--compat``) add their tools on request only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool as SdkTool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from exo_cli import __version__, cancel, registry, schema
from exo_cli.env import ROLE_RANK, Env
from exo_cli.errors import ExoError, UsageError
from exo_cli.records import MCP_COMPAT, to_jsonable
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
    from exo_cli.ops.queuerun import resume_queues  # merge queues a killed runner left (one runner per base)
    from exo_cli.ops.watch import background_poller  # the forge poller (one per repo, by a lock)

    return [background_poller, resume_queues]


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
    return op.tool_text(tool.description or op.description or op.doc, tool)


def tool_output_type(op: Op, tool: Tool) -> Any:
    """The class of what ``tool`` returns: its own result class, else the operation's."""
    return tool.result_type or op.result_type()


def error_result(exc: ExoError) -> CallToolResult:
    """A tool error whose text is exactly exo's error object (what ``--json`` prints)."""
    text = json.dumps(exc.to_dict(), ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _map_error(tool: str, exc: ExoError) -> CallToolResult:
    if exc.protocol:  # the model cannot fix it: a JSON-RPC error with exo's code
        raise MCPError(exc.rpc_code, exc.message, exc.to_dict()["error"]) from exc
    log.info("tool %s failed: %s", tool, exc.message)
    return error_result(exc)


def ok_result(obj: Any, *, is_error: bool = False) -> CallToolResult:
    """A tool's structured result, with the same JSON as text for clients that read only text.

    ``is_error``: the operation returned a result that says nothing of what was asked was done
    (``registry.tool_error``: every task of a spawn failed), where the command exits non-zero.
    """
    text = json.dumps(obj, indent=2, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=obj, is_error=is_error)


def make_tool(env: Env, op: Op, tool: Tool, input_schema: dict[str, Any] | None = None) -> Callable[..., Any]:
    """Build the tool's call: check the arguments, adapt them, invoke the operation, map errors.

    ``await fn(**arguments)`` returns the ``CallToolResult``. Blocking operations run in a
    worker thread inside ``cancel.scope``; when the client cancels the call the scope's
    event is set, the tool returns at once and the operation sees ``cancel.cancelled()``
    at its next short wait.
    """
    checked = input_schema or schema.input_schema(op.tool_args(tool))

    def call(arguments: dict[str, Any]) -> CallToolResult:
        try:
            args = schema.check_arguments(tool.name, checked, arguments)
            result = registry.call_tool(op, tool, env, args)
            return ok_result(to_jsonable(result), is_error=registry.tool_error(result))
        except ExoError as exc:
            return _map_error(tool.name, exc)
        except Exception as exc:  # a bug: an error object too, the traceback only with EXO_DEBUG=1 (as the CLI)
            if env.environ.get("EXO_DEBUG") == "1":
                log.exception("tool %s: internal error", tool.name)
            else:
                log.error("tool %s: internal error: %s: %s", tool.name, type(exc).__name__, exc)
            return error_result(ExoError(
                f"internal error: {type(exc).__name__}: {exc}",
                hint="This is a bug in exo; run the server with EXO_DEBUG=1 for a traceback and report it.",
                tool=tool.name))

    if op.blocking:

        async def fn(**arguments: Any) -> CallToolResult:
            event = threading.Event()

            def run() -> CallToolResult:
                with cancel.scope(event):
                    return call(arguments)

            try:
                return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
            except anyio.get_cancelled_exc_class():
                event.set()
                raise

    else:

        async def fn(**arguments: Any) -> CallToolResult:
            return await anyio.to_thread.run_sync(call, arguments)

    fn.__name__ = tool.name
    fn.__doc__ = tool_description(op, tool)
    return fn


def sdk_tool(env: Env, op: Op, tool: Tool) -> SdkTool:
    """The SDK's record of ``tool``: name, description, schemas, annotations and the call."""
    input_schema = schema.input_schema(op.tool_args(tool))
    return SdkTool(
        fn=make_tool(env, op, tool, input_schema),
        name=tool.name,
        title=None,
        description=tool_description(op, tool),
        parameters=input_schema,
        context_kwarg=None,
        fn_metadata=FuncMetadata(arg_model=ArgModelBase,
                                 output_schema=schema.output_schema(tool_output_type(op, tool))),
        is_async=True,
        annotations=ToolAnnotations(
            read_only_hint=op.read_only,
            destructive_hint=op.destructive,
            idempotent_hint=op.idempotent,
            open_world_hint=False,
        ),
    )


READY_GRACE = 0.5  # seconds between answering the first tools/list and recording the server ready


def _ready(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # readiness is best effort; never fail the client's tools/list
        log.exception("recording MCP readiness failed")


class _Server(MCPServer):
    """An MCPServer that calls exo's tools itself (arguments checked by exo, not coerced by the SDK)
    and calls ``on_listed`` once, when it first answers tools/list."""

    on_listed: Callable[[], None] | None = None
    exo_tools: dict[str, Callable[..., Any]]
    # The broker's session for a relay: the prefix of each tool call's request key (the relay's id);
    # a call sent again after the broker restarted carries the same key (``cancel.key``).
    key_prefix: str | None = None

    async def list_tools(self) -> Any:
        tools = await super().list_tools()
        callback, self.on_listed = self.on_listed, None
        if callback is not None:
            # Recorded a moment after this answer is written, not while it is still being built: the
            # session-start hook releases the agent's first prompt on it, and the client must have
            # registered the tools by then (a hook that answers fast otherwise wins that race).
            asyncio.get_running_loop().call_later(READY_GRACE, _ready, callback)
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        fn = self.exo_tools.get(name)
        if fn is None:  # unknown tool: the SDK's own answer
            return await super().call_tool(name, arguments, context)
        if not isinstance(arguments, dict):
            return error_result(UsageError(f"Invalid arguments for {name}: expected an object", tool=name))
        request_id = getattr(getattr(context, "request_context", None), "request_id", None)
        if self.key_prefix is None or request_id is None:
            return await fn(**arguments)
        token = cancel.REQUEST_KEY.set(f"{self.key_prefix}:{request_id}")
        try:
            return await fn(**arguments)
        finally:
            cancel.REQUEST_KEY.reset(token)


def compat_sets(env: Env, requested: tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """The compatible tool sets to serve: those ``--compat`` names, else the ``mcp.compat`` config key.

    A configuration that cannot be read serves no compatible set (with a warning on stderr):
    every tool call then reports the configuration error itself.
    """
    if requested:
        names = list(requested)
    else:
        try:
            names = list(env.config.get("mcp.compat") or [])
        except ExoError as exc:
            log.warning("no compatible tool sets: %s", exc.message)
            names = []
    unknown = [n for n in names if n not in MCP_COMPAT]
    if unknown:
        raise UsageError(f"Unknown compatible tool set(s): {', '.join(unknown)}",
                         hint=f"Use: {', '.join(MCP_COMPAT)}.", compat=unknown)
    return tuple(dict.fromkeys(names))


def served(role: str, compat: tuple[str, ...] = ()) -> list[tuple[Op, Tool]]:
    """Every (operation, tool) a server for ``role`` with the ``compat`` sets lists, in registry order."""
    out = []
    for op in registry.load_all().values():
        for tool in registry.served_tools(op, compat):
            if lists_tool(op, tool, role):
                out.append((op, tool))
    return out


def build_server(env: Env, role: str = "auto", compat: tuple[str, ...] | list[str] | None = None) -> MCPServer:
    """An MCPServer listing the registry's tools that ``role`` may use (plus the ``compat`` sets').

    An agent's server records, once its client has listed the tools, that it is ready
    (``mcpready.mark_mcp_ready``): the Claude agent's session-start hook waits for that.
    """
    sets = compat_sets(env, compat)
    served_role = serving_role(env, role)
    env.role_cap = served_role
    tools = [(op, tool, sdk_tool(env, op, tool)) for op, tool in served(served_role, sets)]
    server = _Server("exo", version=__version__, instructions=INSTRUCTIONS, tools=[t for _, _, t in tools])
    server.exo_tools = {t.name: t.fn for _, _, t in tools}
    if not env.caller.is_human:
        from exo_cli.ops.mcpready import mark_mcp_ready

        agent_id = env.caller.agent_id
        server.on_listed = lambda: mark_mcp_ready(env, agent_id)
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


def serve_socket(env: Env, role: str, compat: list[str], sock: Any, *, started: Callable[[str], None],
                 refused: Callable[[BaseException], None], key_prefix: str | None = None) -> None:
    """Serve one MCP session over a connected socket: the broker's session for an agent's relay.

    The server is built as ``exo mcp`` builds it (``build_server``: the same tools, roles and
    ``--compat`` sets); ``started(role)`` is told the role served before the first MCP line (the
    relay's hello answer), ``refused(exc)`` why no server could be built. The session then reads
    and writes MCP's newline-delimited JSON-RPC on the socket until the relay closes it; a
    cancelled tool call reaches its operation as from stdio.
    """
    try:
        server = build_server(env, role, compat or None)
    except Exception as exc:  # an unknown --compat set, an unreadable state: told to the relay
        refused(exc)
        return
    if isinstance(server, _Server):
        server.key_prefix = key_prefix
    started(env.role_cap or role)
    from mcp.server.stdio import stdio_server

    rfile = sock.makefile("r", encoding="utf-8", errors="replace", newline="")
    wfile = sock.makefile("w", encoding="utf-8", newline="")

    async def session() -> None:
        async with stdio_server(stdin=anyio.wrap_file(rfile), stdout=anyio.wrap_file(wfile)) as (reader, writer):
            low = server._lowlevel_server
            await low.run(reader, writer, low.create_initialization_options())

    try:
        anyio.run(session)
    except (OSError, ValueError) as exc:  # the relay went away mid-write
        log.info("MCP session ended: %s", exc)
    finally:
        for f in (rfile, wfile):
            with contextlib.suppress(OSError, ValueError):
                f.close()


def serve(env: Env, role: str, compat: tuple[str, ...] | list[str] | None = None) -> None:
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
            server = build_server(env, role, compat)
            start_background_tasks(env, env.role_cap or role)
    except ExoError as exc:
        from exo_cli.render import report

        report(exc, as_json=False)
        raise SystemExit(exc.exit_code) from exc
    server.run("stdio")
