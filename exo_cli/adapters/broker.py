"""The team broker seen from outside: where it lives, how to reach it, start it and stop it.

One broker per repository state folder and host (``exo broker serve``, the front end in
``exo_cli/broker/``). Its files live in exo's private runtime folder (0700, ownership checked)::

    <runtime>/broker/ctl    the control socket (the human's exo, spawn, launchers, doctor)
    <runtime>/broker/lock   the start lock (flock; the kernel drops it when its holder dies)
    <runtime>/broker/life   held (flock, exclusive) by the running broker for its whole life: a
                            headless agent's runner blocks on it and starts the broker again when
                            the kernel drops it (``_runner.py``'s keeper; no polling)
    <runtime>/broker/pid    JSON: pid, start time, exo version, protocol (written once listening)
    <runtime>/s/<key>/sock  one socket per agent, in a folder of its own (a sandbox binds the folder)

Starting follows tmux and gpg-agent: connect; nobody answers -> take the lock -> connect again
(another starter may have won meanwhile) -> remove the stale socket -> start the broker detached
(its own session, ``cwd /``) -> wait for its readiness byte on a pipe -> let go of the lock.
Two starters racing: one wins by the lock, the other connects to the broker it started.

Every connection begins with a hello (``hello``) naming the protocol, exo's version and what the
connection is for; the broker answers ``{"ok": true, ...}`` or an error object. Plain values in,
no ``Env``: the operations above decide the environment and the command line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from pathlib import Path

from exo_cli.adapters import brokerio
from exo_cli.errors import EnvironmentError_, ExoError, rebuild

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

PROTOCOL = 1  # the broker's wire protocol: a relay and a broker of different protocols do not talk
HELLO_TIMEOUT = 10.0  # seconds to connect and get the hello's answer
START_TIMEOUT = 60.0  # seconds a starting broker has to say it listens (a loaded machine is slow)
KINDS = ("call", "hook", "mcp", "ctl")
# What the broker's environment never carries from whoever started it: exo's identity markers (an
# agent's relay may start it) and the variables that only make sense in that process (``EXO_RUN``: the
# token of a call exo runs with a deadline, by which stopping an agent ends what its exo started).
BROKER_DROP = ("EXO_AGENT", "EXO_AGENT_PROOF", "EXO_PARENT", "EXO_ROLE", "EXO_SOCKET", "EXO_FAULT", "TMUX",
               "TMUX_PANE", "EXO_ANTHROPIC_API_KEY", "EXO_RUN")


class Paths:
    """The broker's files under one runtime folder (``files.runtime_dir_for`` of the state folder)."""

    def __init__(self, runtime: Path) -> None:
        self.runtime = Path(runtime)
        self.dir = self.runtime / "broker"
        self.ctl = self.dir / "ctl"
        self.lock = self.dir / "lock"
        self.life = self.dir / "life"
        self.pid_file = self.dir / "pid"
        self.sockets = self.runtime / "s"

    def agent_dir(self, key: str) -> Path:
        """The folder of one agent's socket (a sandbox binds this folder, never the file)."""
        if not key or not key.isalnum() or not key.isascii():
            raise ValueError(f"bad socket key {key!r}")
        return self.sockets / key

    def agent_socket(self, key: str) -> Path:
        return self.agent_dir(key) / "sock"

    def make(self) -> None:
        """Create the private folders (0700, ours: ``files.ensure_private_dir`` refuses anything else)."""
        from exo_cli.adapters.files import ensure_private_dir

        ensure_private_dir(self.runtime)
        ensure_private_dir(self.dir)
        ensure_private_dir(self.sockets)


def socket_key(agent_id: str, nonce: str) -> str:
    """The name of an agent's socket folder: 12 hex digits of sha256(agent id, a random nonce of its record)."""
    from exo_cli.adapters.files import sha256_hex

    return sha256_hex(f"{agent_id}\0{nonce}".encode("utf-8", "surrogateescape"))[:12]


def runtime_of(socket_path: str) -> Path:
    """The runtime folder an agent's socket path lies in (``<runtime>/s/<key>/sock``)."""
    return Path(socket_path).parent.parent.parent


# --------------------------------------------------------------------------- talking to it


class Unreachable(EnvironmentError_):
    """Nobody answers on the broker's socket (it is not running, or its socket is stale)."""


class Lost(EnvironmentError_):
    """The connection broke before the broker's answer (a broker killed mid-request): send it again."""


