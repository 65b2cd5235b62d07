"""The operation registry: every operation is declared once and served by the CLI and MCP.

An operation is a core function ``fn(env, *, ...) -> dataclass`` decorated with ``@op``.
The decorator records its CLI path, its MCP tools (a tool may take the arguments another
tool family fixed, such as ``spawn_workers``: then the tool carries a small adapter mapping its arguments onto the operation's), the
roles that may call it, honest read-only/destructive/idempotent hints, and the help text
of each parameter, which feeds both ``click.option(help=...)`` and the tool schema.

Parameter types are the operation's annotations; ``Annotated[str, Choice(VALUES)]`` and
``Annotated[int, Range(1)]`` narrow them, for the CLI's ``click.Choice``/``IntRange`` and
the tool schemas' ``enum``/``minimum`` alike. Every parameter reaches MCP through one of
the operation's tools (the tool takes it under its public name, or its adapter produces
it) unless ``cli_only`` says why not; an operation without tools is human only, or says
why in ``no_tools``. Tools of other tool families' compatible sets (``exo mcp --compat``) are
kept apart in ``compat``: served only on request, never in the default list.

Both front ends call ``invoke``, which checks the caller's role, so a tool hidden from a
role is also refused if called anyway.

Help strings and docstrings name an operation's own parameters as ``{--since_last}`` (the
parameter's name): each front end renders that placeholder as its reader passes the value, the
flag ``--since-last`` on the command line (``Op.cli_text``; ``flags`` declares a flag spelled
otherwise, such as ``--all`` for ``show_all``) and the argument ``since_last`` for a model
(``Op.tool_text``). Neither says which exception an operation raises: the text says what happens.
"""

from __future__ import annotations

from exo_cli.errors import ExoError, StateError
from exo_cli.lite import NamedTuple
from exo_cli.records import MCP_COMPAT

TYPE_CHECKING = False
if TYPE_CHECKING:
    import inspect
    from collections.abc import Callable, Mapping
    from typing import Any

    from exo_cli.env import Env

OPS_PACKAGE = "exo_cli.ops"


def op_modules() -> list[str]:
    """Every module under ``exo_cli/ops/`` (recursively), in a stable order.

    Found by listing the package's folder, so an operation in a new module is served by the
    CLI and by ``exo mcp`` without any hand-kept list (a forgotten entry used to drop its MCP
    tools silently). Listing a folder costs far less than importing ``pkgutil``.
    """
    import os

    base = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops")
    found: list[str] = []

    def walk(folder: str, prefix: str) -> None:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            if e.name.startswith(("_", ".")):
                continue
            if e.is_dir() and os.path.isfile(os.path.join(e.path, "__init__.py")):
                found.append(f"{prefix}.{e.name}")
                walk(e.path, f"{prefix}.{e.name}")
            elif e.is_file() and e.name.endswith(".py"):
                found.append(f"{prefix}.{e.name[:-3]}")

    walk(base, OPS_PACKAGE)
    return found


class Choice(NamedTuple):
    """``Annotated[str, Choice(VALUES)]``: the parameter is one of ``values`` (an enum in the schema)."""

    values: tuple[str, ...]


class Range(NamedTuple):
    """``Annotated[int, Range(1)]``: the number's bounds, inclusive (``minimum``/``maximum``)."""

    min: float | None = None
    max: float | None = None


class Tool(NamedTuple):
    """One MCP tool backed by an operation (a NamedTuple: cheap to define at startup).

    Its arguments are the adapter's own keyword parameters plus the operation parameters
    ``passthrough`` names (under their public names, see ``Op.names``); a tool without an
    adapter takes every parameter of the operation that is not ``cli_only``. ``adapt``
    maps its own arguments onto the operation's keyword arguments; it may return a list of
    them, one operation call each (a call of another family's that exo splits). ``result`` turns the
    tool's arguments and the operation's results into what the tool returns (an object of
    ``result_type``); without it the tool returns the operation's result.
    """

    name: str
    # the tool's own arguments -> operation keyword arguments (or a list: one call each)
    adapt: Callable[..., dict[str, Any] | list[dict[str, Any]]] | None = None
    # MCP roles that list the tool; None: the operation's roles.
    roles: tuple[str, ...] | None = None
    description: str | None = None
    # help for the adapter's own parameters
    help: Mapping[str, str] = {}  # noqa: RUF012 - never mutated
    # operation parameters the tool also takes as they are (with an adapter)
    passthrough: tuple[str, ...] = ()
    # (tool arguments with defaults, the operation's results) -> the tool's result
    result: Callable[[dict[str, Any], list[Any]], Any] | None = None
    result_type: type | None = None
    # the tool family's set that serves it (``exo mcp --compat NAME``); None: exo's default set
    compat: str | None = None
    # operation parameter -> the adapter's argument that fills it, when named otherwise (for help texts)
    names: Mapping[str, str] = {}  # noqa: RUF012 - never mutated


