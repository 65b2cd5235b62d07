"""exo trust: a committed exo.toml runs nothing, and sends nothing anywhere, until the user trusts its values.

One repository for the module (its exo.toml rewritten and committed by each test); every test
has its own HOME and configuration folder (conftest's ``isolate``), so it starts with no pins.
Each hostile value would create a marker file if exo used it: the refusal must leave no marker,
no worktree and no agent, and name the keys and `exo trust`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Exo, git, sandbox_reach, stop_repo_agents, trust, wait_for
from exo_cli.env import Env
from exo_cli.errors import StateError


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("trust") / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("# demo\n")
    (path / "secret.txt").write_text("s3cret\n")
    git(path, "add", "README.md", "secret.txt")
    git(path, "commit", "-q", "-m", "initial")
    yield path
    stop_repo_agents(path, tmux=False)


@pytest.fixture
def repo(shared: Path, tmp_path: Path) -> Iterator[Path]:
    """The shared repository with no exo.toml and no local file; what a test left running is stopped."""
    for f in (shared / "exo.toml", shared / ".exo" / "config.toml"):
        f.unlink(missing_ok=True)
    yield shared
    stop_repo_agents(shared, tmux=False)


def committed(repo: Path, text: str) -> None:
    """``text`` as the repository's committed exo.toml (what a clone brings)."""
    (repo / "exo.toml").write_text(text)
    git(repo, "add", "exo.toml")
    git(repo, "commit", "-q", "-m", "exo.toml", "--allow-empty")


def local(repo: Path, text: str) -> None:
    (repo / ".exo").mkdir(exist_ok=True)
    (repo / ".exo" / "config.toml").write_text(text)


def q(value: object) -> str:
    return json.dumps(value)


def touch(marker: Path) -> list[str]:
    return [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]


def refused(res: object, *keys: str) -> dict:
    """The error of a refused command: StateError (exit 5), naming every key and `exo trust`."""
    assert res.exit_code == 5, (res.stdout, res.stderr)  # type: ignore[attr-defined]
    err = json.loads(res.stdout)["error"]  # type: ignore[attr-defined]
    assert err["name"] == "StateError" and err["data"]["reason"] == "untrusted-config", err
    for key in keys:
        assert key in err["message"] and key in err["data"]["keys"], err
    assert "exo trust" in err["hint"]
    return err


def no_agent_made(repo: Path, name: str) -> None:
    assert not (repo / ".exo" / "worktrees" / name).exists()
    env = Env(cwd=repo)
    assert not env.has_state() or env.store.agent(name) is None
    assert name not in git(repo, "branch", "--list")


def spawn(name: str, *args: str) -> tuple[str, ...]:
    return ("spawn", "--worker", name, "--prompt", "x", "--mux", "headless", "--json", *args)


# --------------------------------------------------------------------------- each key, refused where used


@pytest.mark.parametrize("key, toml, agent", [
    ("agent.command", "[agent]\ncommand = {touch}\n", "custom"),
    ("agent.args", "[agent]\nargs = {{ demo = {touch} }}\n", "demo"),
    ("agent.skip_permissions", "[agent]\nskip_permissions = true\n", "demo"),
    ("worktree.post_create", "[worktree]\npost_create = {touch}\n", "demo"),
    ("worktree.copy", '[worktree]\ncopy = ["secret.txt"]\n', "demo"),
    ("worktree.symlink", '[worktree]\nsymlink = ["secret.txt"]\n', "demo"),
    ("services", "[services.web]\ncommand = {touch_text}\n", "demo"),
])
def test_a_spawn_uses_no_untrusted_value(repo: Path, tmp_path: Path, key: str, toml: str, agent: str) -> None:
    marker = tmp_path / "ran"
    committed(repo, toml.format(touch=q(touch(marker)), touch_text=q(" ".join(touch(marker)))))
    name = "s-" + key.replace(".", "-").replace("_", "-")
    refused(Exo(repo)(*spawn(name, "--agent", agent)), key)
    assert not marker.exists()
    no_agent_made(repo, name)


