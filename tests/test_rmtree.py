"""Removing trees agents and gates wrote (issue 34 item 3): never through a link, as a normal user.

The cleanups run as a normal user (``nobody`` through ``setpriv`` when the tests run as root: root
ignores folder modes, so only a normal user meets a read-only folder) against a tree that user
owns, holding read-only and unreadable folders, links to a file and a folder of that user's
outside the tree, and a tree deeper than the walk keeps open. What the links point at must not
change: its mode, its content, its files.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOBODY = 65534
CLEANUPS = {  # each cleanup of an agent- or gate-written tree, as the code calls it
    "gates.remove_clone": "from exo_cli.adapters.gates import remove_clone as f",
    "clones.remove_clone": "from exo_cli.adapters.clones import remove_clone as f",
    "rmtree.remove_tree": "from exo_cli.adapters.rmtree import remove_tree as f",
}


def as_normal_user(code: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", code]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv is not installed: cannot run the cleanup as a normal user")
        argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd="/",
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT)})


@pytest.fixture
def place() -> Iterator[Path]:
    """A folder the normal user owns, outside root's private pytest folders."""
    top = Path(tempfile.mkdtemp(prefix="exo-rmtree-"))
    try:
        yield top
    finally:
        for folder, dirs, _ in os.walk(top):
            for d in dirs:
                p = os.path.join(folder, d)
                if not os.path.islink(p):
                    os.chmod(p, 0o700)
        shutil.rmtree(top, ignore_errors=True)


def own(top: Path) -> None:
    """Give ``top`` and everything in it to the normal user (when the tests run as root)."""
    if os.geteuid() != 0:
        return
    for folder, dirs, files in os.walk(top):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(folder, name), NOBODY, NOBODY)
    os.lchown(top, NOBODY, NOBODY)


def hostile_tree(top: Path) -> tuple[Path, Path, Path]:
    """(the tree, a file outside it, a folder outside it), all the normal user's; the tree links to both."""
    outside, outdir, tree = top / "secret.txt", top / "outdir", top / "tree"
    outside.write_text("mine\n")
    outdir.mkdir()
    (outdir / "keep.txt").write_text("keep\n")
    ro = tree / "ro"
    ro.mkdir(parents=True)
    (ro / "link").symlink_to(outside)
    (ro / "dirlink").symlink_to(outdir)
    (ro / "plain.txt").write_text("x\n")
    (tree / "shut" / "inner").mkdir(parents=True)
    (tree / "shut" / "inner" / "f").write_text("y\n")
    (tree / "shut" / "link").symlink_to(outside)
    deep = tree / "deep"
    deep.mkdir()
    at = deep
    for i in range(80):  # deeper than the walk keeps open (MAX_DEPTH), the bottom read-only
        at = at / f"d{i}"
        at.mkdir()
    (at / "link").symlink_to(outside)
    at.chmod(0o500)
    own(top)
    outside.chmod(0o640)
    outdir.chmod(0o750)
    ro.chmod(0o555)
    (tree / "shut" / "inner").chmod(0o000)
    (tree / "shut").chmod(0o000)
    return tree, outside, outdir


@pytest.mark.parametrize("cleanup", sorted(CLEANUPS))
def test_cleanup_as_a_normal_user_never_follows_a_link(place: Path, cleanup: str) -> None:
    tree, outside, outdir = hostile_tree(place)
    done = as_normal_user(f"{CLEANUPS[cleanup]}\nf({str(tree)!r})")
    assert stat.S_IMODE(os.stat(outside).st_mode) == 0o640 and outside.read_text() == "mine\n"
    assert stat.S_IMODE(os.stat(outdir).st_mode) == 0o750 and (outdir / "keep.txt").read_text() == "keep\n"
    assert done.returncode == 0, done.stderr
    assert not os.path.lexists(tree)  # read-only and unreadable folders went too


def test_a_link_in_place_of_the_tree_is_unlinked_not_followed(place: Path) -> None:
    from exo_cli.adapters.rmtree import remove_tree

    (place / "real").mkdir()
    (place / "real" / "f").write_text("x\n")
    (place / "clone").symlink_to(place / "real")
    remove_tree(place / "clone")
    remove_tree(place / "gone")  # nothing there: nothing to do
    assert not os.path.lexists(place / "clone") and (place / "real" / "f").read_text() == "x\n"


