"""Sandboxed agents where the suite run with ``[sandbox] mode = "auto"`` found them wrong (issue 31 item 4).

A sandboxed custom agent never went idle: the watcher took bwrap, its init and the network's bridge
for a build the agent runs. What it left behind: ``exo kill``
returned while the inside of the agent's bubblewrap still ran (bwrap starts it in a session of its own,
outside the process group exo stops); the user's list of clones (``~/.config/exo/clones.jsonl``) grew a
line per sandboxed agent and outlived ``exo deinit``; a deinit killed after it deleted the clones' refs
left their empty folders under ``.git/refs/exo`` for good. Real bubblewrap, real processes, tmux on the
run's private server.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, Exo, git, run_exo, stop_repo_agents, wait_for
from exo_cli.adapters import clones
from exo_cli.adapters.proc import carrying
from exo_cli.env import Env

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (under CI it must be: .ci/run installs it)")

# several processes inside the sandbox, the last one the agent itself
AGENT = ["sh", "-c", "sleep 600 & sleep 600 & exec sleep 600", "{prompt}"]


def inside(env: Env, agent: str) -> set[int]:
    """The live processes that carry the agent's identity (its sandbox's inside among them)."""
    return set(carrying("EXO_AGENT", agent)) & set(carrying("EXO_STATE_DIR", str(env.state_dir)))


def user_config(home: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """``text`` as the user's exo configuration (trusted as the user's own), exo importable by the agents."""
    cfg = home / ".config" / "exo"
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "config.toml").write_text(text)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


@needs_bwrap
def test_kill_returns_once_the_sandbox_is_empty_and_deinit_leaves_no_trace(repo: Path, isolate: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    user_config(isolate, monkeypatch, f"[agent]\ncommand = {json.dumps(AGENT)}\n")
    exo = Exo(repo)
    env = Env(cwd=repo)
    try:
        for name in ("w1", "w2", "w3"):
            r = exo("spawn", "--worker", name, "--prompt", "x", "--agent", "custom", "--mux", "headless", "--sandbox")
            assert r.exit_code == 0, r.stderr
            agent = env.store.agent(name)
            assert agent is not None and agent.spec.get("sandboxed")
            if name == "w3":  # bwrap's init and the sleeps (and the network's bridge): the sandbox is up
                wait_for(lambda: len(inside(env, "w3")) >= 4, timeout=60, what="w3's sandbox to start")
            # each stop: nothing of its sandbox runs once it says stopped (w1, w2: stopped while it starts)
            assert exo("kill", name).exit_code == 0
            assert inside(env, name) == set()
        homes = isolate / ".config" / "exo" / clones.HOMES
        assert len(homes.read_text().splitlines()) == 3

        killed = run_exo("deinit", cwd=repo, env={"EXO_FAULT": "deinit.files"})
        assert killed.returncode == 137, killed.stderr
        done = run_exo("deinit", cwd=repo)
        assert done.returncode == 0, done.stderr
        assert not homes.exists()  # the clones' lines went with the repository, and the file with its last line
        assert not (repo / ".git" / "refs" / "exo").exists()  # no empty folder of the clones' refs
    finally:
        stop_repo_agents(repo)


def test_the_list_of_clones_holds_only_clones_that_exist(tmp_path: Path) -> None:
    folder = tmp_path / "exo"
    repo_a, repo_b = tmp_path / "a", tmp_path / "b"
    made = {}
    for name, repo in (("a1", repo_a), ("a2", repo_a), ("b1", repo_b)):
        made[name] = tmp_path / name
        made[name].mkdir()
        clones.record_home(folder, made[name], repo)
    assert clones.home_of(folder, made["a1"]) == repo_a
    (tmp_path / "other").mkdir()
    made["a2"].rmdir()
    (tmp_path / "other").rename(made["a2"])  # another folder at the same path: not the clone exo recorded
    made["b1"].rmdir()
    with (folder / clones.HOMES).open("a") as fh:
        fh.write("not json\n")
    made["a3"] = tmp_path / "a3"
    made["a3"].mkdir()
    clones.record_home(folder, made["a3"], repo_a)  # each new line drops the lines of clones gone
    lines = [json.loads(x)["clone"] for x in (folder / clones.HOMES).read_text().splitlines()]
    assert lines == [str(made["a1"]), str(made["a3"])]
    assert clones.forget_homes(folder, repo_b) == 0
    assert clones.forget_homes(folder, repo_a, apply=False) == 2 and (folder / clones.HOMES).exists()
    assert clones.forget_homes(folder, repo_a) == 2
    assert not (folder / clones.HOMES).exists()
    assert clones.forget_homes(folder, repo_a) == 0


@needs_bwrap
@pytest.mark.parametrize("mux", ["headless", "tmux"])
@pytest.mark.parametrize("build", [False, True], ids=["quiet", "building"])
def test_a_quiet_sandboxed_custom_agent_goes_idle_unless_it_builds(repo: Path, isolate: Path, mux: str, build: bool,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Quiet for idle_quiet_seconds: idle, but not while it runs a child process (its "build"); bwrap, its init,
    the network's bridge and the pane's keeper are none."""
    script = "echo ready; sleep 600" if build else "echo ready; exec sleep 600"
    user_config(isolate, monkeypatch, f'[agent]\ncommand = ["sh", "-c", {json.dumps(script)}, "{{prompt}}"]\n'
                "idle_quiet_seconds = 2\n")
    try:
        r = run_exo("spawn", "--worker", "q", "--prompt", "x", "--agent", "custom", "--mux", mux, "--sandbox",
                    cwd=repo)
        assert r.returncode == 0, r.stderr
        r = run_exo("wait", "q", "--timeout", "8" if build else "40", "--json", cwd=repo, timeout=90)
        assert r.returncode == 0, r.stderr
        (entry,) = json.loads(r.stdout)["results"]
        assert entry["status"] == ("running" if build else "idle"), r.stdout
        assert json.loads(r.stdout)["timed_out"] is build
    finally:
        stop_repo_agents(repo)