def test_a_trusted_post_create_runs_and_a_changed_one_is_refused_again(repo: Path, tmp_path: Path) -> None:
    marks = tmp_path / "marks"  # the post-create command runs in the agent's sandbox (the default): it writes here
    marks.mkdir()
    marker = marks / "ran"
    local(repo, sandbox_reach(marks) + '[agent]\ncommand = ["sleep", "600"]\n')  # the user's own file: trusted
    committed(repo, f"# the team's settings\n[worktree]\npost_create = {q(touch(marker))}\n")
    refused(Exo(repo)(*spawn("p1", "--agent", "custom")), "worktree.post_create")
    assert not marker.exists()
    shown = Exo(repo)("trust", "--show", "--json")
    assert shown.exit_code == 0, shown.stderr
    [entry] = shown.json()["entries"]  # type: ignore[index]
    assert entry == {"key": "worktree.post_create", "current": touch(marker), "pinned": None, "state": "new",
                     "what": "a command run in each new worktree"}
    assert not Path(shown.json()["pins_file"]).exists()  # type: ignore[index]  # --show pins nothing
    res = Exo(repo)("trust", "--json")
    assert res.exit_code == 0, res.stderr
    pins = Path(res.json()["pins_file"])  # type: ignore[index]
    assert pins.stat().st_mode & 0o777 == 0o600 and pins.parent.stat().st_mode & 0o777 == 0o700
    assert not str(pins).startswith(str(repo))  # never inside the repository
    res = Exo(repo)(*spawn("p1", "--agent", "custom"))
    assert res.exit_code == 0, res.stdout
    assert marker.exists()  # the very value trusted runs
    # a comment and another key merged later revoke nothing: pins are values, not the file's digest
    committed(repo, (repo / "exo.toml").read_text() + "# reviewed\n[limits]\nmax_agents = 9\n")
    assert Env(cwd=repo).config.untrusted() == []
    # another value is refused until trusted again, and shown as such
    other = touch(marks / "other")
    committed(repo, f"[worktree]\npost_create = {q(other)}\n")
    [entry] = Exo(repo)("trust", "--show", "--json").json()["entries"]  # type: ignore[index]
    assert (entry["state"], entry["pinned"], entry["current"]) == ("differs", touch(marker), other)
    refused(Exo(repo)(*spawn("p2", "--agent", "custom")), "worktree.post_create")
    no_agent_made(repo, "p2")
    assert not (marks / "other").exists()


def test_notify_command_runs_only_once_trusted(repo: Path, tmp_path: Path) -> None:
    from exo_cli.ops.attention import signal
    from exo_cli.records import Agent

    marker = tmp_path / "ran"
    committed(repo, f"[notify]\ncommand = {q(touch(marker))}\n")
    agent = Agent(id="w1", name="w1", role="dev", parent="root", status="asking", backend="demo", mux="headless")
    signal(Env(cwd=repo), "question", agent, "Which port?")
    doctor = Exo(repo)("doctor", "--dry-run", "--json")
    assert doctor.exit_code == 5
    [problem] = [p for p in doctor.json()["problems"] if p["kind"] == "untrusted-config"]  # type: ignore[index]
    assert problem["subject"] == "notify.command" and "exo trust" in problem["action"]
    trust(repo)
    signal(Env(cwd=repo), "question", agent, "Which port?")
    wait_for(marker.exists, what="the trusted notify command")  # it would have run the first time too


