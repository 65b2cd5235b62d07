"""Shared types and process helpers of the multiplexer layer.

A ``Location`` says where an agent runs (tmux pane, Zellij tab or headless process);
a ``PaneState`` is one observation of it; ``Mux`` is the protocol every backend
implements. Processes and ``/proc`` are ``adapters.proc``'s.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from exo_cli.errors import ExternalFailure, InvalidInput
from exo_cli.lite import NamedTuple
from exo_cli.records import MUXES
from exo_cli.validate import visible

# The launcher that gives a pane's process exactly the environment exo passes.
LAUNCHER = Path(__file__).with_name("_launch.py")


class Location(NamedTuple):
    """Where an agent runs: enough to find, observe, type into and stop it later.

    ``Location`` and ``PaneState`` are records (``exo_cli.lite``'s NamedTuple), not dataclasses:
    every ``exo status`` and ``exo agents`` with agents builds them, and a dataclass costs several
    times more to define (and imports ``inspect``).
    """

    mux: str
    session: str | None = None
    window: str | None = None  # tmux window id ("@3")
    pane: str | None = None  # tmux pane id ("%3")
    tab: str | None = None  # Zellij tab name
    pid: int | None = None  # the agent process (tmux: pane_pid)
    pgid: int | None = None
    log: str | None = None  # headless: the log file
    name: str | None = None  # window / tab / agent name
    start_time: int | None = None  # /proc start time of pid, guards against pid reuse

    @property
    def key(self) -> str:
        """The key this location has in ``Mux.list_states()``."""
        if self.mux == "tmux" and self.pane:
            return self.pane
        if self.mux == "zellij" and self.tab:
            return self.tab
        return str(self.pid) if self.pid is not None else (self.name or "")

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict without the unset fields."""
        return {k: v for k, v in zip(self._fields, self, strict=True) if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Location:
        """Build a Location from ``to_dict`` output, ignoring unknown keys."""
        known = _LOCATION_FIELDS
        if data.get("mux") not in MUXES:
            raise InvalidInput(f"Invalid location: unknown multiplexer {data.get('mux')!r}", field="mux")
        return cls(**{k: v for k, v in data.items() if k in known})


_LOCATION_FIELDS = frozenset(Location._fields)


class PaneState(NamedTuple):
    """One observation of an agent's pane or process."""

    location: Location
    alive: bool
    dead_status: int | None = None
    current_command: str | None = None
    pid: int | None = None
    in_mode: bool = False
    # When its output last changed (epoch seconds: tmux, headless), or a fingerprint of its
    # activity that changes when it does (Zellij, from /proc); None when unknown.
    activity: float | str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "location": self.location.to_dict(),
            "alive": self.alive,
            "dead_status": self.dead_status,
            "current_command": self.current_command,
            "pid": self.pid,
            "in_mode": self.in_mode,
            "activity": self.activity,
        }


@runtime_checkable
class Mux(Protocol):
    """What every multiplexer backend offers (tmux, Zellij and headless implement all of it).

    ``tests/test_mux_contract.py`` checks that each backend has every method here with the
    same parameters and defaults.
    """

    kind: str

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str],
        env: Mapping[str, str],
        log_path: str | os.PathLike[str] | None = None,
    ) -> Location:
        """Start ``argv`` as agent ``name`` with exactly ``env``; return where it runs."""
        ...

    def list_states(self, locations: Sequence[Location] | None = None) -> dict[str, PaneState]:
        """Observe agents in one go, keyed by ``Location.key``.

        ``locations`` are the agents the caller wants (default: every agent the backend has
        a record of); a backend whose one listing call sees every pane (tmux) may return more.
        """
        ...

    def alive(self, loc: Location) -> bool:
        """Whether the agent at ``loc`` still runs."""
        ...

    def capture(self, loc: Location, lines: int = 200) -> str:
        """The last ``lines`` lines of the agent's screen or log."""
        ...

    def send_text(self, loc: Location, text: str, *, submit: bool = True, enter_delay: float = 0.5) -> None:
        """Type ``text`` into the agent (then Enter when ``submit``); StateError without a terminal."""
        ...

    def kill(self, loc: Location, *, grace: float = 3.0) -> None:
        """Stop the agent's process group: SIGTERM, then SIGKILL after ``grace`` seconds."""
        ...

    def close(self, loc: Location, *, force: bool = False) -> None:
        """Remove the agent's pane, tab or record (``force``: even while it runs)."""
        ...

    def attach_argv(self, loc: Location) -> list[str]:
        """The command line that shows the agent to a human."""
        ...

    def kill_server(self) -> None:
        """Stop the multiplexer server exo started for this repository, if it owns one."""
        ...


# --------------------------------------------------------------------------- records


def record_path(folder: Path, name: str, what: str = "agent name") -> Path:
    """Where the Location record of ``name`` lives in ``folder``."""
    from exo_cli.validate import check_name

    return folder / f"{check_name(name, what)}.json"


def write_record(path: Path, loc: Location) -> None:
    """Write ``loc`` to ``path`` atomically, mode 0600 (a Location, never an environment)."""
    from exo_cli.adapters.files import atomic_write

    atomic_write(path, json.dumps(loc.to_dict()), mode=0o600, fsync=False)