def hello(path: str | os.PathLike[str], kind: str, version: str, *, timeout: float | None = HELLO_TIMEOUT,
          **fields: Any) -> tuple[Any, dict[str, Any]]:
    """Connect to ``path`` and say hello; (the connected socket, the broker's answer).

    ``timeout`` bounds the wait for the answer (None: a blocking call's answer comes when it
    comes). Unreachable when nobody listens there; Lost when the connection breaks before the
    answer; the broker's refusal, or the failure of what it ran, as the ExoError it sent.
    """
    target = os.fspath(path)
    try:
        sock = brokerio.connect(target, HELLO_TIMEOUT if timeout is None else min(timeout, HELLO_TIMEOUT))
    except OSError as exc:
        if exc.errno in brokerio.GONE:
            raise Unreachable(f"exo's broker is not running (nothing answers on {target})", path=target) from exc
        raise EnvironmentError_(f"Cannot reach exo's broker on {target}: {exc.strerror or exc}", path=target) from exc
    try:
        brokerio.send(sock, {"hello": PROTOCOL, "exo": version, "kind": kind, "pid": os.getpid(), **fields})
        sock.settimeout(timeout)
        answer = brokerio.recv(sock)
    except ExoError:
        sock.close()
        raise
    except (OSError, ValueError) as exc:
        sock.close()
        raise Lost(f"exo's broker on {target} did not answer: {exc}", path=target) from exc
    except BaseException:
        sock.close()
        raise
    if answer is None:
        sock.close()
        raise Lost(f"exo's broker on {target} closed the connection before answering", path=target)
    if not answer.get("ok"):
        sock.close()
        raise rebuild(answer.get("error"), default="exo's broker refused the connection")
    return sock, answer


def ctl(paths: Paths, cmd: str, version: str, *, timeout: float = HELLO_TIMEOUT, **fields: Any) -> dict[str, Any]:
    """Send one control command (``ping``, ``register``, ``status``, ``stop``); the broker's answer."""
    sock, _ = hello(paths.ctl, "ctl", version, timeout=timeout)
    try:
        brokerio.send(sock, {"cmd": cmd, **fields})
        answer = brokerio.recv(sock)
    except (OSError, ValueError) as exc:
        raise EnvironmentError_(f"exo's broker stopped answering ({cmd}): {exc}") from exc
    finally:
        sock.close()
    if answer is None:
        raise Unreachable(f"exo's broker closed the connection ({cmd})")
    if not answer.get("ok"):
        raise rebuild(answer.get("error"), default=f"exo's broker refused {cmd}")
    return answer


def ping(paths: Paths, version: str, *, timeout: float = HELLO_TIMEOUT) -> dict[str, Any] | None:
    """The running broker's facts (pid, exo version, protocol, agents), or None when none answers."""
    try:
        return ctl(paths, "ping", version, timeout=timeout)
    except (Unreachable, Lost):  # not running, or exiting right now
        return None