class Arg(NamedTuple):
    """One argument of a tool: its public name, type, default, help, and the parameter it fills."""

    name: str
    annotation: Any
    default: Any  # inspect.Parameter.empty when required
    help: str
    param: str | None  # the operation parameter it passes through to; None: the adapter's own

    @property
    def required(self) -> bool:
        import inspect

        return self.default is inspect.Parameter.empty


class Op(NamedTuple):
    """One operation: the single implementation behind a command and its tools."""

    name: str
    func: Callable[..., Any]
    cli: str | None
    tools: tuple[Tool, ...]
    roles: tuple[str, ...]
    read_only: bool
    destructive: bool
    idempotent: bool
    help: Mapping[str, str]
    blocking: bool = False
    description: str | None = None
    # parameter -> why no MCP tool takes it
    cli_only: Mapping[str, str] = {}  # noqa: RUF012 - never mutated
    # why the operation has no MCP tool (a human-only operation needs no reason)
    no_tools: str | None = None
    # parameter -> its public name, when it differs (the CLI's option and the tools' argument)
    names: Mapping[str, str] = {}  # noqa: RUF012 - never mutated
    # tools of other tool families' compatible sets (served only with ``exo mcp --compat``)
    compat: tuple[Tool, ...] = ()
    # the parameter naming the agent the operation acts on: the call runs on that agent's host
    on_host: str | None = None
    # parameters naming a file or folder: the broker refuses any outside the calling agent's own folders
    paths: tuple[str, ...] = ()
    # file parameter -> the parameter its text goes to: an agent's relay reads the file and sends the text
    reads: Mapping[str, str] = {}  # noqa: RUF012 - never mutated
    # parameter -> its command-line flag, when it is not ``--<public name>`` (``show_all``: ``--all``)
    flags: Mapping[str, str] = {}  # noqa: RUF012 - never mutated

    def cli_flag(self, param: str) -> str:
        """The command-line flag of a parameter (``since_last``: ``--since-last``)."""
        return self.flags.get(param) or "--" + self.public(param).replace("_", "-")

    def cli_text(self, text: str) -> str:
        """A help string as the command line shows it: ``{--since_last}`` is the flag ``--since-last``."""
        return _render(text, self.cli_flag)

    def tool_text(self, text: str, tool: Tool | None = None) -> str:
        """A help string as an MCP tool shows it: ``{--since_last}`` is the argument `` `since_last` `` (the
        name ``tool``'s adapter gives it, when it names it otherwise), as code."""
        names = tool.names if tool is not None else {}
        return _render(text, lambda param: f"`{names.get(param) or self.public(param)}`")

    @property
    def summary(self) -> str:
        return self.doc.splitlines()[0]

    @property
    def doc(self) -> str:
        import inspect

        return inspect.getdoc(self.func) or self.name

    def params(self) -> list[inspect.Parameter]:
        """The operation's keyword parameters (``env`` dropped)."""
        import inspect

        sig = inspect.signature(self.func)
        return [p for p in sig.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]

    def tool_roles(self, tool: Tool) -> tuple[str, ...]:
        roles = tool.roles if tool.roles is not None else self.roles
        return tuple(r for r in roles if r != "human")

    def public(self, param: str) -> str:
        """The public name of a parameter (``from_branch`` is ``from``)."""
        return self.names.get(param, param)

    def result_type(self) -> Any:
        """The operation's result class (its return annotation, resolved)."""
        import inspect

        return resolve(self.func, inspect.signature(self.func).return_annotation)

    def tool_args(self, tool: Tool) -> list[Arg]:
        """The arguments ``tool`` takes, in order: its adapter's own, then the parameters it passes through."""
        import inspect

        out: list[Arg] = []
        helps = {**self.help, **tool.help}
        if tool.adapt is not None:
            for p in inspect.signature(tool.adapt).parameters.values():
                if p.kind is not inspect.Parameter.KEYWORD_ONLY:
                    continue
                if p.name not in helps:
                    raise TypeError(f"tool {tool.name}: parameter {p.name!r} has no help text")
                out.append(Arg(p.name, resolve(tool.adapt, p.annotation), p.default,
                               self.tool_text(helps[p.name], tool), None))
            through = [p for p in self.params() if p.name in tool.passthrough]
        else:
            through = [p for p in self.params() if p.name not in self.cli_only]
        for p in through:
            out.append(Arg(self.public(p.name), resolve(self.func, p.annotation), p.default,
                           self.tool_text(helps[p.name], tool), p.name))
        return out

    def all_tools(self) -> tuple[Tool, ...]:
        """Every tool of the operation: exo's default ones, then the compatible sets' ones."""
        return self.tools + self.compat