def read_records(folder: Path) -> list[Location]:
    """Every readable Location record in ``folder``; broken ones are skipped."""
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            out.append(Location.from_dict(json.loads(path.read_text())))
        except (OSError, ValueError, TypeError, InvalidInput):
            continue
    return out


# --------------------------------------------------------------------------- validation


def check_argv(argv: Sequence[str]) -> list[str]:
    """Return ``argv`` as a list if it is a non-empty list of NUL-free strings."""
    if isinstance(argv, str) or not argv:
        raise InvalidInput("Invalid command: expected a non-empty list of arguments", field="argv")
    out = []
    for a in argv:
        if not isinstance(a, str) or "\x00" in a:
            raise InvalidInput("Invalid command: every argument must be a string without NUL", field="argv")
        out.append(a)
    return out


def check_env(env: Mapping[str, str]) -> dict[str, str]:
    """Return ``env`` as a dict if every key and value can be put in an environment."""
    out = {}
    for k, v in env.items():
        if not isinstance(k, str) or not k or "=" in k or "\x00" in k:
            raise InvalidInput(f"Invalid environment variable name {k!r}", field="env")
        if not isinstance(v, str) or "\x00" in v:
            raise InvalidInput(f"Invalid value for environment variable {k}", field="env")
        out[k] = v
    return out


def check_send_text(text: object) -> str:
    """Return ``text`` as it may be typed into a pane: refused with a NUL; control characters made visible.

    Every backend types only what this returns, so no text (a message, a note, an answer) can
    end a bracketed paste early (``ESC[201~``) or act as a key (``ESC[Z``, Ctrl-C, a CR): every
    C0/C1 control character but newline and tab arrives as visible text (``validate.visible``).
    """
    if not isinstance(text, str):
        raise InvalidInput("Invalid text: expected a string", field="text")
    if "\x00" in text:
        raise InvalidInput("Invalid text: it contains a NUL byte", field="text")
    return visible(text)


# --------------------------------------------------------------------------- launcher


def launcher_argv(fifo: Path) -> list[str]:
    """The pane command that reads its real argv and env from ``fifo`` and execs it."""
    return [sys.executable, "-I", "-S", str(LAUNCHER), str(fifo)]


def keeper_line(keeper: Mapping[str, Any]) -> str:
    """The start request's field for an agent's keeper (``_runner.encode_keeper``; InvalidInput on a NUL)."""
    from exo_cli.adapters.mux._runner import encode_keeper

    try:
        return encode_keeper(dict(keeper))
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInput(f"Bad keeper request: {exc}", field="keeper") from exc


def make_fifo(path: Path) -> Path:
    """Create a fresh FIFO (mode 0600) at ``path``."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.mkfifo(path, 0o600)
    return path


def encode_spec(spec: Mapping[str, Any]) -> bytes:
    """Encode a start request for ``_launch.py``: NUL-separated, counted fields."""
    argv = list(spec["argv"])
    env = dict(spec["env"])
    keep = list(spec.get("keep", ()))
    fields = ["EXO1", str(spec["cwd"]), str(spec.get("pid_file") or ""), str(len(argv)), *argv, str(len(env))]
    for k, v in env.items():
        fields += [k, v]
    fields += [str(len(keep)), *keep]
    if spec.get("exit_file") or spec.get("keeper"):
        fields.append(str(spec.get("exit_file") or ""))
    if spec.get("keeper"):
        fields.append(str(spec["keeper"]))  # _runner.encode_keeper's line: the launcher starts the keeper
    if any("\0" in f for f in fields):
        raise InvalidInput("Start request contains a NUL byte", field="argv")
    return "\0".join(fields).encode("utf-8", "surrogateescape")


def deliver_spec(
    fifo: Path,
    spec: Mapping[str, Any] | bytes,
    *,
    timeout: float = 20.0,
    still_waiting: Callable[[], bool] | None = None,
) -> None:
    """Write ``spec`` (argv, env, cwd, keep, pid_file) into ``fifo`` once the launcher opens it.

    ``spec`` may also be an already encoded payload (bytes, e.g. the shell launcher's
    script). ``still_waiting`` is asked about twice a second; when it returns False (the
    pane already died) or ``timeout`` passes, ExternalFailure is raised.
    """
    data = spec if isinstance(spec, bytes) else encode_spec(spec)
    deadline = time.monotonic() + timeout
    next_check = time.monotonic() + 0.5
    delay = 0.001
    try:
        while True:
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
            now = time.monotonic()
            if now > deadline:
                raise ExternalFailure(
                    "The agent's pane did not start its launcher in time",
                    hint="Check that the Python interpreter running exo can be started by the multiplexer.",
                    fifo=str(fifo),
                )
            if still_waiting is not None and now > next_check:
                next_check = now + 0.5
                if not still_waiting():
                    raise ExternalFailure("The agent's pane exited before it started", fifo=str(fifo))
            time.sleep(delay)
            delay = min(delay * 2, 0.002)
        try:
            os.set_blocking(fd, True)
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        finally:
            os.close(fd)
    finally:
        try:
            os.unlink(fifo)
        except FileNotFoundError:
            pass


def tail_lines(text: str, lines: int) -> str:
    """Return the last ``lines`` lines of ``text`` without trailing blank lines."""
    rows = text.rstrip("\n").split("\n")
    while rows and not rows[-1].strip():
        rows.pop()
    if lines > 0:
        rows = rows[-lines:]
    return "\n".join(rows) + ("\n" if rows else "")