@pytest.mark.parametrize("key", ["ssh.command", "hosts"])
def test_no_host_is_reached_through_untrusted_settings(repo: Path, tmp_path: Path, key: str) -> None:
    marker = tmp_path / "ran"
    ssh = tmp_path / "ssh"
    ssh.write_text(f"#!/bin/sh\ntouch {marker}\nexit 255\n")
    ssh.chmod(0o755)
    host = '[hosts.b]\nssh = "b.example"\npath = "/srv/repo"\n'
    if key == "ssh.command":  # the hosts are the user's, the ssh client the repository's
        local(repo, host)
        committed(repo, f"[ssh]\ncommand = {q(str(ssh))}\n")
    else:
        local(repo, f"[ssh]\ncommand = {q(str(ssh))}\n")
        committed(repo, host)
    refused(Exo(repo)("hosts", "--json"), key)
    refused(Exo(repo)(*spawn("h1", "--host", "b", "--agent", "demo")), key)
    assert not marker.exists()
    trust(repo)
    assert Exo(repo)("hosts", "--json").exit_code == 0
    assert marker.exists()  # the trusted value is used: the same call did reach ssh


def test_an_untrusted_store_is_never_opened_nor_replaced_by_sqlite(repo: Path) -> None:
    from exo_cli.adapters.store import has_state, pointed_url

    committed(repo, '[store]\nurl = "postgresql://exo@127.0.0.1:9/elsewhere"\n')
    state = Env(cwd=repo).state_path
    had = has_state(state)
    for args in (("agents", "--json"), ("init", "--json"), ("doctor", "--json")):
        refused(Exo(repo)(*args), "store.url")
    assert pointed_url(state) is None and has_state(state) == had  # no pointer written, no SQLite state made
    # the broker refuses to serve it, with the error as its one line, never a traceback
    from exo_cli.broker.serve import serve

    r, w = os.pipe()
    assert serve(Env(cwd=repo), ready_fd=w) == 5
    with os.fdopen(r) as fh:
        said = fh.read()
    assert "store.url" in said and "Traceback" not in said


def test_the_forge_is_chosen_only_from_trusted_values(repo: Path) -> None:
    from exo_cli.ops.pr import forge_for

    committed(repo, '[forge]\nkind = "github"\nremote = "upstream"\n')
    with pytest.raises(StateError) as info:
        forge_for(Env(cwd=repo))
    assert info.value.data["keys"] == ["forge.kind", "forge.remote"] and info.value.data["key"] == "forge.kind"
    trust(repo)
    assert Env(cwd=repo).config.get("forge.kind") == "github"


# --------------------------------------------------------------------------- who may trust, and what


def test_user_and_local_files_and_defaults_need_no_trust(repo: Path, isolate: Path) -> None:
    committed(repo, '[agent]\nskip_permissions = false\n[forge]\nkind = "auto"\nremote = "origin"\n'
                    '[worktree]\ncopy = []\n[broker]\nidle_exit = 3\n')
    local(repo, '[worktree]\npost_create = ["true"]\n')
    user = Path(os.environ["EXO_CONFIG_DIR"])
    user.mkdir(parents=True, exist_ok=True)
    (user / "config.toml").write_text('[notify]\ncommand = ["true"]\n')
    conf = Env(cwd=repo).config
    assert conf.untrusted() == [] and conf.get("worktree.post_create") == ["true"]
    assert conf.get("notify.command") == ["true"]
    # a repository value hidden by the local file is not used, so it needs no trust either
    committed(repo, '[worktree]\npost_create = ["rm", "-rf", "/"]\n')
    assert Env(cwd=repo).config.untrusted() == []


def test_every_listed_key_and_every_key_of_a_listed_section_needs_trust() -> None:
    from exo_cli.config import SCHEMA
    from exo_cli.trust import needs_trust

    for key in ("agent.command", "agent.args", "agent.skip_permissions", "worktree.post_create", "worktree.copy",
                "worktree.symlink", "services", "notify.command", "ssh.command", "hosts", "store.url",
                "forge.kind", "forge.remote", "merge.gates", "merge.setup", "sandbox.allow_hosts",
                "sandbox.mode", "sandbox.anything_added_later"):
        assert needs_trust(key), key
    for key in ("agent.default", "merge.batch", "mux.default", "limits.max_agents", "broker.idle_exit",
                "notify.desktop", "ssh.persist", "agentx.command", "forgery"):
        assert not needs_trust(key), key
    assert {k for k in SCHEMA if needs_trust(k)} >= {"agent.command", "hosts", "store.url", "forge.kind"}


