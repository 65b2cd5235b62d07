"""Systems without /proc (macOS, the BSDs): the caller's identity by process ancestry and the
"someone is still in this worktree" guard of `exo complete` read processes through psutil.

On Linux the tests take that path two ways: with `/proc` taken away (the adapter's `PROC_ROOT`
pointed at a folder that does not exist, as on macOS) and with the `EXO_PROCESS_READER=psutil`
switch. The `/proc` reader stays where it is faster, and psutil is never imported by the hooks,
`exo status` or `exo --help` where `/proc` exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pr_helpers import make_agent

from conftest import ROOT, wait_for
from exo_cli import registry
from exo_cli.adapters import proc
from exo_cli.config import EnvVars
from exo_cli.env import Env
from exo_cli.errors import StateError
from exo_cli.records import Agent


@pytest.fixture(params=["no-proc", "switch"])
def psutil_reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    if request.param == "no-proc":
        monkeypatch.setattr(proc, "PROC_ROOT", str(tmp_path / "no-proc-here"))
        assert not proc.has_proc()
    else:
        monkeypatch.setenv(proc.READER_VAR, "psutil")
    assert proc.use_psutil()
    yield request.param


def test_the_switch_is_a_documented_variable() -> None:
    assert proc.READER_VAR == EnvVars.PROCESS_READER
    assert EnvVars.PROCESS_READER in (ROOT / "docs" / "configuration.md").read_text()


def test_psutil_readers_agree_with_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "marker-arg"], cwd=tmp_path)
    try:
        wait_for(lambda: "marker-arg" in proc.cmdline(child.pid), what="the child's command line", timeout=60)
        by_proc = (proc.ancestors(child.pid), proc.processes_inside(str(tmp_path)),
                   proc.processes_inside(str(tmp_path), exclude={child.pid}), proc.proc_start_time(child.pid))
        monkeypatch.setattr(proc, "PROC_ROOT", str(tmp_path / "no-proc-here"))
        by_psutil = (proc.ancestors(child.pid), proc.processes_inside(str(tmp_path)),
                     proc.processes_inside(str(tmp_path), exclude={child.pid}), proc.proc_start_time(child.pid))
    finally:
        child.kill()
        child.wait()
    assert by_psutil == by_proc  # the start time too: a pid reused while psutil reads is seen as such
    assert isinstance(by_psutil[3], int)
    assert by_psutil[0][:2] == [child.pid, os.getpid()]
    assert [p["pid"] for p in by_psutil[1]] == [child.pid] and "marker-arg" in by_psutil[1][0]["command"]
    assert by_psutil[1][0]["pgid"] == os.getpgid(os.getpid())  # the child stayed in our group
    assert by_psutil[2] == []
    assert proc.ancestors(child.pid) == [child.pid]  # gone: itself only, as the /proc reader says


def test_identity_by_ancestry_without_proc(repo: Path, psutil_reader: str) -> None:
    base = Env(cwd=repo)
    now = time.time()
    for agent_id, location in (("w3", {"pid": os.getppid()}), ("tl1", {})):
        base.store.insert_agent(Agent(id=agent_id, name=agent_id, role="dev" if location else "tl", parent="root",
                                      status="working", backend="demo", mux="headless", location=location,
                                      created_at=now, updated_at=now, status_at=now))
    e = Env(cwd=repo, environ={**os.environ, "EXO_AGENT": "tl1"})  # ancestry beats the claimed identity
    assert (e.caller.agent_id, e.caller.via, e.role) == ("w3", "ancestry", "dev")


def test_a_reused_pid_proves_nothing_without_proc(repo: Path, psutil_reader: str) -> None:
    """The recorded process's start time is checked through psutil too: the same pid started later
    (here: a recorded start time that is not the running process's) is not the agent."""
    base = Env(cwd=repo)
    now = time.time()
    started = proc.proc_start_time(os.getppid())
    assert isinstance(started, int)
    base.store.insert_agent(Agent(id="w4", name="w4", role="dev", parent="root", status="working", backend="demo",
                                  mux="headless", location={"pid": os.getppid(), "start_time": started - 50},
                                  created_at=now, updated_at=now, status_at=now))
    assert Env(cwd=repo).caller.is_human
    base.store.update_agent("w4", location={"pid": os.getppid(), "start_time": started})
    assert Env(cwd=repo).caller.agent_id == "w4"


def test_complete_refuses_while_someone_works_in_the_worktree_without_proc(repo: Path, psutil_reader: str) -> None:
    a = make_agent(repo, "w1")
    other = subprocess.Popen(["sleep", "300"], cwd=a.worktree, start_new_session=True)
    try:
        with pytest.raises(StateError, match="Not removing") as info:
            registry.invoke("complete", Env(cwd=repo), target="w1", force=True)
        assert [p["pid"] for p in info.value.data["would_block"]["processes"]] == [other.pid]
        assert Path(a.worktree).exists()
    finally:
        other.kill()
        other.wait()
    r = registry.invoke("complete", Env(cwd=repo), target="w1")
    assert r.worktree_removed and not Path(a.worktree).exists()


PROBE = """
import sys
from exo_cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stderr.write('\\nPSUTIL=' + str('psutil' in sys.modules) + '\\n')
"""


@pytest.mark.parametrize("args", [["hook", "stop", "--cli", "claude"], ["hook", "session-start", "--cli", "claude"],
                                  ["status"], ["agents", "--json"], ["--help"]])
def test_hooks_and_status_never_import_psutil_where_proc_exists(repo: Path, args: list[str]) -> None:
    env = Env(cwd=repo)
    now = time.time()
    env.store.insert_agent(Agent(id="w1", name="w1", role="dev", parent="root", status="working", backend="claude",
                                 mux="headless", location={"pid": 999999}, created_at=now, updated_at=now,
                                 status_at=now))
    proc_env = {**os.environ, "PYTHONPATH": str(ROOT), "EXO_AGENT": "w1"}
    out = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=repo, env=proc_env, input=json.dumps({}),
                         capture_output=True, text=True)
    assert out.stderr.rsplit("PSUTIL=", 1)[1].strip() == "False", out.stderr
