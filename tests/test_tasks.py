"""exo_cli.ops.tasks: the beads functions spawn, complete and reconstitute build on."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from conftest import git
from exo_cli.adapters.beads import BdSource, Bead, JsonlSource
from exo_cli.env import Env
from exo_cli.errors import EnvironmentError_, InvalidInput, NotFound, StateError
from exo_cli.ops import tasks
from exo_cli.records import Agent

FIX = Path(__file__).parent / "fixtures" / "beads"
SMALL = FIX / "small"
FAKE_BD = Path(__file__).parent / "fake_bd.py"
NO_BD_PATH = f"/usr/bin{os.pathsep}/bin"


def add_beads(repo: Path, src: Path = SMALL) -> Path:
    beads = repo / ".beads"
    beads.mkdir(exist_ok=True)
    for f in src.iterdir():
        if f.name != "README.md":
            shutil.copyfile(f, beads / f.name)
    return beads


def make_env(repo: Path, **extra: str) -> Env:
    environ = {**os.environ, "PATH": NO_BD_PATH, **extra}
    environ.pop("EXO_AGENT", None)
    return Env(cwd=repo, environ=environ)


def agent(name: str, bead: str | None, status: str = "working", **kw) -> Agent:
    now = time.time()
    return Agent(id=name, name=name, role="dev", parent="root", status=status, backend="demo", mux="headless",
                 bead=bead, created_at=now, updated_at=now, status_at=now, **kw)


@pytest.fixture
def fake_bd(tmp_path: Path) -> dict[str, str]:
    """A STAND-IN `bd` (tests/fake_bd.py; real bd cannot be installed here) on a private PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "bd"
    exe.write_text(f"#!{sys.executable}\n" + FAKE_BD.read_text())
    exe.chmod(0o755)
    return {"PATH": f"{bindir}{os.pathsep}{NO_BD_PATH}", "FAKE_BD_LOG": str(tmp_path / "bd.log")}


def test_open_repo_beads_jsonl_bd_and_beads_dir(repo: Path, tmp_path: Path, fake_bd: dict[str, str]) -> None:
    env = make_env(repo)
    with pytest.raises(EnvironmentError_) as ei:
        tasks.open_repo_beads(env)
    assert ei.value.hint and "bd init" in ei.value.hint
    beads = add_beads(repo)
    src = tasks.open_repo_beads(make_env(repo))
    assert isinstance(src, JsonlSource) and src.path == beads / "issues.jsonl" and src.prefix == "ex"
    # from a subfolder, the repository root's tracker
    (repo / "sub").mkdir()
    assert tasks.open_repo_beads(make_env(repo / "sub")).path == beads / "issues.jsonl"  # type: ignore[attr-defined]
    # BEADS_DIR elsewhere wins
    (tmp_path / "elsewhere").mkdir()
    other = add_beads(tmp_path / "elsewhere", FIX / "herdctl")
    src = tasks.open_repo_beads(make_env(repo, BEADS_DIR=str(other)))
    assert isinstance(src, JsonlSource) and src.path == other / "beads.jsonl"
    # bd on the caller's PATH
    src = tasks.open_repo_beads(make_env(repo, **fake_bd, FAKE_BD_JSONL=str(beads / "issues.jsonl")))
    assert isinstance(src, BdSource) and src.bd_path.endswith("/bin/bd")