def test_an_agent_cannot_trust(tmp_path: Path) -> None:
    from conftest import agent_vars
    from exo_cli.records import Agent
    from exo_cli.registry import OPS, load_all

    repo = tmp_path / "own"  # its own repository: an agent recorded under this very process
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    committed(repo, f"[worktree]\npost_create = {q(touch(tmp_path / 'x'))}\n")
    Exo(repo)("init", "--json")
    now = time.time()
    store = Env(cwd=repo).store
    store.insert_agent(Agent(id="w9", name="w9", role="tl", parent="root", status="working", backend="demo",
                             mux="headless", repo=str(repo), created_at=now, updated_at=now, status_at=now))
    res = Exo(repo)("trust", "--json", env=agent_vars(repo, "w9"))
    assert res.exit_code == 5 and "w9" in res.json()["error"]["message"], res.stdout  # type: ignore[index]
    # a process under an agent's recorded process, its agent variables stripped, is that agent
    store.update_agent("w9", location={"pid": os.getpid(), "mux": "headless"})
    res = Exo(repo)("trust", "--json")
    assert res.exit_code == 5 and res.json()["error"]["data"]["caller"] == "w9", res.stdout  # type: ignore[index]
    # ... also when an untrusted [store] url would make exo look for it elsewhere
    committed(repo, '[store]\nurl = "postgresql://exo@127.0.0.1:9/x"\n')
    res = Exo(repo)("trust", "--json")
    assert res.exit_code == 5 and res.json()["error"]["data"].get("caller") == "w9", res.stdout  # type: ignore[index]
    assert not (Path(os.environ["EXO_CONFIG_DIR"]) / "trust").exists()
    load_all()
    assert OPS["trust"].tools == () and OPS["trust"].roles == ("human",)


def test_init_trusts_what_it_writes_never_what_was_there(repo: Path, tmp_path: Path) -> None:
    from exo_cli.ops import init as init_op

    hostile = f"[worktree]\npost_create = {q(touch(tmp_path / 'x'))}\n"
    committed(repo, hostile)
    Exo(repo)("init", "--json")
    assert Env(cwd=repo).config.untrusted() == ["worktree.post_create"]
    # what exo init writes is trusted, even were it to set such a key
    written = init_op.EXO_TOML
    try:
        init_op.EXO_TOML = written + '\n[services.web]\ncommand = "serve"\n'
        res = Exo(repo)("init", "--force", "--json")
    finally:
        init_op.EXO_TOML = written
    assert res.exit_code == 0, res.stdout
    conf = Env(cwd=repo).config
    assert "services" in conf.from_repo() and conf.untrusted() == []


def test_the_broker_reads_the_humans_configuration_folder_never_the_agents(tmp_path: Path) -> None:
    """An agent's relay sends its own variables: neither they nor its HOME choose the trusted user file and pins."""
    from exo_cli.broker.guard import request_environ
    from exo_cli.config_paths import user_config_dir
    from exo_cli.records import Agent

    agent = Agent(id="w1", name="w1", role="dev", parent="root", status="working", backend="demo", mux="headless")
    given = {"XDG_CONFIG_HOME": str(tmp_path / "mine"), "HOME": str(tmp_path), "EXO_CONFIG_DIR": str(tmp_path / "x")}
    out = request_environ(given, agent, state_dir="/s", socket="/s/w1", proof=None, repo_root=tmp_path,
                          config_dir="/home/human/.config/exo")
    assert user_config_dir(out) == Path("/home/human/.config/exo")


