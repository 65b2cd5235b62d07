"""The PostgreSQL store itself: its choice, its schema and versions, bad input, LISTEN/NOTIFY.

The behaviour shared with SQLite (every Store method, messages, wait, spawn/complete, MCP,
the load tests) runs on both stores through conftest's ``store_kind``; this file holds what
only PostgreSQL has. Every test runs against the private cluster of ``pg_cluster``.
"""

from __future__ import annotations

import inspect
import json
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, run_exo
from exo_cli.adapters.store import open_store
from exo_cli.errors import EnvironmentError_, InvalidInput, StateError
from exo_cli.records import Agent


@pytest.fixture
def pg(pg_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("EXO_STORE_URL", pg_cluster.url())
    return pg_cluster


def agent(i: int | str) -> Agent:
    now = time.time()
    return Agent(id=f"a{i}", name=f"a{i}", role="dev", parent="root", status="starting", backend="demo",
                 mux="headless", created_at=now, updated_at=now, status_at=now, repo="/somewhere")


def fresh_db(cluster: Any, name: str) -> str:
    cluster.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    cluster.psql(f"CREATE DATABASE {name}")
    return str(cluster.url(name))


def test_postgres_store_implements_the_interface_with_its_signatures() -> None:
    from exo_cli.adapters.store import base
    from exo_cli.adapters.store.postgres import PostgresStore
    from exo_cli.adapters.store.sqlite import SqliteStore

    names = [n for n, v in vars(base.Store).items() if not n.startswith("_") and callable(v)]
    for cls in (SqliteStore, PostgresStore):
        for name in names:
            want = inspect.signature(getattr(base.Store, name))
            got = inspect.signature(getattr(cls, name))
            assert [(p.name, p.kind) for p in got.parameters.values()] == [
                (p.name, p.kind) for p in want.parameters.values()], (cls, name)


def test_repositories_share_one_database_with_their_own_rows(pg: Any, tmp_path: Path) -> None:
    url = fresh_db(pg, "shared")
    one, two = open_store(tmp_path / "one", tmp_path, url), open_store(tmp_path / "two", tmp_path, url)
    one.insert_agent(agent(1))
    two.insert_agent(agent(1)._replace(status="idle"))
    assert one.post("note", "a1", "root", "from one") != two.post("note", "a1", "root", "from two")
    assert [m.body for m in one.messages(recipient="root")] == ["from one"]
    assert [m.body for m in two.messages(recipient="root")] == ["from two"]
    assert one.agent("a1").status == "starting" and two.agent("a1").status == "idle"  # type: ignore[union-attr]
    pr = {"forge": "local", "title": "t", "body": "", "head": "h", "base": "main", "author": "a1", "state": "open"}
    assert (one.insert_pr(**pr), two.insert_pr(**pr), one.insert_pr(**pr)) == (1, 1, 2)  # numbered per repository
    one.kv_set("k", "1")
    assert two.kv_get("k") is None and two.kv_claim("k", "2") is True
    assert pg.psql("SELECT count(*) FROM exo.repos", "shared") == "2"


def test_schema_is_versioned_and_a_newer_one_refused(pg: Any, tmp_path: Path, repo: Path) -> None:
    url = fresh_db(pg, "newer")
    store = open_store(tmp_path, tmp_path, url)
    assert store.exists() is False  # no schema yet, and checking creates none
    assert pg.psql("SELECT to_regnamespace('exo') IS NULL", "newer") == "True"
    store.agents()
    assert store.exists() is True
    from exo_cli.adapters.store.pgschema import PG_SCHEMA_VERSION as SCHEMA_VERSION

    assert pg.psql("SELECT version FROM exo.version", "newer") == str(SCHEMA_VERSION)
    # a version-1 database (before the migrate's hold and moved marker) is brought up to date on open
    pg.psql("ALTER TABLE exo.repos DROP COLUMN held_by, DROP COLUMN moved_to, DROP COLUMN incoming", "newer")
    pg.psql("UPDATE exo.version SET version = 1", "newer")
    assert open_store(tmp_path, tmp_path, url).agents() == []
    assert pg.psql("SELECT count(*) FROM information_schema.columns WHERE table_schema = 'exo' AND table_name = "
                   "'repos' AND column_name IN ('held_by', 'moved_to', 'incoming')", "newer") == "3"
    assert pg.psql("SELECT version FROM exo.version", "newer") == str(SCHEMA_VERSION)
    pg.psql(f"UPDATE exo.version SET version = {SCHEMA_VERSION + 1}", "newer")
    with pytest.raises(StateError, match="newer than this exo"):
        open_store(tmp_path, tmp_path, url).agents()
    proc = run_exo("agents", "--json", cwd=repo, env={"EXO_STORE_URL": url})
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert "newer than this exo" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


def test_a_foreign_exo_schema_is_a_state_error(pg: Any, tmp_path: Path) -> None:
    url = fresh_db(pg, "foreigndb")
    pg.psql("CREATE SCHEMA exo", "foreigndb")
    pg.psql("CREATE TABLE exo.messages (x int)", "foreigndb")
    with pytest.raises(StateError, match="not exo's state"):
        open_store(tmp_path, tmp_path, url).agents()


def test_parallel_first_opens_migrate_once(pg: Any, tmp_path: Path) -> None:
    url = fresh_db(pg, "race")
    errors: list[BaseException] = []

    def first(i: int) -> None:
        try:
            open_store(tmp_path / f"r{i}", tmp_path, url).insert_agent(agent(i))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=first, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert pg.psql("SELECT count(*) FROM exo.agents", "race") == "8"


def test_unreachable_database_is_an_environment_error_and_hooks_fail_open(repo: Path, tmp_path: Path) -> None:
    url = f"postgresql://nobody@/exo?host={tmp_path}/no-server"
    with pytest.raises(EnvironmentError_, match="Cannot use exo's PostgreSQL store"):
        open_store(tmp_path, tmp_path, url).agents()
    for args in (["status", "--json"], ["agents", "--json"], ["note", "hello", "--json"]):
        proc = run_exo(*args, cwd=repo, env={"EXO_STORE_URL": url})
        assert proc.returncode == 7, (args, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr
        err = json.loads(proc.stdout)["error"]
        assert err["name"] == "EnvironmentError" and "PGPASSWORD" in err["hint"]
    proc = run_exo("hook", "stop", "--cli", "claude", cwd=repo, input="{}",
                   env={"EXO_STORE_URL": url, "EXO_AGENT": "w1"})
    assert proc.returncode == 0 and json.loads(proc.stdout) == {}
    assert "warning" in proc.stderr and "Traceback" not in proc.stderr


def test_wrong_user_is_an_environment_error(pg: Any, repo: Path) -> None:
    url = str(pg.url()).replace(f"//{pg.user}@", "//no_such_role@")
    proc = run_exo("agents", "--json", cwd=repo, env={"EXO_STORE_URL": url})
    assert proc.returncode == 7, proc.stdout + proc.stderr
    assert "no_such_role" in json.loads(proc.stdout)["error"]["message"]


def test_a_password_in_the_url_is_refused(repo: Path) -> None:
    with pytest.raises(InvalidInput, match="password"):
        open_store(repo, repo, "postgresql://me:secret@db.example.invalid/exo")
    proc = run_exo("agents", "--json", cwd=repo, env={"EXO_STORE_URL": "postgresql://me:secret@/exo?host=/x"})
    assert proc.returncode == 4 and "secret" not in proc.stdout + proc.stderr
    for url in ("postgresql://me:hunter2@/exo?host=/x", "postgresql://me@/exo?host=/x&password=hunter2"):
        (repo / "exo.toml").write_text(f'[store]\nurl = "{url}"\n')
        proc = run_exo("agents", "--json", cwd=repo)  # a repository's value is refused, untrusted, before it is used
        assert proc.returncode == 5 and "hunter2" not in proc.stdout + proc.stderr
        proc = run_exo("trust", "--json", cwd=repo)  # and never pinned: no password lands in a file
        assert proc.returncode == 4 and "hunter2" not in proc.stdout + proc.stderr, proc.stdout
        assert not (Path(os.environ["EXO_CONFIG_DIR"]) / "trust").exists()
    (repo / "exo.toml").unlink()
    (repo / ".exo").mkdir()
    (repo / ".exo" / "config.toml").write_text('[store]\nurl = "postgresql://me:hunter2@/exo?host=/x"\n')
    proc = run_exo("agents", "--json", cwd=repo)  # the local file is trusted: the password itself is refused
    assert proc.returncode == 4 and "hunter2" not in proc.stdout + proc.stderr


def test_config_file_chooses_the_store_and_env_beats_it(pg: Any, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from exo_cli.env import Env

    url = fresh_db(pg, "fromconfig")
    monkeypatch.delenv("EXO_STORE_URL")
    (repo / ".exo").mkdir()
    (repo / ".exo" / "config.toml").write_text(f'[store]\nurl = "{url}"\n')
    assert Env(cwd=repo).store_url == url
    assert run_exo("init", cwd=repo).returncode == 0
    assert run_exo("agents", "--json", cwd=repo).returncode == 0
    assert pg.psql("SELECT count(*) FROM exo.repos", "fromconfig") == "1"
    assert not (repo / ".git" / "exo" / "state.db").exists()
    # The state folder now records where the state is: an agent's process (EXO_STATE_DIR, no
    # configuration of its own) follows it, and a contradicting choice is an error, never a second state.
    state = repo / ".git" / "exo"
    assert (state / "store-url").read_text().strip() == url and (state / "store-url").stat().st_mode & 0o777 == 0o600
    assert Env(cwd=repo, environ={"EXO_STATE_DIR": str(state), "HOME": os.environ["HOME"]}).store_url == url
    with pytest.raises(StateError, match="is configured") as info:
        _ = Env(cwd=repo, environ={**os.environ, "EXO_STORE_URL": ""}).store_url  # env beats the file
    assert "exo store migrate" in (info.value.hint or "")


def test_a_url_while_the_state_is_in_sqlite_says_to_migrate(repo: Path) -> None:
    assert run_exo("init", cwd=repo).returncode == 0
    proc = run_exo("agents", "--json", cwd=repo, env={"EXO_STORE_URL": "postgresql://me@/exo?host=/x"})
    assert proc.returncode == 5 and "exo store migrate" in json.loads(proc.stdout)["error"]["hint"]


def test_a_hook_in_a_database_without_exo_state_does_nothing(pg: Any, repo: Path) -> None:
    url = fresh_db(pg, "empty")
    proc = run_exo("hook", "stop", "--cli", "claude", cwd=repo, input="{}", env={"EXO_STORE_URL": url,
                                                                                  "EXO_AGENT": "w1"})
    assert proc.returncode == 0 and "no exo state" in proc.stderr
    assert pg.psql("SELECT to_regnamespace('exo') IS NULL", "empty") == "True"


PROBE = """
import sys
from exo_cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stderr.write('\\nPSYCOPG=' + str(any(m.split('.')[0] == 'psycopg' for m in sys.modules)) + '\\n')
"""


@pytest.mark.parametrize("args", [["status", "--json"], ["hook", "stop", "--cli", "claude"], ["agents", "--json"]])
def test_the_sqlite_paths_never_import_psycopg(repo: Path, args: list[str]) -> None:
    run_exo("init", cwd=repo)
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=repo, capture_output=True, text=True,
                          input="{}", env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert [x for x in proc.stderr.splitlines() if x.startswith("PSYCOPG=")][-1] == "PSYCOPG=False"


# -- LISTEN/NOTIFY -----------------------------------------------------------------------------


def _post_later(url: str, state: str, ready: str) -> None:
    while not Path(ready).exists():
        time.sleep(0.01)
    open_store(Path(state), Path(state), url).post("note", "x", "root", "hi")


def test_a_message_committed_in_another_process_wakes_the_waiter(pg: Any, tmp_path: Path) -> None:
    url = pg.url()
    store = open_store(tmp_path, tmp_path, url)
    store.agents()
    ready = tmp_path / "ready"
    with store.bell.listen(["root"]) as waiter:
        p = mp.get_context("spawn").Process(target=_post_later, args=(url, str(tmp_path), str(ready)))
        p.start()
        ready.touch()
        assert waiter.wait(60) is True  # a long timeout: True proves the NOTIFY woke it, not the clock
        p.join(30)
        assert p.exitcode == 0
        assert waiter.wait(0) is False  # drained
    assert [m.body for m in store.messages(recipient="root")] == ["hi"]


def test_listen_hears_only_its_own_keys_and_repository(pg: Any, tmp_path: Path) -> None:
    url = pg.url()
    one, two = open_store(tmp_path / "one", tmp_path, url), open_store(tmp_path / "two", tmp_path, url)
    with one.bell.listen(["a1"]) as w1, one.bell.listen(["a2"]) as w2, two.bell.listen(["a1"]) as w3:
        one.bell.ring("a1")
        assert w1.wait(30) is True
        assert w2.wait(0) is False and w3.wait(0) is False
        one.post("note", "x", "a2", "hi")
        one.post("note", "x", "a2", "again")  # a spare notification: one wake, the rest drained
        assert w2.wait(30) is True and w2.wait(0) is False


def test_a_write_committed_before_the_check_still_finds_its_row(pg: Any, tmp_path: Path) -> None:
    """LISTEN first, then read, then wait: a row committed in between is read (and its NOTIFY is spare)."""
    store = open_store(tmp_path, tmp_path, pg.url())
    with store.bell.listen(["root"]) as waiter:
        open_store(tmp_path, tmp_path, pg.url()).post("note", "x", "root", "early")
        assert [m.body for m in store.messages(recipient="root", unconsumed=True)] == ["early"]
        assert waiter.wait(30) is True  # the spare notification: harmless, the waiter reads again


def test_the_password_comes_from_libpq_and_a_wrong_one_is_an_environment_error(pg: Any, repo: Path) -> None:
    """A role with a password (scram): PGPASSWORD lets exo in; a wrong one is exit 7; no file holds it."""
    hba = pg.data / "pg_hba.conf"
    if "exo_pw" not in hba.read_text():
        hba.write_text("local all exo_pw scram-sha-256\n" + hba.read_text())
        pg.psql("SELECT pg_reload_conf()")
    pg.psql("DROP DATABASE IF EXISTS pwdb")
    pg.psql("DROP ROLE IF EXISTS exo_pw")
    pg.psql("CREATE ROLE exo_pw LOGIN PASSWORD 'canary-pw-7731'")
    pg.psql("CREATE DATABASE pwdb OWNER exo_pw")
    url = f"postgresql://exo_pw@/pwdb?host={pg.sock}"
    wrong = run_exo("agents", "--json", cwd=repo, env={"EXO_STORE_URL": url, "PGPASSWORD": "not-it"})
    assert wrong.returncode == 7, wrong.stdout + wrong.stderr
    assert "password authentication failed" in json.loads(wrong.stdout)["error"]["message"]
    assert "not-it" not in wrong.stdout + wrong.stderr
    ok = run_exo("init", cwd=repo, env={"EXO_STORE_URL": url, "PGPASSWORD": "canary-pw-7731"})
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert pg.psql("SELECT count(*) FROM exo.repos", "pwdb") == "1"
    for f in (repo / ".git").rglob("*"):
        if f.is_file():
            assert b"canary-pw-7731" not in f.read_bytes(), f
