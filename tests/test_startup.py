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
