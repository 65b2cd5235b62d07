"""`exo beads ready|show|list` and `exo reconstitute` on real repositories (and linked worktrees)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import Exo, agent_vars, git, write_trusted
from exo_cli.env import Env
from exo_cli.records import Agent

FIX = Path(__file__).parent / "fixtures" / "beads"
FAKE_BD = Path(__file__).parent / "fake_bd.py"

# name -> (fixture files, the JSONL's name in .beads/, the agent's bead (short id))
SETS = {
    "small": ({"issues.jsonl": FIX / "small/issues.jsonl", "config.yaml": FIX / "small/config.yaml"},
              "issues.jsonl", "a1"),
    "herdctl": ({"beads.jsonl": FIX / "herdctl/beads.jsonl", "config.yaml": FIX / "herdctl/config.yaml",
                 "metadata.json": FIX / "herdctl/metadata.json"}, "beads.jsonl", "vxo"),
}  # fmt: skip


def add_beads(repo: Path, name: str = "small", commit: bool = True) -> Path:
    files, jsonl, _ = SETS[name]
    (repo / ".beads").mkdir(exist_ok=True)
    for dest, src in files.items():
        shutil.copyfile(src, repo / ".beads" / dest)
    if commit:
        git(repo, "add", ".beads")
        git(repo, "commit", "-q", "-m", "beads")
    return repo / ".beads" / jsonl


def edit_line(path: Path, bead_id: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Change one bead's line in a JSONL file, leaving every other line byte-identical."""
    lines = path.read_bytes().splitlines(keepends=True)
    for i, line in enumerate(lines):
        obj = json.loads(line)
        if obj["id"] == bead_id:
            change(obj)
            lines[i] = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
    path.write_bytes(b"".join(lines))


def _call(cwd: Path, tool: str, args: dict[str, object], role: str = "tl") -> Any:
    from mcp import Client

    from exo_cli.mcp_server import build_server

    server = build_server(Env(cwd=cwd), role)

    async def go() -> Any:
        async with Client(server) as c:
            r = await c.call_tool(tool, args)
            return r

    return asyncio.run(go())


# --- exo beads ---------------------------------------------------------------------------------


def test_beads_ready_list_show_json(repo: Path, exo: Exo) -> None:
    add_beads(repo)
    r = exo("beads", "ready", "--json")
    assert r.exit_code == 0, r.stderr
    data = r.json()
    assert [b["id"] for b in data["beads"]] == ["ex-a3", "ex-a2", "ex-a1", "ex-ep", "ex-ep.1", "ex-c1"]
    assert data["count"] == data["total"] == 6 and data["source"] == "jsonl" and data["owned"] == {}
    assert data["beads"][0]["status"] == "open" and "raw" not in data["beads"][0]
    r = exo("beads", "ready", "--limit", "2", "--json")
    assert [b["id"] for b in r.json()["beads"]] == ["ex-a3", "ex-a2"] and r.json()["total"] == 6
    assert exo("beads", "ready", "--limit", "-1", "--json").exit_code == 2  # out of its range: a usage error, as over MCP (-32602)

    listed = exo("beads", "list", "--json").json()
    ids = [b["id"] for b in listed["beads"]]
    assert "ex-d1" not in ids and "ex-t1" not in ids and "ex-b1" in ids and "ex-e1" in ids
    assert listed["by_status"] == {"open": 7, "closed": 1, "in_progress": 1}
    every = exo("beads", "list", "--all", "--json").json()
    assert every["count"] == 9 and "ex-t1" not in [b["id"] for b in every["beads"]]
    assert [b["id"] for b in exo("beads", "list", "--status", "closed", "--json").json()["beads"]] == ["ex-d1"]
    assert exo("beads", "list", "--status", "a b", "--json").exit_code == 4

    shown = exo("beads", "show", "b1", "--json").json()
    assert shown["bead"]["id"] == "ex-b1" and shown["short_id"] == "b1"
    assert shown["ready"] is False and shown["blocked_by"] == ["ex-a1"]
    assert shown["dependencies"] == [
        {"id": "ex-a1", "type": "blocks", "title": "Add a --verbose flag", "status": "open", "found": True}
    ]
    ok = exo("beads", "show", "ex-c1", "--json").json()
    assert ok["ready"] is True and ok["why_not_ready"] is None
    assert ok["bead"]["comments"][0]["text"] == "Low priority."


