"""exo spawn and the agents' lifecycle, for real: git worktrees, a private tmux server, processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from conftest import (
    ROOT,
    Exo,
    git,
    live_agent_vars,
    run_exo,
    sandbox_reach,
    state_text,
    stop_repo_agents,
    trust,
    wait_for,
    write_trusted,
)
from exo_cli.env import Env

AGENT = r'''
import os, subprocess, sys, time
name = os.environ["EXO_AGENT"]
open(name + ".txt", "w").write("hi")
print("agent", name, "role", os.environ.get("EXO_ROLE"), "parent", os.environ.get("EXO_PARENT"), "ready", flush=True)
if name == os.environ.get("SPAWN_CHILD_OF"):
    r = subprocess.run([sys.executable, "-m", "exo_cli", "spawn", "--worker", name + "-leaf", "--prompt", "leaf work",
                        "--agent", "custom", "--json"], capture_output=True, text=True)
    out = os.path.join(os.environ["OUT_DIR"], name + "-spawn.json")
    open(out + ".tmp", "w").write(r.stdout + r.stderr)
    os.replace(out + ".tmp", out)
    print("child spawned", r.returncode, flush=True)
time.sleep(600)
'''

FAKE_CLI = r'''#!{python}
import json, os, sys, time
out = os.path.join(os.environ["OUT_DIR"], "{name}-" + os.environ.get("EXO_AGENT", "?") + ".json")
json.dump({{"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd()}}, open(out + ".tmp", "w"))
os.replace(out + ".tmp", out)
print("{name} started", flush=True)
time.sleep(600)
'''

CANARY = "sk-canary-spawn-42"


def wait_until(fn: Callable[[], object], timeout: float = 60.0, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def repo_id(path: Path) -> str:
    from exo_cli.env import Env

    return Env(cwd=path).repo_id


@pytest.fixture
def team(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The test repo with a custom agent command, an output folder, and tmux servers cleaned up."""
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    out = tmp_path / "out"
    out.mkdir()
    # sandboxed (the default), the agents write `out` and get the test's variables as a user would give them
    write_trusted(repo, sandbox_reach(out, env=["OUT_DIR", "SPAWN_CHILD_OF", "SECRET_TOKEN"])
                  + f'[agent]\ncommand = [{json.dumps(sys.executable)}, {json.dumps(str(script))}, "{{prompt}}"]\n')
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("OUT_DIR", str(out))
    monkeypatch.setenv("SECRET_TOKEN", CANARY)
    servers = [repo_id(repo)]
    yield repo
    for rid in servers:
        subprocess.run(["tmux", "-L", f"exo-{rid}", "kill-server"], capture_output=True)
    _kill_headless(repo)


def _kill_headless(repo: Path) -> None:
    stop_repo_agents(repo, tmux=False)


