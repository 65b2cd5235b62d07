"""The operation registry: every operation is declared once and served by the CLI and MCP.

An operation is a core function ``fn(env, *, ...) -> dataclass`` decorated with ``@op``.
The decorator records its CLI path, its MCP tools (a seed may fix a tool's arguments:
then the tool carries a small adapter mapping its arguments onto the operation's), the
roles that may call it, honest read-only/destructive/idempotent hints, and the help text
of each parameter, which feeds both ``click.option(help=...)`` and the tool schema.

Both front ends call ``invoke``, which checks the caller's role, so a tool hidden from a
role is also refused if called anyway.
"""

from __future__ import annotations

from exo_cli.errors import StateError
from exo_cli.lite import NamedTuple

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


class Tool(NamedTuple):
    """One MCP tool backed by an operation (a NamedTuple: cheap to define at startup)."""

    name: str
    # tool arguments -> operation keyword arguments; its signature is the tool's schema.
    adapt: Callable[..., dict[str, Any]] | None = None
    # MCP roles that list the tool; None: the operation's roles.
    roles: tuple[str, ...] | None = None
    description: str | None = None
    # help for the adapter's own parameters
    help: Mapping[str, str] = {}  # noqa: RUF012 - never mutated


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
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare ``fn`` as the operation ``name``."""

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
        )
        return fn

    return deco


_loaded = False


def load_all() -> dict[str, Op]:
    """Import every module under ``ops/`` once; each ``@op`` fills ``OPS``."""
    global _loaded
    if not _loaded:
        import importlib

        for mod in op_modules():
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
    check_role(operation, env)
    return operation.func(env, **kwargs)