def test_beads_errors(repo: Path, exo: Exo) -> None:
    r = exo("beads", "ready", "--json")
    assert r.exit_code == 7 and r.json()["error"]["code"] == -32005  # no tracker
    add_beads(repo)
    r = exo("beads", "show", "zz", "--json")
    assert r.exit_code == 3 and r.json()["error"]["message"] == "Bead not found: ex-zz"
    r = exo("beads", "show", "../x")
    assert r.exit_code == 4 and "Invalid bead ID" in r.stderr


def test_beads_human_views(repo: Path, exo: Exo) -> None:
    add_beads(repo)
    env = Env(cwd=repo)
    now = time.time()
    env.store.insert_agent(Agent(id="w1", name="w1", role="dev", parent="root", status="working",
                                 backend="demo", mux="headless", bead="ex-a2", created_at=now,
                                 updated_at=now, status_at=now, location={"mux": "headless", "pid": os.getpid()}))
    r = exo("beads", "ready")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["ID", "PRI", "STATUS", "TYPE", "TITLE"]
    assert lines[1].split()[:4] == ["ex-a3", "P0", "open", "bug"]
    assert "[w1]" in lines[2] and "6 bead(s)" in lines[-1]
    r = exo("beads", "show", "ex-b1")
    assert "ex-b1: Document the verbose flag" in r.stdout and "blocked by  ex-a1" in r.stdout
    assert "ex-a1 [blocks]: Add a --verbose flag (open)" in r.stdout
    assert exo("beads", "list", "--status", "nothing").stdout.startswith("No beads.")


def test_beads_via_bd_stand_in(repo: Path, tmp_path: Path) -> None:
    jsonl = add_beads(repo)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "bd").write_text(f"#!{sys.executable}\n" + FAKE_BD.read_text())
    (bindir / "bd").chmod(0o755)
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "FAKE_BD_JSONL": str(jsonl)}
    r = Exo(repo)("beads", "ready", "--json", env=env)
    assert r.exit_code == 0, r.stderr
    assert r.json()["source"] == "bd" and [b["id"] for b in r.json()["beads"]][:3] == ["ex-a3", "ex-a2", "ex-a1"]
    shown = Exo(repo)("beads", "show", "ep.1", "--json", env=env).json()
    assert shown["source"] == "bd" and shown["dependencies"][0]["title"] == "Plugin system"


def test_mcp_tools_equal_cli_json(repo: Path, exo: Exo) -> None:
    add_beads(repo)
    for tool, args, cli in [
        ("beads_ready", {"limit": 2}, ["beads", "ready", "--limit", "2", "--json"]),
        ("beads_list", {"show_all": True}, ["beads", "list", "--all", "--json"]),
        ("beads_show", {"bead_id": "b1"}, ["beads", "show", "b1", "--json"]),
        ("exo_reconstitute", {}, ["reconstitute", "--json"]),
    ]:
        r = _call(repo, tool, args)
        assert not r.is_error, r.content
        assert r.structured_content == exo(*cli).json(), tool
    # dev agents see the read-only tools too
    from mcp import Client

    from exo_cli.mcp_server import build_server

    async def names() -> set[str]:
        async with Client(build_server(Env(cwd=repo), "dev")) as c:
            return {t.name for t in (await c.list_tools()).tools}

    assert {"beads_ready", "beads_show", "beads_list", "exo_reconstitute"} <= asyncio.run(names())
    r = _call(repo, "beads_show", {"bead_id": "zz"})
    assert r.is_error and "Bead not found: ex-zz" in r.content[0].text


