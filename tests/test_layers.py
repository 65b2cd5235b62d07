"""The layer contract, read from the code itself (``ast``): which module may import what.

exo is two floors under two front ends: ``adapters/`` (the only code touching the outside
world: git, SQLite, processes, /proc, files and locks, multiplexers, agent CLIs, beads, forges)
under ``ops/`` (every operation), under the registry and the front ends (``commands/`` with
``main``, ``cli``, ``hookrun`` and ``readrun``, ``mcp_server``, and ``web`` for ``exo ui``), which render through ``render/``. The small shared modules
(records, errors, validate, config, env, selfcmd) sit beside them.

Every import counts, at the top of a module, inside a function or under ``TYPE_CHECKING``
alike: a lazy import is still a dependency. What is not yet converted is listed in
``PENDING`` with the reason; an entry that no longer matches anything fails too, so the list
only shrinks.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "exo_cli"

ADAPTERS = "exo_cli.adapters"
OPS = "exo_cli.ops"
FRONT_ENDS = ("exo_cli.registry", "exo_cli.commands", "exo_cli.main", "exo_cli.cli", "exo_cli.hookrun",
              "exo_cli.readrun", "exo_cli.mcp_server", "exo_cli.render", "exo_cli.web")
OUTSIDE_WORLD = ("subprocess", "sqlite3", "_sqlite3", "fcntl")  # only adapters/ touches these

# (importer, what) -> why it is still allowed. ``importer`` covers its submodules too
# (``exo_cli.ops.spawn`` covers the whole spawn package); ``what`` is a banned
# module, "sql" (SQL text in an operation), "circle" (an import circle, keyed by its first module)
# or an op's private name.
PENDING: dict[tuple[str, str], str] = {}


class Violation(NamedTuple):
    importer: str
    what: str
    line: int
    rule: str

    def __str__(self) -> str:
        return f"{self.importer} ({self.what}, line {self.line}): {self.rule}"


class Import(NamedTuple):
    importer: str
    target: str  # the imported module (``from a import b``: ``a.b`` when that is a module, else ``a``)
    name: str | None  # the imported name for ``from a import name``
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@cache
def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


@cache
def tree(module: str) -> ast.Module:
    path = modules()[module]
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _type_only_nodes(root: ast.Module) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``)."""
    found: set[int] = set()
    for node in ast.walk(root):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                found.update(id(n) for n in ast.walk(stmt))
    return found


