"""The merge queue's gates: throw-away candidate clones, and each gate run as a process group with a deadline.

``run_gate`` is the one function every gate (and every ``merge.setup`` command) runs through,
so that a sandbox (issue 31) can wrap it in one place: today it runs the command in a session
of its own (its process group and everything carrying its ``EXO_RUN`` token) inside the
clone, output to a log file, and ends the whole session at the deadline or once the command
has exited (a server a gate left running does not outlive it). Given a sandbox ``Plan``
(``ops/gatesandbox``: ``[sandbox] mode`` decides) it runs the command in bubblewrap instead.

``make_clone`` makes the candidate's clone: ``git clone --shared --no-checkout`` of the
repository into a fresh folder under exo's state (never reused; ``remove_clone`` removes it,
and the queue's runner removes every leftover of a base it advances, say after ``kill -9``).
The candidate commit is built in the repository itself from git objects only (no checkout, no
ref but exo's own under ``refs/exo/queue/``), so the clone sees it through its alternates.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from exo_cli.adapters.git import Git
from exo_cli.adapters.proc import TOKEN_VAR, end_session, run_token
from exo_cli.adapters.rmtree import remove_tree
from exo_cli.errors import EnvironmentError_

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from exo_cli.adapters.sandbox import Plan

TAIL_BYTES = 4000  # the end of a failing gate's log kept for the bounce message


@dataclass(frozen=True)
class GateRun:
    """One finished gate: exit code (None: it timed out and was ended), its log file and the log's tail."""

    command: str
    code: int | None
    timed_out: bool
    log: str
    tail: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.code == 0 and not self.timed_out


def argv_of(command: str | Sequence[str]) -> list[str]:
    """The argv of a configured command: a string runs under ``sh -c``, a list as it is."""
    return ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)


def shown(command: str | Sequence[str]) -> str:
    import shlex

    return command if isinstance(command, str) else shlex.join(command)


def run_gate(clone: str | os.PathLike[str], command: str | Sequence[str], timeout: float,
             env: Mapping[str, str], log: str | os.PathLike[str], *, plan: Plan | None = None,
             token: str | None = None) -> GateRun:
    """Run ``command`` in ``clone`` with ``env``, output appended to ``log``; end it all at ``timeout``.

    With ``plan`` (a sandbox whose cwd is ``clone``) it runs inside bubblewrap with the plan's
    environment instead of ``env``: ending bwrap's session at the deadline ends the sandbox's
    pid namespace, so every process the gate started inside goes with it. ``token``: the
    ``EXO_RUN`` token its processes carry (``clone_token``: what a dead runner's successor ends).
    """
    argv = argv_of(command)
    if plan is None:
        token = token or run_token()
        full = {**env, TOKEN_VAR: token}
        # posix_spawn has no cwd (and a chdir here would move every thread): a shell enters the clone first
        enter = ["/bin/sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", os.fspath(clone), *argv]
    else:
        token = None  # never inside a sandbox (NEVER_ENV): its pid namespace ends it all
        enter, full = _sandboxed(plan, argv)
    started = time.monotonic()
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, f"$ {shown(command)}\n".encode())
        actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                   (os.POSIX_SPAWN_DUP2, fd, 1), (os.POSIX_SPAWN_DUP2, fd, 2)]
        try:
            pid = os.posix_spawnp(enter[0], enter, full, file_actions=actions, setsid=True)
        except OSError as exc:
            os.write(fd, f"could not start: {exc}\n".encode())
            return GateRun(shown(command), 127, False, str(log), f"could not start: {exc}", 0.0)
        code, timed_out = _wait(pid, timeout)
        if timed_out:
            code, _ = end_session(pid, token=token)
            os.write(fd, f"\ntimed out after {timeout:g}s: the gate and every process it started were ended\n".encode())
        else:
            with contextlib.suppress(OSError):  # what it left running in its session goes too
                end_session(pid, token=token, grace=1.0)
        os.write(fd, f"[exit {code}]\n".encode())
    finally:
        os.close(fd)
    return GateRun(shown(command), None if timed_out else code, timed_out, str(log), tail(log),
                   time.monotonic() - started)


