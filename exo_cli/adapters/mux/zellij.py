"""Zellij backend: one tab per agent in the Zellij session exo runs in.

Command lines follow Zellij's documented CLI (``zellij --session S action ...``):
``new-tab --layout FILE --cwd DIR --name NAME``, ``go-to-tab-name NAME``,
``write-chars -- TEXT``, ``write 13`` (Enter), ``dump-screen [--full] FILE``,
``close-tab``. The tab layout puts the agent in a 60% pane with focus and, with
services, process-compose and its log stacked in the other 40%.

Every pane of the tab runs exo's launcher, which reads argv and environment from a FIFO:
no secret reaches the layout file, a command line, or the Zellij server's environment.
The launcher reports each pane's pid (and, for the agent, its exit status), so liveness,
listing and stopping need no Zellij call, and work from any shell: only starting an
agent needs to run inside Zellij. Actions that work on "the focused pane" (typing,
dumping, closing) target the session recorded in the agent's location and first focus
the agent's tab by name; they move the user's view.

The runner is injectable (``run``) because Zellij cannot be installed everywhere
exo is tested.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from exo_cli.adapters.files import ensure_private_dir, locked
from exo_cli.adapters.mux.base import (
    Location,
    PaneState,
    check_argv,
    check_env,
    check_send_text,
    deliver_spec,
    keeper_line,
    launcher_argv,
    make_fifo,
    read_records,
    record_path,
    tail_lines,
    write_record,
)
from exo_cli.adapters.proc import kill_group, pid_alive, proc_start_time
from exo_cli.errors import EnvironmentError_, ExternalFailure, InvalidInput, StateError
from exo_cli.validate import check_name

Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]

NOT_IN_ZELLIJ = "exo is not running inside a Zellij session: --mux zellij opens agents as tabs of the session it runs in"
NO_SESSION = "The agent's Zellij session is not recorded, and exo is not running inside one"
# Variables Zellij sets for the pane that the agent keeps on top of the given env.
PANE_VARS = ("TERM", "ZELLIJ", "ZELLIJ_SESSION_NAME", "ZELLIJ_PANE_ID")
WRITE_CHUNK = 16384  # characters per write-chars call (argv size limits)
PC_LOG = ".exo/logs/process-compose.log"


def in_zellij(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs inside a Zellij session (``ZELLIJ`` / ``ZELLIJ_SESSION_NAME``)."""
    env = os.environ if environ is None else environ
    return "ZELLIJ" in env or bool(env.get("ZELLIJ_SESSION_NAME"))


def require_zellij(environ: Mapping[str, str] | None = None) -> str:
    """Return the current Zellij session name; raise EnvironmentError_ outside Zellij."""
    env = os.environ if environ is None else environ
    name = env.get("ZELLIJ_SESSION_NAME")
    if not in_zellij(env) or not name:
        raise EnvironmentError_(
            NOT_IN_ZELLIJ,
            hint="Start zellij and run exo from one of its panes, or use --mux tmux or --mux headless.",
        )
    return name


def _not_installed(binary: str) -> EnvironmentError_:
    return EnvironmentError_(f"Zellij is not installed ({binary} is not on PATH)",
                             hint="Install Zellij, or use --mux tmux or --mux headless.", binary=binary)


# --------------------------------------------------------------------------- KDL


def kdl_str(value: str) -> str:
    """Quote ``value`` as a KDL string (backslash, quote and control characters escaped)."""
    out = ['"']
    for ch in value:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\b":
            out.append("\\b")
        elif ch == "\f":
            out.append("\\f")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{{{ord(ch):x}}}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _command_pane(indent: str, attrs: str, argv: Sequence[str], cwd: str | None) -> list[str]:
    lines = [f"{indent}pane {attrs}{{"]
    lines.append(f"{indent}    command {kdl_str(argv[0])}")
    if len(argv) > 1:
        lines.append(f"{indent}    args " + " ".join(kdl_str(a) for a in argv[1:]))
    if cwd is not None:
        lines.append(f"{indent}    cwd {kdl_str(cwd)}")
    lines.append(f"{indent}}}")
    return lines


