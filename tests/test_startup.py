"""Startup stays light: heavy modules are never imported by --help, status, agents (not timed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("mcp", "git", "rich", "yaml", "tomli_w", "pydantic")

PROBE = """
import sys, json
from exo_cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r})
sys.stderr.write('\\nHEAVY=' + json.dumps(heavy) + '\\n')
"""


@pytest.mark.parametrize("args", [["--help"], ["status", "--json"], ["agents", "--json"], ["status"],
                                  ["init", "--help"]])
def test_no_heavy_imports(repo: Path, args: list[str]) -> None:
    code = PROBE.format(heavy=set(HEAVY))
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = [x for x in proc.stderr.splitlines() if x.startswith("HEAVY=")][-1]
    assert json.loads(line[6:]) == [], f"exo {' '.join(args)} imported heavy modules"


EVERY_HELP = """
import contextlib, io, json, sys
from exo_cli.commands import COMMANDS
from exo_cli.main import main
seen = {{}}
for name in COMMANDS:
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main([name, "--help"])
        except SystemExit:
            pass
    for m in sorted(sys.modules):
        if m.split('.')[0] in {heavy!r}:
            seen.setdefault(m.split('.')[0], name)
sys.stderr.write('\\nHEAVY=' + json.dumps(seen) + '\\n')
"""


def test_no_command_help_imports_heavy_modules(repo: Path) -> None:
    """Every command, a new one too, keeps to the startup budget's diet (docs/performance.md): its ``--help``
    loads its command module and whatever that imports at module level, which must not be a heavy module
    (the TUI, the MCP SDK, rich, PyYAML, psycopg...). One process asks each in turn; the answer names the
    first command after which each heavy module was loaded."""
    code = EVERY_HELP.format(heavy={*HEAVY, "textual", "psycopg"})
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = [x for x in proc.stderr.splitlines() if x.startswith("HEAVY=")][-1]
    assert json.loads(line[6:]) == {}, "these commands' --help imported heavy modules (module: first command)"