@cache
def imports(module: str) -> tuple[Import, ...]:
    known = modules()
    is_package = modules()[module].name == "__init__.py"
    type_only = _type_only_nodes(tree(module))
    out = []
    for node in ast.walk(tree(module)):
        if isinstance(node, ast.Import):
            out += [Import(module, alias.name, None, node.lineno, id(node) in type_only) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the importing module's package
                package = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join([*package, *([node.module] if node.module else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append(Import(module, sub if sub in known else base, alias.name, node.lineno, id(node) in type_only))
    return tuple(out)


def all_imports() -> Iterator[Import]:
    for module in modules():
        yield from imports(module)


def _banned(rule: str, importers: str, banned: tuple[str, ...], exempt: tuple[str, ...] = ()) -> list[Violation]:
    found = []
    for imp in all_imports():
        if not _within(imp.importer, importers) or any(_within(imp.importer, e) for e in exempt):
            continue
        for b in banned:
            if _within(imp.target, b):
                found.append(Violation(imp.importer, b, imp.line, rule))
    return found


def adapters_stay_below() -> list[Violation]:
    """Adapters take plain values (paths, names, runners): not even ``Env``, the operations' context."""
    return _banned("adapters never import operations, front ends or the operations' context (env)", ADAPTERS,
                   (OPS, *FRONT_ENDS, "exo_cli.env"))


def ops_stay_inside() -> list[Violation]:
    return _banned("operations never import click, mcp, subprocess, sqlite3 or fcntl", OPS,
                   ("click", "mcp", *OUTSIDE_WORLD))


def only_adapters_touch_the_world() -> list[Violation]:
    return _banned("only adapters/ imports subprocess, sqlite3 or fcntl", PACKAGE, OUTSIDE_WORLD, (ADAPTERS,))


def only_mcp_server_imports_mcp() -> list[Violation]:
    return _banned("only exo_cli.mcp_server imports mcp", PACKAGE, ("mcp",), ("exo_cli.mcp_server",))


def only_the_web_front_end_imports_the_web_stack() -> list[Violation]:
    """``exo ui``'s server and highlighter (exo_cli/web/) are no other module's business."""
    return _banned("only exo_cli.web imports starlette, uvicorn or pygments", PACKAGE,
                   ("starlette", "uvicorn", "pygments"), ("exo_cli.web",))


def _op(module: str) -> str:
    """The operation a module belongs to: ``exo_cli.ops.spawn.task`` -> ``exo_cli.ops.spawn``."""
    return ".".join(module.split(".")[:3])


def ops_keep_their_privates() -> list[Violation]:
    """An op module never reaches for another op's private (``_x``) names (a split op's parts may)."""
    rule = "operations never use another op module's private helpers"
    found = []
    for module in modules():
        if not _within(module, OPS):
            continue
        bound: dict[str, str] = {}  # local name -> the op module it names
        for imp in imports(module):
            if imp.name is None or not _within(imp.target, OPS) or _op(imp.target) in (OPS, _op(module)):
                continue
            if imp.target.endswith("." + imp.name):  # from exo_cli.ops import tasks
                bound[imp.name] = imp.target
            elif imp.name.startswith("_"):  # from exo_cli.ops.tasks import _x
                found.append(Violation(module, f"{imp.target}.{imp.name}", imp.line, rule))
        for node in ast.walk(tree(module)):
            if isinstance(node, ast.ImportFrom):  # "as" names of module imports
                for alias in node.names:
                    if alias.asname and alias.name in bound:
                        bound[alias.asname] = bound[alias.name]
        for node in ast.walk(tree(module)):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(Violation(module, f"{bound[node.value.id]}.{node.attr}", node.lineno, rule))
    return found


SQL = re.compile(r"^\s*(SELECT\s.*\sFROM\s|INSERT\s+(OR\s+\w+\s+)?INTO\s|UPDATE\s+\w+\s+SET\s|DELETE\s+FROM\s|"
                 r"CREATE\s+(TABLE|INDEX)\s|PRAGMA\s)", re.S)


def ops_write_no_sql() -> list[Violation]:
    """SQL text lives in the store adapter; operations call its named methods."""
    found = []
    for module in modules():
        if not _within(module, OPS):
            continue
        lines = {node.lineno for node in ast.walk(tree(module))
                 if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.match(node.value)}
        found += [Violation(module, "sql", line, "operations write no SQL") for line in sorted(lines)]
    return found


def no_import_circles() -> list[Violation]:
    """No module reaches itself through the imports that run (lazy ones included).

    Type-only imports do not run; nor does importing one's own package add anything (Python
    imports a module's packages before the module), so neither makes a circle.
    """
    known = modules()
    edges: dict[str, set[str]] = {m: set() for m in known}
    for imp in all_imports():
        if imp.target in known and not imp.type_only and not _within(imp.importer, imp.target):
            edges[imp.importer].add(imp.target)
    # Tarjan's strongly connected components, iteratively.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in known:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        members.append(m)
                        if m == node:
                            break
                    if len(members) > 1:
                        circles.append(sorted(members))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return [Violation(c[0], "circle", 0, "no import circles: " + " <-> ".join(c)) for c in circles]


RULES = [
    adapters_stay_below,
    ops_stay_inside,
    only_adapters_touch_the_world,
    only_mcp_server_imports_mcp,
    only_the_web_front_end_imports_the_web_stack,
    ops_keep_their_privates,
    ops_write_no_sql,
    no_import_circles,
]


def _pending(v: Violation) -> bool:
    return any(_within(v.importer, importer) and v.what == what for importer, what in PENDING)


@pytest.mark.parametrize("rule", RULES, ids=[r.__name__ for r in RULES])
def test_layer_contract(rule: Callable[[], list[Violation]]) -> None:
    broken = [str(v) for v in rule() if not _pending(v)]
    assert not broken, "\n".join(broken)


def test_every_pending_exception_is_still_needed() -> None:
    found = [v for rule in RULES for v in rule()]
    stale = [f"{importer}: {what} ({why})" for (importer, what), why in PENDING.items()
             if not any(_within(v.importer, importer) and v.what == what for v in found)]
    assert not stale, "No longer needed; remove from PENDING in tests/test_layers.py:\n" + "\n".join(stale)


def test_the_contract_sees_what_it_forbids(tmp_path: Path) -> None:
    """The readers find imports wherever they are: in functions, relative, under TYPE_CHECKING."""
    source = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "from . import files\n"
        "if TYPE_CHECKING:\n"
        "    from exo_cli.ops import status\n"
        "def f():\n"
        "    import subprocess\n"
        "    from ..registry import op\n"
    )
    module = "exo_cli.adapters.probe"
    modules()[module] = tmp_path / "probe.py"
    (tmp_path / "probe.py").write_text(source, encoding="utf-8")
    tree.cache_clear()
    imports.cache_clear()
    try:
        targets = {i.target for i in imports(module)}
        assert {"exo_cli.adapters.files", "exo_cli.ops.status", "subprocess", "exo_cli.registry"} <= targets
        assert {(v.importer, v.what) for v in adapters_stay_below()} >= {(module, OPS), (module, "exo_cli.registry")}
        assert (module, "subprocess") not in {(v.importer, v.what) for v in only_adapters_touch_the_world()}
    finally:
        del modules()[module]
        tree.cache_clear()
        imports.cache_clear()
