"""Files an agent can write that exo opens: a FIFO, a link to /dev/zero or a 10 GB file at each of them.

Each kind of site exo reads from a checkout, its git folder, a hook payload or a context file
(a `.git` file, `commondir`, HEAD, a loose ref, packed-refs, `info/exclude`, `.exo/context.md`,
a transcript) gets the planted file; every reader must answer (nothing, or what it can read) at
once instead of waiting for a FIFO's writer or reading without end. Each read runs in a thread
with a generous deadline; a reader still blocked is released by opening its FIFO for writing.
Real files and a real git repository; nothing mocked.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exo_cli.adapters import gitdir
from exo_cli.adapters.agents.base import tail_json_lines
from exo_cli.adapters.checkpoint import _read as checkpoint_read
from exo_cli.adapters.usage import read_usage
from exo_cli.ops.deinit import _exclude_lines
from exo_cli.ops.hooks import task_context
from exo_cli.ops.rebase import ref_sha
from exo_cli.records import Agent

DEADLINE = float(os.environ.get("EXO_TEST_DEADLINE", 60))  # seconds: generous on a loaded machine; a blocked open never returns at all


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout.strip()


def plant(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "devzero":
        path.symlink_to("/dev/zero")
    else:  # huge: 10 GB, sparse (no disk used)
        with open(path, "wb") as fh:
            fh.truncate(10 << 30)


def restore(path: Path, data: bytes) -> None:
    if os.path.lexists(path):
        os.unlink(path)  # never opened: writing to a FIFO would wait for a reader
    path.write_bytes(data)


def answers(path: Path, call: Callable[[], Any]) -> Any:
    """``call()``'s result, failing the test when it is still blocked at the deadline."""
    box: dict[str, Any] = {}
    t = threading.Thread(target=lambda: box.update(value=call()), daemon=True)
    t.start()
    t.join(DEADLINE)
    if t.is_alive():
        if os.path.exists(path) and not os.path.islink(path):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # release the reader (a FIFO)
        t.join(DEADLINE)
        pytest.fail(f"reading {path} blocked")
    assert "value" in box, f"reading {path} raised"
    return box["value"]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A repository with a linked worktree: (main checkout, linked worktree)."""
    top = tmp_path_factory.mktemp("agentfiles")
    main = top / "main"
    main.mkdir()
    git(main, "init", "-q", "-b", "main")
    git(main, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x")
    git(main, "worktree", "add", "-q", "-b", "w1", str(top / "w1"))
    return main, top / "w1"


KINDS = ["fifo", "devzero", "huge"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_git_folders_files_are_never_waited_on_nor_read_without_end(checkout: tuple[Path, Path],
                                                                     kind: str) -> None:
    main, wt = checkout
    common = main / ".git"
    wt_git = common / "worktrees" / "w1"
    tip = git(main, "rev-parse", "refs/heads/w1")
    saved = {p: p.read_bytes() for p in (wt / ".git", wt_git / "HEAD", wt_git / "commondir", wt_git / "gitdir")}
    try:
        for path in (wt_git / "HEAD", common / "refs" / "heads" / "w1", common / "packed-refs"):
            plant(path, kind)
            assert answers(path, lambda: gitdir.head_commit(wt_git)) in (None, tip)
            assert answers(path, lambda: ref_sha(str(wt), "refs/heads/w1")) in (None, tip)
            os.unlink(path)
            if path.name == "w1":
                git(main, "update-ref", "refs/heads/w1", tip)
            elif path.name == "HEAD":
                restore(path, saved[path])
        for path in (wt_git / "commondir", wt_git / "gitdir"):
            plant(path, kind)
            assert answers(path, lambda: ref_sha(str(wt), "refs/heads/w1")) in (None, tip)
            assert answers(path, lambda: gitdir.operations(wt_git)) == []
            assert answers(path, lambda p=path: checkpoint_read(p)) == ""  # type: ignore[misc]
            restore(path, saved[path])
        dot = wt / ".git"
        plant(dot, kind)
        assert answers(dot, lambda: gitdir.git_dir_of(wt)) is None
        assert answers(dot, lambda: ref_sha(str(wt), "refs/heads/w1")) is None
        restore(dot, saved[dot])
        exclude = common / "info" / "exclude"
        plant(exclude, kind)
        assert answers(exclude, lambda: _exclude_lines(common)) == []
        assert answers(exclude, lambda: gitdir.add_exclude(common, "/.exo/")) is False  # neither written nor replaced
        assert answers(exclude, lambda: gitdir.remove_exclude(common, "/.exo/")) is False
        assert os.path.islink(exclude) if kind == "devzero" else not exclude.is_symlink()
        os.unlink(exclude)
    finally:
        for p, data in saved.items():
            restore(p, data)
        git(main, "update-ref", "refs/heads/w1", tip)
    assert ref_sha(str(wt), "refs/heads/w1") == tip  # restored: read again


@pytest.mark.parametrize("kind", KINDS)
def test_an_agents_context_and_transcript_are_never_waited_on(tmp_path: Path, kind: str) -> None:
    context = tmp_path / ".exo" / "context.md"
    plant(context, kind)
    agent = Agent(id="w1", name="w1", role="dev", parent="lead", status="running", backend="custom", mux="headless",
                  task="the task", worktree=str(tmp_path))
    assert "the task" in answers(context, lambda: task_context(agent))
    transcript = tmp_path / "t.jsonl"
    plant(transcript, kind)
    assert answers(transcript, lambda: read_usage("claude", str(transcript), {})) == []
    assert answers(transcript, lambda: tail_json_lines(str(transcript))) == []


def test_a_link_at_info_exclude_is_never_written_through(tmp_path: Path) -> None:
    common = tmp_path / "git"
    (common / "info").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.write_text("the human's\n")
    (common / "info" / "exclude").symlink_to(outside)
    assert gitdir.add_exclude(common, "/.exo/") is False
    assert outside.read_text() == "the human's\n"
    os.unlink(common / "info" / "exclude")
    assert gitdir.add_exclude(common, "/.exo/") is True and gitdir.add_exclude(common, "/.exo/") is False
    assert (common / "info" / "exclude").read_text() == "/.exo/\n"
    assert gitdir.remove_exclude(common, "/.exo/") is True