@needs_bwrap
def test_doctor_rebuilds_a_live_sandboxed_agent_as_sandboxed(repo: Path, isolate: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The state lost, `exo doctor` rebuilds live agents' records: a sandboxed one's says sandboxed (else it would
    be watched, stopped and started again as an unsandboxed agent)."""
    user_config(isolate, monkeypatch, f"[agent]\ncommand = {json.dumps(AGENT)}\nidle_quiet_seconds = 3600\n")
    try:
        for name, mux, flag in (("s1", "headless", "--sandbox"), ("s2", "tmux", "--sandbox"),
                                ("u1", "headless", "--no-sandbox")):
            r = run_exo("spawn", "--worker", name, "--prompt", "x", "--agent", "custom", "--mux", mux, flag, cwd=repo)
            assert r.returncode == 0, r.stderr
        env = Env(cwd=repo)
        for name in ("s1", "s2"):
            wait_for(lambda n=name: len(inside(env, n)) >= 4, timeout=60, what=f"{name}'s sandbox to start")
        db = env.state_dir / "state.db"
        env.store.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        r = run_exo("doctor", "--json", cwd=repo)
        rebuilt = sorted(p["subject"] for p in json.loads(r.stdout)["problems"]
                         if p["kind"] == "lost-record" and p["repaired"])
        assert rebuilt == ["s1", "s2", "u1"], r.stdout
        agents = {a["id"]: a for a in json.loads(run_exo("agents", "--json", cwd=repo).stdout)["agents"]}
        assert {n: agents[n]["sandboxed"] for n in ("s1", "s2", "u1")} == {"s1": True, "s2": True, "u1": False}
    finally:
        stop_repo_agents(repo)


@needs_bwrap
def test_reap_stops_what_is_left_of_its_agent_never_a_namesake_spawned_since(repo: Path, isolate: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`exo reap` stops a sandboxed agent's leftovers by that spawn's own socket, not by its name alone: a new
    agent of the same name (the name is free once the old one is done and its clone gone) spawned while reap
    works on the old record keeps running."""
    from exo_cli.ops import agentctl

    user_config(isolate, monkeypatch, f"[agent]\ncommand = {json.dumps(AGENT)}\nidle_quiet_seconds = 3600\n")

    def spawn() -> None:
        r = run_exo("spawn", "--worker", "w1", "--prompt", "x", "--agent", "custom", "--mux", "headless", "--sandbox",
                    cwd=repo)
        assert r.returncode == 0, r.stderr

    try:
        spawn()
        env = Env(cwd=repo)
        old = env.store.agent("w1")
        assert old is not None and old.spec.get("sandboxed")
        wait_for(lambda: len(inside(env, "w1")) >= 4, timeout=60, what="w1's sandbox to start")
        assert Exo(repo)("kill", "w1").exit_code == 0
        env.store.update_agent("w1", status="done")  # done, its clone gone (as complete leaves it): w1 is free
        shutil.rmtree(str(old.worktree))
        git(repo, "branch", "-D", str(old.branch))
        new: set[int] = set()
        real_close = agentctl.close_windows

        def close_then_a_namesake(env_: Env, a: object) -> bool:  # another terminal spawns w1 meanwhile
            out = real_close(env_, a)  # type: ignore[arg-type]
            if not new:
                spawn()
                new.update(wait_for(lambda: len(inside(env, "w1")) >= 4 and inside(env, "w1"), timeout=60,
                                    what="the new w1's sandbox"))
            return out

        monkeypatch.setattr(agentctl, "close_windows", close_then_a_namesake)
        assert Exo(repo)("reap", "--json").exit_code == 0
        assert new and inside(env, "w1") >= new  # the new w1 runs on, whole
        now = Env(cwd=repo).store.agent("w1")  # and its record stays its own (the old one is history)
        assert now is not None and now.created_at != old.created_at and not now.retired
    finally:
        stop_repo_agents(repo)


@needs_bwrap
def test_under_auto_an_agent_with_services_runs_unsandboxed_and_says_so(repo: Path, isolate: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Its services run in a sandbox of their own with no network the agent shares: under `auto` (the default) an
    agent with services runs unsandboxed, with a warning; `--skip-permissions` is then refused (never silently
    unsandboxed), and `--sandbox` walls both in."""
    user_config(isolate, monkeypatch, f"[agent]\ncommand = {json.dumps(AGENT)}\n"
                '[services.web]\ncommand = "sleep 600"\nport = 18460\n')
    try:
        r = run_exo("spawn", "--worker", "u1", "--prompt", "x", "--agent", "custom", "--mux", "headless", "--json",
                    cwd=repo)
        assert r.returncode == 0, r.stdout + r.stderr
        res = json.loads(r.stdout)
        assert res["agents"][0]["sandboxed"] is False
        assert any("unsandboxed" in w and "services" in w for w in res["warnings"]), res["warnings"]
        r = run_exo("spawn", "--worker", "u2", "--prompt", "x", "--agent", "custom", "--mux", "headless",
                    "--skip-permissions", "--json", cwd=repo)
        assert r.returncode == 7 and "services" in json.loads(r.stdout)["error"]["message"], r.stdout
        assert Env(cwd=repo).store.agent("u2") is None
        r = run_exo("spawn", "--worker", "s1", "--prompt", "x", "--agent", "custom", "--mux", "headless", "--sandbox",
                    "--json", cwd=repo)
        assert r.returncode == 0 and json.loads(r.stdout)["agents"][0]["sandboxed"] is True, r.stdout
    finally:
        stop_repo_agents(repo)


@needs_bwrap
def test_beside_an_older_exos_broker_a_sandboxed_spawn_says_how_to_go_on(repo: Path, isolate: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """An upgrade mid-team: another exo's broker still serves its agents. A sandboxed agent could not reach exo
    without its own broker, so the spawn is refused, saying to spawn with --no-sandbox meanwhile (which works)."""
    import exo_cli.ops.broker as broker_ops

    user_config(isolate, monkeypatch, f"[agent]\ncommand = {json.dumps(AGENT)}\n")
    exo = Exo(repo)
    try:
        r = exo("spawn", "--worker", "old1", "--prompt", "x", "--agent", "custom", "--mux", "headless", "--json")
        assert r.exit_code == 0, r.stdout  # its broker serves old1
        monkeypatch.setattr(broker_ops, "__version__", "99.0.0")  # this exo is newer than the running broker
        r = exo("spawn", "--worker", "new1", "--prompt", "x", "--agent", "custom", "--mux", "headless", "--json")
        err = r.json()["errors"][0]  # type: ignore[index]
        assert r.exit_code == 5 and "--no-sandbox" in err["hint"] and "without it meanwhile" not in err["hint"], err
        r = exo("spawn", "--worker", "new2", "--prompt", "x", "--agent", "custom", "--mux", "headless", "--no-sandbox",
                "--json")
        assert r.exit_code == 0 and r.json()["agents"][0]["sandboxed"] is False, r.stdout  # type: ignore[index]
    finally:
        stop_repo_agents(repo, tmux=False)