def test_resolve_bead_task(repo: Path) -> None:
    add_beads(repo)
    env = make_env(repo)
    t = tasks.resolve_bead_task(env, "a1")
    assert (t.id, t.short_id, t.slug, t.title) == ("ex-a1", "a1", "add-a-verbose-flag", "Add a --verbose flag")
    assert isinstance(t.bead, Bead) and t.bead.raw["x_future_field"] == {"kept": True}
    assert tasks.resolve_bead_task(env, "ex-a2").slug == "fix-the-tui-socket-deadlock"
    assert tasks.resolve_bead_task(env, "ep.1").short_id == "ep.1"
    md = t.context("bd-a1/add-a-verbose-flag", "main")
    assert md.startswith("# Task: Add a --verbose flag\n\n**ID:** ex-a1\n")
    assert "**Branch:** bd-a1/add-a-verbose-flag" in md and "**Parent branch:** main" in md
    assert "## Acceptance criteria" in md and "git push -u origin bd-a1/add-a-verbose-flag" in md
    kid = tasks.resolve_bead_task(env, "ep.1")
    assert "- ex-ep: Plugin system (open) [parent-child]" in kid.context("b")
    json.dumps(t.to_dict())
    assert t.to_dict()["bead"]["id"] == "ex-a1"


@pytest.mark.parametrize(("bad", "cls", "code", "message"), [
    ("a/b", InvalidInput, -32002, "Invalid bead ID 'a/b': it contains a path separator"),
    ("..", InvalidInput, -32002, "Invalid bead ID '..': it contains '..'"),
    ("a1;rm", InvalidInput, -32002, None),
    ("zz", NotFound, -32001, "Bead not found: ex-zz"),
    ("b1", StateError, -32004, "Bead is blocked: ex-b1"),
    ("ex-d1", StateError, -32004, "Bead is closed: ex-d1"),
    ("e1", StateError, -32004, None),
])  # fmt: skip
def test_resolve_bead_task_errors(repo: Path, bad: str, cls: type, code: int, message: str | None) -> None:
    add_beads(repo)
    with pytest.raises(cls) as ei:
        tasks.resolve_bead_task(make_env(repo), bad)
    assert ei.value.rpc_code == code
    if message:
        assert ei.value.message == message


def test_resolve_own_claim_is_allowed(repo: Path) -> None:
    add_beads(repo)
    env = make_env(repo)
    assert tasks.resolve_bead_task(env, "e1", actor="someone").id == "ex-e1"


def test_pick_ready_priority_age_and_live_owners(repo: Path) -> None:
    add_beads(repo)
    env = make_env(repo)
    ids = lambda beads: [b.id for b in beads]  # noqa: E731
    assert ids(tasks.pick_ready(env, 3)) == ["ex-a3", "ex-a2", "ex-a1"]
    assert ids(tasks.pick_ready(env, 100)) == ["ex-a3", "ex-a2", "ex-a1", "ex-ep", "ex-ep.1", "ex-c1"]
    assert ids(tasks.pick_ready(env, 2, exclude_ids=["a3"])) == ["ex-a2", "ex-a1"]
    assert ids(tasks.pick_ready(env, 2, exclude_ids=["ex-a3"])) == ["ex-a2", "ex-a1"]
    env.store.insert_agent(agent("w1", "a2"))  # short id recorded
    env.store.insert_agent(agent("w2", "ex-a3", status="idle"))  # full id
    env.store.insert_agent(agent("w3", "ex-a1", status="dead"))  # dead: does not own
    env.store.insert_agent(agent("w4", "ex-ep", status="done"))
    env.store.insert_agent(agent("w5", None))
    env.store.insert_agent(agent("w6", "ex-ep.1", location={"mux": "headless", "pid": 2**22 + 12345}))  # its process is gone
    fresh = make_env(repo)
    assert ids(tasks.pick_ready(fresh, 3)) == ["ex-a1", "ex-ep", "ex-ep.1"]
    from exo_cli.ops import agentctl

    agentctl.refresh(fresh, fresh.store.agents())  # recording it dead is a refresh's (exo agents, a wait)
    assert fresh.store.agent("w6").status == "dead"  # type: ignore[union-attr]
    assert tasks.live_owners(fresh) == {"a2": "w1", "ex-a3": "w2"}
    for bad in (0, -1, True, "3"):
        with pytest.raises(InvalidInput):
            tasks.pick_ready(fresh, bad)  # type: ignore[arg-type]


