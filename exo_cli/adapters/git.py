"""Thin, fast git helpers over the ``git`` binary (argv lists, no shell).

GitPython costs ~140 ms to import, so the hot paths (status, hooks) use these
instead. Heavier git work that benefits from GitPython lives in ``gitops.py``.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import subprocess

from exo_cli.errors import EnvironmentError_, external

# Keep git from prompting or paging, whatever the user's config says.
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "LC_ALL": "C"}


class Finished(NamedTuple):
    """A finished git process (the fields of ``subprocess.CompletedProcess`` exo reads)."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def _spawn_capture(argv: list[str], env: dict[str, str], timeout: float) -> Finished:
    """posix_spawn ``argv`` with stdout/stderr captured and stdin from /dev/null.

    The hooks and ``exo status`` run git on every call; importing ``subprocess`` costs
    more than the git call itself, so this path spawns directly.
    """
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, out_w, 1),
        (os.POSIX_SPAWN_DUP2, err_w, 2),
        (os.POSIX_SPAWN_CLOSE, out_r),
        (os.POSIX_SPAWN_CLOSE, err_r),
    ]
    try:
        pid = os.posix_spawnp(argv[0], argv, env, file_actions=actions)
    finally:
        os.close(out_w)
        os.close(err_w)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    open_fds = [out_r, err_r]
    deadline = time.monotonic() + timeout
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, 9)
                break
            ready, _, _ = select.select(open_fds, [], [], left)
            for fd in ready:
                data = os.read(fd, 65536)
                if data:
                    chunks[fd].append(data)
                else:
                    open_fds.remove(fd)
    finally:
        os.close(out_r)
        os.close(err_r)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    stderr = b"".join(chunks[err_r]).decode("utf-8", "replace")
    if open_fds:
        stderr += f"\ntimed out after {timeout}s"
    return Finished(argv, code, b"".join(chunks[out_r]).decode("utf-8", "replace"), stderr)


def git(
    args: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    check: bool = True,
    input: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str] | Finished:
    """Run ``git args`` in ``cwd``; raise ExternalFailure when it fails and ``check``."""
    full_env = dict(os.environ)
    full_env.update(_GIT_ENV)
    if env:
        full_env.update(env)
    try:
        if input is None:
            proc: subprocess.CompletedProcess[str] | Finished = _spawn_capture(
                ["git", "-C", os.fspath(cwd), *args], full_env, timeout
            )
        else:
            import subprocess

            proc = subprocess.run(
                ["git", *args], cwd=cwd, capture_output=True, text=True, input=input, env=full_env, timeout=timeout
            )
    except FileNotFoundError as exc:
        raise EnvironmentError_("git is not installed", hint="Install git.") from exc
    if check and proc.returncode != 0:
        raise external(f"git {args[0]}", proc)
    return proc


def out(args: Sequence[str], *, cwd: str | os.PathLike[str]) -> str:
    return git(args, cwd=cwd).stdout.strip()


class RepoInfo(NamedTuple):
    """Where a repository lives, seen from one of its worktrees."""

    toplevel: Path  # the worktree the caller is in
    common_dir: Path  # shared .git directory
    git_dir: Path  # this worktree's git dir
    root: Path  # the main checkout

    @property
    def is_main_checkout(self) -> bool:
        return self.toplevel == self.root


def discover(cwd: str | os.PathLike[str]) -> RepoInfo:
    """Find the repository around ``cwd`` with one git call; EnvironmentError outside a repo."""
    proc = git(
        ["rev-parse", "--path-format=absolute", "--show-toplevel", "--git-common-dir", "--git-dir"],
        cwd=cwd,
        check=False,
    )
    if proc.returncode != 0:
        raise EnvironmentError_(
            f"Not in a git repository: {os.fspath(cwd)}",
            hint="Run exo inside a git repository (or pass -C PATH).",
            cwd=os.fspath(cwd),
        )
    lines = proc.stdout.splitlines()
    if len(lines) < 3:
        raise EnvironmentError_(
            f"Not in a git work tree: {os.fspath(cwd)}", hint="exo needs a repository with a work tree."
        )
    top, common, gdir = (Path(x) for x in lines[:3])
    if common.name == ".git":
        root = common.parent
    else:
        root = Path(_main_worktree(top) or top)
    return RepoInfo(toplevel=top, common_dir=common, git_dir=gdir, root=root)