# --- exo reconstitute ----------------------------------------------------------------------------


def make_agent_worktree(repo: Path, tmp_path: Path, bead: str) -> Path:
    """A linked worktree on its own branch, recorded as agent w1 working on ``bead``."""
    wt = tmp_path / "wt-w1"
    branch = f"bd-{bead}/task"
    git(repo, "worktree", "add", "-q", "-b", branch, str(wt), "main")
    now = time.time()
    Env(cwd=repo).store.insert_agent(Agent(
        id="w1", name="w1", role="dev", parent="root", status="working", backend="demo", mux="headless",
        bead=bead, worktree=str(wt), branch=branch, base_branch="main", repo=str(repo),
        created_at=now, updated_at=now, status_at=now, spec={"worktree_created": True},
    ))  # fmt: skip
    return wt


@pytest.mark.parametrize("name", list(SETS))
def test_reconstitute_brings_main_into_worktree(repo: Path, tmp_path: Path, name: str) -> None:
    jsonl = add_beads(repo, name)
    files, jsonl_name, short = SETS[name]
    wt = make_agent_worktree(repo, tmp_path, short)
    as_agent = agent_vars(repo, "w1")
    run = Exo(wt)
    (wt / "notes.txt").write_text("mine\n")  # unrelated files: never touched
    (wt / "README.md").write_text("# edited in the worktree\n")

    first = run("reconstitute", "--json", env=as_agent)
    assert first.exit_code == 0, first.stdout + first.stderr
    d = first.json()
    full = d["bead"]
    assert full.endswith("-" + short) and d["agent"] == "w1" and d["source"] == "jsonl"
    assert d["files_updated"] == [] and d["main_branch"] == "main" and d["worktree"] == str(wt)
    assert d["changes"]["new"] is True and d["context_updated"] is True
    ctx = wt / ".exo/context.md"
    assert d["context_file"] == str(ctx) and ctx.read_text().startswith("# Task: ")
    assert f"**Branch:** bd-{short}/task" in ctx.read_text() and "**Parent branch:** main" in ctx.read_text()

    # On main: the bead is claimed, gains a dependency and a comment; committed.
    def change(obj: dict[str, Any]) -> None:
        obj["status"] = "in_progress"
        obj["assignee"] = "w1"
        obj.setdefault("dependencies", []).append(
            {"issue_id": obj["id"], "depends_on_id": "dep-new", "type": "related", "created_at": "2026-02-01T00:00:00Z"})
        obj.setdefault("comments", []).append(
            {"id": 99, "issue_id": obj["id"], "author": "tl", "text": "Please also cover -vv.",
             "created_at": "2026-02-01T00:00:00Z"})  # fmt: skip

    edit_line(jsonl, full, change)
    git(repo, "commit", "-q", "-am", "claim + comment")
    main_bytes = jsonl.read_bytes()
    before_wt = (wt / ".beads" / jsonl_name).read_bytes()
    assert before_wt != main_bytes

    second = run("reconstitute", "--json", env=as_agent)
    assert second.exit_code == 0, second.stdout + second.stderr
    d = second.json()
    assert d["files_updated"] == [str(wt / ".beads" / jsonl_name)]
    assert (wt / ".beads" / jsonl_name).read_bytes() == main_bytes
    c = d["changes"]
    assert c["changed"] and not c["new"]
    assert c["status"] == {"from": "open", "to": "in_progress"}
    assert c["dependencies_added"] == [{"depends_on_id": "dep-new", "type": "related", "metadata": None}]
    assert [x["text"] for x in c["comments_added"]] == ["Please also cover -vv."]
    assert c["fields_changed"] == ["assignee"]
    text = ctx.read_text()
    assert "**Status:** in_progress" in text and "- dep-new: (not found) [related]" in text
    # Nothing else in the worktree changed; the context file stays out of git.
    assert (wt / "notes.txt").read_text() == "mine\n"
    assert (wt / "README.md").read_text() == "# edited in the worktree\n"
    status = sorted(line.split() for line in git(wt, "status", "--porcelain").splitlines())
    assert status == sorted([["M", "README.md"], ["M", f".beads/{jsonl_name}"], ["??", "notes.txt"]])
    for other in files:
        if other != jsonl_name:
            assert (wt / ".beads" / other).read_bytes() == files[other].read_bytes()

    third = run("reconstitute", "--json", env=as_agent)
    d = third.json()
    assert third.exit_code == 0 and d["files_updated"] == [] and d["changes"]["changed"] is False
    assert d["context_updated"] is False

    human = run("reconstitute", env=as_agent)
    assert human.exit_code == 0 and "No changes to" in human.stdout