def layout_kdl(
    agent_argv: Sequence[str],
    cwd: str | os.PathLike[str],
    *,
    services: bool,
    services_argv: Sequence[str] | None = None,
    services_log: str = PC_LOG,
    logs_argv: Sequence[str] | None = None,
    tab_bars: bool = True,
) -> str:
    """Return the KDL layout of an agent tab (``worktree.kdl``).

    The agent pane takes 60% with focus. With ``services``, the other 40% holds
    two stacked panes: ``process-compose`` (``services_argv``, by default
    ``process-compose up --config process-compose.yaml --log-file <log> --no-server``)
    and ``logs`` (``logs_argv``, by default ``tail -F <log>``). Without services the
    agent pane fills the tab. ``tab_bars`` keeps Zellij's tab and status bars (its
    default tab template). ``Zellij.start`` gives every pane exo's launcher instead.
    """
    argv = check_argv(agent_argv)
    cwd_s = os.fspath(cwd)
    lines = ["layout {"]
    if tab_bars:
        lines += [
            "    default_tab_template {",
            "        pane size=1 borderless=true {",
            '            plugin location="zellij:tab-bar"',
            "        }",
            "        children",
            "        pane size=2 borderless=true {",
            '            plugin location="zellij:status-bar"',
            "        }",
            "    }",
        ]
    if services:
        pc = check_argv(
            services_argv
            or [
                "process-compose",
                "up",
                "--config",
                "process-compose.yaml",
                "--log-file",
                services_log,
                "--no-server",
            ]
        )
        logs = check_argv(logs_argv or ["tail", "-F", services_log])
        lines.append('    pane split_direction="vertical" {')
        lines += _command_pane("        ", 'name="agent" size="60%" focus=true ', argv, cwd_s)
        lines.append('        pane split_direction="horizontal" size="40%" stacked=true {')
        lines += _command_pane("            ", 'name="process-compose" ', pc, cwd_s)
        lines += _command_pane("            ", 'name="logs" ', logs, cwd_s)
        lines.append("        }")
        lines.append("    }")
    else:
        lines += _command_pane("    ", 'name="agent" focus=true ', argv, cwd_s)
    lines.append("}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- backend


def _default_runner(binary: str) -> Runner:
    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        from exo_cli.adapters.proc import run as proc_run

        return proc_run(argv, what=f"zellij {' '.join(argv[3:5])}".strip(), timeout=30)

    return run


def _missing_runner(binary: str) -> Runner:
    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        raise _not_installed(binary)

    return run


class Zellij:
    """Agent tabs in a Zellij session."""

    kind = "zellij"

    def __init__(
        self,
        session: str | None = None,
        *,
        runtime_dir: Path,
        run: Runner | None = None,
        binary: str = "zellij",
        environ: Mapping[str, str] | None = None,
        services: bool = False,
        services_argv: Sequence[str] | None = None,
        start_timeout: float = 20.0,
        require: bool = True,
        confirm_timeout: float = 1.5,
    ) -> None:
        """``require`` (starting agents): be inside a Zellij session with zellij installed, or
        EnvironmentError_. Without it (listing, typing into or stopping recorded agents from
        any shell) nothing is checked until a Zellij call is needed, which then uses the
        session recorded in the agent's location."""
        self.environ = os.environ if environ is None else environ
        if run is None:
            from exo_cli.adapters.proc import which

            if which(binary) is None:
                if require:
                    raise _not_installed(binary)  # before the session: being inside one would not help
                run = _missing_runner(binary)
            else:
                run = _default_runner(binary)
        if session is None and require:
            session = require_zellij(self.environ)
        self.session = session if session is not None else (self.environ.get("ZELLIJ_SESSION_NAME") or None)
        self.run = run
        self.binary = binary
        self.runtime_dir = Path(runtime_dir)
        self.services = services
        self.services_argv = list(services_argv) if services_argv else None
        self.start_timeout = start_timeout
        self.confirm_timeout = confirm_timeout

    # ------------------------------------------------------------------ plumbing

    def action_argv(self, *args: str, session: str | None = None) -> list[str]:
        """``zellij --session <session> action <args...>`` (the location's session, else this one)."""
        target = session or self.session
        if not target:
            raise EnvironmentError_(
                NO_SESSION, hint="Run it inside the agent's Zellij session, or attach to it with `zellij attach`."
            )
        return [self.binary, "--session", target, "action", *args]

    def _action(self, *args: str, session: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.run(self.action_argv(*args, session=session))

    @property
    def _dir(self) -> Path:
        return ensure_private_dir(ensure_private_dir(self.runtime_dir) / "zellij")

    def _record_path(self, name: str) -> Path:
        return record_path(self._dir, name, "tab name")

    @contextmanager
    def _tab_lock(self) -> Iterator[None]:
        """Serialize focus-then-act sequences (typing, dumping, closing) across processes."""
        with locked(self._dir / "focus.lock"):
            yield

    def go_to_tab(self, name: str, *, session: str | None = None) -> None:
        """Focus the agent's tab (``go-to-tab-name NAME``)."""
        self._action("go-to-tab-name", check_name(name, "tab name"), session=session)

    # ------------------------------------------------------------------ start

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str],
        env: Mapping[str, str],
        log_path: str | os.PathLike[str] | None = None,
        services_argv: Sequence[str] | None = None,
        services_log: str | os.PathLike[str] | None = None,
        services_env: Mapping[str, str] | None = None,
        keeper: Mapping[str, object] | None = None,
    ) -> Location:
        """Open tab ``name`` with the agent layout running ``argv`` in ``cwd`` with exactly ``env``.

        Zellij adds only TERM, ZELLIJ, ZELLIJ_SESSION_NAME and ZELLIJ_PANE_ID. With
        ``services_argv`` (or the constructor's ``services``), process-compose and a
        ``tail -F`` of ``services_log`` run in the tab's side panes, through the launcher
        too (with ``services_env``, by default the agent's; their pids are recorded, see
        ``service_locations``). ``log_path`` is
        not used (the pane's scrollback is the log). ``keeper``: as ``Tmux.start`` (the agent's
        launcher starts it beside the agent).
        """
        check_name(name, "tab name")
        argv = check_argv(argv)
        env = check_env(env)
        side_env = check_env(services_env) if services_env is not None else env
        cwd = os.fspath(cwd)
        if not os.path.isdir(cwd):
            raise InvalidInput(f"Working folder {cwd} does not exist", field="cwd")
        if services_argv is None and self.services:
            services_argv = self.services_argv or [
                "process-compose", "up", "--config", "process-compose.yaml", "--log-file", PC_LOG, "--no-server",
            ]  # fmt: skip
        log = os.fspath(services_log) if services_log else os.path.join(cwd, PC_LOG)
        if services_argv is not None:
            services_argv = check_argv(services_argv)
            Path(log).parent.mkdir(parents=True, exist_ok=True)
        token = uuid.uuid4().hex[:8]
        panes = [("agent", argv)]
        if services_argv is not None:
            panes += [("process-compose", services_argv), ("logs", ["tail", "-F", log])]
        fifos = {p: make_fifo(self._dir / f"{name}-{token}-{p}.fifo") for p, _ in panes}
        pid_files = {p: self._dir / f"{name}-{token}-{p}.pid" for p, _ in panes}
        exit_file = self._exit_path(name)
        exit_file.unlink(missing_ok=True)
        layout = self._dir / f"{name}-{token}.kdl"
        fd = os.open(layout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(layout_kdl(
                launcher_argv(fifos["agent"]), cwd, services=services_argv is not None,
                services_argv=launcher_argv(fifos["process-compose"]) if services_argv is not None else None,
                logs_argv=launcher_argv(fifos["logs"]) if services_argv is not None else None,
            ))  # fmt: skip
        pids: dict[str, int] = {}
        try:
            self._action("new-tab", "--layout", str(layout), "--cwd", cwd, "--name", name)
            for pane, pane_argv in panes:
                spec = {"argv": pane_argv, "env": env if pane == "agent" or services_env is None else side_env,
                        "cwd": cwd if pane != "logs" else "/",
                        "keep": list(PANE_VARS), "pid_file": str(pid_files[pane])}
                if pane == "agent":
                    spec["exit_file"] = str(exit_file)
                    if keeper:
                        spec["keeper"] = keeper_line(keeper)
                deliver_spec(fifos[pane], spec, timeout=self.start_timeout)
                pids[pane] = self._read_pid(pid_files[pane])
        finally:
            for leftover in (*fifos.values(), layout, *pid_files.values()):
                try:
                    os.unlink(leftover)
                except FileNotFoundError:
                    pass
        pid = pids["agent"]
        loc = Location(
            mux="zellij", session=self.session, tab=name, pid=pid, pgid=pid, name=name,
            start_time=proc_start_time(pid),
        )  # fmt: skip
        self._write_record(loc)
        services = [
            Location(mux="zellij", session=self.session, tab=name, pid=pids[p], pgid=pids[p], name=f"{name}:{p}",
                     start_time=proc_start_time(pids[p]))
            for p in ("process-compose", "logs") if p in pids
        ]  # fmt: skip
        self._services_path(name).write_text(json.dumps([s.to_dict() for s in services]))
        return loc

    def service_locations(self, loc: Location) -> list[Location]:
        """The service panes (process-compose and its log) started with the agent's tab."""
        name = check_name(loc.tab or loc.name, "tab name")
        try:
            data = json.loads(self._services_path(name).read_text())
        except (OSError, ValueError):
            return []
        return [Location.from_dict(d) for d in data if isinstance(d, dict)]

    def _services_path(self, name: str) -> Path:
        return self._dir / f"{check_name(name, 'tab name')}.services"

    def _exit_path(self, name: str) -> Path:
        return self._dir / f"{check_name(name, 'tab name')}.exit"

    def exit_status(self, loc: Location) -> int | None:
        """The agent's exit status, reported by its launcher (None while it runs, or when unknown)."""
        try:
            return int(self._exit_path(loc.tab or loc.name or "").read_text().strip())
        except (OSError, ValueError, InvalidInput):
            return None

    def _read_pid(self, pid_file: Path) -> int:
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            try:
                text = pid_file.read_text().strip()
                if text:
                    return int(text)
            except (FileNotFoundError, ValueError):
                pass
            time.sleep(0.01)
        raise ExternalFailure("The agent's Zellij pane did not report its process id", pid_file=str(pid_file))

    def _write_record(self, loc: Location) -> None:
        write_record(self._record_path(loc.name or ""), loc)

    def locations(self) -> list[Location]:
        """Every agent tab this runtime folder has a record of."""
        return read_records(self._dir)

    # ------------------------------------------------------------------ observe

    def list_states(self, locations: Sequence[Location] | None = None) -> dict[str, PaneState]:
        """Return the state of ``locations`` (default: every recorded tab) keyed by tab name.

        Liveness comes from the recorded pid, the exit status from the launcher's report,
        and ``activity`` from the agents' processes (``proc.tree_activities``, one scan of
        /proc for all): no Zellij call.
        """
        from exo_cli.adapters.proc import tree_activities

        locs = [loc for loc in (self.locations() if locations is None else list(locations)) if loc.mux == "zellij"]
        alive = {loc.key: pid_alive(loc.pid, loc.start_time) for loc in locs}
        activities = tree_activities(loc.pgid or loc.pid or 0 for loc in locs if alive[loc.key])
        states = {}
        for loc in locs:
            live = alive[loc.key]
            status = None if live else self.exit_status(loc)
            states[loc.key] = PaneState(location=loc, alive=live, pid=loc.pid, dead_status=status,
                                        activity=activities.get(loc.pgid or loc.pid or 0))
        return states

    def alive(self, loc: Location) -> bool:
        """Whether the agent's process still runs."""
        return pid_alive(loc.pid, loc.start_time)

    def _dump(self, name: str, session: str | None, *, full: bool) -> str:
        """Dump the focused pane (the caller focused the tab and holds the tab lock)."""
        dump = self._dir / f"dump-{uuid.uuid4().hex[:8]}.txt"
        self._action("dump-screen", *(["--full"] if full else []), str(dump), session=session)
        try:
            return dump.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError as exc:
            raise ExternalFailure("zellij dump-screen wrote no file", path=str(dump)) from exc
        finally:
            try:
                os.unlink(dump)
            except FileNotFoundError:
                pass

    def capture(self, loc: Location, lines: int = 200) -> str:
        """Return the last ``lines`` lines of the agent's pane (focuses its tab, then ``dump-screen``)."""
        name = check_name(loc.tab or loc.name, "tab name")
        with self._tab_lock():
            self.go_to_tab(name, session=loc.session)
            text = self._dump(name, loc.session, full=True)
        return tail_lines(text, lines)

    # ------------------------------------------------------------------ type

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
        """Type ``text`` into the agent's tab with ``write-chars`` and press Enter (``write 13``) after a pause.

        The text is passed after ``--`` so a leading ``-`` is never read as a flag, and is
        split into chunks for long messages. Confirmed as tmux does: when the typed text
        visibly changed the screen (``dump-screen``) and the Enter does not, the Enter alone
        is retried up to ``retries`` times; the text is never typed twice. NUL is refused and
        every other control character but newline and tab is typed as visible text
        (``check_send_text``).
        """
        text = check_send_text(text)
        name = check_name(loc.tab or loc.name, "tab name")
        if not self.alive(loc):
            raise StateError(f"The agent in Zellij tab {name} has exited", tab=name)
        session = loc.session
        with self._tab_lock():
            self.go_to_tab(name, session=session)
            checking = submit and confirm and bool(text)
            before = self._dump(name, session, full=False) if checking else ""
            for i in range(0, len(text), WRITE_CHUNK):
                self._action("write-chars", "--", text[i : i + WRITE_CHUNK], session=session)
            if not submit:
                return
            time.sleep(max(enter_delay, 0.0))
            typed = self._dump(name, session, full=False) if checking else ""
            self._action("write", "13", session=session)
            if not checking or typed == before:
                return  # nothing visible to confirm against (no echo): one Enter only
            for _ in range(retries):
                if self._screen_changes(name, session, typed):
                    return
                self._action("write", "13", session=session)

    def _screen_changes(self, name: str, session: str | None, old: str) -> bool:
        deadline = time.monotonic() + self.confirm_timeout
        while time.monotonic() < deadline:
            time.sleep(0.1)
            if self._dump(name, session, full=False) != old:
                return True
        return False

    # ------------------------------------------------------------------ stop

    def kill(self, loc: Location, *, grace: float = 3.0) -> None:
        """Stop the agent's process group (SIGTERM, SIGKILL after ``grace``); the tab stays."""
        pgid = loc.pgid or loc.pid
        if not pgid:
            raise InvalidInput("Not a Zellij location", field="location")
        kill_group(pgid, grace=grace, leader_start_time=loc.start_time)

    def close(self, loc: Location, *, force: bool = False) -> None:
        """Close the agent's tab (``go-to-tab-name`` then ``close-tab``); a live agent needs ``force``."""
        name = check_name(loc.tab or loc.name, "tab name")
        if self.alive(loc):
            if not force:
                raise StateError(
                    f"The agent in Zellij tab {name} is still running",
                    hint="Stop it first (kill), or close with force.",
                    tab=name,
                )
            self.kill(loc)
        for svc in self.service_locations(loc):
            kill_group(svc.pgid or svc.pid or 0, grace=1.0, leader_start_time=svc.start_time)
        with self._tab_lock():
            self.go_to_tab(name, session=loc.session)
            self._action("close-tab", session=loc.session)
        for path in (self._record_path(name), self._services_path(name), self._exit_path(name)):
            path.unlink(missing_ok=True)

    def attach_argv(self, loc: Location) -> list[str]:
        """Inside this session: ``go-to-tab-name``; elsewhere: ``zellij attach <session>``."""
        name = check_name(loc.tab or loc.name, "tab name")
        session = loc.session or self.session
        if session and self.environ.get("ZELLIJ_SESSION_NAME") == session:
            return self.action_argv("go-to-tab-name", name, session=session)
        if not session:
            raise EnvironmentError_(NO_SESSION, hint="Attach to the agent's Zellij session yourself (zellij list-sessions).")
        return [self.binary, "attach", session]

    def kill_server(self) -> None:
        """Nothing to stop: the Zellij session is the user's own, never exo's to end."""
