"""A team in Zellij, end to end through ``exo`` (Zellij's part played by ``fake_zellij.py``).

exo spawns from inside a Zellij session (``ZELLIJ``/``ZELLIJ_SESSION_NAME`` set, ``zellij`` on
PATH); everything else runs from a plain shell, as a user's other terminal would: listing,
waiting, messaging, completing and killing need no Zellij session of their own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_agents_watch import AGENT, _alive

from conftest import ROOT, git, sandbox_reach, wait_for, write_trusted

HERE = Path(__file__).resolve().parent
SANDBOX = ["--sandbox"] if shutil.which("bwrap") or os.environ.get("CI") else []  # CI installs bubblewrap

PROCESS_COMPOSE = r'''#!{python}
import json, os, sys, time
out = os.path.join(os.environ["PC_OUT"], os.environ["EXO_AGENT"] + ".json")
json.dump({{"argv": sys.argv[1:], "cwd": os.getcwd(), "port": os.environ.get("WEB_PORT"),
           "proof": os.environ.get("EXO_AGENT_PROOF")}}, open(out + ".tmp", "w"))
os.replace(out + ".tmp", out)
time.sleep(600)
'''


@pytest.fixture
def zteam(repo: Path, tmp_path: Path) -> Iterator[tuple[Path, dict[str, str], dict[str, str]]]:
    """(repo, the env of a shell inside Zellij, the env of a plain shell)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "zellij").write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = 'zellij'\n"
                                   f"runpy.run_path({str(HERE / 'fake_zellij.py')!r}, run_name='__main__')\n")
    (bindir / "zellij").chmod(0o755)
    (bindir / "process-compose").write_text(PROCESS_COMPOSE.format(python=sys.executable))
    (bindir / "process-compose").chmod(0o755)
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    (tmp_path / "pc").mkdir()
    write_trusted(repo, sandbox_reach(tmp_path / "pc", env=["PC_OUT"])  # the services run sandboxed (the default)
        + f'[agent]\ncommand = [{json.dumps(sys.executable)}, {json.dumps(str(script))}, "{{name}}", "{{prompt}}"]\n'
        'idle_quiet_seconds = 2\n[services.web]\ncommand = "sleep 600"\nport = 18400\n'
    )
    git(repo, "add", "exo.toml")
    git(repo, "commit", "-qm", "exo config")
    plain = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{bindir}:{os.environ['PATH']}",
             "FAKE_ZELLIJ_DIR": str(tmp_path / "zellij"), "PC_OUT": str(tmp_path / "pc")}
    for var in ("ZELLIJ", "ZELLIJ_SESSION_NAME", "ZELLIJ_PANE_ID", "EXO_AGENT"):
        plain.pop(var, None)
    inside = {**plain, "ZELLIJ": "0", "ZELLIJ_SESSION_NAME": "work", "ZELLIJ_PANE_ID": "9"}
    yield repo, inside, plain
    state = tmp_path / "zellij"
    for tab in state.glob("*.tab.json"):
        for pid in json.loads(tab.read_text()).get("pids", {}).values():
            try:
                os.killpg(pid, 9)
            except OSError:
                pass


def run(repo: Path, env: dict[str, str], *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exo_cli", *args], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def run_json(repo: Path, env: dict[str, str], *args: str) -> dict:
    proc = run(repo, env, *args, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def calls(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "zellij" / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_zellij_team_from_a_plain_shell(zteam, tmp_path: Path) -> None:
    repo, inside, plain = zteam
    # sandboxed (services make `auto` leave an agent unsandboxed: --sandbox walls both in)
    res = run_json(repo, inside, "spawn", "--worker", "quiet", "--agent", "custom", "--mux", "zellij",
                   "--prompt", "hello", *SANDBOX)
    assert res["errors"] == [], res
    rec = run_json(repo, plain, "agents")["agents"][0]  # listing from a shell outside Zellij works
    assert rec["mux"] == "zellij" and rec["location"]["session"] == "work" and rec["status"] == "working"
    assert rec["sandboxed"] is bool(SANDBOX)
    status = run_json(repo, plain, "status")
    assert status["team"]["agents"] == 1

    # The services run in the agent's tab, with the compose file exo wrote, by absolute path.
    worktree = Path(rec["worktree"])
    pc = wait_for(lambda: (tmp_path / "pc" / "quiet.json").exists()
                  and json.loads((tmp_path / "pc" / "quiet.json").read_text()), 30, "process-compose")
    config = pc["argv"][pc["argv"].index("--config") + 1]
    assert config == str(worktree / ".exo" / "process-compose.yaml") and Path(config).is_file()
    assert pc["cwd"] == str(worktree) and pc["port"] == "18400"
    assert pc["proof"] is None  # the services are no agent: never the agent's proof (they were given it in Zellij)

    # Quiet output makes it idle; the waiting root (outside Zellij) is told.
    waited = run_json(repo, plain, "wait", "quiet", "--timeout", "60")
    assert waited["results"][0]["status"] == "idle", waited
    # A message to the idle agent is typed into its tab, in the session recorded for it.
    sent = run_json(repo, plain, "send", "quiet", "ping-z")
    assert sent["sent"][0]["delivery"] == "typed"
    typed = [c for c in calls(tmp_path) if c[3:5] == ["write-chars", "--"]]
    assert typed and typed[-1][:3] == ["--session", "work", "action"] and "ping-z" in typed[-1][-1]
    waited = run_json(repo, plain, "wait", "quiet", "--timeout", "60")
    assert "ECHO [MESSAGE from root] ping-z" in waited["results"][0]["message"]

    # complete stops what exo started for the agent (its services too) and removes the worktree.
    svc_pids = [s["pid"] for s in json.loads(json.dumps(
        _agent(repo, "quiet").spec["services_locations"]))]
    assert len(svc_pids) == 2 and all(_alive(p) for p in svc_pids)
    done = run_json(repo, plain, "complete", "quiet")
    assert done["removal"] == "removed" and done["worktree_removed"], done
    assert not any(_alive(p) for p in svc_pids)


def test_kill_stops_the_services_panes_too(zteam, tmp_path: Path) -> None:
    repo, inside, plain = zteam
    run_json(repo, inside, "spawn", "--worker", "quiet", "--agent", "custom", "--mux", "zellij", "--prompt", "x")
    agent = wait_for(lambda: (a := _agent(repo, "quiet")) and a.spec.get("services_locations") and a, 30, "spawned")
    pids = [agent.location["pid"], *(s["pid"] for s in agent.spec["services_locations"])]
    assert all(_alive(p) for p in pids)
    res = run_json(repo, plain, "kill", "quiet")
    assert res["killed"] == ["quiet"]
    wait_for(lambda: not any(_alive(p) for p in pids), 15, "everything stopped")


def _agent(repo: Path, name: str):  # noqa: ANN202 - exo_cli.records.Agent
    from exo_cli.env import Env

    return Env(cwd=repo, environ={**os.environ, "EXO_STATE_DIR": str(repo / ".git" / "exo")}).store.agent(name)
