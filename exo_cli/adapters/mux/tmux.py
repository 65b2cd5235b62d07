"""tmux backend: one private server (``tmux -L <socket>``), one session, one window per agent.

Agents start through exo's launcher (``_launch.py``) so that they get exactly the
environment of the spawning call, never the server's. Status comes from one
batched ``list-panes -a`` call. Text is typed through a uniquely named buffer
pasted with bracketed paste, then Enter after a pause, serialized per pane with a
file lock and confirmed by watching the screen.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from exo_cli.adapters.files import ensure_private_dir, locked, runtime_dir_for
from exo_cli.adapters.mux import _launch, tmux_socket
from exo_cli.adapters.mux.base import (
    Location,
    PaneState,
    check_argv,
    check_env,
    check_send_text,
    deliver_spec,
    encode_spec,
    keeper_line,
    launcher_argv,
    make_fifo,
    tail_lines,
)
from exo_cli.adapters.proc import kill_group, proc_start_time
from exo_cli.errors import EnvironmentError_, ExoError, InvalidInput, NotFound, StateError, external
from exo_cli.validate import check_name

PLACEHOLDER = "_exo"
# Variables tmux sets for the pane that the agent keeps on top of the given env.
PANE_VARS = ("TERM", "TMUX", "TMUX_PANE")
# The only variables of the calling process the long-running server starts with.
SERVER_VARS = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE",
    "TERM", "TMUX_TMPDIR", "XDG_RUNTIME_DIR", "TZ",
)  # fmt: skip
_FIELDS = (
    "#{session_name}",
    "#{window_id}",
    "#{pane_id}",
    "#{pane_pid}",
    "#{pane_dead}",
    "#{pane_dead_status}",
    "#{pane_dead_signal}",
    "#{pane_in_mode}",
    "#{pane_current_command}",
    "#{window_activity}",
    "#{window_name}",
)
_LIST_FORMAT = "\t".join(_FIELDS)
# "server exited unexpectedly": the client reached a server that was shutting down (just killed).
_NO_SERVER = ("no server running", "error connecting to", "No such file or directory",
              "server exited unexpectedly")

LAUNCHERS = ("auto", "sh", "python")
_UNSET = object()
_programs: object = _UNSET  # the shell launcher's (dash, env), looked up once per process

_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


class StartRequest(NamedTuple):
    """One window for ``Tmux.start_many``: what ``Tmux.start`` takes."""

    name: str
    argv: Sequence[str]
    cwd: str | os.PathLike[str]
    env: Mapping[str, str]
    keeper: Mapping[str, object] | None = None  # see Tmux.start


class _Pending(NamedTuple):
    slot: int  # its place in the call's results
    name: str
    fifo: Path
    payload: bytes
    args: list[str]


def literal(text: str) -> str:
    """``text`` for an argument tmux expands as a format (a window's start folder and name, a message):
    ``#`` doubled, so that ``#{...}`` stays text and ``#(command)`` runs nothing."""
    return text.replace("#", "##")


def _tmux_arg(arg: str) -> str:
    """Protect an argument ending in ``;`` (tmux would take it as a command separator)."""
    return arg[:-1] + "\\;" if arg.endswith(";") else arg


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _dead_status(dead: str, status: str, sig: str) -> int | None:
    """Exit status of a dead pane; killed by a signal N gives -N (as subprocess does).

    tmux can report a pane dead (its terminal closed) a moment before it has the
    status, so a dead pane may briefly have None.
    """
    if dead != "1":
        return None
    if status.lstrip("-").isdigit():
        return int(status)
    if sig.isdigit():
        return -int(sig)
    return None


class Tmux:
    """A private tmux server holding one session of agent windows."""

    kind = "tmux"

    def __init__(
        self,
        socket_name: str,
        session: str,
        *,
        runtime_dir: Path | None = None,
        binary: str = "tmux",
        width: int = 200,
        height: int = 50,
        history_limit: int = 50000,
        confirm_timeout: float = 1.5,
        launcher: str = "auto",
    ) -> None:
        if launcher not in LAUNCHERS:
            raise InvalidInput(f"Invalid launcher {launcher!r}", hint=f"Use one of: {', '.join(LAUNCHERS)}.")
        self.launcher = launcher
        self.socket_name = check_name(socket_name, "tmux socket name")
        self.session = check_name(session, "tmux session name")
        if runtime_dir is None:
            runtime_dir = runtime_dir_for(socket_name)
        self.runtime_dir = Path(runtime_dir)
        self.binary = binary
        self.width = width
        self.height = height
        self.history_limit = history_limit
        self.confirm_timeout = confirm_timeout
        self._ready = False
        self._socket: str | None = None

    # ------------------------------------------------------------------ plumbing

    def _argv(self, *args: str) -> list[str]:
        return [self.binary, "-S", self.socket_path(), *args]

    def _exec(
        self,
        *args: str,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        what: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run one tmux client call; decode its output as UTF-8 (bad bytes replaced)."""
        argv = self._argv(*args)
        try:
            raw = subprocess.run(
                argv,
                input=input,
                stdin=None if input is not None else subprocess.DEVNULL,
                capture_output=True,
                env=dict(env) if env is not None else None,
                timeout=30,
            )
        except FileNotFoundError as exc:
            raise EnvironmentError_(
                f"{self.binary} is not installed or not on PATH", hint="Install tmux.", binary=self.binary
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise external(
                what or f"tmux {args[0]}", subprocess.CompletedProcess(argv, -1, "", "timed out after 30s")
            ) from exc
        proc = subprocess.CompletedProcess(
            argv,
            raw.returncode,
            raw.stdout.decode("utf-8", "replace"),
            raw.stderr.decode("utf-8", "replace"),
        )
        if check and proc.returncode != 0:
            raise external(what or f"tmux {args[0]}", proc)
        return proc

    @staticmethod
    def _no_server(proc: subprocess.CompletedProcess[str]) -> bool:
        return proc.returncode != 0 and any(s in proc.stderr for s in _NO_SERVER)

    # ------------------------------------------------------------------ server and session

    def server_running(self) -> bool:
        """Whether the private server answers."""
        return self._exec("list-sessions", "-F", "#{session_name}", check=False).returncode == 0

    def kill_server(self) -> None:
        """Stop the private server and every pane in it (no error when none runs); remove its socket."""
        self._exec("kill-server", check=False)
        self._ready = False
        path = self.socket_path()
        if not os.path.exists(path):
            return
        deadline = time.monotonic() + 2.0
        while self.server_running():  # the server finishes exiting after the client returns
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        try:
            os.unlink(path)  # tmux leaves its socket file behind
        except OSError:
            pass

    def stop_if_idle(self) -> bool:
        """Stop the private server when it holds nothing but the placeholder window: no agent runs in
        it and no dead agent's screen waits to be read (``exo reap`` closes those). True when no
        server runs afterwards. The caller makes sure no spawn is adding a window meanwhile."""
        if not os.path.exists(self.socket_path()):
            return True  # no server (tmux makes the socket first): not even a tmux call
        proc = self._exec("list-windows", "-a", "-F", "#{window_name}", check=False)
        if proc.returncode != 0:
            return self._no_server(proc)
        if any(name != PLACEHOLDER for name in proc.stdout.splitlines()):
            return False
        self.kill_server()
        return not self.server_running()

    def ensure_session(self) -> None:
        """Create the detached session (with a quiet placeholder window) and set its options.

        The server starts with a minimal environment, never the caller's secrets;
        ``remain-on-exit`` keeps a dead agent's screen readable; ``exit-empty off``
        keeps the server up when windows close.
        """
        if self._ready:
            return
        self._socket = tmux_socket.pin(self.runtime_dir, self.socket_name)
        env = {k: os.environ[k] for k in SERVER_VARS if k in os.environ}
        options = [
            ";", "set-option", "-g", "remain-on-exit", "on",
            ";", "set-option", "-g", "history-limit", str(self.history_limit),
            ";", "set-option", "-s", "exit-empty", "off",
        ]  # fmt: skip
        proc = self._exec(
            "new-session", "-d", "-s", self.session, "-n", PLACEHOLDER,
            "-x", str(self.width), "-y", str(self.height),
            "--", "sleep", "2147483647",
            *options,
            env=env, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            if "duplicate session" not in proc.stderr:
                raise external("tmux new-session", proc)
            self._exec(*options[1:], what="tmux set-option")
        self._ready = True

    # ------------------------------------------------------------------ start

    def _launch_command(self, fifo: Path, spec: dict[str, object]) -> tuple[list[str], bytes]:
        """The pane command and the FIFO payload: the shell launcher where it can, else Python's.

        ``launcher="auto"`` takes the shell launcher when dash and env exist and every
        variable name is a shell name; ``"sh"`` insists on it (EnvironmentError_ /
        InvalidInput when it cannot); ``"python"`` always runs ``_launch.py``.
        """
        global _programs
        if self.launcher != "python":
            if _programs is _UNSET:
                _programs = _launch.shell_programs()
            programs = _programs
            data = _launch.encode_sh(spec) if programs else None
            if data is not None and isinstance(programs, tuple):
                return _launch.sh_argv(str(fifo), PANE_VARS, programs), data
            if self.launcher == "sh":
                if not programs:
                    raise EnvironmentError_("The shell launcher needs dash and env", hint="Install dash.")
                raise InvalidInput("The shell launcher cannot pass this environment (a name is not a shell name)")
        return launcher_argv(fifo), encode_spec(spec)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str],
        env: Mapping[str, str],
        log_path: str | os.PathLike[str] | None = None,
        keeper: Mapping[str, object] | None = None,
    ) -> Location:
        """Open window ``name`` running ``argv`` in ``cwd`` with exactly ``env``.

        tmux adds only TERM, TMUX and TMUX_PANE. ``log_path`` is not used: the pane's history
        (``capture``) is the log. ``keeper``: the launcher starts it beside the agent (``_runner.keep``).
        """
        out = self.start_many([StartRequest(name, argv, cwd, env, keeper)])[0]
        if isinstance(out, ExoError):
            raise out
        return out

    def start_many(self, requests: Sequence[StartRequest]) -> list[Location | ExoError]:
        """Open one window per request with ONE tmux call; a Location or the ExoError of each, in order.

        Every request is checked and gets its own FIFO and launcher as ``start`` does; the
        windows are created by one client call (``new-window ... ; new-window ...``) and
        then every launcher gets its start request. tmux stops a command list at the first
        failing command: the windows before it are kept, that request fails with tmux's
        message, and the rest are tried again in a new call.
        """
        results: list[Location | ExoError | None] = [None] * len(requests)
        todo: list[_Pending] = []
        try:
            for i, req in enumerate(requests):
                try:
                    todo.append(self._prepare(i, req))
                except ExoError as exc:
                    results[i] = exc
            created: list[tuple[_Pending, str, int, str]] = []
            retried = False
            while todo:
                try:
                    self.ensure_session()
                except ExoError as exc:
                    for p in todo:
                        results[p.slot] = exc
                        _unlink(p.fifo)
                    todo = []
                    break
                args: list[str] = []
                for p in todo:
                    args += [*p.args, ";"]
                proc = self._exec(*args[:-1], check=False)
                lines = proc.stdout.splitlines()
                for p, line in zip(todo, lines, strict=False):
                    pane, pid_s, window = line.split()
                    created.append((p, pane, int(pid_s), window))
                done, todo = len(lines), todo[len(lines):]
                if proc.returncode == 0 or not todo:
                    break
                if not done and not retried and (self._no_server(proc) or "can't find session" in proc.stderr):
                    self._ready = False  # the server or session went away: make it again, once
                    retried = True
                    continue
                failed, todo = todo[0], todo[1:]
                results[failed.slot] = external("tmux new-window", proc)
                _unlink(failed.fifo)
            while created:
                p, pane, pid, window = created[0]

                def pane_lives(pane: str = pane) -> bool:
                    return self._pane_info(pane) is not None

                try:
                    deliver_spec(p.fifo, p.payload, still_waiting=pane_lives)
                except ExoError as exc:
                    self._exec("kill-window", "-t", window, check=False)
                    results[p.slot] = exc
                else:
                    results[p.slot] = Location(
                        mux="tmux", session=self.session, window=window, pane=pane, pid=pid, pgid=pid,
                        name=p.name, start_time=proc_start_time(pid),
                    )  # fmt: skip
                created.pop(0)
        except BaseException:
            for p, _pane, _pid, window in created:  # started windows nobody will ever hear of
                self._exec("kill-window", "-t", window, check=False)
                _unlink(p.fifo)
            for p in todo:
                _unlink(p.fifo)
            raise
        return [r if r is not None else ExoError("tmux did not start the window") for r in results]

    def _prepare(self, index: int, req: StartRequest) -> _Pending:
        """Check one request, make its FIFO and its ``new-window`` arguments."""
        check_name(req.name, "window name")
        argv = check_argv(req.argv)
        env = check_env(req.env)
        cwd = os.fspath(req.cwd)
        if not os.path.isdir(cwd):
            raise InvalidInput(f"Working folder {cwd} does not exist", field="cwd")
        spec: dict[str, object] = {"argv": argv, "env": env, "cwd": cwd, "keep": list(PANE_VARS)}
        spec["keeper"] = keeper_line(req.keeper) if req.keeper else ""
        fifo_dir = ensure_private_dir(ensure_private_dir(self.runtime_dir) / "fifo")
        fifo = fifo_dir / f"{req.name}-{os.urandom(4).hex()}"
        command, payload = self._launch_command(fifo, spec)
        make_fifo(fifo)
        args = [
            "new-window", "-d", "-P", "-F", "#{pane_id} #{pane_pid} #{window_id}",
            "-n", literal(req.name), "-t", f"={self.session}:", "-c", literal(cwd), "--", *command,
        ]  # fmt: skip
        return _Pending(index, req.name, fifo, payload, [_tmux_arg(a) for a in args])

    # ------------------------------------------------------------------ observe

    def list_states(self, locations: Sequence[Location] | None = None) -> dict[str, PaneState]:
        """Return every agent pane of the server keyed by pane id, from one tmux call.

        ``locations`` is not needed: the one call sees every pane. (Three calls only when a
        dead pane has no exit status yet, see below.)
        """
        states = self._list_states()
        if any(not s.alive and s.dead_status is None for s in states.values()):
            # tmux 3.3 sometimes misses the exit of a fast child and leaves it a zombie
            # without status until another child exits: make one exit, then look again.
            self._exec("run-shell", "true", check=False)
            states = self._list_states()
        return states

    def _list_states(self) -> dict[str, PaneState]:
        proc = self._exec("list-panes", "-a", "-F", _LIST_FORMAT, check=False)
        if proc.returncode != 0:
            if self._no_server(proc):
                return {}
            raise external("tmux list-panes", proc)
        states: dict[str, PaneState] = {}
        for line in proc.stdout.splitlines():
            parts = line.split("\t", len(_FIELDS) - 1)
            if len(parts) != len(_FIELDS):
                continue
            session, window, pane, pid_s, dead, status, sig, in_mode, command, activity, wname = parts
            if session != self.session or wname == PLACEHOLDER:
                continue
            pid = int(pid_s) if pid_s.isdigit() else None
            loc = Location(
                mux="tmux", session=session, window=window, pane=pane, pid=pid, pgid=pid, name=wname
            )
            states[pane] = PaneState(
                location=loc,
                alive=dead != "1",
                dead_status=_dead_status(dead, status, sig),
                current_command=command or None,
                pid=pid,
                in_mode=in_mode == "1",
                activity=float(activity) if activity.isdigit() else None,
            )
        return states

    def _pane_info(self, pane: str) -> dict[str, str] | None:
        proc = self._exec(
            "display-message", "-p", "-t", pane, "#{pane_pid}\t#{pane_dead}\t#{pane_in_mode}\t#{pane_dead_status}",
            check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            return None
        parts = proc.stdout.rstrip("\n").split("\t")
        if len(parts) != 4:
            return None
        return dict(zip(("pid", "dead", "in_mode", "status"), parts, strict=True))

    def _require_pane(self, loc: Location) -> dict[str, str]:
        if loc.mux != "tmux" or not loc.pane:
            raise InvalidInput("Not a tmux location", field="location")
        info = self._pane_info(loc.pane)
        if info is None or (loc.pid is not None and info["pid"] != str(loc.pid)):
            raise NotFound(
                f"tmux pane {loc.pane} of {loc.name or 'the agent'} no longer exists", pane=loc.pane
            )
        return info

    def alive(self, loc: Location) -> bool:
        """Whether the agent's pane exists, is the same pane, and its process runs."""
        if loc.mux != "tmux" or not loc.pane:
            return False
        info = self._pane_info(loc.pane)
        if info is None or info["dead"] == "1":
            return False
        return loc.pid is None or info["pid"] == str(loc.pid)

    def capture(self, loc: Location, lines: int = 200) -> str:
        """Return the last ``lines`` lines of the pane (history included, wrapped lines joined)."""
        self._require_pane(loc)
        proc = self._exec("capture-pane", "-p", "-J", "-S", f"-{max(int(lines), 1)}", "-t", loc.pane or "")
        return tail_lines(proc.stdout, lines)

    def capture_many(self, locs: Sequence[Location], lines: int = 200) -> list[str]:
        """``capture`` of several panes in ONE tmux call (a marker line with each pane's pid before its text).

        NotFound names the first pane that is gone or holds another process (as ``capture`` would).
        """
        if not locs:
            return []
        for loc in locs:
            if loc.mux != "tmux" or not loc.pane:
                raise InvalidInput("Not a tmux location", field="location")
        marker = f"\x1eexo-capture-{os.urandom(8).hex()}"
        args: list[str] = []
        for loc in locs:
            pane = loc.pane or ""
            if args:
                args.append(";")
            args += ["display-message", "-p", "-t", pane, f"{marker} #{{pane_pid}}",
                     ";", "capture-pane", "-p", "-J", "-S", f"-{max(int(lines), 1)}", "-t", pane]
        proc = self._exec(*args, check=False)
        chunks = proc.stdout.split(marker + " ")[1:]
        out: list[str] = []
        for i, loc in enumerate(locs):
            chunk = chunks[i] if i < len(chunks) else None
            pid, _, text = (chunk or "").partition("\n")
            if chunk is None or (loc.pid is not None and pid.strip() != str(loc.pid)):
                if chunk is None and proc.returncode == 0:
                    raise external("tmux capture-pane", proc)
                raise NotFound(f"tmux pane {loc.pane} of {loc.name or 'the agent'} no longer exists", pane=loc.pane)
            out.append(tail_lines(text, lines))
        return out

    def _snapshot(self, pane: str) -> str:
        proc = self._exec(
            "capture-pane", "-p", "-t", pane,
            ";", "display-message", "-p", "-t", pane, "#{cursor_x},#{cursor_y},#{history_size}",
            check=False,
        )  # fmt: skip
        return proc.stdout

    def _wait_change(self, pane: str, old: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(0.05)
            if self._snapshot(pane) != old:
                return True
        return False

    # ------------------------------------------------------------------ type

    @contextmanager
    def pane_lock(self, pane: str) -> Iterator[None]:
        """Hold the per-pane typing lock (threads of this process and other processes)."""
        lock_dir = ensure_private_dir(ensure_private_dir(self.runtime_dir) / "locks")
        key = f"{self.socket_name}-{pane.lstrip('%')}"
        with _thread_locks_guard:
            tlock = _thread_locks.setdefault(key, threading.Lock())
        with tlock, locked(lock_dir / f"pane-{key}.lock"):
            yield

    def send_text(
        self,
        loc: Location,
        text: str,
        *,
        submit: bool = True,
        enter_delay: float = 0.5,
        confirm: bool = True,
        retries: int = 2,
    ) -> None:
        """Type ``text`` into the agent's pane and, with ``submit``, press Enter.

        The text goes through a uniquely named buffer pasted with ``paste-buffer -p``
        (bracketed when the program asked for it; newlines arrive as CR, as from a
        terminal), never through a shell or ``send-keys`` parsing. Enter follows after
        ``enter_delay`` seconds. When the paste visibly changed the screen and the
        Enter does not, the Enter alone is retried up to ``retries`` times; the text
        is never pasted twice. Copy mode is left first. NUL is refused and every other control
        character but newline and tab arrives as visible text (``check_send_text``): nothing
        in the text can end the bracketed paste or act as a key.
        """
        text = check_send_text(text)
        if not loc.pane:
            raise InvalidInput("Not a tmux location", field="location")
        pane = loc.pane
        with self.pane_lock(pane):
            info = self._require_pane(loc)
            if info["dead"] == "1":
                raise StateError(
                    f"The agent in tmux pane {pane} has exited (status {info['status'] or '?'})",
                    hint="Read its last screen with capture, or start it again.",
                    pane=pane,
                )
            if info["in_mode"] == "1":
                self._exec("send-keys", "-t", pane, "-X", "cancel", check=False)
            before = self._snapshot(pane) if submit and confirm else ""
            if text:
                buf = f"exo-{os.urandom(16).hex()}"
                self._exec("load-buffer", "-b", buf, "-", input=text.encode("utf-8"))
                try:
                    self._exec("paste-buffer", "-p", "-d", "-b", buf, "-t", pane)
                except BaseException:
                    self._exec("delete-buffer", "-b", buf, check=False)
                    raise
            if not submit:
                return
            time.sleep(max(enter_delay, 0.0))
            pasted = self._snapshot(pane) if confirm else ""
            self._exec("send-keys", "-t", pane, "Enter")
            if not confirm or not text or pasted == before:
                return  # nothing visible to confirm against (no echo): one Enter only
            for _ in range(retries):
                if self._wait_change(pane, pasted, self.confirm_timeout):
                    return
                self._exec("send-keys", "-t", pane, "Enter")

    # ------------------------------------------------------------------ stop

    def kill(self, loc: Location, *, grace: float = 3.0) -> None:
        """Stop the agent's process group (SIGTERM, SIGKILL after ``grace``); keep its window."""
        if not loc.pane:
            raise InvalidInput("Not a tmux location", field="location")
        info = self._pane_info(loc.pane)
        if info is None or info["dead"] == "1" or not info["pid"].isdigit():
            return
        if loc.pid is not None and info["pid"] != str(loc.pid):
            return  # the pane id now belongs to another pane (server restarted): not ours
        kill_group(int(info["pid"]), grace=grace, leader_start_time=loc.start_time)

    def close(self, loc: Location, *, force: bool = False) -> None:
        """Remove the agent's window; a live agent is refused unless ``force`` (then killed first)."""
        if not loc.pane:
            raise InvalidInput("Not a tmux location", field="location")
        info = self._pane_info(loc.pane)
        if info is None or (loc.pid is not None and info["pid"] != str(loc.pid)):
            return
        if info["dead"] != "1":
            if not force:
                raise StateError(
                    f"The agent in tmux pane {loc.pane} is still running",
                    hint="Stop it first (kill), or close with force.",
                    pane=loc.pane,
                )
            self.kill(loc)
        self._exec("kill-window", "-t", loc.window or loc.pane, check=False)

    def attach_argv(self, loc: Location) -> list[str]:
        """The command that shows the agent's window: switch-client inside this server, else attach."""
        target = loc.pane or loc.window or f"={self.session}:"
        select = ["select-window", "-t", target, ";"]
        inside = os.environ.get("TMUX", "").split(",")[0]
        if inside and os.path.realpath(inside) == os.path.realpath(self.socket_path()):
            return self._argv(*select, "switch-client", "-t", target)
        return self._argv(*select, "attach-session", "-t", f"={self.session}")

    def socket_path(self) -> str:
        """This server's socket: pinned for the repository when its first server started (``tmux_socket``),
        so that every exo process reaches the same server whatever its ``TMUX_TMPDIR``."""
        if self._socket is None:
            pinned = tmux_socket.pinned(self.runtime_dir, self.socket_name)
            if pinned is None:
                return tmux_socket.default(self.socket_name)
            self._socket = pinned
        return self._socket
