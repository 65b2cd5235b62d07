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
                                          timeout=60, check=False)
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
    def run(self, args: Sequence[str], *, stdin: str = "", timeout: float | None = DEFAULT_TIMEOUT,
            cancelled: Callable[[], bool] | None = None) -> subprocess.CompletedProcess[str]:
        """Run exo ``args`` on the host; stdin is the only input.

        ``cancelled`` is asked twice a second: when it says so (an MCP client cancelled the call),
        the session is closed and ExternalFailure ``reason: "cancelled"`` raised.
        """
        import time

        self.ensure_master()
        argv = self.argv(args)
        deadline = None if timeout is None else time.monotonic() + timeout
        child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, errors="replace")
        given: str | None = stdin
        while True:
            try:
                out, err = child.communicate(input=given, timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                given = None  # sent once: communicate keeps writing it
                why = ("cancelled" if cancelled is not None and cancelled() else
                       "timeout" if deadline is not None and time.monotonic() >= deadline else None)
                if why is not None:
                    child.kill()
                    child.communicate()
                    raise ExternalFailure(f"Host {self.name} did not answer within {timeout:g} s" if why == "timeout"
                                          else f"The call to host {self.name} was cancelled", host=self.name,
                                          reason=why) from None
        proc = subprocess.CompletedProcess(argv, child.returncode, out, err)
        if "Control socket connect" in proc.stderr:  # a master that died left its socket: start anew next time
            with contextlib.suppress(OSError):
                os.unlink(self.control_path)
        if proc.returncode == SSH_FAILED:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            raise self.unreachable(lines[-1] if lines else "ssh failed")
        return proc

    def call(self, request: Mapping[str, Any], *, timeout: float | None = DEFAULT_TIMEOUT,
             cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
        """Send one request to the host's exo (``host-call``) and return its JSON answer."""
        proc = self.run([CALL], stdin=json.dumps(request, ensure_ascii=True) + "\n", timeout=timeout,
                        cancelled=cancelled)
        for line in reversed(proc.stdout.splitlines()):
            if line.startswith("{"):
                try:
                    answer = json.loads(line)
                except ValueError:
                    break
                if isinstance(answer, dict) and "ok" in answer:
                    return answer
                break
        from exo_cli.validate import visible

        tail = (proc.stderr.strip() or proc.stdout.strip())[-400:]
        raise ExternalFailure(f"exo on host {self.name} gave no answer (exit status {proc.returncode})"
                              + (f": {visible(tail)}" if tail else ""),
                              hint=f"Check [hosts.{self.name}] exo and path; `exo doctor --hosts` checks each host.",
                              host=self.name, returncode=proc.returncode)


def interactive(host: Host, args: Sequence[str]) -> list[str]:
    """The argv of an interactive ssh session running exo ``args`` on the host (a terminal of its own)."""
    host.ensure_master()
    return host.argv(args, tty=True)


def split_command(value: str | Sequence[str]) -> tuple[str, ...]:
    """A configured command (a string, split as a shell would, or a list) as argv words."""
    return tuple(shlex.split(value) if isinstance(value, str) else value)