def test_reconstitute_human_report_and_local_edits(repo: Path, tmp_path: Path) -> None:
    jsonl = add_beads(repo)
    wt = make_agent_worktree(repo, tmp_path, "a1")
    as_agent = agent_vars(repo, "w1")
    run = Exo(wt)
    assert run("reconstitute", env=as_agent).exit_code == 0
    edit_line(jsonl, "ex-a1", lambda o: o.update(status="in_progress"))
    git(repo, "commit", "-q", "-am", "claim")
    r = run("reconstitute", env=as_agent)
    assert r.exit_code == 0, r.stderr
    assert "Updated " in r.stdout and "ex-a1: status open -> in_progress" in r.stdout
    # The agent edits its copy by hand: reconstitute refuses to clobber it, --force overwrites.
    wt_file = wt / ".beads/issues.jsonl"
    wt_file.write_bytes(wt_file.read_bytes() + b'{"id":"ex-zz","title":"local"}\n')
    edit_line(jsonl, "ex-a1", lambda o: o.update(priority=0))
    git(repo, "commit", "-q", "-am", "p0")
    r = run("reconstitute", "--json", env=as_agent)
    assert r.exit_code == 5 and "local changes" in r.json()["error"]["message"]
    assert b"ex-zz" in wt_file.read_bytes()
    r = run("reconstitute", "--force", "--json", env=as_agent)
    assert r.exit_code == 0 and wt_file.read_bytes() == jsonl.read_bytes()
    assert r.json()["changes"]["fields_changed"] == ["priority"]


def test_reconstitute_config_base_and_root(repo: Path, tmp_path: Path) -> None:
    jsonl = add_beads(repo)
    git(repo, "branch", "trunk")
    wt = make_agent_worktree(repo, tmp_path, "a1")
    edit_line(jsonl, "ex-a1", lambda o: o.update(title="Changed on main only"))
    git(repo, "commit", "-q", "-am", "main only")
    # worktree.base = trunk: the file comes from trunk (unchanged there), the bead from the tracker
    r = Exo(wt)("reconstitute", "--json", env={**agent_vars(repo, "w1"), "EXO_BASE_BRANCH": "trunk"})
    assert r.exit_code == 0, r.stdout
    assert r.json()["main_branch"] == "trunk" and r.json()["files_updated"] == []
    r = Exo(wt)("reconstitute", "--json", env={**agent_vars(repo, "w1"), "EXO_BASE_BRANCH": "nope"})
    assert r.exit_code == 5 and "does not exist" in r.json()["error"]["message"]
    # at the root: nothing to copy, no bead, nothing written
    before = jsonl.read_bytes()
    r = Exo(repo)("reconstitute", "--json")
    assert r.exit_code == 0
    assert r.json() | {"worktree": None} == {
        "agent": "root", "worktree": None, "bead": None, "source": "jsonl", "main_branch": "main",
        "files_updated": [], "context_file": None, "context_updated": False, "changes": {},
    }  # fmt: skip
    assert jsonl.read_bytes() == before and not (repo / ".exo/context.md").exists()


