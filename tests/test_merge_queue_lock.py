"""The per-base lock held in the store (issue 34 item 5): what excludes exo processes on two hosts.

PostgreSQL (the private cluster): a process acting as host ``a`` holds the store's lock of
``main`` (and nothing else: no file lock of this host), and a real ``exo pr merge`` acting as
host ``b`` must wait for it, then land once it is released, or once ``a`` is killed with
``kill -9`` (the server ends its session, and the lock with it). SQLite: the leased row is taken
over only from a dead owner or an expired lease, and renewed while held.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pr_helpers import env_for, git
from test_merge_queue import pr_of

from conftest import EXO, ROOT, wait_for
from exo_cli.adapters.store import baselock

HOLDER = """
import sys, time
from pathlib import Path
from exo_cli.env import Env
env = Env(cwd=Path(sys.argv[1]))
with env.store.named_lock("merge:main", host=env.host_name, wait=0) as held:
    Path(sys.argv[2]).write_text(str(held))
    while not Path(sys.argv[3]).exists():
        time.sleep(0.05)
"""


def as_host(name: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("EXO_AGENT")}
    return {**environ, "EXO_HOST": name, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def waiting_on_lock(url: str, host: str) -> bool:
    """Whether a session of ``host`` tries for an exo lock now (the PostgreSQL server's own view)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
                            (f"exo lock {host}:%",)).fetchone()
    return bool(rows and rows[0])


@pytest.mark.parametrize("release", ["released", "kill-9"])
def test_a_plain_merge_on_host_b_waits_for_the_lock_host_a_holds(repo: Path, tmp_path: Path, pg_cluster: Any,
                                                                 monkeypatch: pytest.MonkeyPatch, release: str) -> None:
    monkeypatch.setenv("EXO_STORE_URL", pg_cluster.url())
    n = pr_of(repo, "w0", {"f.txt": "1\n"})
    start = git(repo, "rev-parse", "main")
    said, go = tmp_path / "held", tmp_path / "go"
    a = subprocess.Popen([sys.executable, "-c", HOLDER, str(repo), str(said), str(go)], env=as_host("a"), cwd=repo)
    b: subprocess.Popen[str] | None = None
    try:
        wait_for(lambda: said.exists() and said.read_text() == "True", what="host a to hold the lock of main")
        b = subprocess.Popen([*EXO, "pr", "merge", str(n), "--json"], env=as_host("b"), cwd=repo,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: waiting_on_lock(pg_cluster.url(), "b"), what="host b's merge to wait for the lock")
        assert b.poll() is None and git(repo, "rev-parse", "main") == start  # nothing landed meanwhile
        if release == "released":
            go.write_text("")
        else:
            os.kill(a.pid, signal.SIGKILL)
        out, err = b.communicate(timeout=120)
        assert b.returncode == 0, err
        assert json.loads(out)["state"] == "merged" and git(repo, "rev-parse", "main") != start
        assert a.wait(timeout=60) == (0 if release == "released" else -signal.SIGKILL)
    finally:
        go.write_text("")
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_the_runner_lock_of_another_host_keeps_a_second_runner_out(repo: Path, pg_cluster: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXO_STORE_URL", pg_cluster.url())
    from exo_cli.ops import mergequeue as mq
    from exo_cli.ops.queuerun import advance

    env_a, env_b = env_for(repo, extra={"EXO_HOST": "a"}), env_for(repo, extra={"EXO_HOST": "b"})
    assert not mq.runner_alive(env_b, "main")
    with env_a.store.named_lock("queue-run:main", host="a", wait=0) as held:
        assert held
        assert mq.runner_alive(env_b, "main")  # seen from host b, whose file lock is free
        assert advance(env_b, "main") == 0  # it leaves the queue to the other host's runner
    assert not mq.runner_alive(env_b, "main")


def lock_row(store: Any, name: str) -> dict[str, Any] | None:
    raw = store.kv_get(f"lock:{name}")
    return json.loads(raw) if raw else None


def test_sqlite_lease_taken_over_only_from_a_dead_owner_or_an_expired_lease(repo: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    store = env_for(repo).store
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)
    live_elsewhere = {"host": "other", "pid": os.getpid(), "start": None, "token": "x", "until": time.time() + 60}
    store.kv_set("lock:merge:main", json.dumps(live_elsewhere))
    with store.named_lock("merge:main", host="here", wait=0) as held:
        assert not held  # another host's owner with a live lease: never taken
    assert lock_row(store, "merge:main") == live_elsewhere
    store.kv_set("lock:merge:main", json.dumps({**live_elsewhere, "until": time.time() - 1}))
    with store.named_lock("merge:main", host="here", wait=0) as held:
        assert held and lock_row(store, "merge:main")["host"] == "here"  # its lease expired
    assert lock_row(store, "merge:main") is None  # released
    store.kv_set("lock:merge:main", json.dumps({**live_elsewhere, "host": "here", "pid": dead}))
    with store.named_lock("merge:main", host="here", wait=0) as held:
        assert held  # this host's owner is dead: taken at once, whatever its lease
        with store.named_lock("merge:main", host="here", wait=0) as again:
            assert not again  # held by a live process: this one
    monkeypatch.setattr(baselock, "RENEW", 0.05)
    with store.named_lock("merge:main", host="here", wait=0) as held:
        first = lock_row(store, "merge:main")
        assert held and first is not None
        wait_for(lambda: lock_row(store, "merge:main")["until"] > first["until"], what="the lease renewed")
    assert lock_row(store, "merge:main") is None
