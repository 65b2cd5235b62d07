"""Guard rails on the code's shape that ruff and mypy do not check by themselves.

- Every ruff per-file-ignore pattern names files that exist: an exemption for a file that was
  moved or deleted would silently exempt whatever later takes its name.
- No module of ``exo_cli/`` passes ``MAX_LINES`` lines: a module that grows past it does too
  many jobs and should be split by job (as ``ops/spawn/`` is). ``TOO_LONG`` lists the modules
  still waiting for their split, with the reason; it only shrinks.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 650
# Modules over MAX_LINES that are being split, and why they may be for now (remove an entry once
# its module is split or gone).
TOO_LONG: dict[str, str] = {}


def _ruff_lint() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]["lint"]


@cache
def _tracked() -> list[str]:
    """The repository's files as git sees them (tracked plus new, never ignored ones)."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         check=True, capture_output=True).stdout
    return [name for name in out.decode().split("\0") if name and (ROOT / name).is_file()]


def _glob(pattern: str) -> re.Pattern[str]:
    """A ruff path glob as a regular expression: ``**`` spans folders, ``*`` and ``?`` do not."""
    parts = re.split(r"(\*\*/?|\*|\?)", pattern)
    table = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}
    return re.compile("".join(table.get(p, re.escape(p)) for p in parts))


def test_glob_translation() -> None:
    assert _glob("tests/**").fullmatch("tests/e2e/x.py")
    assert _glob("exo_cli/adapters/**").fullmatch("exo_cli/adapters/mux/tmux.py")
    assert not _glob("exo_cli/adapters/**").fullmatch("exo_cli/ops/x.py")
    assert _glob("exo_cli/*.py").fullmatch("exo_cli/main.py")
    assert not _glob("exo_cli/*.py").fullmatch("exo_cli/ops/x.py")
    assert _glob("**/conftest.py").fullmatch("conftest.py") and _glob("**/conftest.py").fullmatch("a/b/conftest.py")


def test_ruff_per_file_ignores_name_existing_files() -> None:
    stale = [pattern for pattern in _ruff_lint()["per-file-ignores"]
             if not any(_glob(pattern).fullmatch(name) for name in _tracked())]
    assert not stale, f"pyproject.toml [tool.ruff.lint.per-file-ignores] names no file: {stale}"


def test_ruff_bans_the_outside_world_outside_adapters() -> None:
    lint = _ruff_lint()
    assert set(lint["flake8-tidy-imports"]["banned-api"]) >= {"subprocess", "sqlite3", "fcntl"}
    exempt = sorted(p for p, rules in lint["per-file-ignores"].items()
                    if "TID251" in rules and p.startswith("exo_cli/"))
    assert exempt == ["exo_cli/adapters/**"]


def _lines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


def test_no_module_passes_the_line_limit() -> None:
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "exo_cli").rglob("*.py"))
            if (n := _lines(p)) > MAX_LINES}
    over = {name: n for name, n in long.items() if name not in TOO_LONG}
    assert not over, f"split these modules by job (at most {MAX_LINES} lines each): {over}"


def test_too_long_list_only_names_long_modules() -> None:
    stale = [name for name in TOO_LONG if (ROOT / name).exists() and _lines(ROOT / name) <= MAX_LINES]
    assert not stale, f"these modules are short now: remove them from TOO_LONG: {stale}"


def test_nothing_installed_is_tracked() -> None:
    """Installed trees (node_modules, virtualenvs) are never in git, not even as a symlink: a tracked link
    replaces the real folder on checkout and the tests that need it skip."""
    import subprocess

    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    bad = [f.decode() for f in files if any(part in (b"node_modules", b".venv") for part in f.split(b"/"))]
    assert not bad, f"installed trees tracked by git: {bad}"


def _imported_modules() -> set[str]:
    """The top-level module of every import in ``exo_cli/`` (lazy ones inside functions too)."""
    import ast

    found: set[str] = set()
    for path in (ROOT / "exo_cli").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


def test_every_dependency_is_imported() -> None:
    """A declared dependency that nothing imports is installed, audited and kept compatible for nothing
    (GitPython and tomli-w were)."""
    from importlib.metadata import packages_distributions

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    modules: dict[str, set[str]] = {}
    for module, dists in packages_distributions().items():
        for dist in dists:
            modules.setdefault(re.sub(r"[-_.]+", "-", dist).lower(), set()).add(module)
    imported = _imported_modules()
    unused = []
    for requirement in project["dependencies"]:
        dist = re.sub(r"[-_.]+", "-", re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]).lower()
        assert dist in modules, f"{dist} is not installed: reinstall with pip install -e '.[test]'"
        if not modules[dist] & imported:
            unused.append(dist)
    assert not unused, f"declared in pyproject.toml but imported nowhere in exo_cli: {unused}"
