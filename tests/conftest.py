"""Shared fixtures: isolation from the developer's machine, real git repositories, an exo runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import leftovers
import pytest
from click.testing import CliRunner
from hosts_harness import sshd, sshd_session, two_hosts  # noqa: F401 - the two-host fixtures (tests/hosts_harness.py)
from leftovers import (  # noqa: F401 - the run's hygiene (tests/leftovers.py): its hooks and fixture are this conftest's
    pytest_sessionfinish,
    pytest_terminal_summary,
    pytest_unconfigure,
    run_folders,
)

ROOT = Path(__file__).resolve().parent.parent
EXO = [sys.executable, "-m", "exo_cli"]


@pytest.fixture(autouse=True)
def isolate(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Give every test its own HOME, config dir and git identity; no colour, fixed width."""
    for var in leftovers.scrub(dict(os.environ)):  # what an earlier test may have set without monkeypatch
        monkeypatch.delenv(var)
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXO_CONFIG_DIR", str(home / ".config" / "exo"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Exo Test")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "exo@example.invalid")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Exo Test")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "exo@example.invalid")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    (home / ".gitconfig").write_text("[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n")
    if os.environ.get(SANDBOX_VAR):  # the run asks for another [sandbox] mode (EXO_* is scrubbed: this knob is not)
        monkeypatch.setenv("EXO_SANDBOX", os.environ[SANDBOX_VAR])
    return home


# EXO_TEST_SANDBOX=off (or on) runs the suite with that [sandbox] mode instead of the default (auto)
SANDBOX_VAR = "EXO_TEST_SANDBOX"


def _outside_git(path: Path) -> bool:
    """Whether no git repository holds ``path`` (tests of "outside a repository" need their folders there)."""
    probe = path
    while not probe.exists():
        probe = probe.parent
    return subprocess.run(["git", "-C", str(probe), "rev-parse", "--git-dir"], capture_output=True).returncode != 0


def _sandbox_basetemp() -> Path:
    """A base folder of this run's own where a sandbox sees it (a sandbox has /tmp and /var/tmp of its own).

    Sandboxed agents see it read-only, so the tests' fake CLIs and scripts are where they look
    (the repository, exo's state and the checkouts stay hidden: they are deeper mounts). It is
    outside every git repository (not in the checkout: tests of what exo does outside a repository
    make their folders there); each run has its own (two runs at once must not wipe each other's),
    and the folders of runs whose process is gone are removed.
    """
    candidates = [Path.home() / ".cache" / "exo-tests", ROOT.parent / f".{ROOT.name}-tests"]
    top = next((c for c in candidates if _outside_git(c) and not str(c.resolve()).startswith(("/tmp/", "/var/tmp/"))),
               None)
    if top is None:
        raise pytest.UsageError(f"no folder for the tests outside a git repository and /tmp: tried {candidates}")
    top.mkdir(parents=True, exist_ok=True)
    for old in top.glob("run-*"):
        pid = old.name.removeprefix("run-")
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            subprocess.run(["rm", "-rf", "--one-file-system", str(old)], check=False)
    return top / f"run-{os.getpid()}"


# -- the same tests against both stores ------------------------------------------------------
# The modules below run every test twice: on SQLite (the default) and on PostgreSQL, through
# EXO_STORE_URL pointing at a private cluster (each test's repository has its own state folder,
# hence its own rows in the shared database). Tests about SQLite itself carry `sqlite_only`.
BOTH_STORES = {"test_store", "test_messages", "test_messages_helpers", "test_spawn", "test_complete_matrix",
               "test_mcp_arguments", "test_mcp_roles", "test_mcp_wire", "test_mcp_cancel", "test_mcp_ready",
               "test_mcp_stdio", "test_load", "test_cost", "test_budget_team"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sqlite_only: a test about the SQLite store itself (not run on PostgreSQL)")
    if (os.environ.get(SANDBOX_VAR) or "auto") != "off" and config.option.basetemp is None \
            and not hasattr(config, "workerinput"):
        # a sandbox has a /tmp of its own: the tests' folders (fake CLIs, scripts, result files) go where it
        # sees them (read-only, but for what exo makes writable; the repository and exo's state stay hidden)
        config.option.basetemp = str(_sandbox_basetemp())
    leftovers.pytest_configure(config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if (metafunc.module.__name__.rsplit(".", 1)[-1] in BOTH_STORES and "store_kind" in metafunc.fixturenames
            and metafunc.definition.get_closest_marker("sqlite_only") is None):
        metafunc.parametrize("store_kind", ["sqlite", "postgres"], indirect=True)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[object]:
    """A private PostgreSQL cluster for the whole run (skipped only when PostgreSQL is not installed)."""
    from pg_cluster import Cluster, pg_bin

    bindir = pg_bin()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed (initdb not found); .ci/run installs it")
        pytest.skip("PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql/*/bin)")
    cluster = Cluster(bindir).start()
    yield cluster
    cluster.stop()


def state_text(store: object) -> str:
    """Every value the store holds for its repository, as one text (to look for what must not be there)."""
    from exo_cli.adapters.store.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        return store.path.read_bytes().decode("utf-8", "replace") if store.path.exists() else ""
    rows = store.query(  # type: ignore[attr-defined]
        "SELECT t::text FROM exo.agents t WHERE repo = %(r)s UNION ALL SELECT t::text FROM exo.messages t"
        " WHERE repo = %(r)s UNION ALL SELECT t::text FROM exo.events t WHERE repo = %(r)s UNION ALL"
        " SELECT t::text FROM exo.prs t WHERE repo = %(r)s UNION ALL SELECT t::text FROM exo.kv t WHERE repo = %(r)s",
        {"r": store.repo})  # type: ignore[attr-defined]
    return "\n".join(r["t"] for r in rows)


def kv_keys(store: object, prefix: str) -> list[str]:
    """The kv keys starting with ``prefix``, on either store."""
    from exo_cli.adapters.store.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        return [r["key"] for r in store.query("SELECT key FROM kv WHERE substr(key, 1, ?) = ?", (len(prefix), prefix))]
    return [r["key"] for r in store.query(  # type: ignore[attr-defined]
        "SELECT key FROM exo.kv WHERE repo = %s AND left(key, %s) = %s", (store.repo, len(prefix), prefix))]  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def brokers_stopped(tmp_path: Path) -> Iterator[None]:
    """Stop the team brokers a test started (its repositories under ``tmp_path``, found by their log).

    A broker leaves by itself a few seconds after its last agent, but a test's end may come first,
    and the run's PostgreSQL cluster may be gone by then (torn down at the end of the run).
    """
    yield
    base = tmp_path
    logs = [*base.glob(".git/exo/broker.log"), *base.glob("*/.git/exo/broker.log"),
            *base.glob("*/*/.git/exo/broker.log")]
    if not logs:
        return
    from exo_cli import __version__
    from exo_cli.adapters import broker
    from exo_cli.adapters.files import runtime_dir_for

    for log in logs:
        try:
            broker.stop(broker.Paths(runtime_dir_for(str(log.parent.resolve()), create=False)), __version__, timeout=30)
        except Exception:  # noqa: BLE001 - a test that broke its state on purpose: the run's sweep names it
            pass


@pytest.fixture(autouse=True)
def store_kind(request: pytest.FixtureRequest, isolate: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which store this test runs on; on PostgreSQL, EXO_STORE_URL names the private cluster."""
    kind = getattr(request, "param", "sqlite")
    if kind == "postgres":
        monkeypatch.setenv("EXO_STORE_URL", request.getfixturevalue("pg_cluster").url())
    return str(kind)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A real git repository on branch main with one commit."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("# demo\n")
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "initial")
    return path


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> object:
        return json.loads(self.stdout)


class Exo:
    """Runs exo in-process through Click's CliRunner (the main() error handling included)."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def __call__(self, *args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
        runner = CliRunner()
        old = os.getcwd()
        os.chdir(self.cwd)
        try:
            res = _invoke_main(runner, list(args), input, env)
        finally:
            os.chdir(old)
        return res


def _invoke_main(runner: CliRunner, args: list[str], input: str | None, env: dict[str, str] | None) -> Result:
    """Call exo_cli.main.main(args) under the runner's stream isolation, capturing SystemExit."""
    from exo_cli.main import main

    with runner.isolation(input=input, env=env) as (out, err, _):
        code = 0
        try:
            main(args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        sys.stdout.flush()
        sys.stderr.flush()
        stdout = out.getvalue().decode()
        stderr = err.getvalue().decode() if err is not None else ""
    return Result(code, stdout, stderr)


@pytest.fixture
def exo(repo: Path) -> Exo:
    return Exo(repo)


def run_exo(*args: str, cwd: Path, env: dict[str, str] | None = None, input: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run exo as a real subprocess (``python -m exo_cli``)."""
    full = dict(os.environ)
    if env:
        full.update(env)
    full["PYTHONPATH"] = str(ROOT) + os.pathsep + full.get("PYTHONPATH", "")
    return subprocess.run([*EXO, *args], cwd=cwd, env=full, input=input, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def tmux_socket(tmp_path: Path) -> Iterator[str]:
    """A private tmux socket name, killed after the test."""
    import uuid

    name = f"exo-test-{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True)


def stop_repo_agents(repo: Path, *, tmux: bool = True) -> None:
    """Leave nothing running for ``repo``: its private tmux server, every headless agent group and its broker."""
    from exo_cli import __version__
    from exo_cli.adapters import broker
    from exo_cli.adapters.proc import kill_group
    from exo_cli.env import Env
    from exo_cli.ops.broker import paths

    env = Env(cwd=repo)
    if tmux:
        subprocess.run(["tmux", "-L", f"exo-{env.repo_id}", "kill-server"], capture_output=True)
    try:
        agents = env.store.agents() if env.has_state() else []
    except Exception:  # noqa: BLE001 - a broken state in a test of just that
        agents = []
    for a in agents:
        pgid = a.location.get("pgid")
        if a.location.get("mux") == "headless" and pgid:
            try:
                kill_group(pgid, grace=0.5, leader_start_time=a.location.get("start_time"))
            except Exception:  # noqa: BLE001 - already gone
                pass
    if agents:  # a sandbox killed as it started (its pane closed) sleeps on as its pid namespace's init
        from exo_cli.adapters.sandboxprocs import stop_marked

        stop_marked({"EXO_STATE_DIR": str(env.state_dir)}, grace=0.5)
    try:  # last: an agent still running could start it again
        broker.stop(paths(env), __version__, timeout=30)
    except Exception:  # noqa: BLE001 - no state, no repository: no broker either
        pass


_PROOFS: dict[tuple[str, str], str] = {}
_PROOFS_LOCK = threading.Lock()  # tests make agents' environments from several threads


def agent_vars(repo: Path, agent_id: str, **extra: str) -> dict[str, str]:
    """The identity an agent's own environment carries: ``EXO_AGENT`` and its proof.

    As spawn does, a proof is made and its digest recorded in the agent's spec; the same
    proof is given again while the record keeps its digest. For an agent exo did not record,
    only ``EXO_AGENT`` (a claim exo refuses).
    """
    from exo_cli.env import PROOF_FIELD, Env, new_proof, proof_digest

    with _PROOFS_LOCK:
        env = Env(cwd=repo)
        try:
            record = env.store.agent(agent_id) if env.has_state() else None
        except Exception:  # noqa: BLE001 - a broken state in a test of just that: no record to prove
            record = None
        if record is None:
            return {"EXO_AGENT": agent_id, **extra}
        key = (str(env.state_path.resolve()), agent_id)
        proof = _PROOFS.get(key)
        if proof is None or record.spec.get(PROOF_FIELD) != proof_digest(proof):
            proof, digest = new_proof()
            env.store.update_agent(agent_id, spec={**record.spec, PROOF_FIELD: digest})
            _PROOFS[key] = proof
    return {"EXO_AGENT": agent_id, "EXO_AGENT_PROOF": proof, **extra}


def agent_process_environ(pid: int) -> dict[str, str]:
    """The environment of the agent's own process: the recorded process, or (headless: the recorded
    process is exo's runner, which holds the agent's environment in memory only) its first
    descendant that carries ``EXO_AGENT``. Waits for the runner to start the agent."""

    def environ_of(p: int) -> dict[str, str]:
        try:
            raw = Path(f"/proc/{p}/environ").read_bytes()
        except OSError:
            return {}
        return dict(x.decode(errors="replace").split("=", 1) for x in raw.split(b"\0") if b"=" in x)

    def children(p: int) -> list[int]:
        try:
            return [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            return []

    def search() -> dict[str, str] | None:
        todo = [pid]
        while todo:
            p = todo.pop(0)
            env = environ_of(p)
            if "EXO_AGENT" in env:
                return env
            todo.extend(children(p))
        return None

    return wait_for(search, what=f"an agent process under pid {pid}")  # type: ignore[no-any-return]


def live_agent_environ(repo: Path, agent_id: str) -> dict[str, str]:
    """The whole environment of the running agent's own process (from /proc)."""
    from exo_cli.env import Env

    record = Env(cwd=repo).store.agent(agent_id)
    assert record is not None and record.location.get("pid"), f"{agent_id} has no recorded process"
    return agent_process_environ(int(record.location["pid"]))


def live_agent_vars(repo: Path, agent_id: str) -> dict[str, str]:
    """``EXO_AGENT`` and its proof as the running agent's own process has them (from /proc, as only
    the same Unix user can read them): the identity spawn really gave it. Not its socket: a test
    that passes these to an exo of its own acts for the agent on the direct path (``EXO_SOCKET``
    would send the call through the agent's socket, where the test's process proves itself by the
    proof all the same)."""
    environ = live_agent_environ(repo, agent_id)
    return {k: environ[k] for k in ("EXO_AGENT", "EXO_AGENT_PROOF")}


def wait_for(pred, timeout: float = 60.0, what: str = "condition"):  # type: ignore[no-untyped-def]
    """Poll ``pred`` until it returns something truthy (and return it), or fail after ``timeout``.

    The deadline is generous on purpose: it only costs time when the test fails anyway, and a
    loaded 2-core machine can take many seconds to start a process.
    """
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.03)
    raise AssertionError(f"timed out waiting for {what}")


def trust(repo: Path, environ: dict[str, str] | None = None) -> None:
    """Trust what ``repo``'s exo.toml sets now, as its user does with `exo trust` (a test configuring its own
    repository); ``environ``: the user's environment when it is not this process's (its configuration folder)."""
    from exo_cli.env import HUMAN, Env
    from exo_cli.registry import invoke

    # as the human, without looking the caller up: that opens the store, which a test may not want opened yet
    invoke("trust", Env(cwd=repo, environ=environ, caller=HUMAN), show=False)


def write_trusted(repo: Path, text: str, environ: dict[str, str] | None = None) -> None:
    """Write ``repo``'s exo.toml and trust it (the user's own configuration, as `exo trust` would pin it)."""
    (repo / "exo.toml").write_text(text)
    trust(repo, environ)


def sandbox_works() -> bool:
    """Whether bubblewrap works here, as `[sandbox] mode = "auto"` (the default) finds it: agents run sandboxed."""
    from exo_cli.adapters.sandbox import probe

    return (os.environ.get(SANDBOX_VAR) or "auto") != "off" and probe(path=os.environ.get("PATH", ""))[0]


def sandbox_reach(*folders: Path, env: list[str] | None = None) -> str:
    """A ``[sandbox]`` table for exo.toml: sandboxed agents may write ``folders`` and get the variables ``env``.

    How the tests' fake CLIs, which record what they saw into a folder of the test, work sandboxed:
    the way a user gives an agent a folder and a variable (everything else stays hidden or dropped).
    """
    return f"[sandbox]\npaths = {json.dumps([str(f) for f in folders])}\nenv = {json.dumps(env or [])}\n"


@pytest.fixture
def sleepers(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The test repository whose custom agents just sleep; every agent (tmux or headless) is stopped afterwards."""
    write_trusted(repo, '[agent]\ncommand = ["sleep", "600"]\n')
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    yield repo
    stop_repo_agents(repo)
