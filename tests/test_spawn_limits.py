"""limits.max_agents with on_limit = "wait": a spawn beyond the limit queues until a slot frees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from test_spawn import spawn_json, team  # noqa: F401 - the fixture is used by name

from conftest import ROOT, Exo


def test_spawn_waits_for_a_free_slot(team: Path) -> None:  # noqa: F811
    with open(team / "exo.toml", "a") as fh:
        fh.write('[limits]\nmax_agents = 1\non_limit = "wait"\n[mux]\ndefault = "headless"\n')
    exo = Exo(team)
    code, res = spawn_json(exo, "--worker", "first", "--prompt", "x", "--agent", "custom")
    assert code == 0, res
    queued = subprocess.Popen(
        [sys.executable, "-m", "exo_cli", "spawn", "--worker", "second", "--prompt", "y", "--agent", "custom",
         "--json"],
        cwd=team, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        # The second spawn must still be queued while the first agent lives.
        for _ in range(30):
            assert queued.poll() is None, queued.communicate()
            time.sleep(0.1)
        agents = json.loads(exo("agents", "--json").stdout)["agents"]
        assert [a["id"] for a in agents] == ["first"]
        assert exo("kill", "first").exit_code == 0
        out, err = queued.communicate(timeout=60)
    finally:
        if queued.poll() is None:
            queued.kill()
    assert queued.returncode == 0, err
    assert [a["id"] for a in json.loads(out)["agents"]] == ["second"]
    assert "Waiting for a free agent slot" in out + err