PLACEHOLDER = r"\{--([a-z][a-z0-9_]*)\}"  # ``{--since_last}``: an operation's parameter, named in a help text


def _render(text: str, name: Callable[[str], str]) -> str:
    if "{--" not in text:
        return text
    import re

    return re.sub(PLACEHOLDER, lambda m: name(m.group(1)), text)


def resolve(func: Callable[..., Any], annotation: Any) -> Any:
    """An annotation as an object: postponed (string) annotations evaluated in ``func``'s module."""
    import inspect
    import sys
    import typing

    if annotation is inspect.Parameter.empty:
        return typing.Any
    if isinstance(annotation, str):
        module = sys.modules[func.__module__]
        return eval(annotation, vars(module), {})  # noqa: S307 - our own source
    return annotation


def tool_calls(operation: Op, tool: Tool, args: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The operation calls (keyword arguments) a call of ``tool`` with ``args`` (public names) makes."""
    own: dict[str, Any] = {}
    through: dict[str, Any] = {}
    for a in operation.tool_args(tool):
        if a.name in args:
            (own if a.param is None else through)[a.param or a.name] = args[a.name]
    if tool.adapt is None:
        return [through]
    made = tool.adapt(**own)
    calls = made if isinstance(made, list) else [made]
    return [{**through, **c} for c in calls]  # what the adapter set for one call is more specific


def call_tool(operation: Op, tool: Tool, env: Env, args: Mapping[str, Any]) -> Any:
    """Call ``tool`` with ``args`` (already checked against its schema): the operation, once or more.

    When the tool makes several calls, one failing does not stop the others: its ExoError
    goes to ``tool.result`` in its place (unless every call failed: then the first error is raised).
    """
    calls = tool_calls(operation, tool, args)
    if len(calls) == 1:
        results: list[Any] = [invoke(operation.name, env, **calls[0])]
    else:
        results = []
        for kw in calls:
            try:
                results.append(invoke(operation.name, env, **kw))
            except ExoError as exc:
                results.append(exc)
        if all(isinstance(r, ExoError) for r in results):
            raise results[0]
    if tool.result is None:
        return results[0]
    full = {a.name: args.get(a.name, None if a.required else a.default) for a in operation.tool_args(tool)}
    return tool.result(full, results)


def exit_code(result: Any) -> int:
    """The CLI's exit status for a result an operation returned (not raised): its ``exit_code``, else 0.

    A result that can report failure in itself (a spawn whose tasks failed, a read whose pattern
    never appeared) defines ``exit_code`` and, when the operation has tools, ``tool_error``.
    """
    return int(getattr(result, "exit_code", 0) or 0)


def tool_error(result: Any) -> bool:
    """Whether an MCP tool answers ``result`` with ``isError: true`` (its ``tool_error``; the result stays the
    structured content): nothing of what was asked was done. A partial success is no error: the result says
    what failed."""
    return bool(getattr(result, "tool_error", False))


def served_tools(operation: Op, compat: tuple[str, ...] | list[str] = ()) -> list[Tool]:
    """The tools a server with the ``compat`` sets serves for ``operation``.

    A compatible set's tool replaces exo's tool of the same name (it takes the same arguments
    and more, and returns the same object with more fields).
    """
    extra = [t for t in operation.compat if t.compat in compat]
    replaced = {t.name for t in extra}
    return [t for t in operation.tools if t.name not in replaced] + extra


OPS: dict[str, Op] = {}


def keyword_only(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The names of ``fn``'s keyword-only parameters, read from its code object.

    Not ``inspect.signature``: every hook would pay for importing ``inspect`` (about as much
    as the rest of the hook's imports together) just to declare its operation.
    """
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    code = fn.__code__
    return code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]


