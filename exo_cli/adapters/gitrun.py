"""git's runner: one git process with hooks off, a deadline, and nothing left behind.

Every git command exo runs goes through ``run_git`` (``Git.run`` and ``Git._exec`` call it):

- **No hook runs.** An agent can point ``core.hooksPath`` anywhere with ``git config``, in its
  worktree's config or in the shared one (husky's ``prepare`` script does exactly that), and a
  hook runs with the rights and identity of whoever runs git: for exo's merges, the human's
  or the TL's. So every call gets ``-c core.hooksPath=<an empty folder exo owns>``
  (``files.empty_dir``), which beats every config file, and ``-c core.fsmonitor=false`` (the
  other program a repository's config makes every ``git status`` run). Git LFS's pre-push hook
  is the one hook whose work matters: ``Git.push`` pushes LFS objects itself (``gitremote``).
- **A deadline that ends everything.** git runs in a session of its own
  (``procrun.run_captured``); at the deadline that session, and every process that still
  carries the call's token, is ended: a filter, a credential helper or ssh it started goes too.
- **Only its own locks.** SIGTERM lets git remove its lock files; those still there after
  SIGKILL are removed when the call's own processes held them open and they were not there
  before the call (``gitdir.lock_files`` before, ``gitdir.created_locks`` after): another
  process's lock is never touched.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from exo_cli.adapters.files import empty_dir
from exo_cli.adapters.gitdir import created_locks, lock_files, remove_locks
from exo_cli.adapters.procrun import run_captured
from exo_cli.errors import EnvironmentError_

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from exo_cli.adapters.gitdir import Locks

# Keep git from prompting or paging, whatever the user's config says.
GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "LC_ALL": "C"}
# A rebase or merge must never wait for an editor in an agent's (or the hook's) process.
NO_EDITOR = {"GIT_EDITOR": "true", "GIT_SEQUENCE_EDITOR": "true"}
# The git commands that never take a lock file: no snapshot of the locks before them.
READERS = frozenset({"rev-parse", "for-each-ref", "log", "cat-file", "ls-files", "rev-list", "var", "merge-base",
                     "cherry", "ls-remote", "diff", "show", "merge-tree", "symbolic-ref", "bundle", "grep"})


class Finished(NamedTuple):
    """A finished git process (the fields of ``subprocess.CompletedProcess`` exo reads)."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def hooks_off() -> list[str]:
    """The options that keep git from running a hook or an fsmonitor program (before the command's name)."""
    return ["-c", f"core.hooksPath={empty_dir()}", "-c", "core.fsmonitor=false"]


def command_of(args: Sequence[str]) -> str:
    """The git command in ``args`` (after any ``-c key=value``)."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] == "-c" else 1
    return args[i] if i < len(args) else ""


def run_git(path: str, args: Sequence[str], environ: Mapping[str, str] | None, *, input: bytes | None,
            env: Mapping[str, str] | None, timeout: float) -> tuple[list[str], int, bytes, bytes]:
    """Run ``git -C path args`` with hooks off and a deadline; (argv, exit code, stdout, stderr)."""
    full = dict(os.environ if environ is None else environ)
    full.update(GIT_ENV)
    if env:
        full.update(env)
    argv = ["git", "-C", path, *hooks_off(), *args]
    before: Locks | None = None if command_of(args) in READERS else lock_files(path)
    try:
        got = run_captured(argv, full, timeout, input, fifo_watch=True)
    except FileNotFoundError as exc:
        raise EnvironmentError_("git is not installed", hint="Install git.") from exc
    err = got.err
    if got.on_fifo:  # a named pipe in a checkout (a .gitignore, say) or named by a configuration: never written
        err += (b"\nended: git waited to open a FIFO (a named pipe) nobody writes, in the checkout or named by a "
                b"configuration; remove it")
    if got.timed_out or got.on_fifo:
        ours = created_locks(got.held, before)
        removed = remove_locks(ours)
        if got.timed_out:
            err += f"\ntimed out after {timeout}s: git and every process it started were ended".encode()
        if removed:
            err += f"; removed the lock files it had created: {', '.join(removed)}".encode()
        left = sorted(p for p in got.held if p not in removed and os.path.lexists(p))
        if left:
            err += f"; left lock files it may not own: {', '.join(left)}".encode()
    return argv, got.code, got.out, err
