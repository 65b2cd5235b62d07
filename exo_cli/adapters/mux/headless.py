"""Headless backend: each agent is a process group, led by exo's runner, writing to a log file.

For CI and ``-p``/``exec`` style runs. Every agent runs under ``_runner.py``, which gets the
request (argv, environment, folder, how messages reach the agent) through a pipe, holds it in
memory, and starts the agent with exactly that environment, output into the log (mode 0600).
Each start leaves a small record (the ``Location``, never the environment) in
``<runtime_dir>/headless/`` so that later exo processes can list, capture, message and stop
the agent without any external call; the runner keeps the agent's state and its last exit
status next to it (``<name>.state``).

``send_text`` hands a message to the runner (a file in ``<name>.inbox/`` and a byte on the
``<name>.wake`` FIFO): with ``channel="resume"`` it starts the CLI's next turn of the same
session (``claude -p --resume``, ``codex exec resume``, ``gemini -p --resume``); with
``channel="stdin"`` it writes the message to the agent's stdin; with the default ``"none"``
the agent's stdin is /dev/null and messages are refused.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    import subprocess

RUNNER = Path(__file__).with_name("_runner.py")
CHANNELS = ("none", "stdin", "resume")


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
        channel: Mapping[str, Any] | None = None,
    ) -> Location:
        """Start ``argv`` in ``cwd`` with exactly ``env`` in a new session, output to ``log_path``.

        ``log_path`` defaults to ``<runtime_dir>/headless/<name>.log``; it is appended to
        and created with mode 0600. ``channel`` says how messages reach the agent:
        ``{"mode": "none"}`` (the default: stdin is /dev/null), ``{"mode": "stdin"}``, or
        ``{"mode": "resume", "resume": [... "{session}" ... "{message}" ...], "session": id,
        "session_from": "codex-json"}`` (see ``_runner.py``).
        """
        check_name(name, "agent name")
        argv = check_argv(argv)
        env = check_env(env)
        cwd = os.fspath(cwd)
        if not os.path.isdir(cwd):
            raise InvalidInput(f"Working folder {cwd} does not exist", field="cwd")
        chan = dict(channel or {"mode": "none"})
        if chan.get("mode") not in CHANNELS:
            raise InvalidInput(f"Invalid message channel {chan.get('mode')!r}", field="channel")
        if chan["mode"] == "resume":
            chan["resume"] = check_argv(chan.get("resume") or [])
        self._check_program(argv[0], env, cwd)
        import subprocess  # here: observing agents (every `exo status`) never needs it

        log = Path(log_path) if log_path is not None else self.records_dir / f"{name}.log"
        folder = self.records_dir
        inbox = folder / f"{name}.inbox"
        inbox.mkdir(mode=0o700, exist_ok=True)
        wake = folder / f"{name}.wake"
        if not wake.exists():
            os.mkfifo(wake, 0o600)
        self._write_state(name, {"state": "starting", "mode": chan["mode"]})
        request = {"argv": argv, "env": env, "cwd": cwd, "dir": str(folder), "name": name, **chan}
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.fchmod(fd, 0o600)
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(RUNNER)],
                cwd=cwd,
                env={},
                stdin=subprocess.PIPE,
                stdout=fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(fd)
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(request).encode("utf-8"))
        finally:
            proc.stdin.close()
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

    @staticmethod
    def _check_program(program: str, env: Mapping[str, str], cwd: str) -> None:
        """EnvironmentError_ now, rather than an agent that dies at once, when ``program`` cannot run."""
        from exo_cli.adapters.proc import which

        if os.sep in program:
            path = program if os.path.isabs(program) else os.path.join(cwd, program)
            if not os.path.exists(path):
                raise EnvironmentError_(f"{program} is not installed or not on PATH", hint=f"Install {program}.",
                                        binary=program)
            if not os.access(path, os.X_OK):
                raise EnvironmentError_(f"{program} cannot be executed", binary=program)
            return
        if which(program, env.get("PATH", os.defpath)) is None:
            raise EnvironmentError_(f"{program} is not installed or not on PATH", hint=f"Install {program}.",
                                    binary=program)

    # ------------------------------------------------------------------ records

    def _record_path(self, name: str) -> Path:
        return record_path(self.records_dir, name)

    def _write_record(self, loc: Location) -> None:
        write_record(self._record_path(loc.name or str(loc.pid)), loc)

    def locations(self) -> list[Location]:
        """Every agent this runtime folder has a record of."""
        return read_records(self.records_dir)

    def _state_path(self, name: str) -> Path:
        return self.records_dir / f"{check_name(name, 'agent name')}.state"

    def _write_state(self, name: str, data: Mapping[str, Any]) -> None:
        from exo_cli.adapters.files import atomic_write

        atomic_write(self._state_path(name), json.dumps(dict(data)), mode=0o600, fsync=False)

    def runner_state(self, loc: Location) -> dict[str, Any]:
        """What the agent's runner last wrote: state, mode, turns, rc, session ({} when unknown)."""
        if not loc.name:
            return {}
        try:
            data = json.loads(self._state_path(loc.name).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    # ------------------------------------------------------------------ observe

    def _status(self, loc: Location) -> int | None:
        pid = loc.pid or 0
        if pid not in self._statuses:
            proc = self._children.get(pid)
            code = proc.poll() if proc is not None else reap(pid)
            if code is None and pid not in self._children and not pid_alive(pid, loc.start_time, reap_child=False):
                state = self.runner_state(loc)  # not our child: the runner recorded the agent's status
                rc = state.get("rc") if state.get("state") == "exited" else None
                code = rc if isinstance(rc, int) else None
            if code is not None:
                self._statuses[pid] = code
        return self._statuses.get(pid)

    def _state(self, loc: Location) -> PaneState:
        pid = loc.pid or 0
        status = self._status(loc) if pid else None
        alive = status is None and pid_alive(pid, loc.start_time, reap_child=pid not in self._children)
        command = command_name(pid) if alive else None
        activity = None
        if loc.log:
            try:
                activity = os.stat(loc.log).st_mtime
            except OSError:
                activity = None
        return PaneState(
            location=loc, alive=alive, dead_status=status, current_command=command, pid=pid or None,
            activity=activity,
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
        """Hand ``text`` to the agent's runner: its next turn (resume) or a line on its stdin.

        Refused (StateError) when the agent has exited or its channel is ``none``. ``submit``
        and ``enter_delay`` have no meaning here (a message is always submitted whole).
        """
        text = check_send_text(text)
        name = loc.name or str(loc.pid)
        mode = self.runner_state(loc).get("mode")
        if mode not in ("stdin", "resume"):
            raise StateError(
                f"Agent {name} runs headless without a message channel and cannot be sent text",
                hint="Send it a message instead: it gets it at its next hook, or through `exo wait` in the agent.",
                agent=loc.name,
            )
        if not self.alive(loc):
            raise StateError(f"Agent {name} has exited", agent=loc.name)
        inbox = self.records_dir / f"{check_name(name, 'agent name')}.inbox"
        final = inbox / f"{time.time_ns():020d}-{os.urandom(4).hex()}.msg"
        tmp = inbox / f".{final.name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write(text)
        os.replace(tmp, final)
        try:
            wake = os.open(self.records_dir / f"{name}.wake", os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno in (errno.ENXIO, errno.ENOENT):  # no runner reads it: it is gone
                final.unlink(missing_ok=True)
                raise StateError(f"Agent {name} has exited", agent=loc.name) from exc
            raise
        try:
            os.write(wake, b"\n")
        except BlockingIOError:
            pass  # the FIFO is full of wake-ups already: the runner will look
        finally:
            os.close(wake)

    # ------------------------------------------------------------------ stop

    def kill(self, loc: Location, *, grace: float = 3.0) -> None:
        """Stop the agent's process group: SIGTERM, then SIGKILL after ``grace`` seconds."""
        pgid = loc.pgid or loc.pid
        if not pgid:
            raise InvalidInput("Not a headless location", field="location")
        kill_group(pgid, grace=grace, leader_start_time=loc.start_time)
        if loc.pid:
            self._status(loc)

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
            folder = self.records_dir
            for path in (self._record_path(loc.name), folder / f"{loc.name}.state", folder / f"{loc.name}.wake"):
                path.unlink(missing_ok=True)
            inbox = folder / f"{loc.name}.inbox"
            for leftover in inbox.glob("*") if inbox.is_dir() else []:
                leftover.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                inbox.rmdir()

    def attach_argv(self, loc: Location) -> list[str]:
        """The command that follows the agent's log, every control character made visible (``_follow``)."""
        if not loc.log:
            raise InvalidInput("Not a headless location", field="location")
        return [sys.executable, "-m", "exo_cli.adapters.mux._follow", loc.log, "200"]

    def kill_server(self) -> None:
        """Nothing to stop: headless agents run without a multiplexer server."""