def test_deinit_forgets_the_trusted_values(tmp_path: Path) -> None:
    from exo_cli.trust import pins_path

    repo = tmp_path / "own"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    committed(repo, '[forge]\nremote = "upstream"\n')
    assert Exo(repo)("init", "--json").exit_code == 0
    trust(repo)
    pins = pins_path(os.environ, repo)
    assert pins.is_file()
    res = Exo(repo)("deinit", "--json")
    assert res.exit_code == 0, res.stdout
    assert f"{pins}: the values trusted with exo trust" in res.json()["removed"]  # type: ignore[index]
    assert not pins.exists()


def test_a_host_call_records_the_callers_trust_only_for_no_agent_of_this_host(tmp_path: Path) -> None:
    """Pins that come with a host call are recorded only once the caller is known to be no agent here; a
    request naming a key that needs no trust is refused."""
    from exo_cli.ops.hostcall import answer
    from exo_cli.ops.hosts import PROTOCOL
    from exo_cli.records import Agent
    from exo_cli.trust import pins_path

    repo = tmp_path / "own"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    post = touch(tmp_path / "x")
    committed(repo, f"[worktree]\npost_create = {q(post)}\n")
    assert Exo(repo)("init", "--json").exit_code == 0
    environ = {k: v for k, v in os.environ.items() if k != "EXO_STORE_URL"}

    def call(pins: dict) -> dict:
        req = {"v": PROTOCOL, "op": "agents", "args": {}, "env": {}, "trust": pins}
        return answer(json.dumps(req), cwd=str(repo), environ=environ)[0]

    got = call({"limits.max_agents": 1})
    assert got["error"]["name"] == "InvalidInput" and got["error"]["data"]["field"] == "trust", got
    now = time.time()
    Env(cwd=repo).store.insert_agent(Agent(
        id="w9", name="w9", role="dev", parent="root", status="working", backend="demo", mux="headless",
        repo=str(repo), location={"pid": os.getpid(), "mux": "headless"}, created_at=now, updated_at=now,
        status_at=now))
    got = call({"worktree.post_create": post})  # this very process runs under agent w9's recorded process
    assert got["ok"] is False and "w9" in got["error"]["message"], got
    assert not pins_path(environ, repo).exists()
    Env(cwd=repo).store.update_agent("w9", location={})
    got = call({"worktree.post_create": post})  # the human's exo on another host: its trust is recorded here
    assert got["ok"] is True, got
    assert Env(cwd=repo).config.untrusted() == []


def test_a_committed_local_file_is_the_repositorys(repo: Path, tmp_path: Path) -> None:
    """.exo/config.toml is the user's own, unless the repository brings it (git tracks it, or .exo is its link)."""
    marker = tmp_path / "ran"
    local(repo, f"[worktree]\npost_create = {q(touch(marker))}\n")
    assert Env(cwd=repo).config.untrusted() == []  # the user's own local file
    git(repo, "add", "-f", ".exo/config.toml")
    git(repo, "commit", "-q", "-m", "a hostile local file")
    try:
        err = refused(Exo(repo)(*spawn("lc1", "--agent", "demo")), "worktree.post_create")
        assert ".exo/config.toml" in err["message"]
        assert not marker.exists()
        no_agent_made(repo, "lc1")
    finally:
        git(repo, "rm", "-q", "--cached", ".exo/config.toml")
        git(repo, "commit", "-q", "-m", "untrack it")
    # a committed link named .exo brings the repository's own files in as the local file
    other = tmp_path / "linked"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    (other / "cfg").mkdir()
    (other / "cfg" / "config.toml").write_text(f"[worktree]\npost_create = {q(touch(marker))}\n")
    (other / ".exo").symlink_to("cfg")
    git(other, "add", "-f", ".exo", "cfg")
    git(other, "commit", "-q", "-m", "a hostile link")
    assert Env(cwd=other).config.untrusted() == ["worktree.post_create"]
