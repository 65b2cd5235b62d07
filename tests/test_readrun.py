"""`exo status` and `exo agents` without Click (exo_cli/readrun.py): the same answers, a lighter start.

The plain forms are answered without importing Click, and at the root of a team of live headless
agents without ``dataclasses`` (hence ``inspect``) or ``subprocess`` either; every other form
goes to the Click command line. Each plain form's stdout, stderr and exit status are compared
with the Click command line's own answer to the same argv, in the same repository (not timed:
bench/startup.py measures the time).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT, Exo, Result, stop_repo_agents
from exo_cli import readrun

# What a status or agents call at the root of a live team must not import (tests/test_startup.py holds the
# heavy ones: mcp, rich, ...): Click, and what the hot path's records avoid (dataclasses pulls in inspect).
NOT_ON_THE_READ_PATH = ("click", "dataclasses", "inspect", "subprocess")

PROBE = """
import sys, json
from exo_cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stderr.write('\\nMODULES=' + json.dumps(sorted(m for m in {watched!r} if m in sys.modules)) + '\\n')
"""

PLAIN = [
    ["status"], ["status", "--json"], ["status", "w1"], ["status", "w1", "--json"], ["status", "--json", "w1"],
    ["agents"], ["agents", "--json"], ["agents", "--all"], ["agents", "--json", "--all"], ["ls"], ["ls", "--json"],
    ["status", "ghost"], ["status", "ghost", "--json"], ["status", "a b", "--json"], ["status", "-"], ["status", ""],
    ["status", "\x1b[31mred"],
]


@pytest.fixture
def team(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The test repository with two live headless demo agents that did their first turn and now wait."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    try:
        r = Exo(repo)("spawn", "--worker", "w1", "--worker", "w2", "--prompt", "x", "--agent", "demo", "--mux",
                      "headless", "--json")
        assert r.exit_code == 0, r.stdout + r.stderr
        deadline = time.monotonic() + 120
        while True:
            agents = json.loads(Exo(repo)("agents", "--json").stdout)["agents"]
            if [a["status"] for a in agents] == ["idle", "idle"]:
                break
            assert time.monotonic() < deadline, f"the demo agents did not come to rest: {agents}"
            time.sleep(0.2)
        yield repo
    finally:
        stop_repo_agents(repo, tmux=False)


def _click(cwd: Path, args: list[str]) -> Result:
    """The Click command line's answer to ``args`` (``cli.run_cli``, the path every other command takes)."""
    from exo_cli.cli import run_cli

    old = os.getcwd()
    os.chdir(cwd)
    try:
        with CliRunner().isolation() as (out, err, _):
            code = 0
            try:
                run_cli(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 0
            sys.stdout.flush()
            sys.stderr.flush()
            return Result(code, out.getvalue().decode(), err.getvalue().decode() if err is not None else "")
    finally:
        os.chdir(old)


def _steady(text: str) -> str:
    """``text`` without what moves between two calls: the ages."""
    text = re.sub(r'"(age_seconds|status_age_seconds)": [0-9.]+', r'"\1": 0', text)
    return re.sub(r"\b\d+(s|m|h\d\dm|d)$", "AGE", text, flags=re.M)


def _same(cwd: Path, args: list[str]) -> Result:
    quick = Exo(cwd)(*args)
    click = _click(cwd, args)
    assert (quick.exit_code, _steady(quick.stdout), quick.stderr) == (
        click.exit_code, _steady(click.stdout), click.stderr), args
    return quick


def test_plain_forms_answer_as_the_click_command_line(team: Path) -> None:
    codes = {tuple(args): _same(team, args).exit_code for args in PLAIN}
    assert codes[("status", "w1", "--json")] == 0
    assert codes[("status", "ghost", "--json")] == 3
    assert codes[("status", "a b", "--json")] == 4
    assert json.loads(Exo(team)("agents", "--json").stdout)["count"] == 2


def test_plain_forms_outside_a_repository(tmp_path: Path) -> None:
    for args in (["status", "--json"], ["status"], ["agents", "--json"], ["ls"]):
        assert _same(tmp_path, args).exit_code == 7, args


def test_the_rest_goes_to_click(repo: Path) -> None:
    assert readrun.parse("status", ["--help"]) is None
    assert readrun.parse("agents", ["--watch"]) is None
    assert readrun.parse("agents", ["w1"]) is None
    assert readrun.parse("status", ["a", "b"]) is None
    assert readrun.parse("status", ["--json", "--json"]) is None
    assert readrun.parse("status", ["--all"]) is None
    assert readrun.parse("status", ["--", "w1"]) is None
    assert readrun.parse("status", ["--js"]) is None
    assert readrun.parse("ls", ["--json", "--all"]) == ("agents", {"show_all": True}, True)
    assert readrun.parse("status", ["w1", "--json"]) == ("status", {"agent": "w1"}, True)
    exo = Exo(repo)
    r = exo("status", "--help")
    assert r.exit_code == 0 and r.stdout.startswith("Usage: exo status [OPTIONS] [AGENT]")
    r = exo("status", "a", "b")
    assert (r.exit_code, r.stderr.splitlines()[-1]) == (2, "Error: Got unexpected extra argument (b)")
    r = exo("agents", "--watch", "--json")
    assert r.exit_code == 2 and "--watch and --json do not go together" in json.loads(r.stdout)["error"]["message"]
    r = exo("agents", "--bogus", "--json")
    assert r.exit_code == 2 and json.loads(r.stdout)["error"]["message"] == "No such option '--bogus'."


def test_a_shell_asking_for_completions_goes_to_click(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_EXO_COMPLETE", "bash_complete")
    assert readrun.run("status", ["--json"]) is None


@pytest.mark.parametrize("args", [["status", "--json"], ["agents", "--json"], ["status"], ["ls"], ["status", "w1"]])
def test_reads_at_the_root_of_a_live_team_stay_light(team: Path, args: list[str]) -> None:
    code = PROBE.format(watched=set(NOT_ON_THE_READ_PATH))
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=team, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = [x for x in proc.stderr.splitlines() if x.startswith("MODULES=")][-1]
    assert json.loads(line[8:]) == [], f"exo {' '.join(args)} imported them ({proc.stdout[:300]})"


@pytest.mark.parametrize("boom", [ZeroDivisionError, KeyboardInterrupt, EOFError])
def test_failures_answer_as_the_click_command_line(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                   boom: type[BaseException]) -> None:
    import exo_cli.ops.status  # noqa: F401 - declares the operations replaced below
    from exo_cli import registry

    def fail(env: object, **kwargs: object) -> None:
        raise boom("x")

    for name in ("status", "agents"):
        monkeypatch.setitem(registry.OPS, name, registry.get(name)._replace(func=fail))
    for args in (["status"], ["status", "--json"], ["agents", "--json"]):
        r = _same(repo, args)
        assert r.exit_code == (70 if boom is ZeroDivisionError else 130), (args, r)