def test_reconstitute_with_bd(repo: Path, tmp_path: Path) -> None:
    jsonl = add_beads(repo)
    wt = make_agent_worktree(repo, tmp_path, "a1")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "bd").write_text(f"#!{sys.executable}\n" + FAKE_BD.read_text())
    (bindir / "bd").chmod(0o755)
    env = {**agent_vars(repo, "w1"), "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "FAKE_BD_JSONL": str(jsonl),
           "BEADS_DIR": str(repo / ".beads")}  # fmt: skip
    r = Exo(wt)("reconstitute", "--json", env=env)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert r.json()["source"] == "bd" and r.json()["files_updated"] == [] and r.json()["main_branch"] is None
    edit_line(jsonl, "ex-a1", lambda o: o.update(status="in_progress"))  # the shared DB changes; no commit
    d = Exo(wt)("reconstitute", "--json", env=env).json()
    assert d["changes"]["status"] == {"from": "open", "to": "in_progress"}
    assert "**Status:** in_progress" in (wt / ".exo/context.md").read_text()


# --- the whole cycle on a committed beads file, without bd ------------------------------------------


def _leftovers(folder: Path) -> list[str]:
    """Lock and temporary files exo could leave beside the tracker."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith((".lock", ".tmp", ".exo-tmp")))


def test_spawn_merge_complete_reconstitute_needs_no_manual_step(repo: Path) -> None:
    """Claims and closes are exo's own commits on main: merge and complete never see a modified checkout."""
    from conftest import stop_repo_agents

    jsonl = add_beads(repo, commit=False)
    write_trusted(repo, '[agent]\ncommand = ["sleep", "3600"]\n')
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "beads and exo.toml")
    root = Exo(repo)
    try:
        r = root("spawn", "a1", "--agent", "custom", "--mux", "headless", "--json")
        assert r.exit_code == 0, r.stdout + r.stderr
        assert json.loads(r.stdout)["warnings"] == [w for w in json.loads(r.stdout)["warnings"] if "commit" not in w]
        # the claim is its own commit on main; the checkout is clean; nothing left beside the file
        assert git(repo, "status", "--porcelain") == ""
        assert git(repo, "log", "-1", "--format=%s") == "beads: ex-a1 claimed by a1"
        assert _leftovers(repo / ".beads") == []
        wt = repo / ".exo" / "worktrees" / "bd-a1-add-a-verbose-flag"
        assert "**Status:** in_progress" in (wt / ".exo" / "context.md").read_text()
        # the agent works, syncs the tracker from main (exo's own write into its worktree) and files a PR
        as_agent = agent_vars(repo, "a1")
        (wt / "verbose.txt").write_text("-v\n")
        git(wt, "add", "verbose.txt")
        git(wt, "commit", "-q", "-m", "add -v")
        r = Exo(wt)("reconstitute", "--json", env=as_agent)
        assert r.exit_code == 0 and r.json()["files_updated"] == [str(wt / ".beads/issues.jsonl")], r.stdout
        r = Exo(wt)("pr", "file", "--title", "Add -v", "--body", "x", "--json", env=as_agent)
        assert r.exit_code == 0, r.stdout + r.stderr
        number = r.json()["pr"]["number"]
        # the parent merges and completes: no refusal, no manual step
        r = root("pr", "merge", str(number), "--json")
        assert r.exit_code == 0, r.stdout + r.stderr
        r = root("complete", "a1", "--json")
        assert r.exit_code == 0, r.stdout + r.stderr
        done = r.json()
        assert (done["bead_closed"], done["removal"], done["warnings"]) == (True, "removed", [])
        assert not wt.exists()
        assert git(repo, "log", "-1", "--format=%s") == "beads: ex-a1 closed (completed)"
        assert json.loads(next(x for x in jsonl.read_text().splitlines() if '"ex-a1"' in x))["status"] == "closed"
        r = root("reconstitute", "--json")
        assert r.exit_code == 0 and r.json()["files_updated"] == []
        assert git(repo, "status", "--porcelain") == ""
        assert _leftovers(repo / ".beads") == [] and (repo / "verbose.txt").read_text() == "-v\n"
    finally:
        stop_repo_agents(repo, tmux=False)