def _main_worktree(cwd: Path) -> str | None:
    proc = git(["worktree", "list", "--porcelain"], cwd=cwd, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("worktree "):
            return line[len("worktree ") :]
    return None


def current_branch(cwd: str | os.PathLike[str]) -> str | None:
    proc = git(["symbolic-ref", "--quiet", "--short", "HEAD"], cwd=cwd, check=False)
    return proc.stdout.strip() or None


class Snapshot(NamedTuple):
    """Branch, head, upstream, ahead/behind and changed files from one ``git status`` call."""

    branch: str | None
    head: str | None
    upstream: str | None
    ahead: int | None
    behind: int | None
    changes: list[str]


def snapshot(cwd: str | os.PathLike[str]) -> Snapshot:
    """One ``git status --porcelain=v2 --branch`` call, parsed."""
    proc = git(["status", "--porcelain=v2", "--branch", "--untracked-files=all"], cwd=cwd)
    branch = head = upstream = None
    ahead = behind = None
    changes: list[str] = []
    for line in proc.stdout.splitlines():
        if line.startswith("# branch.oid "):
            oid = line[13:]
            head = None if oid == "(initial)" else oid[:7]
        elif line.startswith("# branch.head "):
            name = line[14:]
            branch = None if name == "(detached)" else name
        elif line.startswith("# branch.upstream "):
            upstream = line[18:]
        elif line.startswith("# branch.ab "):
            a, b = line[12:].split()
            ahead, behind = int(a), -int(b)
        elif line.startswith("1 ") or line.startswith("2 "):
            parts = line.split(" ", 8 if line[0] == "1" else 9)
            path = parts[-1].split("\t")[0] if line[0] == "2" else parts[-1]
            changes.append(f"{parts[1].replace('.', ' ')} {path}")
        elif line.startswith("u "):
            changes.append(f"UU {line.split(' ', 10)[-1]}")
        elif line.startswith("? "):
            changes.append(f"?? {line[2:]}")
    return Snapshot(branch, head, upstream, ahead, behind, changes)


def status_porcelain(cwd: str | os.PathLike[str]) -> list[str]:
    """``git status --porcelain`` lines (modified, staged and untracked files)."""
    proc = git(["status", "--porcelain=v1", "--untracked-files=all"], cwd=cwd)
    return [line for line in proc.stdout.splitlines() if line]


def ahead_behind(cwd: str | os.PathLike[str], ref: str, base: str) -> tuple[int, int] | None:
    """Commits ``ref`` has that ``base`` lacks, and the reverse; None when a ref is missing."""
    proc = git(["rev-list", "--left-right", "--count", f"{ref}...{base}"], cwd=cwd, check=False)
    if proc.returncode != 0:
        return None
    left, right = proc.stdout.split()
    return int(left), int(right)


def ref_exists(cwd: str | os.PathLike[str], ref: str) -> bool:
    return git(["rev-parse", "--verify", "--quiet", ref + "^{commit}"], cwd=cwd, check=False).returncode == 0


def add_exclude(common_dir: Path, pattern: str) -> bool:
    """Add ``pattern`` to ``info/exclude`` once; return True when it was added."""
    path = common_dir / "info" / "exclude"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        existing = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        existing = ""
    if pattern in existing.splitlines():
        return False
    with open(path, "a", encoding="utf-8") as fh:
        if existing and not existing.endswith("\n"):
            fh.write("\n")
        fh.write(pattern + "\n")
    return True
