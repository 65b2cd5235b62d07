"""Hosts under faults, each as a test with its outcome: a host lost in the middle of ``exo complete``,
and a canary API key looked for in every process's argv and in sshd's most verbose log on both hosts.

Two hosts over real sshds on 127.0.0.1 (tests/hosts_harness.py), one bare origin, the private
PostgreSQL cluster as the store. Host b's exo pauses at a step of ``complete`` (``EXO_FAULT`` with
``EXO_FAULT_PAUSE``) while the test cuts the connection, then goes on.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from hosts_harness import EXO_BIN, Sshd, TwoHosts, _alive, _write_toml, scan_secret, wait_until

from conftest import Exo, agent_process_environ, git, stop_repo_agents


def _ok(res: Any) -> Any:
    assert res.exit_code == 0, res.stdout + res.stderr
    return res.json()


def _agent(exo: Exo, agent_id: str) -> dict[str, Any]:
    return next(a for a in _ok(exo("agents", "--json"))["agents"] if a["id"] == agent_id)


@pytest.fixture
def hosts(two_hosts: TwoHosts) -> Any:
    yield two_hosts
    stop_repo_agents(two_hosts.a)


# --------------------------------------------------------------------------- a host lost during complete

CUTS = [("complete.checked", "sshd"), ("complete.stopped", "sshd"), ("complete.stopped", "client"),
        ("complete.archived", "sshd")]


def _b_refs(h: TwoHosts) -> str:
    return git(h.b, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads")


@pytest.mark.parametrize(("point", "cut"), CUTS)
def test_a_host_lost_during_complete_removes_nothing_on_either_host(hosts: TwoHosts, exo: Exo, tmp_path: Path,
                                                                    point: str, cut: str) -> None:
    """The connection is cut while exo on b is at ``point``: A says the host is unreachable (exit 7), exo on
    b sees its caller gone and stops before removing anything; the agent stays resumable (never done), and
    the next ``complete`` finishes the job."""
    h = hosts
    force = point == "complete.archived"  # something to archive: an untracked file
    steps = [{"write": {"path": "draft.txt", "content": "unsaved\n"}}] if force else [{"note": {"message": "ok"}}]
    (tmp_path / "script.json").write_text(json.dumps(steps))
    [w] = _ok(exo("spawn", "--host", "b", "--worker", "w1", "--prompt", "p", "--agent", "demo", "--demo-script",
                  str(tmp_path / "script.json"), "--json"))["agents"]
    wait_until(lambda: _agent(exo, "w1")["status"] == "idle", timeout=180, what="w1 idle")
    wt = Path(w["worktree"])
    refs, a_status, origin = _b_refs(h), git(h.a, "status", "--porcelain"), git(h.origin, "for-each-ref")
    pause = tmp_path / "pause"
    pause.mkdir()
    h.set_b_env(EXO_FAULT=point, EXO_FAULT_PAUSE=str(pause))
    proc = subprocess.Popen([str(EXO_BIN), "complete", "w1", "--json", *(["--force"] if force else [])], cwd=h.a,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        flag = wait_until(lambda: (pause / point).is_file() and (pause / point).read_text().strip() and pause / point,
                          timeout=240, what=f"exo on b to reach {point}")
        pid = int(flag.read_text())
        if cut == "sshd":
            h.stop_sshd()  # the host is gone: sshd and every session it serves
        else:
            h.sshd.kill_clients()  # the connection is cut on this side (its master and its session)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 7, out + err
    error = json.loads(out)["error"]
    assert (error["name"], error["data"]["host"], error["data"]["reason"]) == ("EnvironmentError", "b", "unreachable")
    assert "host b" in error["message"].lower() or "Host b" in error["message"]
    flag.unlink()  # exo on b goes on from that step, and finds its caller gone
    wait_until(lambda: not _alive(pid), timeout=120, what="exo on b to end")
    # nothing removed on either host
    assert wt.is_dir() and _b_refs(h) == refs and git(h.origin, "for-each-ref") == origin
    assert git(h.a, "status", "--porcelain") == a_status
    if force:
        assert (wt / "draft.txt").read_text() == "unsaved\n"
    from exo_cli.env import Env

    rec = Env(cwd=h.a).store.agent("w1")
    assert rec is not None and rec.status != "done"
    if point == "complete.checked":
        assert rec.status == "idle"  # never stopped: still running
    else:
        assert rec.status == "dead" and "resumable" in (rec.status_reason or ""), rec
    # it recovers: the host back, the same complete finishes
    h.b_environ.pop("EXO_FAULT")
    h.write_a_config()
    if cut == "sshd":
        h.start_sshd()
    done = _ok(exo("complete", "w1", "--json", *(["--force"] if force else [])))
    assert done["worktree_removed"] and done["branch_deleted"] and not wt.exists()


# --------------------------------------------------------------------------- a canary key on both hosts

SEND_ENV = "  LogLevel DEBUG3\n  SendEnv ANTHROPIC_* MY_SERVICE_* EXO_*\n"  # a user's ssh config that passes them on


class ArgvSampler:
    """Samples every process's argv (``/proc/*/cmdline``) while it runs, looking for canaries."""

    def __init__(self, *canaries: str) -> None:
        self.needles = [c.encode() for c in canaries]
        self.found: list[str] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from hosts_harness import _pids, _read

        while not self._stop.is_set():
            for pid in _pids():
                raw = _read(f"/proc/{pid}/cmdline")
                if any(n in raw for n in self.needles):
                    self.found.append(raw.replace(b"\0", b" ").decode(errors="replace")[:300])
            self.samples += 1
            self._stop.wait(0.02)

    def __enter__(self) -> ArgvSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def test_a_canary_key_is_in_no_argv_and_no_sshd_log_on_either_host(
        repo: Path, isolate: Path, pg_cluster: Any, tmp_path: Path, exo: Exo, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both hosts' sshd log at DEBUG3 and accept every variable, and the user's ssh config sends the agents'
    keys (``SendEnv``): A spawns on b and calls it, B's human spawns on a and calls it, while every
    process's argv is sampled. The keys reach the agents, and nothing else."""
    sshd_b = Sshd(log_level="DEBUG3", client_config=SEND_ENV).start()
    sshd_a = Sshd(alias="exo-a", log_level="DEBUG3", client_config=SEND_ENV).start()
    monkeypatch.setenv("EXO_HOST", "a")
    h = TwoHosts(sshd_b, repo, isolate, tmp_path, pg_cluster.url(), monkeypatch)
    try:
        key_a, token_a, key_b = ("sk-ant-a" + secrets.token_hex(12), "tok-a" + secrets.token_hex(12),
                                 "sk-ant-b" + secrets.token_hex(12))
        monkeypatch.setenv("ANTHROPIC_API_KEY", key_a)
        monkeypatch.setenv("MY_SERVICE_TOKEN", token_a)
        _write_toml(h.a_config, {"hosts": {"b": {"env": ["MY_SERVICE_*"]}}})
        h.reach_a_from_b(sshd_a)
        for config in (h.a_config, h.b_config):  # sandboxed (the default), the demo agents get what these let in
            _write_toml(config, {"sandbox": {"env": ["MY_SERVICE_*", "ANTHROPIC_API_KEY"]}})
        with ArgvSampler(key_a, token_a, key_b) as sampler:
            _ok(exo("spawn", "--host", "b", "--worker", "w1", "--prompt", "p", "--agent", "demo", "--json"))
            wait_until(lambda: _agent(exo, "w1")["status"] == "idle", timeout=180, what="w1 idle")
            for args in (["read", "w1"], ["status", "w1"], ["send", "w1", "hi"], ["diff", "w1"], ["hosts"]):
                _ok(exo(*args, "--json"))
            got = h.exo_on_b("spawn", "--host", "a", "--worker", "wa", "--prompt", "p", "--agent", "demo", "--mux",
                             "headless", "--json", ANTHROPIC_API_KEY=key_b)
            assert got.returncode == 0, got.stdout + got.stderr
            wait_until(lambda: _agent(exo, "wa")["status"] == "idle", timeout=180, what="wa idle")
            for args in (["read", "wa"], ["status", "wa"], ["hosts"]):
                got = h.exo_on_b(*args, "--json", ANTHROPIC_API_KEY=key_b)
                assert got.returncode == 0, got.stdout + got.stderr
        assert sampler.samples > 10 and sampler.found == [], sampler.found
        # they reached the agents (the test is not looking at nothing)
        pid_b = int(_agent(exo, "w1")["location"]["pid"])
        assert agent_process_environ(pid_b).get("ANTHROPIC_API_KEY") == key_a
        assert agent_process_environ(pid_b).get("MY_SERVICE_TOKEN") == token_a
        pid_a = int(_agent(exo, "wa")["location"]["pid"])
        assert agent_process_environ(pid_a).get("ANTHROPIC_API_KEY") == key_b
        assert "debug3" in sshd_a.log.read_text().lower() and "debug3" in sshd_b.log.read_text().lower()
        for canary in (key_a, token_a, key_b):
            assert scan_secret(canary, [*h.scan_roots(), sshd_a.dir], h.tmux_sockets(),
                               logs=[sshd_a.log, sshd_b.log]) == [], canary
    finally:
        stop_repo_agents(repo)
        h.close()
        sshd_a.close()
        sshd_b.close()
