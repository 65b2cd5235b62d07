"""exo's other hosts over ssh: one multiplexed connection per host, every request on stdin.

A host is a destination as ssh understands it (so the user's ~/.ssh/config, keys and agent
apply), a clone of the repository there and the command that runs exo there. exo starts one
master connection per host (``ControlMaster``, kept ``ControlPersist`` seconds) and every call
rides it, so only the first pays the handshake. The master is started on its own (a first
session running ``true``, after which ``ControlPersist`` keeps it in the background; one started
with ``-N`` refuses sessions), with no pipe of the caller's (a master would hold it open) and
its log in a file.

What exo sends (a request, and any secret an agent needs) goes on the remote exo's stdin as
one JSON line, never on a command line: the remote command is fixed text made of the
configured path and exo command. ssh's own exit status 255 means the host could not be
reached (exo never exits 255).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exo_cli.errors import EnvironmentError_, ExternalFailure

SSH_FAILED = 255  # ssh's exit status when the connection (not the remote command) failed
CALL = "host-call"  # the remote exo's subcommand that answers one request
DEFAULT_TIMEOUT = 300.0  # a spawn of several agents on a loaded host takes a while
MAX_ANSWER = 16 << 20  # the most output of one call exo reads from a host (a diff is at most 2 MB of patch)


class Unreachable(EnvironmentError_):
    """The host's ssh connection failed (down, refused, unknown, authentication)."""


@dataclass(frozen=True)
class Host:
    """One ``[hosts.NAME]`` entry, resolved: how to reach it and run exo there."""

    name: str
    dest: str  # the ssh destination
    path: str  # the clone's path there
    exo: tuple[str, ...] = ("exo",)  # the command that runs exo there
    ssh: tuple[str, ...] = ("ssh",)  # the local ssh client argv
    control_dir: str = ""  # where the master's socket and log live (exo's private runtime folder)
    persist: int = 600  # ControlPersist seconds
    env: tuple[str, ...] = ()  # extra variable names (or globs) the host's agents get
    hide: tuple[str, ...] = ()  # variable names (or globs) kept out of the ssh client's own environment

    # -- argv -------------------------------------------------------------------------------
    @property
    def control_path(self) -> str:
        return os.path.join(self.control_dir, f"ssh-{self.name}")

    def options(self) -> list[str]:
        """The options every ssh call of this host carries (the shared master, never a prompt)."""
        return ["-o", f"ControlPath={self.control_path}", "-o", "BatchMode=yes", "-o", "ConnectTimeout=15",
                "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=2"]

    def command(self, args: Sequence[str]) -> str:
        """The remote shell command: into the clone, then exo with ``args`` (every word quoted)."""
        return f"cd {shlex.quote(self.path)} && exec {shlex.join([*self.exo, *args])}"

    def argv(self, args: Sequence[str], *, tty: bool = False) -> list[str]:
        """The local argv that runs exo ``args`` on the host (``tty``: an interactive terminal, for attach)."""
        return [*self.ssh, *self.options(), *(["-t"] if tty else ["-T"]), "--", self.dest, self.command(args)]

    # -- the master connection -----------------------------------------------------------------
    def ensure_master(self) -> None:
        """Start the host's master connection unless one runs; Unreachable when it cannot connect."""
        if os.path.exists(self.control_path):
            return  # a stale socket only makes ssh connect on its own (slower, still right)
        from exo_cli.adapters.files import locked

        os.makedirs(self.control_dir, mode=0o700, exist_ok=True)
        with locked(Path(self.control_dir) / f"ssh-{self.name}.lock"):
            if os.path.exists(self.control_path):
                return
            log = Path(self.control_dir) / f"ssh-{self.name}.log"
            log.unlink(missing_ok=True)
            argv = [*self.ssh, *self.options(), "-o", "ControlMaster=yes", "-o", f"ControlPersist={self.persist}",
                    "-E", str(log), "-T", "--", self.dest, "true"]  # with -N the master would refuse sessions
            try:  # its errors go to the log too (a file: the master it forks keeps what it was given)
                with open(log, "ab") as err:
                    os.chmod(log, 0o600)
                    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                          timeout=60, check=False, env=self.environ())
            except subprocess.TimeoutExpired as exc:
                raise self.unreachable("ssh did not connect within 60 s") from exc
            except OSError as exc:
                raise EnvironmentError_(f"Cannot run ssh ({self.ssh[0]}): {exc.strerror}",
                                        hint="Install the OpenSSH client, or set [ssh] command.", host=self.name) from exc
            if proc.returncode != 0:
                try:
                    why = log.read_text(errors="replace").strip().splitlines()
                except OSError:
                    why = []
                raise self.unreachable(why[-1] if why else f"ssh exited with status {proc.returncode}")

    def unreachable(self, why: str) -> Unreachable:
        from exo_cli.validate import visible

        return Unreachable(f"Host {self.name} ({self.dest}) is unreachable: {visible(why)}",
                           hint=f"Check that `ssh {self.dest}` works from here; `exo hosts` shows every host.",
                           host=self.name, reason="unreachable")

    # -- calls ------------------------------------------------------------------------------------
    def environ(self) -> dict[str, str]:
        """The ssh client's environment: this process's, without the variables ``hide`` names.

        ssh never needs an agent's keys or exo's proof, and a ``SendEnv`` in the user's ssh
        configuration would hand them to the server (and to its logs, and to ssh's own debug log)."""
        return {k: v for k, v in os.environ.items() if not any(fnmatch.fnmatchcase(k, p) for p in self.hide)}

    def run(self, args: Sequence[str], *, stdin: str = "", timeout: float | None = DEFAULT_TIMEOUT,
            cancelled: Callable[[], bool] | None = None, hold: bool = False) -> Answer:
        """Run exo ``args`` on the host; stdin is the only input; at most ``MAX_ANSWER`` bytes of output.

        ``hold`` keeps the session's stdin open until the command ends, so that exo there sees
        its end (the connection cut, this process gone) as the caller leaving. ``cancelled`` is
        asked twice a second: when it says so (an MCP client cancelled the call), the session
        is closed and ExternalFailure ``reason: "cancelled"`` raised; so is an answer longer
        than ``MAX_ANSWER`` (``reason: "too-long"``), and a host silent past ``timeout``.
        """
        import threading
        import time

        self.ensure_master()
        argv = self.argv(args)
        deadline = None if timeout is None else time.monotonic() + timeout
        child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=self.environ())
        assert child.stdin is not None and child.stdout is not None and child.stderr is not None
        out, err = _Drain(child.stdout, MAX_ANSWER, keep_tail=False), _Drain(child.stderr, 1 << 16, keep_tail=True)

        def feed() -> None:  # a thread: a host that reads nothing never blocks the deadline
            try:
                child.stdin.write(stdin.encode())  # type: ignore[union-attr]
                child.stdin.flush()  # type: ignore[union-attr]
                if not hold:
                    child.stdin.close()  # type: ignore[union-attr]
            except (OSError, ValueError):
                pass  # ssh ended early: its status says why

        threads = [threading.Thread(target=t, daemon=True) for t in (feed, out.run, err.run)]
        for t in threads:
            t.start()
        why = None
        while True:
            try:
                child.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                why = ("cancelled" if cancelled is not None and cancelled() else "too-long" if out.over else
                       "timeout" if deadline is not None and time.monotonic() >= deadline else None)
            if why is not None:
                child.kill()
                child.wait()
                break
        with contextlib.suppress(OSError, ValueError):
            child.stdin.close()
        for t in threads[1:]:
            t.join(timeout=10)  # a process ssh started (a ProxyCommand) may keep a pipe open: not waited for
        stderr = err.text()
        if why is not None or out.over:
            why = why or "too-long"  # it ended by itself, its output past the limit
            message = {"timeout": f"Host {self.name} did not answer within {timeout or 0:g} s",
                       "cancelled": f"The call to host {self.name} was cancelled",
                       "too-long": f"exo on host {self.name} answered with more than {MAX_ANSWER >> 20} MiB"}[why]
            raise ExternalFailure(message, host=self.name, reason=why)
        if "Control socket connect" in stderr:  # a master that died left its socket: start anew next time
            with contextlib.suppress(OSError):
                os.unlink(self.control_path)
        if child.returncode == SSH_FAILED:
            lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
            raise self.unreachable(lines[-1] if lines else "ssh failed")
        if child.returncode < 0:  # ssh itself was killed: the connection is gone, whatever happened there
            raise self.unreachable(f"ssh ended by signal {-child.returncode}")
        return Answer(child.returncode, out.data(), stderr)

    def call(self, request: Mapping[str, Any], *, timeout: float | None = DEFAULT_TIMEOUT,
             cancelled: Callable[[], bool] | None = None) -> Answer:
        """Send one request to the host's exo (``host-call``) and return its raw answer (``wire`` reads it).

        The session's stdin stays open until the answer is in (the request says ``hold``)."""
        line = json.dumps({**request, "hold": True}, ensure_ascii=True) + "\n"
        return self.run([CALL], stdin=line, timeout=timeout, cancelled=cancelled, hold=True)


