"""An agent's clone rewritten while exo reads it, and a clone whose configuration names a FIFO or an endless file.

The agent writes its clone at any moment: between exo's check of the clone's object store and
git's read of it, it can add an alternate naming another repository or swap objects for links
into one. The race is won deterministically: exo (a real subprocess) pauses at its fault point
``clone.mirrored`` (everything checked and taken, git not run yet) while the test rewrites the
clone, then goes on. Nothing of the other repository may reach this one.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
import zlib
from pathlib import Path

import pytest
from pr_helpers import env_for
from test_clones import commit_in, spawn_clone, team  # noqa: F401 - the fixture, shared

from conftest import Exo, agent_vars, git, run_exo, wait_for
from exo_cli import registry
from exo_cli.adapters.clones import make_shared_clone
from exo_cli.adapters.clonestore import mirror
from exo_cli.errors import StateError


def _secret(tmp_path: Path) -> tuple[Path, str, str]:
    """A repository the agent may read but this one must never take from: (its objects, commit, blob)."""
    secret = tmp_path / "secret"
    subprocess.run(["git", "init", "-q", str(secret)], check=True)
    (secret / "key.txt").write_text("TOPSECRET\n")
    git(secret, "add", "key.txt")
    git(secret, "-c", "user.name=s", "-c", "user.email=s@s", "commit", "-q", "-m", "secret")
    return secret / ".git" / "objects", git(secret, "rev-parse", "HEAD"), git(secret, "rev-parse", "HEAD:key.txt")


def _paused(root: Path, tmp_path: Path, args: tuple[str, ...], attack: object) -> subprocess.CompletedProcess[str]:
    """Run ``exo args`` as a subprocess paused at ``clone.mirrored``; run ``attack()`` there; let it go on."""
    pause = tmp_path / "pause"
    pause.mkdir(exist_ok=True)
    done: list[subprocess.CompletedProcess[str]] = []
    runner = threading.Thread(target=lambda: done.append(run_exo(
        *args, cwd=root, env={"EXO_FAULT": "clone.mirrored", "EXO_FAULT_PAUSE": str(pause)}, timeout=300)))
    runner.start()
    flag = pause / "clone.mirrored"
    wait_for(flag.exists, 120, "exo paused between its check of the clone and git's read")
    attack()  # type: ignore[operator]
    flag.unlink()
    runner.join(300)
    assert done, "exo did not finish"
    return done[0]


def test_a_store_rewritten_between_the_check_and_the_read_is_never_read(team: Path, exo: Exo,  # noqa: F811
                                                                        tmp_path: Path) -> None:
    clone = Path(spawn_clone(exo, "w1")["worktrees"][0][1])
    objects, commit, blob = _secret(tmp_path)
    store = clone / ".git" / "objects"
    alternates = store / "info" / "alternates"
    original = alternates.read_text()
    (clone / ".git" / "refs" / "heads" / "leak").write_text(commit + "\n")  # the other repository's commit

    def leaked() -> bool:
        return subprocess.run(["git", "-C", str(team), "cat-file", "-e", blob], capture_output=True).returncode == 0

    def add_alternate() -> None:
        alternates.write_text(original + str(objects) + "\n")

    r = _paused(team, tmp_path, ("status", "w1", "--json"), add_alternate)
    assert not leaked(), "an alternate added after the check was followed"
    assert r.returncode in (5, 6) and "Traceback" not in r.stderr, (r.returncode, r.stdout, r.stderr)
    alternates.write_text(original)

    def link_objects() -> None:  # every object of the other repository, as a link in the clone's store
        for path in objects.glob("[0-9a-f][0-9a-f]/*"):
            (store / path.parent.name).mkdir(exist_ok=True)
            (store / path.parent.name / path.name).symlink_to(path)

    r = _paused(team, tmp_path, ("checkpoint", "w1", "--json"), link_objects)
    assert not leaked(), "objects linked in after the check were followed"
    assert r.returncode in (5, 6) and "Traceback" not in r.stderr, (r.returncode, r.stdout, r.stderr)
    for path in objects.glob("[0-9a-f][0-9a-f]/*"):
        (store / path.parent.name / path.name).unlink()
    os.unlink(clone / ".git" / "refs" / "heads" / "leak")
    mine = commit_in(clone, "mine.txt", "mine\n", "w1: mine")  # the clone's own objects are read as ever
    r = exo("status", "w1", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert git(team, "rev-parse", "refs/exo/clones/w1/heads/main.w1") == mine
    git(clone, "gc", "-q", "--prune=now")  # the clone's store changed: exo's copy follows it, no more, no less
    commit_in(clone, "more.txt", "more\n", "w1: more")
    git(clone, "repack", "-q", "-d")  # its new objects in a pack of its own
    r = exo("status", "w1", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr

    def names(root: Path) -> set[str]:
        return {str(p.relative_to(root)) for p in root.glob("*/*") if p.parent.name != "info"}

    taken = team / ".git" / "exo" / "clones" / "w1" / "git" / "objects"
    assert names(taken) == names(store) and any(n.startswith("pack/") for n in names(taken)), names(taken)
    assert json.loads(r.stdout)["git"]["branch"] == "main.w1"


class Fifo:
    """A FIFO that notes whether anyone opened it to read (a writer waits on it; the reader gets an empty file)."""

    def __init__(self, path: Path) -> None:
        self.path, self.opened, self.closing = path, threading.Event(), threading.Event()
        os.mkfifo(path)
        self.thread = threading.Thread(target=self._wait, daemon=True)
        self.thread.start()

    def _wait(self) -> None:
        fd = os.open(self.path, os.O_WRONLY)  # returns once a reader opened it
        if not self.closing.is_set():
            self.opened.set()
        os.close(fd)

    def close(self) -> bool:
        """Let the writer go; whether anyone but this opened the FIFO meanwhile."""
        self.closing.set()
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self.thread.join(30)
        os.close(fd)
        return self.opened.is_set()


def test_a_clones_configuration_naming_a_fifo_or_an_endless_file_is_never_read(team: Path, exo: Exo,  # noqa: F811
                                                                              tmp_path: Path) -> None:
    """Neither exo's reads of a clone, nor its fetches from it, nor exo run inside it (the agent's own calls, its
    hooks, the broker acting for it, a human) read the clone's configuration: an ``include.path`` naming a FIFO
    would hold git until its deadline, ``/dev/zero`` or a 1 GB sparse file make it fail."""
    clone = Path(spawn_clone(exo, "w1")["worktrees"][0][1])
    commit_in(clone, "app.py", "print(1)\n", "w1: app")
    fifo = Fifo(tmp_path / "config.fifo")
    sparse = tmp_path / "huge.cfg"
    with open(sparse, "wb") as fh:
        fh.truncate(1 << 30)
    with open(clone / ".git" / "config", "a") as fh:
        fh.write(f"[include]\n\tpath = {fifo.path}\n\tpath = /dev/zero\n\tpath = {sparse}\n")
    runs = {args[0]: exo(*args) for args in (("status", "w1", "--json"), ("diff", "w1", "--json"),
                                             ("checkpoint", "w1", "--json"))}
    runs["human in the clone"] = Exo(clone)("agents", "--json")
    runs["agent's hook"] = Exo(clone)("hook", "stop", "--cli", "claude", "--json", input="{}",
                                      env=agent_vars(clone, "w1"))
    filed = registry.invoke("pr_file", env_for(clone, "w1"), title="w1 work")  # the agent's own call
    opened = fifo.close()
    assert not opened, "the clone's include.path was read"
    for label, r in runs.items():
        assert r.exit_code == 0, (label, r.stdout, r.stderr)
    assert [a["id"] for a in runs["human in the clone"].json()["agents"]] == ["w1"]  # type: ignore[index]
    assert filed.pr.head == "main.w1"
    nested = clone / "nested"  # a repository of the agent's inside its clone: kept whole by complete --force
    subprocess.run(["git", "init", "-q", str(nested)], check=True)
    (nested / "n.txt").write_text("nested work\n")
    git(nested, "add", "n.txt")
    git(nested, "-c", "user.name=n", "-c", "user.email=n@n", "commit", "-q", "-m", "nested work")
    fifo = Fifo(tmp_path / "nested.fifo")
    with open(nested / ".git" / "config", "a") as fh:
        fh.write(f"[include]\n\tpath = {fifo.path}\n")
    r = exo("complete", "w1", "--force", "--json")
    assert not fifo.close(), "the nested repository's include.path was read"
    assert r.exit_code == 0 and r.json()["kept_nested"] == ["nested"], r.stdout  # type: ignore[index]
    kept = Path(r.json()["archive_folder"]) / "nested"  # type: ignore[index]
    assert f"path = {fifo.path}" in (kept / "1" / ".git" / "config").read_text()  # its own config, kept as it was
    assert git(team, "bundle", "list-heads", str(kept / "1.bundle"))


def test_staged_files_only_the_clone_has_are_kept_in_the_repository(team: Path, exo: Exo) -> None:  # noqa: F811
    """A file the agent staged (its object in the clone's store only) is in its checkpoint and its archive: git
    writes no object it finds in an alternate, so exo copies those into the repository before it keeps them."""
    clone = Path(spawn_clone(exo, "w1")["worktrees"][0][1])
    (clone / "staged.txt").write_text("staged, never committed\n")
    git(clone, "add", "staged.txt")
    blob = git(clone, "rev-parse", ":staged.txt")
    r = exo("checkpoint", "w1", "--json")
    assert r.exit_code == 0 and r.json()["taken"], r.stdout  # type: ignore[index]
    assert git(team, "fsck", "--no-dangling") == ""  # the repository's store alone holds all it names
    git(team, "cat-file", "-e", blob)
    r = exo("complete", "w1", "--force", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert not clone.exists() and git(team, "fsck", "--no-dangling") == ""
    for cmd in r.json()["restore"]:  # type: ignore[index]
        assert subprocess.run(shlex.split(cmd), cwd=team, capture_output=True).returncode == 0, cmd
    assert (clone / "staged.txt").read_text() == "staged, never committed\n"
    assert git(clone, "diff", "--cached", "--name-only") == "staged.txt"


def test_a_store_on_another_file_system_is_copied_and_still_checked(repo: Path, tmp_path: Path) -> None:
    """Where exo's folder is on another file system (no hard link can be made), the clone's objects are copied,
    each opened without following a link or waiting on a FIFO."""
    if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on a file system of its own")
    clone = tmp_path / "clone"
    make_shared_clone(repo, clone, branch="work", start="main")
    commit_in(clone, "a.txt", "a\n", "a")
    dest = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        assert mirror(clone, dest) == 3  # its commit, tree and blob
        for path in (clone / ".git" / "objects").glob("[0-9a-f][0-9a-f]/*"):
            copy = dest / path.parent.name / path.name
            assert copy.read_bytes() == path.read_bytes() and copy.stat().st_ino != path.stat().st_ino
        head = git(clone, "rev-parse", "HEAD")
        loose = clone / ".git" / "objects" / head[:2] / head[2:]
        shutil.rmtree(dest / head[:2])
        loose.unlink()
        os.mkfifo(loose)  # opened to copy: never waited on
        with pytest.raises(StateError, match="no regular file"):
            mirror(clone, dest)
        assert not (dest / head[:2] / head[2:]).exists()
    finally:
        shutil.rmtree(dest)


def test_a_staged_object_damaged_in_the_clone_makes_no_checkpoint(team: Path, exo: Exo) -> None:  # noqa: F811
    """The agent rewrote the bytes of an object only its clone has: exo cannot copy it, so it keeps no checkpoint
    that names it (the repository never holds a ref to what it lacks)."""
    clone = Path(spawn_clone(exo, "w1")["worktrees"][0][1])
    (clone / "staged.txt").write_text("staged\n")
    git(clone, "add", "staged.txt")
    blob = git(clone, "rev-parse", ":staged.txt")
    loose = clone / ".git" / "objects" / blob[:2] / blob[2:]
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"blob 7\0damaged"))  # another object's bytes under this name
    r = exo("checkpoint", "w1", "--json")
    assert r.exit_code in (5, 6) and "Traceback" not in r.stderr, (r.exit_code, r.stdout, r.stderr)
    assert git(team, "for-each-ref", "refs/exo/checkpoints/") == ""
    assert git(team, "fsck", "--no-dangling") == ""


def test_a_fifo_in_the_work_tree_ends_git_at_once_not_at_its_deadline(team: Path, exo: Exo) -> None:  # noqa: F811
    """A ``.gitignore`` that is a FIFO (git opens it to list untracked files, and waits for a writer) ends the git
    call once it is seen waiting on it, with that said; nothing is removed on that reading."""
    clone = Path(spawn_clone(exo, "w1")["worktrees"][0][1])
    (clone / "sub").mkdir()
    os.mkfifo(clone / "sub" / ".gitignore")
    r = exo("status", "w1", "--json")
    assert r.exit_code == 6 and "FIFO" in r.stdout and "timed out" not in r.stdout, r.stdout
    r = exo("complete", "w1", "--force", "--json")
    assert r.exit_code == 6 and "FIFO" in r.stdout, r.stdout
    assert clone.is_dir()
    (clone / "sub" / ".gitignore").unlink()
    assert exo("status", "w1", "--json").exit_code == 0


def test_a_change_in_the_same_second_as_the_clones_index_is_seen(tmp_path: Path) -> None:
    """exo's copy of a clone's index keeps the index's time: git's racy-clean check needs it.

    A file rewritten with the same size in the same second its index was written looks unchanged by
    its stat data; git looks at its content only because the index is no older than it. A copy stamped
    with the time it was made made such a change look clean to status and complete (work lost).
    """
    from exo_cli.adapters.clones import Reader
    from exo_cli.adapters.git import Git

    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "base")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(repo), str(clone)], check=True)
    for attempt in range(20):  # git compares whole seconds: the rewrite must fall in the index's second
        name = f"f{attempt}.txt"
        (clone / name).write_text("first version\n")
        git(clone, "add", name)
        git(clone, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", name)
        (clone / name).write_text("other version\n")  # the same size, at once
        if (clone / name).stat().st_mtime_ns // 10**9 == (clone / ".git" / "index").stat().st_mtime_ns // 10**9:
            break
    else:
        pytest.skip("no rewrite fell in the same second as its index in 20 tries")
    time.sleep(1.1)  # exo reads later (the copy made in another second than the index was written)
    reader = Reader(Git(repo), repo / ".git", str(clone), tmp_path / "exo-folder")
    reader.refresh()
    out = reader.git().run(["status", "--porcelain"], check=False).stdout
    assert name in out, out