def read_pid(paths: Paths) -> dict[str, Any] | None:
    """What the broker wrote in its pid file (pid, start time, exo, protocol), or None."""
    import json

    try:
        data = json.loads(paths.pid_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# --------------------------------------------------------------------------- starting it


def broker_environ(environ: Mapping[str, str], state_dir: str) -> dict[str, str]:
    """The broker's environment: its starter's minus exo's markers, with the state folder it serves.

    A Claude agent's own environment hides its API key under another name (the Claude backend):
    the broker gets it back under its usual name, as the human has it.
    """
    out = {k: v for k, v in environ.items() if k not in BROKER_DROP}
    hidden = environ.get("EXO_ANTHROPIC_API_KEY")
    if hidden and not out.get("ANTHROPIC_API_KEY"):
        out["ANTHROPIC_API_KEY"] = hidden
    out["EXO_STATE_DIR"] = state_dir
    return out


def ensure(paths: Paths, *, argv: Sequence[str], environ: Mapping[str, str], version: str,
           replace_idle_other: bool = True, timeout: float = START_TIMEOUT) -> dict[str, Any]:
    """The running broker's facts, starting it first when none answers (never two: see the module).

    A broker of another exo version with no agents left is stopped and replaced (dmypy's
    restart); one still serving agents is returned as it is: the caller decides (its ``exo``
    differs from ``version``). EnvironmentError_ when it cannot be started, with its log's tail.
    """
    paths.make()
    deadline = time.monotonic() + timeout
    for _ in range(5):
        info = ping(paths, version)
        if info is not None:
            if info.get("exo") == version or not replace_idle_other or info.get("agents"):
                return info
            stop(paths, version, timeout=max(1.0, deadline - time.monotonic()))
            continue
        with _start_lock(paths, deadline):
            info = ping(paths, version)  # another starter may have won while we waited for the lock
            if info is not None:
                continue
            brokerio.unlink_stale(str(paths.ctl))
            start(paths, argv=argv, environ=environ, deadline=deadline)
    info = ping(paths, version)
    if info is None:
        raise EnvironmentError_("exo's broker did not stay up", hint=f"See its log: {log_hint(paths)}")
    return info


@contextlib.contextmanager
def _start_lock(paths: Paths, deadline: float) -> Any:
    from exo_cli.adapters.files import FileLock

    lock = FileLock(paths.lock)
    while not lock.acquire(blocking=False):
        if time.monotonic() > deadline:
            raise EnvironmentError_(f"Another exo process has been starting the broker for too long ({paths.lock})",
                                    hint="Run `exo doctor`; it stops a broker that hangs.", path=str(paths.lock))
        time.sleep(0.02)
    try:
        yield lock
    finally:
        lock.release()


def start(paths: Paths, *, argv: Sequence[str], environ: Mapping[str, str], deadline: float) -> None:
    """Start ``argv`` (``exo ... broker serve``) detached and wait until it listens (the start lock is held).

    The broker gets ``--ready-fd N``: it forks once more (so no exo process is left with a child to
    reap), makes its own session, listens, then writes ``ready`` on that pipe. Anything else on the
    pipe, or its end without ``ready``, is the broker's reason not to run.
    """
    import select
    import subprocess

    r, w = os.pipe()
    try:
        proc = subprocess.Popen([*argv, "--ready-fd", str(w)], pass_fds=(w,), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/", env=dict(environ),
                                start_new_session=True)
    except OSError as exc:
        os.close(r)
        os.close(w)
        raise EnvironmentError_(f"Cannot start exo's broker: {exc.strerror or exc}", argv=list(argv)) from exc
    os.close(w)
    said = b""
    try:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        while b"\n" not in said:
            left = deadline - time.monotonic()
            if left <= 0:
                raise EnvironmentError_("exo's broker did not start in time", hint=f"See its log: {log_hint(paths)}")
            ready, _, _ = select.select([r], [], [], left)
            if not ready:
                continue
            chunk = os.read(r, 4096)
            if not chunk:
                break
            said += chunk
    finally:
        os.close(r)
        if proc.returncode is None:  # the middle process: it only forks and exits
            with contextlib.suppress(OSError):
                proc.kill()
            proc.wait()
    line = said.decode("utf-8", "replace").strip()
    if line == "ready" or line == "running":
        return
    raise EnvironmentError_(f"exo's broker did not start: {line or 'it exited at once'}",
                            hint=f"See its log: {log_hint(paths)}")


def log_hint(paths: Paths) -> str:
    info = read_pid(paths) or {}
    return str(info.get("log") or "broker.log in exo's state folder")


def stop(paths: Paths, version: str, *, timeout: float = 30.0) -> bool:
    """Ask the broker to stop and wait until nothing answers; True when one was running.

    A broker that does not answer but whose pid file names a live process of its own is
    terminated (SIGTERM, then SIGKILL).
    """
    running = False
    try:
        ctl(paths, "stop", version)
        running = True
    except (Unreachable, Lost):
        pass
    except ExoError:
        running = True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and brokerio.answers(str(paths.ctl), timeout=1.0):
        time.sleep(0.05)
    info = read_pid(paths)
    pid = info.get("pid") if info else None
    if isinstance(pid, int) and pid > 1 and _is_broker(pid, info.get("start_time") if info else None):
        from exo_cli.adapters.proc import kill_group

        kill_group(pid, grace=3.0, leader_start_time=info.get("start_time") if info else None)
        running = True
    return running


def _is_broker(pid: int, start_time: Any) -> bool:
    """Whether ``pid`` is still the broker that wrote the pid file (same start time, alive)."""
    from exo_cli.adapters.proc import pid_alive

    return pid_alive(pid, start_time if isinstance(start_time, int) else None, reap_child=False)


def alive(paths: Paths) -> bool:
    """Whether the broker's process named in its pid file still runs."""
    info = read_pid(paths)
    pid = info.get("pid") if info else None
    return isinstance(pid, int) and pid > 1 and _is_broker(pid, info.get("start_time") if info else None)


def refused(exc: OSError) -> bool:
    """Whether a connect failed because nobody listens (as opposed to a real error)."""
    return exc.errno in brokerio.GONE or exc.errno == errno.ECONNRESET