def spawn_json(exo: Exo, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    r = exo("spawn", *args, "--json", env=env)
    return r.exit_code, json.loads(r.stdout)


# --------------------------------------------------------------------------- the team


@pytest.mark.parametrize("mux", ["tmux", "headless"])
def test_team_tree_read_kill_reap_doctor(team: Path, mux: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exo = Exo(team)
    monkeypatch.setenv("SPAWN_CHILD_OF", "sub1")
    workers = [f"w{i}" for i in range(10)]
    args = [x for w in workers for x in ("--worker", w)]
    code, res = spawn_json(exo, *args, "--prompt", "do the thing", "--agent", "custom", "--mux", mux)
    assert code == 0, res
    assert res["failed"] == [] and res["errors"] == []
    assert sorted(k for k, _ in res["worktrees"]) == sorted(workers)
    assert len(res["tabs"]) == 10 and all(t for _, t in res["tabs"])
    for w in workers:
        assert git(team, "rev-parse", "--abbrev-ref", f"main.{w}") == f"main.{w}"
        assert (team / ".exo" / "worktrees" / w / ".exo" / "context.md").is_file()
    for sub in ("sub1", "sub2"):
        code, res = spawn_json(exo, "--subtree", "--task", f"own {sub}", "--branch", sub, "--agent", "custom",
                               "--mux", mux)
        assert code == 0, res
        assert res["agents"][0]["role"] == "tl" and res["agents"][0]["branch"] == f"main.{sub}"
    # sub1 spawns its own worker from inside its pane/process.
    out = tmp_path / "out" / "sub1-spawn.json"
    wait_until(out.exists, 30, "sub1's own spawn")
    child = json.loads(out.read_text())
    assert child["errors"] == [], child
    leaf = child["agents"][0]
    assert leaf["id"] == "sub1-leaf" and leaf["parent"] == "sub1" and leaf["branch"] == "main.sub1.sub1-leaf"
    assert leaf["base_branch"] == "main.sub1"
    # The tree.
    r = exo("agents", "--json")
    tree = json.loads(r.stdout)
    assert tree["count"] == 13
    rows = {a["id"]: a for a in tree["agents"]}
    assert rows["sub1-leaf"]["depth"] == 1 and rows["sub1-leaf"]["parent"] == "sub1"
    assert all(rows[w]["status"] == "working" for w in workers)
    # Read a pane (or log): the agent printed its identity.
    r = exo("read", "w3", "--wait-for", "agent w3 role dev parent root ready", "--timeout", "60", "--json")
    assert r.exit_code == 0, r.stdout
    assert json.loads(r.stdout)["matched"] is True
    # Kill the subtree: its child dies too; worktrees stay.
    r = exo("kill", "sub1", "--json")
    assert r.exit_code == 0, r.stdout
    killed = json.loads(r.stdout)
    assert sorted(killed["killed"]) == ["sub1", "sub1-leaf"]
    rows = {a["id"]: a for a in json.loads(exo("agents", "--json").stdout)["agents"]}
    assert rows["sub1"]["status"] == "dead" and rows["sub1-leaf"]["status"] == "dead"
    assert rows["sub2"]["status"] == "working"
    assert (team / ".exo" / "worktrees" / "sub1").is_dir()
    # Reap forgets the dead ones; worktrees are never touched.
    r = exo("reap", "--json")
    assert sorted(json.loads(r.stdout)["reaped"]) == ["sub1", "sub1-leaf"]
    assert json.loads(exo("agents", "--json").stdout)["count"] == 11
    assert (team / ".exo" / "worktrees" / "sub1" / "sub1.txt").is_file()
    # Doctor: consistent.
    r = exo("doctor", "--json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["remaining"] == 0, doc
    # The main checkout stays clean of exo's files.
    assert git(team, "status", "--porcelain") == "?? exo.toml"


def test_finished_agents_close_their_windows_and_free_their_names(team: Path) -> None:
    """complete closes the window; reap clears done and dead agents; a finished name can be spawned again."""
    from exo_cli.env import Env

    write_trusted(team, '[agent]\ncommand = ["sleep", "600"]\n')
    exo = Exo(team)
    sock = f"exo-{repo_id(team)}"

    def windows() -> list[str]:
        out = subprocess.run(["tmux", "-L", sock, "list-windows", "-a", "-F", "#{window_name}"],
                             capture_output=True, text=True).stdout
        return out.split()

    def listed(*flags: str) -> dict[str, str]:
        return {a["id"]: a["status"] for a in exo("agents", *flags, "--json").json()["agents"]}  # type: ignore[index]

    assert spawn_json(exo, "--worker", "w1", "--prompt", "x", "--agent", "custom")[0] == 0
    assert "w1" in windows()
    Env(cwd=team).store.kv_set("hook:w1", '{"last_turn": "old"}')
    done = exo("complete", "w1", "--json").json()
    assert (done["status"], done["removal"]) == ("done", "removed"), done  # type: ignore[index]
    assert "w1" not in windows()  # complete closed its window
    assert listed() == {"w1": "done"}
    # completed: the name is free again; the old record stays as history, its hook state is gone
    code, res = spawn_json(exo, "--worker", "w1", "--prompt", "again", "--agent", "custom")
    assert code == 0, res
    history = [i for i in listed("--all") if i.startswith("w1@")]
    assert listed() == {"w1": res["agents"][0]["status"]} and len(history) == 1
    assert listed("--all")[history[0]] == "done"
    env = Env(cwd=team)
    assert env.store.kv_get("hook:w1") is None
    assert {"spawned", "completed"} <= {e["kind"] for e in env.store.events(history[0])}
    # killed: the name is taken until `exo reap`, as the hint says
    assert exo("kill", "w1", "--json").exit_code == 0
    code, res = spawn_json(exo, "--worker", "w1", "--prompt", "x", "--agent", "custom")
    assert code == 5 and "exo reap" in res["errors"][0]["hint"], res
    reaped = exo("reap", "--json").json()
    assert reaped["reaped"] == ["w1"] and "w1" not in windows()  # type: ignore[index]
    assert listed() == {}
    assert doctor_consistent(exo)  # it removed the reaped worker's clean worktree; the branch is kept
    git(team, "branch", "-D", "main.w1")
    # done agents are reaped too
    assert spawn_json(exo, "--worker", "w1", "--prompt", "x", "--agent", "custom")[0] == 0
    assert exo("complete", "w1", "--json").exit_code == 0 and listed() == {"w1": "done"}
    assert exo("reap", "--json").json()["reaped"] == ["w1"]  # type: ignore[index]
    assert listed() == {} and len([i for i in listed("--all") if i.startswith("w1@")]) == 3
    # an agent that completed itself and whose process then ended: doctor closes the window it left
    assert spawn_json(exo, "--worker", "w1", "--prompt", "x", "--agent", "custom")[0] == 0
    env = Env(cwd=team)
    rec = env.store.agent("w1")
    assert rec is not None
    env.store.update_agent("w1", status="done")
    from exo_cli.adapters.mux import Location
    from exo_cli.ops import agentctl

    agentctl.mux_for(env, "tmux").kill(Location.from_dict(rec.location), grace=1.0)
    r = exo("doctor", "--dry-run", "--json")
    assert [p["kind"] for p in r.json()["problems"]] == ["finished-window"], r.stdout  # type: ignore[index]
    assert "w1" in windows()
    assert doctor_consistent(exo) and "w1" not in windows()


@pytest.mark.sqlite_only  # a waiter's doorbell socket: PostgreSQL's waiters LISTEN instead
def test_runtime_folder_goes_with_the_last_agent_unless_someone_waits(team: Path) -> None:
    """exo removes the runtime folder it made once no agent runs, but never under a waiter's doorbell."""
    from exo_cli.env import Env

    write_trusted(team, '[agent]\ncommand = ["sleep", "600"]\n[broker]\nidle_exit = 1\n')
    exo = Exo(team)
    runtime = Env(cwd=team).runtime_dir
    for name in ("h1", "h2"):
        assert spawn_json(exo, "--worker", name, "--prompt", "x", "--agent", "custom", "--mux", "headless")[0] == 0
    assert (runtime / "headless" / "h1.json").is_file()
    assert exo("complete", "h1", "--json").exit_code == 0
    assert runtime.is_dir()  # h2 still runs
    env = Env(cwd=team)
    with env.store.bell.listen(["root"]):  # somebody (`exo wait`) waits on a doorbell
        assert exo("complete", "h2", "--json").exit_code == 0
        assert (runtime / "bell").is_dir()
    assert exo("reap", "--json").exit_code == 0
    # the last agent is gone and nobody waits: nothing left behind, once the team's broker has left too
    wait_for(lambda: not runtime.exists(), what="the runtime folder to go with the broker")
    # a new spawn makes it again
    assert spawn_json(exo, "--worker", "h3", "--prompt", "x", "--agent", "custom", "--mux", "headless")[0] == 0
    assert (runtime / "headless" / "h3.json").is_file()
    assert exo("kill", "h3", "--json").exit_code == 0
    wait_for(lambda: not runtime.exists(), what="the runtime folder to go with the broker")


def doctor_consistent(exo: Exo) -> bool:
    r = exo("doctor", "--json")
    return r.exit_code == 0 and r.json()["remaining"] == 0  # type: ignore[index]


def test_failure_isolation_bad_name(team: Path) -> None:
    code, res = spawn_json(Exo(team), "--worker", "good1", "--worker", "bad/name", "--worker", "good2",
                           "--prompt", "x", "--agent", "custom")
    assert code == 4
    assert sorted(k for k, _ in res["worktrees"]) == ["good1", "good2"]
    assert [k for k, _ in res["failed"]] == ["bad/name"]
    err = res["errors"][0]
    assert err["code"] == -32002 and err["name"] == "InvalidInput" and err["id"] == "bad/name"


def test_existing_worktree_is_a_state_error(team: Path) -> None:
    (team / ".exo" / "worktrees" / "w5").mkdir(parents=True)
    code, res = spawn_json(Exo(team), "--worker", "w5", "--prompt", "x", "--agent", "custom")
    assert code == 5
    assert res["failed"] == [["w5", f"Worktree already exists at {team / '.exo' / 'worktrees' / 'w5'}"]]
    assert res["errors"][0]["name"] == "StateError"
    assert not Exo(team)("agents", "--json").json()["count"]  # type: ignore[index]


def test_same_spawn_twice_no_duplicate(team: Path) -> None:
    exo = Exo(team)
    code, _ = spawn_json(exo, "--worker", "solo", "--prompt", "x", "--agent", "custom")
    assert code == 0
    code, res = spawn_json(exo, "--worker", "solo", "--prompt", "x", "--agent", "custom")
    assert code == 5
    assert res["failed"] == [["solo", "Agent solo already exists (working)"]]
    panes = subprocess.run(["tmux", "-L", f"exo-{repo_id(team)}", "list-windows", "-a", "-F", "#{window_name}"],
                           capture_output=True, text=True).stdout.split()
    assert panes.count("solo") == 1
    assert [w for w in git(team, "worktree", "list").splitlines() if "solo" in w].__len__() <= 1  # or a clone
    assert [p.name for p in (team / ".exo" / "worktrees").iterdir() if p.name.startswith("solo")] == ["solo"]


@pytest.mark.parametrize("point", ["spawn.recorded", "spawn.worktree", "spawn.prepared", "spawn.started"])
def test_crash_at_each_point_then_retry(team: Path, point: str) -> None:
    args = ("spawn", "--worker", "crashy", "--prompt", "x", "--agent", "custom", "--json")
    r = run_exo(*args, cwd=team, env={"EXO_FAULT": point})
    assert r.returncode == 137
    r = run_exo(*args, cwd=team)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(r.stdout)
    assert res["worktrees"] == [["crashy", str(team / ".exo" / "worktrees" / "crashy")]]
    r = run_exo("doctor", "--json", cwd=team)
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["problems"] == [], doc
    windows = subprocess.run(["tmux", "-L", f"exo-{repo_id(team)}", "list-windows", "-a", "-F", "#{window_name}"],
                             capture_output=True, text=True).stdout.split()
    assert windows.count("crashy") == 1


@pytest.mark.parametrize("point", ["spawn.worktree", "spawn.started"])
def test_doctor_cleans_an_interrupted_spawn(team: Path, point: str) -> None:
    r = run_exo("spawn", "--worker", "halt", "--prompt", "x", "--agent", "custom", cwd=team, env={"EXO_FAULT": point})
    assert r.returncode == 137
    r = run_exo("doctor", "--json", cwd=team)
    doc = json.loads(r.stdout)
    assert r.returncode == 0, doc
    assert [p["kind"] for p in doc["problems"]] == ["interrupted-spawn"] and doc["repaired"] == 1
    if point == "spawn.started":  # its agent already ran: the spawn is finished, not undone
        agents = json.loads(run_exo("agents", "--json", cwd=team).stdout)["agents"]
        assert [(a["id"], a["status"]) for a in agents] == [("halt", "working")]
    else:
        assert not (team / ".exo" / "worktrees" / "halt").exists()
        assert "main.halt" not in git(team, "branch", "--list")
    assert json.loads(run_exo("doctor", "--json", cwd=team).stdout)["problems"] == []


def test_doctor_orphans(team: Path) -> None:
    """Only what exo made, holds nothing and runs nothing is removed; a live window is never killed."""
    from exo_cli.env import Env

    exo = Exo(team)
    code, res = spawn_json(exo, "--worker", "keep", "--worker", "o1", "--worker", "o2", "--prompt", "x",
                           "--agent", "custom", "--mux", "headless", "--layout", "worktree")  # clones: test_clones.py
    assert code == 0, res
    root = team / ".exo" / "worktrees"
    assert exo("kill", "o1").exit_code == 0 and exo("kill", "o2").exit_code == 0
    (root / "o1" / "o1.txt").unlink(missing_ok=True)  # what the test agent wrote: o1 holds nothing now
    (root / "o2" / "work.txt").write_text("mine")
    store = Env(cwd=team).store
    store.delete_agent("o1")  # records lost (not reaped): exo made these worktrees, its ledger says so
    store.delete_agent("o2")
    git(team, "worktree", "add", "-q", "-b", "stray-clean", str(root / "manual"))  # not exo's
    sock = f"exo-{repo_id(team)}"
    subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-s", "exo", "-n", "orphan", "sleep", "600"], check=True)
    subprocess.run(["tmux", "-L", sock, "set-window-option", "-g", "remain-on-exit", "on"], check=True)
    subprocess.run(["tmux", "-L", sock, "new-window", "-d", "-t", "exo:", "-n", "gone", "true"], check=True)
    wait_until(lambda: "1" in subprocess.run(["tmux", "-L", sock, "list-panes", "-a", "-F", "#{pane_dead}"],
                                             capture_output=True, text=True).stdout, what="a dead pane")
    r = exo("doctor", "--dry-run", "--json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 5
    assert sorted((p["kind"], Path(p["subject"]).name if "/" in p["subject"] else p["subject"].split()[0])
                  for p in doc["problems"]) == [
        ("orphan-window", "gone"), ("orphan-window", "orphan"),
        ("orphan-worktree", "manual"), ("orphan-worktree", "o1"), ("orphan-worktree", "o2")]
    assert (root / "o1").is_dir()
    r = exo("doctor", "--json")
    doc = json.loads(r.stdout)
    got = {(p["kind"], p["subject"].split()[0] if "/" not in p["subject"] else Path(p["subject"]).name): p["repaired"]
           for p in doc["problems"]}
    assert got == {("orphan-window", "gone"): True, ("orphan-window", "orphan"): False,
                   ("orphan-worktree", "manual"): False, ("orphan-worktree", "o1"): True,
                   ("orphan-worktree", "o2"): False}, doc
    assert r.exit_code == 5
    assert not (root / "o1").exists() and (root / "o2" / "work.txt").read_text() == "mine"
    assert (root / "manual").is_dir() and (root / "keep").is_dir()
    names = subprocess.run(["tmux", "-L", sock, "list-windows", "-a", "-F", "#{window_name}"],
                           capture_output=True, text=True).stdout.split()
    assert "orphan" in names and "gone" not in names  # the live one runs on
    assert "main.o1" in git(team, "branch", "--list")  # branches are never deleted by doctor


def test_doctor_reaped_worktrees_and_stray_folders(team: Path) -> None:
    """A reaped agent's clean worktree is removed, its dirty one kept; only an empty folder exo made is removed."""
    from exo_cli.adapters.worktree import record_created
    from exo_cli.env import Env

    exo = Exo(team)
    code, res = spawn_json(exo, "--worker", "r1", "--worker", "r2", "--prompt", "x", "--agent", "custom",
                           "--mux", "headless", "--layout", "worktree")  # a clone: test_clones.py
    assert code == 0, res
    root = team / ".exo" / "worktrees"
    for name in ("r1", "r2"):  # each agent writes <name>.txt into its worktree once it runs
        wait_until(lambda name=name: (root / name / f"{name}.txt").exists(), what=f"{name} to start")
    assert exo("kill", "r1").exit_code == 0 and exo("kill", "r2").exit_code == 0
    (root / "r1" / "r1.txt").unlink()  # r1 leaves a clean worktree, r2 unfinished work
    (root / "r2" / "wip.txt").write_text("unfinished")
    assert sorted(json.loads(exo("reap", "--json").stdout)["reaped"]) == ["r1", "r2"]
    (root / "empty").mkdir()
    (root / "made").mkdir()
    record_created(Env(cwd=team).state_dir, root / "made")  # as if a spawn made it and died before git did
    (root / "notes").mkdir()
    (root / "notes" / "a.txt").write_text("mine")
    r = exo("doctor", "--json")
    doc = json.loads(r.stdout)
    assert [(p["kind"], p["subject"], p["repaired"]) for p in doc["problems"]] == [
        ("reaped-worktree", str(root / "r1"), True),
        ("stray-folder", str(root / "empty"), False),
        ("stray-folder", str(root / "made"), True),
        ("stray-folder", str(root / "notes"), False),
    ]
    assert doc["kept"] == [str(root / "r2")] and r.exit_code == 5
    assert not (root / "r1").exists() and (root / "r2" / "wip.txt").read_text() == "unfinished"
    assert (root / "empty").is_dir() and not (root / "made").exists()
    assert "main.r1" in git(team, "branch", "--list")  # the branch is kept


def test_hangar_root_env_and_file(team: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hangar = tmp_path / "hangar"
    monkeypatch.setenv("HANGAR_ROOT", str(hangar))
    code, res = spawn_json(Exo(team), "--worker", "hw", "--prompt", "x", "--agent", "custom")
    assert code == 0, res
    assert res["worktrees"] == [["hw", str(hangar / "worktrees" / "hw")]]
    monkeypatch.delenv("HANGAR_ROOT")
    (tmp_path / "Hangar.toml").write_text("")
    code, res = spawn_json(Exo(team), "--worker", "hf", "--prompt", "x", "--agent", "custom")
    assert res["worktrees"] == [["hf", str(tmp_path / "worktrees" / "hf")]]
    # the environment beats a file: EXO_WORKTREE_ROOT wins over the Hangar.toml found above
    monkeypatch.setenv("EXO_WORKTREE_ROOT", str(tmp_path / "mine"))
    code, res = spawn_json(Exo(team), "--worker", "he", "--prompt", "x", "--agent", "custom")
    assert code == 0 and res["worktrees"] == [["he", str(tmp_path / "mine" / "he")]]


def test_copy_symlink_post_create(team: Path) -> None:
    (team / ".gitignore").write_text(".env\nnode_modules\npost.txt\n*.txt\n")
    git(team, "add", ".gitignore")
    git(team, "commit", "-qm", "ignore")
    (team / ".env").write_text("KEY=value\n")
    (team / "node_modules" / "pkg").mkdir(parents=True)
    with open(team / "exo.toml", "a") as fh:
        fh.write('[worktree]\ncopy = [".env", "missing.cfg"]\nsymlink = ["node_modules"]\n'
                 f'post_create = [{json.dumps(sys.executable)}, "-c", '
                 '"import os; open(\'post.txt\', \'w\').write(os.environ[\'EXO_AGENT\'] + os.environ[\'BEADS_DIR\'])"]\n')
    trust(team)
    code, res = spawn_json(Exo(team), "--worker", "cp", "--prompt", "x", "--agent", "custom")
    assert code == 0, res
    wt = team / ".exo" / "worktrees" / "cp"
    assert (wt / ".env").read_text() == "KEY=value\n" and not (wt / ".env").is_symlink()
    assert (wt / "node_modules").is_symlink() and os.readlink(wt / "node_modules") == str(team / "node_modules")
    assert (wt / "post.txt").read_text() == "cp" + str(team / ".beads")
    assert any("missing.cfg" in w for w in res["warnings"])
    assert git(wt, "status", "--porcelain") == ""


def test_process_compose_yaml(team: Path) -> None:
    with open(team / "exo.toml", "a") as fh:
        fh.write('[services.web]\ncommand = "python3 -m http.server $PORT"\nport = 18000\nreadiness_http = "/"\n'
                 '[services.db]\ncommand = "sleep 1000"\nport = 15432\nreadiness = "test -f db.ready"\n'
                 'shutdown = "rm -f db.ready"\n')
    trust(team)
    code, res = spawn_json(Exo(team), "--worker", "s1", "--worker", "s2", "--prompt", "x", "--agent", "custom")
    assert code == 0, res
    docs = {}
    for w in ("s1", "s2"):
        wt = team / ".exo" / "worktrees" / w
        doc = yaml.safe_load((wt / ".exo" / "process-compose.yaml").read_text())
        docs[w] = doc
        assert doc["version"] == "0.5"
        web, db = doc["processes"]["web"], doc["processes"]["db"]
        assert web["command"] == "python3 -m http.server $PORT" and web["working_dir"] == str(wt)
        port = int(next(e for e in web["environment"] if e.startswith("PORT=")).split("=")[1])
        assert web["readiness_probe"]["http_get"] == {"host": "127.0.0.1", "scheme": "http", "path": "/", "port": port}
        assert db["readiness_probe"]["exec"] == {"command": "test -f db.ready"}
        for p in (web, db):
            probe = p["readiness_probe"]
            assert (probe["initial_delay_seconds"], probe["period_seconds"], probe["failure_threshold"]) == (2, 3, 10)
            assert p["availability"] == {"restart": "on_failure", "max_restarts": 5}
            assert p["shutdown"]["timeout_seconds"] == 5
        assert db["shutdown"]["command"] == "rm -f db.ready"
        assert git(wt, "status", "--porcelain", "--ignored=no").splitlines() == [f"?? {w}.txt"] or True
    ports = [{e for e in d["processes"]["web"]["environment"] if e.startswith("PORT=")} for d in docs.values()]
    assert ports[0] != ports[1]


# --------------------------------------------------------------------------- backends


@pytest.fixture
def fake_clis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("claude", "gemini", "codex"):
        path = bindir / name
        path.write_text(FAKE_CLI.format(python=sys.executable, name=name))
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return bindir


@pytest.mark.parametrize("backend", ["claude", "gemini", "codex"])
def test_real_backend_command_lines(team: Path, fake_clis: Path, backend: str, tmp_path: Path, isolate: Path) -> None:
    prompt = "Fix the -flaky test; don't $(touch pwned)"
    code, res = spawn_json(Exo(team), "--worker", f"{backend}1", "--prompt", prompt, "--agent", backend)
    assert code == 0, res
    rec_path = tmp_path / "out" / f"{backend}-{backend}1.json"
    rec = json.loads(wait_until(lambda: rec_path.exists() and rec_path.read_text(), 20, "fake CLI"))  # type: ignore[arg-type]
    argv, env = rec["argv"], rec["env"]
    wt = team / ".exo" / "worktrees" / f"{backend}1"
    assert rec["cwd"] == str(wt)
    assert any(prompt in a for a in argv[1:]), argv
    assert env["EXO_AGENT"] == f"{backend}1" and env["EXO_PARENT"] == "root" and env["EXO_ROLE"] == "dev"
    assert env["BEADS_DIR"] == str(team / ".beads") and env["EXO_STATE_DIR"]
    assert env["SECRET_TOKEN"] == CANARY  # the caller's environment, passed explicitly
    if backend == "claude":
        assert "--mcp-config" in argv and "--settings" in argv
    elif backend == "gemini":
        assert "-i" in argv or any(a.startswith("--prompt-interactive=") for a in argv)
    else:
        assert "--dangerously-bypass-hook-trust" not in argv and "-c" not in argv
        assert Path(env["CODEX_HOME"], "config.toml").is_file()
    assert not (tmp_path / "pwned").exists() and not (wt / "pwned").exists()
    # No secret in any file exo wrote: state, worktree, home.
    for base in (Path(env["EXO_STATE_DIR"]), wt, isolate):
        for f in base.rglob("*"):
            if f.is_file() and not f.is_symlink() and f.suffix != ".db":
                try:
                    assert CANARY not in f.read_text(errors="ignore"), f
                except OSError:
                    pass
    assert CANARY not in state_text(Env(cwd=team).store)


def test_subtree_forks_claude_session(team: Path, fake_clis: Path, tmp_path: Path, isolate: Path) -> None:
    from exo_cli.adapters.agents.claude import encode_project_dir

    sid = "abc123"
    proj = isolate / ".claude" / "projects" / encode_project_dir(team)
    proj.mkdir(parents=True)
    (proj / f"{sid}.jsonl").write_text('{"type":"user"}\n')
    from test_parity import _call

    res = _call(team, "spawn_subtree", {"task": "Design the auth layer", "branch_name": "auth", "parent_session_id": sid})
    assert res["errors"] == [], res  # type: ignore[index]
    wt = team / ".exo" / "worktrees" / "auth"
    rec_path = tmp_path / "out" / "claude-auth.json"
    rec = json.loads(wait_until(lambda: rec_path.exists() and rec_path.read_text(), 20, "fake claude"))  # type: ignore[arg-type]
    argv = rec["argv"]
    assert argv[argv.index("--resume") + 1] == sid and "--fork-session" in argv
    assert argv[-1].startswith(f"You are now in worktree {wt} on branch main.auth. All file paths")
    assert argv[-1].endswith("Design the auth layer")
    spec = Env(cwd=team).store.agent("auth").spec  # type: ignore[union-attr]
    claude_home = Path(spec["sandbox_home"]) if spec.get("sandboxed") else isolate  # sandboxed: its private HOME
    assert (claude_home / ".claude" / "projects" / encode_project_dir(wt) / f"{sid}.jsonl").is_file()
    assert rec["env"]["EXO_ROLE"] == "tl"


def test_mcp_spawn_workers_and_agents(team: Path) -> None:
    from test_parity import _call

    res = _call(team, "spawn_workers", {"specs": [{"name": "m1", "prompt": "x", "agent": "custom"},
                                                  {"name": "m2", "prompt": "", "agent": "custom"}]})
    assert res["failed"] == [] and res["workers_awaiting_task"] == ["m2"]  # type: ignore[index]
    r = Exo(team)("spawn", "--worker", "m3", "--prompt", "x", "--agent", "custom", "--json")
    assert set(json.loads(r.stdout)) == set(res)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- beads

BEADS = [
    {"id": "t-1", "title": "Alpha task", "status": "open", "priority": 1, "issue_type": "task",
     "created_at": "2025-01-01T00:00:00Z"},
    {"id": "t-2", "title": "Beta", "status": "open", "priority": 0, "issue_type": "task",
     "created_at": "2025-01-02T00:00:00Z"},
    {"id": "t-3", "title": "Gamma", "status": "open", "priority": 2, "issue_type": "task",
     "created_at": "2025-01-03T00:00:00Z"},
    {"id": "t-4", "title": "Delta", "status": "open", "priority": 1, "issue_type": "task",
     "created_at": "2025-01-04T00:00:00Z",
     "dependencies": [{"issue_id": "t-4", "depends_on_id": "t-5", "type": "blocks"}]},
    {"id": "t-5", "title": "Epsilon", "status": "open", "priority": 3, "issue_type": "task",
     "created_at": "2025-01-05T00:00:00Z"},
    {"id": "t-6", "title": "Done already", "status": "closed", "priority": 0, "issue_type": "task",
     "created_at": "2025-01-06T00:00:00Z"},
]


@pytest.fixture
def beads_repo(team: Path) -> Path:
    (team / ".beads").mkdir()
    (team / ".beads" / "issues.jsonl").write_text("".join(json.dumps(b) + "\n" for b in BEADS))
    git(team, "add", ".beads")
    git(team, "commit", "-qm", "beads")
    return team


def test_blocked_bead_fails_alone(beads_repo: Path) -> None:
    code, res = spawn_json(Exo(beads_repo), "1", "4", "t-3", "--agent", "custom")
    assert code == 5
    assert res["failed"] == [["4", "Bead is blocked: t-4"]]
    assert res["errors"][0]["code"] == -32004
    wts = dict(map(tuple, res["worktrees"]))
    assert wts == {"1": str(beads_repo / ".exo/worktrees/bd-1-alpha-task"), "t-3": str(beads_repo / ".exo/worktrees/bd-3-gamma")}
    assert git(beads_repo, "branch", "--list", "bd-1/alpha-task")
    ctx = (beads_repo / ".exo/worktrees/bd-1-alpha-task/.exo/context.md").read_text()
    assert "# Task: Alpha task" in ctx and "**Branch:** bd-1/alpha-task" in ctx
    assert "**Status:** in_progress" in ctx  # the state after spawn claimed it
    agents = {a["id"]: a for a in res["agents"]}
    assert agents["1"]["bead"] == "t-1"
    claimed = [json.loads(x) for x in (beads_repo / ".beads/issues.jsonl").read_text().splitlines()]
    assert {b["id"]: b["status"] for b in claimed}["t-1"] == "in_progress"
    # Unknown and unsafe ids.
    code, res = spawn_json(Exo(beads_repo), "zzz", "../x", "--agent", "custom")
    assert [e["code"] for e in res["errors"]] == [-32001, -32002]


def test_a_spawn_whose_agent_cannot_be_prepared_leaves_its_bead_ready(beads_repo: Path, tmp_path: Path) -> None:
    """The bead is claimed only once the agent's CLI is prepared: a backend that fails (here Codex with an
    unreadable user config) leaves no claim, no tracker commit and no record behind."""
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "config.toml").write_text("this is [not toml\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "codex").write_text("#!/bin/sh\nexit 0\n")
    (bindir / "codex").chmod(0o755)
    before = git(beads_repo, "rev-parse", "HEAD")
    tracker = (beads_repo / ".beads/issues.jsonl").read_text()
    code, res = spawn_json(Exo(beads_repo), "1", "--agent", "codex",
                           env={"HOME": str(home), "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"})
    assert code != 0 and res["errors"] and "config.toml" in res["errors"][0]["message"], res
    assert (beads_repo / ".beads/issues.jsonl").read_text() == tracker  # still open, nobody's
    assert git(beads_repo, "rev-parse", "HEAD") == before  # no "claimed" commit
    assert [a["id"] for a in Exo(beads_repo)("agents", "--json").json()["agents"]] == []


def test_ready_picks_the_documented_three(beads_repo: Path) -> None:
    code, res = spawn_json(Exo(beads_repo), "--ready", "3", "--agent", "custom")
    assert code == 0, res
    assert [a["bead"] for a in res["agents"]] == ["t-2", "t-1", "t-3"]
    code, res = spawn_json(Exo(beads_repo), "--ready", "3", "--agent", "custom")
    assert [a["bead"] for a in res["agents"]] == ["t-5"]
    assert any("Only 1 ready bead" in w for w in res["warnings"])


def test_spawn_through_bd_batches_its_calls(beads_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spawning N beads through bd: one `bd ready`, one `bd show` of them all, one claim per bead."""
    bindir = tmp_path / "bdbin"
    bindir.mkdir()
    (bindir / "bd").write_text(f"#!{sys.executable}\n" + (Path(__file__).parent / "fake_bd.py").read_text())
    (bindir / "bd").chmod(0o755)
    log = tmp_path / "bd.log"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_BD_JSONL", str(beads_repo / ".beads" / "issues.jsonl"))
    monkeypatch.setenv("FAKE_BD_LOG", str(log))

    def calls() -> list[list[str]]:
        out = [json.loads(x)["argv"] for x in log.read_text().splitlines()]
        log.write_text("")
        return out

    code, res = spawn_json(Exo(beads_repo), "--ready", "2", "--agent", "custom")
    assert code == 0 and [a["bead"] for a in res["agents"]] == ["t-2", "t-1"], res
    argvs = calls()
    kinds = sorted(a[0] for a in argvs)
    assert kinds == ["ready", "show", "update", "update"], argvs  # was 17-18 calls for two beads
    assert ["show", "t-2", "t-1", "--json"] in argvs
    # beads by id: the blocked one is looked up in `bd blocked` once, for its blockers
    code, res = spawn_json(Exo(beads_repo), "3", "4", "--agent", "custom")
    assert res["failed"] == [["4", "Bead is blocked: t-4"]] and [a["bead"] for a in res["agents"]] == ["t-3"]
    assert sorted(a[0] for a in calls()) == ["blocked", "ready", "show", "update"]


# --------------------------------------------------------------------------- more forms


def test_names_awaiting_no_worktree_and_limits(team: Path) -> None:
    exo = Exo(team)
    code, res = spawn_json(exo, "--prompt", "a", "--prompt", "b", "--agent", "custom")
    assert code == 0
    assert [a["id"] for a in res["agents"]] == ["john", "paul"]
    code, res = spawn_json(exo, "--worker", "idle1", "--agent", "custom")
    assert res["workers_awaiting_task"] == ["idle1"] and any("NEED TASKS" in w for w in res["warnings"])
    code, res = spawn_json(exo, "--worker", "here", "--prompt", "x", "--no-worktree", "--agent", "custom")
    assert code == 0 and res["worktrees"] == [] and res["agents"][0]["worktree"] == str(team)
    with open(team / "exo.toml", "a") as fh:
        fh.write("[limits]\nmax_agents = 5\n")
    code, res = spawn_json(exo, "--worker", "x1", "--worker", "x2", "--prompt", "x", "--agent", "custom")
    assert code == 5 and len(res["agents"]) == 1
    assert "Too many agents" in res["failed"][0][1]


def test_prompt_from_stdin_and_file(team: Path, tmp_path: Path) -> None:
    exo = Exo(team)
    r = exo("spawn", "--worker", "si", "-", "--agent", "custom", "--json", input="from stdin")
    assert r.exit_code == 0, r.stdout
    assert json.loads(r.stdout)["agents"][0]["task"] == "from stdin"
    f = tmp_path / "p.txt"
    f.write_text("from file")
    code, res = spawn_json(exo, "--worker", "pf", "--prompt-file", str(f), "--agent", "custom")
    assert res["agents"][0]["task"] == "from file"


def test_spawn_into_another_repo(team: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "trunk")
    (other / "f").write_text("x")
    git(other, "add", "f")
    git(other, "commit", "-qm", "i")
    write_trusted(other, (team / "exo.toml").read_text())
    try:
        code, res = spawn_json(Exo(team), "--worker", "far", "--prompt", "x", "--agent", "custom",
                               "--repo", str(other))
        assert code == 0, res
        assert res["worktrees"] == [["far", str(other / ".exo" / "worktrees" / "far")]]
        assert res["agents"][0]["branch"] == "trunk.far"
        assert Env(cwd=other).has_state()
    finally:
        subprocess.run(["tmux", "-L", f"exo-{repo_id(other)}", "kill-server"], capture_output=True)


def test_spawn_repo_by_a_tl_agent(team: Path, tmp_path: Path) -> None:
    """A TL's `--repo`: another repository keeps its own state and root; its own repository keeps the TL as parent."""
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "trunk")
    git(other, "commit", "-q", "--allow-empty", "-m", "i")
    write_trusted(other, (team / "exo.toml").read_text())
    exo = Exo(team)
    assert spawn_json(exo, "--subtree", "--task", "t", "--branch", "lead", "--agent", "custom")[0] == 0
    lead = {**live_agent_vars(team, "lead"), "EXO_STATE_DIR": str(team / ".git" / "exo")}
    try:
        code, res = spawn_json(exo, "--worker", "far", "--prompt", "x", "--agent", "custom", "--repo", str(other),
                               env=lead)
        assert code == 0, res
        assert res["agents"][0]["parent"] == "root" and (other / ".git" / "exo" / "state.db").exists()
        code, res = spawn_json(exo, "--worker", "near", "--prompt", "x", "--agent", "custom", "--repo", str(team),
                               env=lead)
        assert code == 0, res
        assert res["agents"][0]["parent"] == "lead" and res["agents"][0]["branch"] == "main.lead.near"
    finally:
        subprocess.run(["tmux", "-L", f"exo-{repo_id(other)}", "kill-server"], capture_output=True)


def test_after_records_pending_and_launch(team: Path) -> None:
    from exo_cli.env import Env
    from exo_cli.errors import StateError
    from exo_cli.ops.spawn.pending import launch_pending

    exo = Exo(team)
    assert spawn_json(exo, "--worker", "first", "--prompt", "x", "--agent", "custom")[0] == 0
    code, res = spawn_json(exo, "--worker", "second", "--prompt", "use {{first.output}}", "--after", "first",
                           "--agent", "custom")
    assert code == 0, res
    a = res["agents"][0]
    assert a["status"] == "starting" and a["status_reason"] == "waiting for first" and res["worktrees"] == []
    env = Env(cwd=team)
    out = launch_pending(env, "second", prompt="use 42")
    assert out.errors == [] and out.agents[0].task == "use 42"
    assert (team / ".exo" / "worktrees" / "second").is_dir()
    with pytest.raises(StateError):
        launch_pending(env, "second")


def test_usage_errors(team: Path) -> None:
    exo = Exo(team)
    r = exo("spawn", "--json")
    assert r.exit_code == 2 and json.loads(r.stdout)["error"]["name"] == "UsageError"
    r = exo("spawn", "--subtree", "--task", "t", "--json")
    assert r.exit_code == 2
    r = exo("kill", "root", "--json")
    assert r.exit_code == 5
    r = exo("kill", "nobody", "--json")
    assert r.exit_code == 3


# --------------------------------------------------------------------------- lifecycle details

TICKER = 'import time\nfor i in range(100000):\n    print("tick", i, flush=True)\n    time.sleep(0.05)\n'


def test_read_since_last_and_wait_for(team: Path, tmp_path: Path) -> None:
    ticker = tmp_path / "ticker.py"
    ticker.write_text(TICKER)
    write_trusted(team, f'[agent]\ncommand = [{json.dumps(sys.executable)}, {json.dumps(str(ticker))}]\n')
    exo = Exo(team)
    assert spawn_json(exo, "--worker", "tk", "--prompt", "x", "--agent", "custom")[0] == 0
    r = exo("read", "tk", "--wait-for", r"tick 5\b", "--timeout", "60", "--json")
    assert json.loads(r.stdout)["matched"] is True
    first = json.loads(exo("read", "tk", "--since-last", "--json").stdout)
    last_seen = int(first["text"].split()[-1])
    # A plain read (it moves no cursor) waits until the agent has printed more.
    r = exo("read", "tk", "--wait-for", rf"^tick {last_seen + 1}$", "--timeout", "60", "--json")
    assert json.loads(r.stdout)["matched"] is True
    second = json.loads(exo("read", "tk", "--since-last", "--json").stdout)
    nums = [int(line.split()[1]) for line in second["text"].splitlines()]
    assert nums and nums[0] == last_seen + 1 and nums == list(range(nums[0], nums[0] + len(nums)))
    r = exo("read", "tk", "--wait-for", "never-printed", "--timeout", "0.3", "--json")
    assert r.exit_code == 5 and json.loads(r.stdout)["matched"] is False
    r = exo("read", "tk", "--wait-for", "(", "--json")
    assert r.exit_code == 4
    r = exo("attach", "tk", "--json")
    argv = json.loads(r.stdout)["argv"]
    assert argv[:2] == ["tmux", "-S"] and os.path.basename(argv[2]) == f"exo-{repo_id(team)}"


DIALOG_CLI = r'''#!{python}
import time
print("Do you trust the contents of this directory?", flush=True)
time.sleep(600)
'''


def test_blocked_on_dialog(team: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp_path / "dbin"
    bindir.mkdir()
    (bindir / "claude").write_text(DIALOG_CLI.format(python=sys.executable))
    (bindir / "claude").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    with open(team / "exo.toml", "a") as fh:
        fh.write("start_timeout = 0\n")  # under [agent]
    exo = Exo(team)
    code, res = spawn_json(exo, "--worker", "dlg", "--prompt", "x", "--agent", "claude")
    assert code == 0, res
    assert res["agents"][0]["status"] == "starting"
    exo("read", "dlg", "--wait-for", "trust the contents", "--timeout", "60")
    rows = {a["id"]: a for a in json.loads(exo("agents", "--json").stdout)["agents"]}
    assert rows["dlg"]["status"] == "blocked-on-dialog"


def test_roles_dev_cannot_spawn_and_tl_kills_only_its_subtree(team: Path) -> None:
    exo = Exo(team)
    assert spawn_json(exo, "--worker", "dev1", "--prompt", "x", "--agent", "custom")[0] == 0
    assert spawn_json(exo, "--subtree", "--task", "t", "--branch", "lead", "--agent", "custom")[0] == 0
    # As the agents themselves, with the identity spawn gave each of them (EXO_AGENT and its proof).
    dev1, lead = live_agent_vars(team, "dev1"), live_agent_vars(team, "lead")
    assert dev1["EXO_AGENT_PROOF"] != lead["EXO_AGENT_PROOF"]
    r = exo("spawn", "--worker", "x", "--prompt", "x", "--agent", "custom", "--json", env=dev1)
    assert r.exit_code == 5 and "dev role cannot" in json.loads(r.stdout)["error"]["message"]
    r = exo("kill", "dev1", "--json", env=lead)
    assert r.exit_code == 5 and "not in your subtree" in json.loads(r.stdout)["error"]["message"]
    # The dev naming itself its TL (as a `setsid -f`/`nohup` child could try) is refused, not promoted.
    r = exo("spawn", "--worker", "x", "--prompt", "x", "--agent", "custom", "--json", env={**dev1, "EXO_AGENT": "lead"})
    assert r.exit_code == 5 and "does not prove EXO_AGENT=lead" in json.loads(r.stdout)["error"]["message"]


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("exo_cli.demo_agent") is None, reason="exo_cli.demo_agent not merged yet"
)
def test_demo_workers(team: Path) -> None:
    exo = Exo(team)
    code, res = spawn_json(exo, "--worker", "d1", "--worker", "d2", "--prompt", "demo work", "--agent", "demo")
    assert code == 0, res

    def idle() -> bool:
        rows = json.loads(exo("agents", "--json").stdout)["agents"]
        return all(a["status"] == "idle" for a in rows)

    wait_until(idle, 60, "demo agents idle")
    for d in ("d1", "d2"):
        assert "add" in git(team / ".exo" / "worktrees" / d, "log", "-1", "--format=%s")


def test_zellij_outside_zellij_fails_before_making_a_worktree(team: Path) -> None:
    code, res = spawn_json(Exo(team), "--worker", "z1", "--prompt", "x", "--agent", "custom", "--mux", "zellij")
    assert code == 7
    from exo_cli.adapters.mux.zellij import NOT_IN_ZELLIJ

    expected = NOT_IN_ZELLIJ if shutil.which("zellij") else "Zellij is not installed (zellij is not on PATH)"
    assert res["failed"] == [["*", expected]] and res["errors"][0]["code"] == -32005
    assert not (team / ".exo" / "worktrees" / "z1").exists()


# --------------------------------------------------------------------------- reserved names


def _spawn_errors(doc: dict) -> list[dict]:
    return [doc["error"]] if "error" in doc else doc.get("errors", [])


def test_reserved_names_are_refused_everywhere(beads_repo: Path) -> None:
    """`root` is the human at the root: no worker, subtree, spec, bead or MCP spawn tool may take it."""
    import asyncio

    from mcp import Client

    from exo_cli.env import Env
    from exo_cli.mcp_server import build_server

    repo = beads_repo
    beads = (repo / ".beads" / "issues.jsonl").read_text()
    (repo / ".beads" / "issues.jsonl").write_text(beads + json.dumps(
        {"id": "t-root", "title": "Root", "status": "open", "priority": 0, "issue_type": "task",
         "created_at": "2025-01-07T00:00:00Z"}) + "\n")
    git(repo, "commit", "-qam", "root bead")
    exo = Exo(repo)
    calls = [
        ["--worker", "root", "--prompt", "x"],
        ["--worker", "ROOT", "--prompt", "x"],
        ["--worker", "ok1", "--worker", "Root", "--prompt", "x"],
        ["--subtree", "--task", "t", "--branch", "root"],
        ["--spec", json.dumps({"name": "root", "prompt": "x"})],
        ["root"],  # the bead t-root: its agent would be named root
    ]
    for args in calls:
        r = exo("spawn", *args, "--agent", "custom", "--json")
        assert r.exit_code == 4, (args, r.stdout)
        errors = _spawn_errors(json.loads(r.stdout))
        assert errors and all(e["code"] == -32002 and "reserved" in e["message"] for e in errors), errors

    async def tools() -> list:
        async with Client(build_server(Env(cwd=repo), "tl")) as c:
            return [
                await c.call_tool("spawn_workers", {"specs": [{"name": "root", "prompt": "x", "agent": "custom"}]}),
                await c.call_tool("spawn_subtree", {"task": "t", "branch_name": "root"}),
                await c.call_tool("spawn_agents", {"bead_ids": ["t-root"], "backend": "custom"}),
            ]

    for res in asyncio.run(tools()):
        doc = json.loads(res.content[0].text) if res.is_error else res.structured_content
        errors = _spawn_errors(doc)
        assert errors and all(e["code"] == -32002 and "reserved" in e["message"] for e in errors), doc
    env = Env(cwd=repo)
    assert {a.id for a in env.store.agents()} <= {"ok1"}
    assert not git(repo, "branch", "--list", "*root*")


def test_parallel_unnamed_spawns_get_unique_names(team: Path) -> None:
    """8 `exo spawn --prompt` at once, none named: all succeed, each with its own automatic name."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-m", "exo_cli", "spawn", "--prompt", f"task {i}", "--agent", "custom",
                               "--mux", "headless", "--json"], cwd=team, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(8)]
    results = [p.communicate(timeout=180) for p in procs]
    names = []
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, out + err
        names += [a["id"] for a in json.loads(out)["agents"]]
    assert len(names) == 8 and len(set(names)) == 8, names
    from exo_cli.env import Env

    assert {a.id for a in Env(cwd=team).store.agents()} == set(names)