def op(
    name: str,
    *,
    cli: str | None = None,
    tools: tuple[str | Tool, ...] | list[str | Tool] = (),
    roles: tuple[str, ...] = ("tl", "dev"),
    read_only: bool = False,
    destructive: bool = False,
    idempotent: bool = False,
    help: Mapping[str, str] | None = None,
    blocking: bool = False,
    description: str | None = None,
    cli_only: Mapping[str, str] | None = None,
    no_tools: str | None = None,
    names: Mapping[str, str] | None = None,
    on_host: str | None = None,
    paths: tuple[str, ...] = (),
    reads: Mapping[str, str] | None = None,
    flags: Mapping[str, str] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare ``fn`` as the operation ``name`` (``on_host``: the parameter naming the agent whose host runs it;
    ``paths``: parameters naming files or folders; ``reads``: file parameter -> the parameter its text fills)."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        declared = dict(help or {})
        for param in keyword_only(fn):
            if param not in declared:
                raise TypeError(f"operation {name}: parameter {param!r} has no help text")
        OPS[name] = Op(
            name=name,
            func=fn,
            cli=cli,
            tools=tuple(t if isinstance(t, Tool) else Tool(t) for t in tools),
            roles=roles,
            read_only=read_only,
            destructive=destructive,
            idempotent=idempotent,
            help=declared,
            blocking=blocking,
            description=description,
            cli_only=dict(cli_only or {}),
            no_tools=no_tools,
            names=dict(names or {}),
            on_host=on_host,
            paths=tuple(paths),
            reads=dict(reads or {}),
            flags=dict(flags or {}),
        )
        return fn

    return deco


def extend(name: str, *tools: Tool) -> None:
    """Add compatible-set tools (each with ``compat`` set) to the operation ``name``."""
    operation = OPS[name]
    for t in tools:
        if t.compat not in MCP_COMPAT:
            raise TypeError(f"tool {t.name}: unknown compatible set {t.compat!r}")
    OPS[name] = operation._replace(compat=operation.compat + tuple(tools))


_loaded = False
# Imported before the rest, as ``exo mcp`` has always imported them: the order operations register
# in is the order their tools are listed in (``tests/snapshots/``), so every server (``exo mcp``, the
# broker's sessions) loads the registry this way before any other operation module.
FIRST = ("exo_cli.ops.watch",)


def load_all() -> dict[str, Op]:
    """Import every module under ``ops/`` once (``FIRST`` first); each ``@op`` fills ``OPS``."""
    global _loaded
    if not _loaded:
        import importlib

        for mod in (*FIRST, *op_modules()):
            importlib.import_module(mod)
        _loaded = True
    return OPS


def get(name: str) -> Op:
    if name not in OPS:
        load_all()
    return OPS[name]


def allowed(operation: Op, role: str) -> bool:
    """The human may do everything; an agent what its role lists ("tl" covers "dev" ops too)."""
    if role == "human":
        return True
    if role == "tl":
        return "tl" in operation.roles or "dev" in operation.roles
    return role in operation.roles


def check_role(operation: Op, env: Env) -> None:
    role = env.role
    if not allowed(operation, role):
        who = env.caller.agent_id
        raise StateError(
            f"The {role} role cannot {operation.cli or operation.name}: {who} is a {role} agent",
            hint="Ask your parent (exo note / exo question) to do it for you."
            if role == "dev"
            else "Only the human at the root may do this.",
            op=operation.name,
            role=role,
            caller=who,
        )


def invoke(name: str, env: Env, /, **kwargs: Any) -> Any:
    """Call operation ``name`` for the caller in ``env`` after checking its role."""
    operation = get(name)
    if env.relayed:  # an agent with a socket: its broker runs the call, as that agent
        from exo_cli.relay import call

        return call(env, operation, kwargs)
    env.follow_store()
    check_role(operation, env)
    if operation.on_host is not None and ROUTER is not None:
        routed = ROUTER(env, operation, kwargs)  # the agent runs on another host: exo there runs the very same operation
        if routed is not NOT_ROUTED:
            return routed
    return operation.func(env, **kwargs)


# Set by ``ops.remote`` (imported by every module that declares an ``on_host`` operation): runs a call
# on the host of the agent it names and returns its result, or NOT_ROUTED when that agent runs here.
ROUTER: Callable[[Env, Op, Mapping[str, Any]], Any] | None = None
NOT_ROUTED = object()