def _sandboxed(plan: Plan, argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """The bwrap command line and environment running ``argv`` in ``plan``; EnvironmentError without bwrap."""
    from dataclasses import replace

    from exo_cli.adapters import sandbox

    found = sandbox.bwrap_path(plan.env) or sandbox.bwrap_path()
    if found is None:
        raise EnvironmentError_("bubblewrap is not installed (no bwrap on PATH): the merge gates cannot be sandboxed",
                                hint="Install it (Debian/Ubuntu: apt-get install bubblewrap), or set [sandbox] mode "
                                     "= \"auto\" or \"off\".")
    return sandbox.build(replace(plan, argv=tuple(argv)), bwrap=found)


def _wait(pid: int, timeout: float) -> tuple[int | None, bool]:
    """Wait for ``pid`` (our child) up to ``timeout``: (exit code, False), or (None, True) at the deadline."""
    import select

    deadline = time.monotonic() + timeout
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status), False
            left = deadline - time.monotonic()
            if left <= 0:
                return None, True
            if pidfd is not None:
                select.select([pidfd], [], [], left)
            else:
                time.sleep(min(left, 0.05))
    finally:
        if pidfd is not None:
            os.close(pidfd)


def tail(log: str | os.PathLike[str], size: int = TAIL_BYTES) -> str:
    """The last ``size`` bytes of ``log`` as text (from a line start when it was cut)."""
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            f.seek(max(0, end - size))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    if end > size and "\n" in text:
        text = text.split("\n", 1)[1]
    return text


def make_clone(repo: str | os.PathLike[str], folder: str | os.PathLike[str], commit: str) -> str:
    """A fresh ``git clone --shared`` of ``repo`` in ``folder`` (which must not exist), ``commit`` checked out."""
    dest = Path(folder)
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if dest.exists():
        raise FileExistsError(str(dest))  # never reused
    Git(dest.parent).run(["clone", "-q", "--shared", "--no-checkout", os.fspath(repo), str(dest)])
    Git(dest).run(["checkout", "-q", "--detach", commit])
    return str(dest)


RUN_SUFFIX = ".run"  # beside a clone: the EXO_RUN token of the gates run in it


def clone_token(folder: str | os.PathLike[str]) -> str:
    """A fresh ``EXO_RUN`` token for the gates run in the clone ``folder``, kept beside it (``<folder>.run``) so that
    a runner killed mid-gate leaves the next one a way to end what its gate left running."""
    from exo_cli.adapters.files import atomic_write

    token = run_token()
    atomic_write(Path(os.fspath(folder).rstrip("/") + RUN_SUFFIX), token + "\n", mode=0o600, fsync=False)
    return token


def remove_clone(folder: str | os.PathLike[str]) -> None:
    """End what its gates left running (carrying its token), then remove a candidate clone (folders a gate made
    read-only included, no link it planted followed) and its token file."""
    import signal

    from exo_cli.adapters.proc import carrying

    run = os.fspath(folder).rstrip("/") + RUN_SUFFIX
    try:
        with open(run, encoding="utf-8") as f:
            token = f.read(200).strip()
    except OSError:
        token = ""
    if token:
        for pid in set(carrying(TOKEN_VAR, token)) - {os.getpid()}:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    remove_tree(folder)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(run)


def leftovers(parent: str | os.PathLike[str]) -> list[str]:
    """The candidate clones left under ``parent`` (a runner that died): folders, and token files whose folder went."""
    try:
        found = {str(p).removesuffix(RUN_SUFFIX) for p in Path(parent).iterdir()
                 if p.is_dir() or p.name.endswith(RUN_SUFFIX)}
    except OSError:
        return []
    return sorted(found)
