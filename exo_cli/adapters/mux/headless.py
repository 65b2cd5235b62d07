"""Headless backend: each agent is a child process group writing to a log file.

For CI and ``-p``/``exec`` style runs. The agent gets exactly the environment
passed, stdin from /dev/null, stdout and stderr into its log (mode 0600). Each
start leaves a small record (the ``Location``, never the environment) in
``<runtime_dir>/headless/`` so that later exo processes can list, capture and stop
the agent without any external call.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from exo_cli.adapters.files import ensure_private_dir
from exo_cli.adapters.mux.base import (
    Location,
    PaneState,
    check_argv,
    check_env,
    check_send_text,
    read_records,
    record_path,
    tail_lines,
    write_record,
)
from exo_cli.adapters.proc import command_name, kill_group, pid_alive, proc_start_time, reap
from exo_cli.errors import EnvironmentError_, InvalidInput, NotFound, StateError
from exo_cli.validate import check_name


class Headless:
    """Agents as detached process groups with log files."""

    kind = "headless"

    def __init__(self, runtime_dir: Path) -> None:
        self.runtime_dir = Path(runtime_dir)
        self._statuses: dict[int, int] = {}
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def records_dir(self) -> Path:
        """Where the Location records of started agents live."""
        return ensure_private_dir(ensure_private_dir(self.runtime_dir) / "headless")

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str],
        env: Mapping[str, str],
        log_path: str | os.PathLike[str] | None = None,
    ) -> Location:
        """Start ``argv`` in ``cwd`` with exactly ``env`` in a new session, output to ``log_path``.

        ``log_path`` defaults to ``<runtime_dir>/headless/<name>.log``; it is
        appended to and created with mode 0600.
        """
        check_name(name, "agent name")
        argv = check_argv(argv)
        env = check_env(env)
        cwd = os.fspath(cwd)
        if not os.path.isdir(cwd):
            raise InvalidInput(f"Working folder {cwd} does not exist", field="cwd")
        log = Path(log_path) if log_path is not None else self.records_dir / f"{name}.log"
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.fchmod(fd, 0o600)
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        except FileNotFoundError as exc:
            raise EnvironmentError_(
                f"{argv[0]} is not installed or not on PATH", hint=f"Install {argv[0]}.", binary=argv[0]
            ) from exc
        except PermissionError as exc:
            raise EnvironmentError_(f"{argv[0]} cannot be executed: {exc}", binary=argv[0]) from exc
        finally:
            os.close(fd)
        self._children[proc.pid] = proc
        loc = Location(
            mux="headless",
            session=str(self.runtime_dir),
            pid=proc.pid,
            pgid=proc.pid,
            log=str(log),
            name=name,
            start_time=proc_start_time(proc.pid),
        )
        self._write_record(loc)
        return loc

    # ------------------------------------------------------------------ records

    def _record_path(self, name: str) -> Path:
        return record_path(self.records_dir, name)

    def _write_record(self, loc: Location) -> None:
        write_record(self._record_path(loc.name or str(loc.pid)), loc)

    def locations(self) -> list[Location]:
        """Every agent this runtime folder has a record of."""
        return read_records(self.records_dir)

    # ------------------------------------------------------------------ observe

    def _status(self, pid: int) -> int | None:
        if pid not in self._statuses:
            proc = self._children.get(pid)
            code = proc.poll() if proc is not None else reap(pid)
            if code is not None:
                self._statuses[pid] = code
        return self._statuses.get(pid)

    def _state(self, loc: Location) -> PaneState:
        pid = loc.pid or 0
        status = self._status(pid) if pid else None
        alive = status is None and pid_alive(pid, loc.start_time, reap_child=pid not in self._children)
        command = command_name(pid) if alive else None
        return PaneState(
            location=loc, alive=alive, dead_status=status, current_command=command, pid=pid or None
        )

    def list_states(self, locations: Sequence[Location] | None = None) -> dict[str, PaneState]:
        """Return the state of ``locations`` (default: every recorded agent) keyed by pid; no external call."""
        locs = self.locations() if locations is None else list(locations)
        return {loc.key: self._state(loc) for loc in locs if loc.mux == "headless"}

    def alive(self, loc: Location) -> bool:
        """Whether the agent's process still runs (zombies and reused pids count as dead)."""
        return self._state(loc).alive

    def capture(self, loc: Location, lines: int = 200) -> str:
        """Return the last ``lines`` lines of the agent's log."""
        if not loc.log:
            raise InvalidInput("Not a headless location", field="location")
        try:
            with open(loc.log, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                chunk = 8192
                data = b""
                while size > 0 and data.count(b"\n") <= lines:
                    step = min(chunk, size)
                    size -= step
                    fh.seek(size)
                    data = fh.read(step) + data
                    chunk *= 2
        except FileNotFoundError as exc:
            raise NotFound(f"Log {loc.log} does not exist", path=loc.log) from exc
        return tail_lines(data.decode("utf-8", "replace"), lines)

    def send_text(self, loc: Location, text: str, *, submit: bool = True, enter_delay: float = 0.5) -> None:
        """Refuse: a headless agent has no terminal to type into."""
        check_send_text(text)
        raise StateError(
            f"Agent {loc.name or loc.pid} runs headless and cannot be typed into",
            hint="Send it a message instead: headless agents read their mailbox through their hooks.",
            agent=loc.name,
        )

    # ------------------------------------------------------------------ stop

    def kill(self, loc: Location, *, grace: float = 3.0) -> None:
        """Stop the agent's process group: SIGTERM, then SIGKILL after ``grace`` seconds."""
        pgid = loc.pgid or loc.pid
        if not pgid:
            raise InvalidInput("Not a headless location", field="location")
        kill_group(pgid, grace=grace, leader_start_time=loc.start_time)
        if loc.pid:
            self._status(loc.pid)

    def close(self, loc: Location, *, force: bool = False) -> None:
        """Forget a finished agent's record (its log stays); a live one is refused unless ``force``."""
        if self.alive(loc):
            if not force:
                raise StateError(
                    f"Agent {loc.name or loc.pid} is still running",
                    hint="Stop it first (kill), or close with force.",
                    agent=loc.name,
                )
            self.kill(loc)
        if loc.name:
            try:
                self._record_path(loc.name).unlink()
            except FileNotFoundError:
                pass

    def attach_argv(self, loc: Location) -> list[str]:
        """The command that follows the agent's log."""
        if not loc.log:
            raise InvalidInput("Not a headless location", field="location")
        return ["tail", "-n", "200", "-F", loc.log]

    def kill_server(self) -> None:
        """Nothing to stop: headless agents run without a multiplexer server."""
