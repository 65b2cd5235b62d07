"""Checkpoints (issue 29): the disasters played with real git, each restored byte for byte.

An agent is a real worktree on its own branch (``pr_helpers.make_agent``); its turns end with
the real stop hook (a subprocess, as its CLI runs it), whose checkpoint is taken by the real
background helper (``exo checkpoint AGENT --due``); the human undoes with the real CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pr_helpers import commit, git, make_agent
from test_messages_helpers import hook_json, run_hook

from conftest import Exo, agent_vars, wait_for

STOP = {"session_id": "c-sess", "transcript_path": "/nonexistent", "cwd": "/x", "hook_event_name": "Stop",
        "stop_hook_active": False, "last_assistant_message": "done with this turn", "permission_mode": "default"}
PROMPT = {"session_id": "c-sess", "transcript_path": "/nonexistent", "cwd": "/x", "hook_event_name": "UserPromptSubmit",
          "prompt": "go on", "permission_mode": "default"}
# Bytes git would convert (a CRLF file under text=auto), a NUL, control characters in a name.
CRLF = b"one\r\ntwo\r\n"
BINARY = bytes(range(256)) * 4
ODD_NAME = "odd \x1b[31mname\t\x07.txt"


def files_of(wt: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every file and link of the checkout but its ``.git``: (kind, mode, bytes or link target)."""
    out: dict[str, tuple[str, int, bytes]] = {}
    for folder, dirs, names in os.walk(wt):
        rel_folder = os.path.relpath(folder, wt)
        links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        dirs[:] = [d for d in dirs if d not in links]
        for name in [*names, *links]:
            rel = os.path.normpath(os.path.join(rel_folder, name))
            if rel == ".git":
                continue
            path = os.path.join(folder, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", 0, os.readlink(path).encode())
            else:
                out[rel] = ("file", st.st_mode & 0o777, Path(path).read_bytes())
    return out


def state(wt: Path) -> dict[str, Any]:
    """What a restore must bring back: the files, HEAD, the branch, its history, git's view of the checkout."""
    return {"files": files_of(wt), "head": git(wt, "rev-parse", "HEAD"), "branch": git(wt, "symbolic-ref", "HEAD"),
            "log": git(wt, "log", "--format=%H %s"),
            "status": git(wt, "status", "--porcelain=v1", "-z", "--untracked-files=all")}


def folder_of(repo: Path, agent: str = "w1") -> Path:
    from pr_helpers import env_for

    from exo_cli.ops.turnend import folder

    env = env_for(repo)
    rec = env.store.agent(agent)
    assert rec is not None
    return Path(folder(env, rec))


def end_turn(repo: Path, agent: str = "w1", **payload: Any) -> dict[str, Any] | None:
    """The agent's turn ends: its stop hook (a real subprocess), then its background checkpoint, waited for."""
    out = hook_json(run_hook(repo, agent, "stop", "claude", {**STOP, **payload}))
    due = folder_of(repo, agent) / "due"
    wait_for(lambda: not due.exists(), timeout=90, what="the background checkpoint of the turn")
    return out  # type: ignore[no-any-return]


def start_turn(repo: Path, agent: str = "w1") -> None:
    hook_json(run_hook(repo, agent, "prompt", "claude", PROMPT))


def listed(exo: Exo, agent: str = "w1") -> list[dict[str, Any]]:
    r = exo("checkpoints", agent, "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    return r.json()["checkpoints"]  # type: ignore[index,no-any-return]


def ok(r: Any) -> Any:
    assert r.exit_code == 0, r.stdout + r.stderr
    return r.json()


@pytest.fixture
def work(repo: Path) -> Path:
    """w1's worktree with work of every kind: tracked, executable, binary, CRLF, a link, untracked, ignored."""
    (repo / ".gitignore").write_text(".env\nnode_modules/\n")
    (repo / ".gitattributes").write_text("*.txt text=auto\n")
    git(repo, "add", ".gitignore", ".gitattributes")
    git(repo, "commit", "-q", "-m", "ignore rules")
    make_agent(repo, "w1")
    wt = repo / ".exo" / "worktrees" / "w1"
    (wt / "src" / "pkg").mkdir(parents=True)
    (wt / "src" / "app.py").write_text("print('app')\n")
    (wt / "src" / "pkg" / "util.py").write_text("def util():\n    return 1\n")
    (wt / "run.sh").write_text("#!/bin/sh\necho run\n")
    (wt / "run.sh").chmod(0o755)
    (wt / "data.bin").write_bytes(BINARY)
    (wt / "crlf.txt").write_bytes(CRLF)
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "w1: the app")
    os.symlink("src/app.py", wt / "app-link")
    (wt / "notes.md").write_text("my notes, never committed\n")
    (wt / ODD_NAME).write_text("odd\n")
    (wt / ".env").write_text("API_TOKEN=canary-5f1e\n")
    (wt / "node_modules" / "dep").mkdir(parents=True)
    (wt / "node_modules" / "dep" / "index.js").write_text("module.exports = 1\n")
    (wt / "src" / "app.py").write_text("print('app, edited but not committed')\n")
    return wt


# --------------------------------------------------------------------------- the disasters


def test_an_agent_that_deletes_a_directory_gets_it_back_byte_for_byte(work: Path, repo: Path, exo: Exo) -> None:
    end_turn(repo)
    before = state(work)
    start_turn(repo)
    shutil.rmtree(work / "src")  # the agent's rm -rf
    (work / ".env").write_text("API_TOKEN=\n")
    end_turn(repo)
    assert not (work / "src").exists()
    undone = ok(exo("undo", "w1", "--json"))
    assert undone["restored"] == listed(exo)[-1]["id"] == 1
    assert state(work) == before
    assert "src/app.py" in undone["files"] and undone["ignored"] == [".env"]
    assert (work / "node_modules" / "dep" / "index.js").exists()  # regenerable: never kept, never touched


def test_a_branch_reset_three_commits_back_comes_back_with_its_history(work: Path, repo: Path, exo: Exo) -> None:
    for i in range(4):
        commit(work, f"step{i}.py", f"step {i}\n", f"w1: step {i}")
    end_turn(repo)
    before = state(work)
    start_turn(repo)
    git(work, "reset", "-q", "--hard", "HEAD~3")  # the agent's git reset --hard
    end_turn(repo)
    assert git(work, "rev-parse", "HEAD") != before["head"]
    undone = ok(exo("undo", "w1", "--json"))
    assert (undone["branch"], undone["moved_to"]) == ("main.w1", before["head"])
    assert state(work) == before
    assert git(repo, "rev-parse", "refs/heads/main.w1") == before["head"]


def test_an_amended_commit_is_undone_and_stays_reachable(work: Path, repo: Path, exo: Exo) -> None:
    commit(work, "feature.py", "v1\n", "w1: feature")
    end_turn(repo)
    before = state(work)
    start_turn(repo)
    (work / "feature.py").write_text("a stub\n")
    git(work, "commit", "-q", "-a", "--amend", "-m", "w1: feature, amended")
    amended = git(work, "rev-parse", "HEAD")
    end_turn(repo)
    ok(exo("undo", "w1", "--json"))
    assert state(work) == before
    assert git(repo, "for-each-ref", "--contains", amended, "refs/exo/checkpoints/")  # never lost


def test_an_untracked_file_overwritten_with_a_stub_is_restored(work: Path, repo: Path, exo: Exo) -> None:
    end_turn(repo)
    notes = (work / "notes.md").read_bytes()
    start_turn(repo)
    (work / "notes.md").write_text("TODO\n")
    (work / "src" / "app.py").write_text("print('a later edit the undo of one file keeps')\n")
    end_turn(repo)
    head = git(work, "rev-parse", "HEAD")
    undone = ok(exo("undo", "w1", "--files", "notes.md", "--json"))
    assert undone["files"] == ["notes.md"] and undone["branch"] is None
    assert (work / "notes.md").read_bytes() == notes
    assert (work / "src" / "app.py").read_text() == "print('a later edit the undo of one file keeps')\n"
    assert git(work, "rev-parse", "HEAD") == head


def test_a_worktree_removed_by_hand_is_made_again_byte_for_byte(work: Path, repo: Path, exo: Exo) -> None:
    end_turn(repo)
    before = state(work)
    shutil.rmtree(work)  # by hand, .git file and all
    undone = ok(exo("undo", "w1", "--json"))
    assert undone["worktree_recreated"]
    regenerable = "node_modules/dep/index.js"  # comes back with an install: never kept, so not restored
    assert not (work / regenerable).exists()
    before["files"].pop(regenerable)
    before["status"] = before["status"].replace("!! node_modules/\0", "")
    now = state(work)
    assert {k: v for k, v in now["files"].items() if before["files"].get(k) != v} == {}
    assert now == before
    assert str(work) in git(repo, "worktree", "list")


def test_an_undo_is_undone_with_the_checkpoint_it_took(work: Path, repo: Path, exo: Exo) -> None:
    end_turn(repo)
    start_turn(repo)
    shutil.rmtree(work / "src")
    (work / "new.py").write_text("new\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "w1: src gone")
    end_turn(repo)
    after = state(work)
    undone = ok(exo("undo", "w1", "--json"))
    assert not (work / "new.py").exists()
    ok(exo("undo", "w1", "--to", str(undone["saved"]), "--json"))
    assert state(work) == after


# --------------------------------------------------------------------------- what a checkpoint is


def test_a_checkpoint_never_touches_the_index_head_stash_or_files(work: Path, repo: Path, exo: Exo) -> None:
    (work / "src" / "app.py").write_text("staged version\n")
    git(work, "add", "src/app.py")
    (work / "src" / "app.py").write_text("staged version, edited further\n")
    (work / "stashed.py").write_text("x\n")
    git(work, "add", "stashed.py")
    git(work, "stash", "push", "-q", "--", "stashed.py")
    git_dir = Path(git(work, "rev-parse", "--absolute-git-dir"))
    index = (git_dir / "index").read_bytes()
    stash = git(work, "stash", "list", "--format=%H")
    times = {p: os.lstat(work / p).st_mtime_ns for p in files_of(work)}
    before = state(work)
    taken = ok(exo("checkpoint", "w1", "--json"))
    assert taken["taken"] and taken["checkpoint"]["id"] == 1
    assert (git_dir / "index").read_bytes() == index
    assert git(work, "stash", "list", "--format=%H") == stash
    assert {p: os.lstat(work / p).st_mtime_ns for p in files_of(work)} == times
    assert state(work) == before
    # the files as they are on disk, not as staged; untracked ones too; the odd name and the CRLF bytes exact
    c = taken["checkpoint"]["commit"]
    assert git(repo, "show", f"{c}:src/app.py") == "staged version, edited further"
    assert git(repo, "cat-file", "-p", f"{c}:notes.md") == "my notes, never committed"
    assert subprocess.run(["git", "cat-file", "blob", f"{c}:crlf.txt"], cwd=repo, capture_output=True).stdout == CRLF
    assert ODD_NAME in git(repo, "ls-tree", "-r", "-z", "--name-only", c).split("\0")
    assert git(repo, "rev-parse", f"{c}^1") == before["head"]  # HEAD is its first parent


def test_nothing_changed_means_no_new_checkpoint(work: Path, exo: Exo) -> None:
    first = ok(exo("checkpoint", "w1", "--json"))
    again = ok(exo("checkpoint", "w1", "--json"))
    assert first["taken"] and not again["taken"]
    assert again["checkpoint"]["id"] == first["checkpoint"]["id"]
    assert [c["id"] for c in listed(exo)] == [1]


def test_ignored_files_are_copied_to_exos_state_never_into_a_git_object(work: Path, repo: Path, exo: Exo) -> None:
    c = ok(exo("checkpoint", "w1", "--json"))["checkpoint"]
    assert c["ignored"] == [".env"]  # node_modules/ is regenerable: not kept
    objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo,
                             capture_output=True).stdout
    assert b"canary-5f1e" not in objects
    copies = folder_of(repo) / "blobs"
    assert any(b"canary-5f1e" in p.read_bytes() for p in copies.rglob("*") if p.is_file())
    assert stat.S_IMODE(os.stat(copies).st_mode) == 0o700


def test_nested_repositories_and_big_files_are_listed_not_kept_and_never_touched(work: Path, repo: Path,
                                                                                 exo: Exo) -> None:
    (repo / "exo.toml").write_text("[checkpoints]\nmax_file_mb = 1\n")
    nested = work / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    (nested / "lib.c").write_text("int x;\n")
    (work / "big.bin").write_bytes(b"\0" * (2 << 20))
    c = ok(exo("checkpoint", "w1", "--json"))["checkpoint"]
    assert {(n["path"], n["why"]) for n in c["not_kept"]} == {("vendor/lib/", "a nested repository"),
                                                              ("big.bin", "over 1 MiB")}
    (work / "big.bin").write_bytes(b"\1" * (2 << 20))
    (nested / "lib.c").write_text("int y;\n")
    undone = ok(exo("undo", "w1", "--to", "1", "--json"))
    assert (work / "big.bin").read_bytes() == b"\1" * (2 << 20)  # never overwritten with what was not kept
    assert (nested / "lib.c").read_text() == "int y;\n"
    assert "big.bin" not in undone["files"]


def test_a_repositorys_filters_and_attributes_never_run_or_convert(work: Path, repo: Path, exo: Exo,
                                                                   tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    git(repo, "config", "filter.evil.clean", f"touch {pwned}; cat")
    git(repo, "config", "filter.evil.smudge", f"touch {pwned}; cat")
    (work / ".gitattributes").write_text("*.py filter=evil\n*.txt text=auto\n")
    ok(exo("checkpoint", "w1", "--json"))
    (work / "src" / "app.py").write_text("changed\n")
    (work / "crlf.txt").write_bytes(b"gone\n")
    ok(exo("undo", "w1", "--to", "1", "--force", "--json"))
    assert not pwned.exists()
    assert (work / "crlf.txt").read_bytes() == CRLF
    assert (work / "src" / "app.py").read_text() == "print('app, edited but not committed')\n"


def test_a_restore_never_writes_through_a_link_the_agent_planted(work: Path, repo: Path, exo: Exo,
                                                                  tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "app.py").write_text("not the agent's\n")  # the same name, out of the checkout
    app = (work / "src" / "app.py").read_bytes()
    ok(exo("checkpoint", "w1", "--json"))
    shutil.rmtree(work / "src")
    os.symlink(outside, work / "src")  # src/ is now a link out of the checkout
    undone = ok(exo("undo", "w1", "--to", "1", "--json"))
    assert [p.name for p in outside.iterdir()] == ["app.py"] and (outside / "app.py").read_text() == "not the agent's\n"
    assert not (work / "src").is_symlink() and (work / "src" / "app.py").read_bytes() == app
    assert undone["not_restored"] == []


# --------------------------------------------------------------------------- timing (issue item 2)


def test_a_stop_that_keeps_the_agent_going_checkpoints_before_it_answers(work: Path, repo: Path, exo: Exo) -> None:
    ok(exo("send", "w1", "also update the docs", "--json"))  # pending: the stop hook continues the agent with it
    before = (work / "src" / "app.py").read_bytes()
    out = hook_json(run_hook(repo, "w1", "stop", "claude", STOP))
    assert out["decision"] == "block"
    (work / "src" / "app.py").write_text("the next turn's edit, at once\n")  # no prompt hook: it goes on directly
    [c] = listed(exo)
    assert (c["reason"], c["turn"]) == ("turn", 1)
    blob = subprocess.run(["git", "cat-file", "blob", f"{c['commit']}:src/app.py"], cwd=repo, capture_output=True)
    assert blob.stdout == before


def test_a_next_turn_never_starts_before_the_last_ones_checkpoint(work: Path, repo: Path, exo: Exo) -> None:
    """The background helper waits for the hook's process to exit: here pytest's own (the hook runs in it), so
    it is seconds late, and the prompt hook of the next turn must take the checkpoint first."""
    agent = {**agent_vars(repo, "w1"), "EXO_STATE_DIR": str(repo / ".git" / "exo")}
    before = (work / "src" / "app.py").read_bytes()
    r = exo("hook", "stop", "--cli", "claude", input=json.dumps(STOP), env=agent)
    assert r.exit_code == 0, r.stderr
    assert (folder_of(repo) / "due").exists()
    r = exo("hook", "prompt", "--cli", "claude", input=json.dumps(PROMPT), env=agent)
    assert r.exit_code == 0, r.stderr
    (work / "src" / "app.py").write_text("the next turn's first edit\n")
    [c] = listed(exo)
    blob = subprocess.run(["git", "cat-file", "blob", f"{c['commit']}:src/app.py"], cwd=repo, capture_output=True)
    assert blob.stdout == before
    assert not (folder_of(repo) / "due").exists()
    # the helper comes later and finds nothing due
    wait_for(lambda: not subprocess.run(["pgrep", "-f", "checkpoint w1 --due"], capture_output=True).stdout,
             timeout=90, what="the background helper to finish")
    assert [x["id"] for x in listed(exo)] == [c["id"]]


def test_a_file_become_a_folder_and_a_folder_become_a_file_are_kept_and_restored(work: Path, repo: Path,
                                                                                  exo: Exo) -> None:
    ok(exo("checkpoint", "w1", "--json"))
    before = files_of(work)
    (work / "run.sh").unlink()
    (work / "run.sh").mkdir()
    (work / "run.sh" / "inside.txt").write_text("a folder now\n")
    shutil.rmtree(work / "src" / "pkg")
    (work / "src" / "pkg").write_text("a file now\n")
    swapped = ok(exo("checkpoint", "w1", "--json"))["checkpoint"]
    assert swapped["not_kept"] == []
    c = swapped["commit"]
    assert git(repo, "show", f"{c}:run.sh/inside.txt") == "a folder now"
    assert git(repo, "show", f"{c}:src/pkg") == "a file now"
    ok(exo("undo", "w1", "--to", "1", "--json"))
    assert files_of(work) == before
    ok(exo("undo", "w1", "--to", str(swapped["id"]), "--json"))
    assert (work / "run.sh" / "inside.txt").read_text() == "a folder now\n"
    assert (work / "src" / "pkg").read_text() == "a file now\n"


def test_an_undo_never_deletes_through_a_link_the_agent_planted(work: Path, repo: Path, exo: Exo, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "pkg").mkdir(parents=True)
    (outside / "pkg" / "util.py").write_text("not the agent's\n")
    (outside / "new.py").write_text("not the agent's either\n")
    ok(exo("checkpoint", "w1", "--json"))
    (work / "new.py").write_text("made after the checkpoint\n")
    ok(exo("checkpoint", "w1", "--json"))  # new.py is in the present: the undo deletes it
    shutil.rmtree(work / "src")
    os.symlink(outside, work / "src")
    os.symlink(outside / "new.py", work / "link-out")
    ok(exo("undo", "w1", "--to", "1", "--json"))
    assert (outside / "pkg" / "util.py").read_text() == "not the agent's\n"
    assert (outside / "new.py").read_text() == "not the agent's either\n"
    assert not (work / "src").is_symlink() and (work / "src" / "pkg" / "util.py").read_text() == "def util():\n    return 1\n"


def test_a_submodules_contents_are_listed_not_kept_and_never_touched(work: Path, repo: Path, exo: Exo,
                                                                     tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    git(lib, "init", "-q", "-b", "main")
    (lib / "lib.c").write_text("int lib;\n")
    git(lib, "add", "lib.c")
    git(lib, "commit", "-q", "-m", "lib")
    git(work, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "vendor/lib")
    git(work, "commit", "-q", "-m", "w1: a submodule")
    c = ok(exo("checkpoint", "w1", "--json"))["checkpoint"]
    assert {"path": "vendor/lib/", "why": "a submodule"} in c["not_kept"]
    (work / "vendor" / "lib" / "lib.c").write_text("int changed;\n")
    ok(exo("undo", "w1", "--to", str(c["id"]), "--json"))
    assert (work / "vendor" / "lib" / "lib.c").read_text() == "int changed;\n"  # another repository's: not exo's


def test_a_file_rewritten_in_its_index_second_is_kept_as_it_is_on_disk(repo: Path, exo: Exo) -> None:
    """The first checkpoint seeds its shadow index from the agent's, keeping the index's time.

    A file rewritten with the same size in the same second the agent's index was written matches
    its entry's stat data; git hashes it again only because the index is no older than it. A seed
    stamped with the time of the copy made the checkpoint keep the committed bytes instead.
    """
    import time

    make_agent(repo, "w1")
    wt = repo / ".exo" / "worktrees" / "w1"
    for attempt in range(20):  # git compares whole seconds: the rewrite must fall in the index's second
        name = f"f{attempt}.txt"
        (wt / name).write_text("first version\n")
        git(wt, "add", name)
        git(wt, "commit", "-q", "-m", name)
        (wt / name).write_text("other version\n")  # the same size, at once
        index = Path(git(wt, "rev-parse", "--git-path", "index"))
        index = index if index.is_absolute() else wt / index
        if (wt / name).stat().st_mtime_ns // 10**9 == index.stat().st_mtime_ns // 10**9:
            break
    else:
        pytest.skip("no rewrite fell in the same second as its index in 20 tries")
    time.sleep(1.1)  # the checkpoint is taken in a later second than the index was written
    end_turn(repo)
    start_turn(repo)
    (wt / name).unlink()
    end_turn(repo)
    ok(exo("undo", "w1", "--json"))
    assert (wt / name).read_text() == "other version\n"


def test_complete_waits_for_exos_own_git_in_the_worktree_instead_of_refusing(repo: Path, exo: Exo) -> None:
    """The broker takes a due checkpoint on its own thread: its git may be running in the worktree when complete
    surveys it. complete waits for exo's own git to end instead of refusing (someone else's process still blocks)."""
    import threading

    from exo_cli.adapters.files import empty_dir

    make_agent(repo, "w1")
    wt = repo / ".exo" / "worktrees" / "w1"
    commit(wt, "w1.txt", "work\n")
    git(repo, "merge", "-q", "--ff-only", "main.w1")
    proc = subprocess.Popen(["git", "-C", str(wt), "-c", f"core.hooksPath={empty_dir()}", "-c", "core.fsmonitor=false",
                             "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    wait_for(lambda: os.readlink(f"/proc/{proc.pid}/cwd") == os.path.realpath(wt), timeout=30)
    timer = threading.Timer(1.5, lambda: proc.stdin.close())  # type: ignore[union-attr]  # it ends by itself
    timer.start()
    try:
        done = exo("complete", "w1", "--json")
        assert done.exit_code == 0, done.stdout + done.stderr
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()