@dataclass(frozen=True)
class Answer:
    """What exo on a host printed for one call (its standard output as bytes, at most ``MAX_ANSWER``)."""

    returncode: int
    stdout: bytes
    stderr: str


class _Drain:
    """Reads one output of a child to its end, keeping at most ``limit`` bytes (the first ones, or the last)."""

    def __init__(self, stream: Any, limit: int, *, keep_tail: bool) -> None:
        self.stream, self.limit, self.keep_tail = stream, limit, keep_tail
        self.chunks: list[bytes] = []
        self.size = 0
        self.over = False

    def run(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while block := self.stream.read1(1 << 16):
                self.size += len(block)
                if self.keep_tail:
                    self.chunks.append(block)
                    while self.size - len(self.chunks[0]) >= self.limit:
                        self.size -= len(self.chunks.pop(0))
                elif self.size > self.limit:
                    self.over = True
                    self.chunks = []
                    break  # the caller kills the child
                else:
                    self.chunks.append(block)

    def data(self) -> bytes:
        return b"".join(self.chunks)

    def text(self) -> str:
        return self.data().decode("utf-8", "replace")


def interactive(host: Host, args: Sequence[str]) -> list[str]:
    """The argv of an interactive ssh session running exo ``args`` on the host (a terminal of its own)."""
    host.ensure_master()
    return host.argv(args, tty=True)


def split_command(value: str | Sequence[str]) -> tuple[str, ...]:
    """A configured command (a string, split as a shell would, or a list) as argv words."""
    return tuple(shlex.split(value) if isinstance(value, str) else value)