def test_pick_ready_on_real_fixture(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q")
    beads = repo / ".beads"
    beads.mkdir()
    shutil.copyfile(FIX / "steveyegge-beads/issues.2026-01-26.jsonl", beads / "issues.jsonl")
    shutil.copyfile(FIX / "steveyegge-beads/config.2026-01-26.yaml", beads / "config.yaml")
    env = make_env(repo)
    src = tasks.open_repo_beads(env)
    ready = src.ready()
    got = tasks.pick_ready(env, 3)
    assert [b.id for b in got] == [b.id for b in ready[:3]]
    assert len(tasks.pick_ready(env, 1000)) == 101  # SOURCES.md: 101 ready


def test_claim_and_close_jsonl(repo: Path) -> None:
    beads = add_beads(repo)
    env = make_env(repo)
    before = (beads / "issues.jsonl").read_bytes().splitlines(keepends=True)
    b = tasks.claim(env, "a1", "w1")
    assert (b.id, b.status, b.assignee) == ("ex-a1", "in_progress", "w1")
    assert tasks.claim(env, "ex-a1", "w1").status == "in_progress"  # idempotent
    with pytest.raises(StateError):
        tasks.claim(env, "a1", "w2")
    with pytest.raises(NotFound):
        tasks.claim(env, "nope", "w1")
    c = tasks.close(env, "a1", reason="Merged in #3", session="s-1")
    assert (c.status, c.close_reason, c.raw["closed_by_session"]) == ("closed", "Merged in #3", "s-1")
    assert c.raw["x_future_field"] == {"kept": True}
    after = (beads / "issues.jsonl").read_bytes().splitlines(keepends=True)
    assert [x for i, x in enumerate(after) if i != 0] == [x for i, x in enumerate(before) if i != 0]
    with pytest.raises(StateError, match="open children"):
        tasks.close(env, "ep", reason="x")  # an epic with an open child
    assert tasks.close(env, "ep", force=True).status == "closed"


def test_bd_path(repo: Path, fake_bd: dict[str, str]) -> None:
    beads = add_beads(repo)
    env = make_env(repo, **fake_bd, FAKE_BD_JSONL=str(beads / "issues.jsonl"))
    t = tasks.resolve_bead_task(env, "ep.1")
    assert t.id == "ex-ep.1" and t.dependencies["ex-ep"].title == "Plugin system"
    with pytest.raises(StateError, match="^Bead is blocked: ex-b1$"):
        tasks.resolve_bead_task(env, "b1")
    assert [b.id for b in tasks.pick_ready(env, 3)] == ["ex-a3", "ex-a2", "ex-a1"]
    b = tasks.claim(env, "a3", "w9")
    assert (b.status, b.assignee) == ("in_progress", "w9")
    assert tasks.close(env, "a3", reason="done", session="s").status == "closed"
    log = [json.loads(x) for x in Path(fake_bd["FAKE_BD_LOG"]).read_text().splitlines()]
    argvs = [x["argv"] for x in log]
    assert ["update", "ex-a3", "--claim", "--json"] in argvs
    assert ["close", "ex-a3", "--reason", "done", "--session", "s", "--json"] in argvs
    assert any(x["actor"] == "w9" for x in log if x["argv"][0] == "update")


def test_context_file_and_snapshots(repo: Path) -> None:
    add_beads(repo)
    env = make_env(repo)
    wt = repo / "wt"
    wt.mkdir()  # a checkout that exists (exo never makes one by writing its context into it)
    assert tasks.write_context(env, wt, "# hi\n") is True
    assert tasks.context_path(wt).read_text() == "# hi\n"
    assert tasks.write_context(env, wt, "# hi\n") is False
    assert "/.exo/" in (repo / ".git/info/exclude").read_text().splitlines()
    assert tasks.load_bead_snapshot(env, "w1") is None
    bead = tasks.open_repo_beads(env).get("ex-a1")
    tasks.save_bead_snapshot(env, "w1", bead)
    again = tasks.load_bead_snapshot(env, "w1")
    assert again == bead and again.raw == bead.raw