def test_tracker_writes_commit_only_the_tracker(repo: Path) -> None:
    """The user's staged work stays staged and out of exo's commit; a tracker with edits of its own is left alone."""
    from exo_cli.ops import tasks

    jsonl = add_beads(repo)
    (repo / "mine.txt").write_text("staged\n")
    git(repo, "add", "mine.txt")
    source = tasks.open_repo_beads(Env(cwd=repo))
    tasks.claim(Env(cwd=repo), "a1", "w1", source=source)
    assert git(repo, "show", "--name-only", "--format=%s", "HEAD").split() == \
        ["beads:", "ex-a1", "claimed", "by", "w1", ".beads/issues.jsonl"]
    assert git(repo, "status", "--porcelain") == "A  mine.txt"
    assert tasks.uncommitted_notes(source) == []
    # the user's own edit of the tracker: exo writes but does not commit it, and says so
    edit_line(jsonl, "ex-a2", lambda o: o.update(priority=0))
    head = git(repo, "rev-parse", "HEAD")
    source = tasks.open_repo_beads(Env(cwd=repo))
    tasks.claim(Env(cwd=repo), "a3", "w2", source=source)
    assert git(repo, "rev-parse", "HEAD") == head
    assert "uncommitted changes" in tasks.uncommitted_notes(source)[0]
    assert _leftovers(repo / ".beads") == []
    # without a git identity the commit is still made, as exo
    git(repo, "checkout", "-q", "--", ".beads/issues.jsonl")
    bare = {"PATH": os.environ["PATH"], "HOME": str(repo), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    source = tasks.open_repo_beads(Env(cwd=repo, environ=bare))
    source.claim("ex-ep", "w3")
    assert tasks.uncommitted_notes(source) == [], source.notes  # type: ignore[attr-defined]
    assert git(repo, "log", "-1", "--format=%an %s") == "exo beads: ex-ep claimed by w3"


def test_stop_hook_rebase_is_not_blocked_by_exos_tracker_copy(repo: Path, tmp_path: Path) -> None:
    from exo_cli.ops.hooks import rebase_onto_base

    jsonl = add_beads(repo)
    wt = make_agent_worktree(repo, tmp_path, "a1")
    edit_line(jsonl, "ex-a1", lambda o: o.update(status="in_progress"))
    git(repo, "commit", "-q", "-am", "claim")
    assert Exo(wt)("reconstitute", "--json", env=agent_vars(repo, "w1")).json()["files_updated"]
    assert git(wt, "status", "--porcelain") == "M .beads/issues.jsonl"  # exo's copy of main's file
    env = Env(cwd=repo)
    agent = env.store.agent("w1")
    assert agent is not None
    result = rebase_onto_base(env, agent)
    assert result.status == "rebased", result
    assert git(wt, "status", "--porcelain") == "" and (wt / ".beads/issues.jsonl").read_bytes() == jsonl.read_bytes()
    # an edit of the agent's own is kept, and still keeps the rebase from running
    edit_line(wt / ".beads/issues.jsonl", "ex-a2", lambda o: o.update(priority=4))
    edit_line(jsonl, "ex-a3", lambda o: o.update(priority=4))
    git(repo, "commit", "-q", "-am", "more")
    assert rebase_onto_base(env, agent).status == "dirty"
    assert '"priority":4' in next(x for x in (wt / ".beads/issues.jsonl").read_text().splitlines() if "ex-a2" in x)