def test_no_cleanup_uses_shutil_rmtree_or_a_chmod_error_handler() -> None:
    """The class: every removal of a tree goes through ``remove_tree`` (shutil's stops at a read-only folder,
    and a handler that chmods the failing path follows the link the writer put there)."""
    found = []
    for path in sorted((ROOT / "exo_cli").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for n, line in enumerate(text.splitlines(), 1):
            if re.search(r"\brmtree\(|onexc=|onerror=", line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []


def test_within_never_enters_a_link_among_the_folders(place: Path) -> None:
    """A copied file's removal: the agent replaced a folder on its way with a link to one of the user's."""
    from exo_cli.adapters.rmtree import remove_tree

    worktree, mine = place / "wt", place / "mine"
    (mine / "conf").mkdir(parents=True)
    (mine / "conf" / "settings").write_text("keep\n")
    worktree.mkdir()
    (worktree / "config").symlink_to(mine)  # was a folder exo copied config/conf/settings into
    remove_tree(worktree / "config" / "conf", within=worktree)
    assert (mine / "conf" / "settings").read_text() == "keep\n"
    (worktree / "real" / "conf").mkdir(parents=True)
    (worktree / "real" / "conf" / "x").write_text("x\n")
    remove_tree(worktree / "real" / "conf", within=worktree)
    assert not (worktree / "real" / "conf").exists() and (worktree / "real").is_dir()
    with pytest.raises(ValueError):
        remove_tree(place / "elsewhere", within=worktree)


def test_undoing_a_spawn_never_removes_a_copied_folder_through_a_link(place: Path) -> None:
    from exo_cli.ops.spawn.recovery import _remove_copied_files

    worktree, mine = place / "wt", place / "mine"
    (mine / "conf").mkdir(parents=True)
    (mine / "conf" / "settings").write_text("keep\n")
    worktree.mkdir()
    (worktree / "config").symlink_to(mine)  # the agent swapped the folder exo copied into for a link
    (worktree / "copied.txt").write_text("x\n")
    _remove_copied_files([str(worktree / "config" / "conf"), str(worktree / "copied.txt")], str(worktree))
    assert (mine / "conf" / "settings").read_text() == "keep\n" and not (worktree / "copied.txt").exists()


def test_a_forced_worktree_removal_git_gives_up_on_finishes_as_a_normal_user(place: Path) -> None:
    """git removes the worktree's records, then stops at a folder the agent made read-only: nothing is left."""
    repo, wt, outside = place / "repo", place / "wt", place / "secret.txt"
    outside.write_text("mine\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "first"], check=True)
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", str(wt)], check=True, capture_output=True)
    (wt / "ro" / "sub").mkdir(parents=True)
    (wt / "ro" / "sub" / "f").write_text("x\n")
    (wt / "ro" / "link").symlink_to(outside)
    state = repo / ".git" / "exo"
    state.mkdir()
    own(place)
    outside.chmod(0o640)
    (wt / "ro").chmod(0o555)
    done = as_normal_user(
        "from pathlib import Path\nfrom exo_cli.adapters.git import Git\nfrom exo_cli.adapters.worktree import Worktrees\n"
        f"w = Worktrees(Git({str(repo)!r}), Path({str(state)!r}), Path({str(repo / '.git')!r}))\n"
        f"print(w.remove({str(wt)!r}, force=True))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(True, '')" and not os.path.lexists(wt)
    assert stat.S_IMODE(os.stat(outside).st_mode) == 0o640
    listed = subprocess.run(["git", "-C", str(repo), "-c", f"safe.directory={repo}", "worktree", "list"],
                            capture_output=True, text=True, check=True).stdout
    assert str(wt) not in listed


def test_set_folder_mode_never_follows_a_link(place: Path) -> None:
    from exo_cli.adapters.rmtree import set_folder_mode

    (place / "shut").mkdir(mode=0o000)
    set_folder_mode(place / "shut", 0o700)
    assert stat.S_IMODE(os.stat(place / "shut").st_mode) == 0o700
    (place / "mine").mkdir(mode=0o750)
    (place / "link").symlink_to(place / "mine")
    with pytest.raises(OSError):
        set_folder_mode(place / "link", 0o777)
    assert stat.S_IMODE(os.stat(place / "mine").st_mode) == 0o750
