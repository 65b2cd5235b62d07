"""``exo broker serve``: the team broker's process, started detached by ``adapters.broker.start``.

The process forks once more (the starter waits only for the middle process), makes a session
of its own, works in ``/`` with umask 077 and logs to ``<state>/broker.log``. It listens on the
control socket, opens the socket of every live agent recorded with one (so a restarted broker
serves the same paths), then tells its starter it is ready. The main thread multiplexes the
listening sockets; each connection gets a thread (``conn.handle``). Every ``TICK`` the reaper
opens sockets for agents that need one, closes those of agents whose process is gone (after
``REAP_GRACE``, so the last hooks of an agent that completed itself still get through), gives up
sockets another broker took over, starts a runner for each merge queue with entries that none
advances (every ``QUEUE_EVERY``), and once no agent and no connection is left for
``broker.idle_exit`` seconds the broker takes the start lock, removes its files and exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from exo_cli import __version__
from exo_cli.adapters import broker as adapter
from exo_cli.adapters import brokerio
from exo_cli.errors import ExoError, NotFound, StateError

if TYPE_CHECKING:
    import socket

    from exo_cli.adapters.files import FileLock
    from exo_cli.adapters.netproxy import NetProxy
    from exo_cli.env import Env
    from exo_cli.records import Agent

TICK = 1.0  # seconds between reaper passes
MAX_THREADS = 1024  # connections served at once (an MCP session or a blocking wait holds one for its length)
REAP_GRACE = 3.0  # seconds an agent's socket stays once its process is gone
STORE_PATIENCE = 2.0  # seconds the reaper waits for a store that restarts before it watches processes alone
QUEUE_EVERY = 5.0  # seconds between looks for merge queues no runner advances
LOG_MAX = 1 << 20  # bytes of log kept from earlier runs


class Slot:
    """One agent's listening socket."""

    __slots__ = ("agent", "gone_since", "inode", "key", "path", "record", "sock")

    def __init__(self, record: Agent, key: str, path: str, sock: socket.socket, inode: int) -> None:
        self.agent = record.id
        self.record = record  # the last record read: its process is watched even while the store is unreachable
        self.key = key
        self.path = path
        self.sock = sock
        self.inode = inode
        self.gone_since: float | None = None


class Broker:
    """The broker's state: its sockets, open connections, and when it went idle."""

    def __init__(self, env: Env, paths: adapter.Paths, *, idle_exit: float) -> None:
        self.env = env
        self.paths = paths
        self.idle_exit = idle_exit
        self.sel = selectors.DefaultSelector()
        self.lock = threading.RLock()
        self.slots: dict[str, Slot] = {}  # socket key -> slot
        self.connections = 0  # open connections of agents (control connections keep nobody busy)
        self.idle_since: float | None = time.monotonic()
        self.stopping = threading.Event()
        self.ctl: socket.socket | None = None
        self.ctl_inode = 0
        self.life: FileLock | None = None  # the life lock (``adapters.broker.Paths.life``) once held
        # Connections run on a pool: its idle threads are reused, and with them their store connection
        # (the SQLite store keeps one per thread), so a hook does not open the database again.
        self.pool = ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="exo-conn")
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.state_dir = env.state_dir.resolve()
        self.repo_root = env.repo.root
        self.store_down = False
        self.queues_at = 0.0  # when the reaper last looked for merge queues no runner advances
        self.net: NetProxy | None = None  # sandboxed agents' allow-list proxy, made with the first one
        from exo_cli.broker.later import Later

        self.later = Later(self.log)  # what hooks leave for after their answer (the turn's checkpoint)

    # ------------------------------------------------------------------ logging

    def log(self, text: str) -> None:
        from exo_cli.validate import visible

        sys.stderr.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} [{os.getpid()}] {visible(text)}\n")
        sys.stderr.flush()

    # ------------------------------------------------------------------ life

    def start(self) -> None:
        """Listen on the control socket, record the pid file, open the agents' sockets."""
        self.paths.make()
        self.ctl, self.ctl_inode = brokerio.listen(str(self.paths.ctl))
        self.sel.register(self.ctl, selectors.EVENT_READ, None)
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        from exo_cli.adapters.files import atomic_write
        from exo_cli.adapters.proc import proc_start_time

        atomic_write(self.paths.pid_file, json.dumps({
            "pid": os.getpid(), "start_time": proc_start_time(os.getpid()), "exo": __version__,
            "protocol": adapter.PROTOCOL, "state_dir": str(self.state_dir), "log": str(self.state_dir / "broker.log"),
            "started_at": time.time()}), mode=0o600, fsync=False)
        self.log(f"broker of exo {__version__} serving {self.state_dir} (control socket {self.paths.ctl})")
        self.hold_life()
        self.sync()

    def hold_life(self) -> None:
        """Hold the life lock until this process ends (the kernel drops it then, ``kill -9`` too).

        Headless runners block on it and start a broker again when it drops. A broker that was
        replaced may still hold it for a moment: then the next tick tries again.
        """
        if self.life is not None:
            return
        from exo_cli.adapters.files import FileLock

        lock = FileLock(self.paths.life)
        try:
            if lock.acquire(blocking=False):
                self.life = lock
        except OSError as exc:
            self.log(f"cannot hold the life lock {self.paths.life}: {exc}")

    def stop(self) -> None:
        """Ask the main loop to end (safe from a signal handler or any thread)."""
        self.stopping.set()
        with contextlib.suppress(OSError):
            os.write(self.wake_w, b"!")

    def loop(self) -> None:
        next_tick = time.monotonic() + TICK
        while not self.stopping.is_set():
            timeout = max(0.0, next_tick - time.monotonic())
            for key, _ in self.sel.select(timeout):
                if key.data == "wake":
                    with contextlib.suppress(OSError):
                        os.read(self.wake_r, 4096)
                    continue
                self._accept(key.fileobj, key.data)  # type: ignore[arg-type]
            if time.monotonic() >= next_tick:
                next_tick = time.monotonic() + TICK
                try:
                    self.tick()
                except Exception as exc:  # the reaper must never take the broker down
                    self.log(f"reaper: {type(exc).__name__}: {exc}")

    def _accept(self, listener: socket.socket, slot: Slot | None) -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        if slot is not None:
            with self.lock:
                self.connections += 1
                self.idle_since = None
        from exo_cli.broker.conn import handle

        def run() -> None:
            try:
                handle(self, conn, slot)
            except Exception as exc:  # a connection's failure never reaches the loop
                self.log(f"connection: {type(exc).__name__}: {exc}")
            finally:
                with contextlib.suppress(OSError):
                    conn.close()
                if slot is not None:
                    with self.lock:
                        self.connections -= 1

        self.pool.submit(run)

    def tick(self) -> None:
        if not self.state_dir.is_dir():
            self.log(f"the state folder {self.state_dir} is gone: stopping")
            self.stop()
            return
        if not brokerio.owns(str(self.paths.ctl), self.ctl_inode):
            self.log("the control socket was removed or taken over by another broker: stopping")
            self.ctl_inode = 0  # never remove the other broker's socket
            self.stop()
            return
        self.hold_life()
        self.sync()
        self.resume_queues()
        with self.lock:
            busy = bool(self.slots) or self.connections > 0
            if busy:
                self.idle_since = None
                return
            if self.idle_since is None:
                self.idle_since = time.monotonic()
                return
            if time.monotonic() - self.idle_since < self.idle_exit:
                return
        self._exit_when_idle()

    def resume_queues(self) -> None:
        """Every ``QUEUE_EVERY`` seconds: start a detached runner for each merge queue with entries and no runner
        (one killed, or whose starter could not start it); the runner, not the broker, advances it."""
        if self.store_down or time.monotonic() - self.queues_at < QUEUE_EVERY:
            return
        self.queues_at = time.monotonic()
        from exo_cli.ops.queuerun import resume_idle

        try:
            with self.env.store.patience(STORE_PATIENCE):
                started = resume_idle(self.env)
        except ExoError as exc:
            self.log(f"merge queues: {exc.message}")
            return
        for base in started:
            self.log(f"started a runner for the merge queue of {base}")

    def _exit_when_idle(self) -> None:
        """Take the start lock (not waiting: a starter holding it is about to use us), check again, stop."""
        from exo_cli.adapters.files import FileLock

        lock = FileLock(self.paths.lock)
        if not lock.acquire(blocking=False):
            return
        try:
            with self.lock:
                if self.slots or self.connections:
                    self.idle_since = None
                    return
            self.sync()
            with self.lock:
                if self.slots:
                    return
                self.log("no agent left: exiting")
                self._close_files()
            self.stopping.set()
        finally:
            lock.release()

    def _close_files(self) -> None:
        """Stop listening and remove the files that are still ours (never a newer broker's)."""
        if self.ctl is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(self.ctl)
            self.ctl.close()
            self.ctl = None
        if self.ctl_inode:
            brokerio.unlink_owned(str(self.paths.ctl), self.ctl_inode)
            info = adapter.read_pid(self.paths)
            if info and info.get("pid") == os.getpid():
                with contextlib.suppress(OSError):
                    self.paths.pid_file.unlink()
        for slot in list(self.slots.values()):  # its agents live on: their folders stay (bound in their sandboxes)
            self._close_slot(slot, keep_folder=True)

    def shutdown(self) -> None:
        """After the loop: close and remove whatever is still ours."""
        with self.lock:
            self._close_files()

    # ------------------------------------------------------------------ agents' sockets

    def register(self, agent_id: str) -> Slot:
        """Open (or give back) the socket of recorded agent ``agent_id``."""
        from exo_cli.ops.broker import KEY_FIELD

        agent = self.env.store.agent(agent_id)
        key = agent.spec.get(KEY_FIELD) if agent is not None else None
        if agent is None or not isinstance(key, str) or not key:
            raise NotFound(f"No agent {agent_id} with a socket is recorded", agent=agent_id)
        if not self.env.runs_here(agent):
            raise StateError(f"Agent {agent_id} runs on host {agent.host}: its own broker serves it", agent=agent_id)
        with self.lock:
            slot = self.slots.get(key)
            if slot is not None and brokerio.owns(slot.path, slot.inode):
                slot.gone_since = None
                return slot
            if slot is not None:
                self._close_slot(slot)
            return self._open_slot(agent, key)

    def _open_slot(self, agent: Agent, key: str) -> Slot:
        from exo_cli.adapters.files import ensure_private_dir

        folder = ensure_private_dir(self.paths.agent_dir(key))
        path = str(folder / "sock")
        sock, inode = brokerio.listen(path)
        slot = Slot(agent, key, path, sock, inode)
        self.slots[key] = slot
        self.sel.register(sock, selectors.EVENT_READ, slot)
        self.idle_since = None
        self.log(f"socket of {agent.id}: {path}")
        self._open_net(agent, folder)
        self.stop_wake()
        return slot

    def _open_net(self, agent: Agent, folder: Path) -> None:
        """The agent's network proxy socket, when its record has an allow-list (a sandboxed agent)."""
        from exo_cli.ops import network

        entries = agent.spec.get(network.NET_FIELD)
        if not isinstance(entries, list):
            return
        from exo_cli.adapters import netlog, netpolicy, netproxy

        try:
            policy = netpolicy.parse(entries, key=network.NET_FIELD)
            pins = netpolicy.parse_pins(agent.spec.get(network.PIN_FIELD) or {}, key=network.PIN_FIELD)
            if self.net is None:
                self.net = netproxy.NetProxy(log=self.log)
            self.net.add(agent.id, network.net_folder(folder), policy, netlog.folder(self.state_dir),
                         record=netlog.stem(folder.name), pins=pins)
        except (ExoError, OSError) as exc:  # no proxy: the sandbox has no way out (closed, not open)
            self.log(f"cannot open the network proxy of {agent.id}: {exc}")

    def stop_wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self.wake_w, b"!")

    def _close_slot(self, slot: Slot, *, keep_folder: bool = False) -> None:
        self.slots.pop(slot.key, None)
        if self.net is not None:
            self.net.remove(slot.agent, keep_folder=keep_folder)
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(slot.sock)
        brokerio.close_owned(slot.sock, slot.path, slot.inode, keep_folder=keep_folder)

    def sync(self) -> None:
        """Sockets for the live agents recorded with one; none for agents whose process is gone."""
        from exo_cli.ops.broker import KEY_FIELD, gone_ids, socket_agents

        try:
            with self.env.store.patience(STORE_PATIENCE):  # not the store's 30 s: the reaper must go on
                agents = socket_agents(self.env)
        except ExoError as exc:  # the store is unreachable: watch the processes of the records we have
            if not self.store_down:
                self.log(f"cannot read the agents (watching their processes meanwhile): {exc.message}")
            self.store_down = True
            with self.lock:
                agents = [s.record for s in self.slots.values()]
        else:
            if self.store_down:
                self.log("the store answers again")
            self.store_down = False
        gone = gone_ids(self.env, agents) if agents else set()
        wanted = {str(a.spec[KEY_FIELD]): a for a in agents if a.id not in gone}
        now = time.monotonic()
        with self.lock:
            for key, slot in list(self.slots.items()):
                if not brokerio.owns(slot.path, slot.inode):
                    self.log(f"socket of {slot.agent} was taken over or removed: closing it")
                    self._close_slot(slot)
                elif key not in wanted:
                    if slot.gone_since is None:
                        slot.gone_since = now
                    elif now - slot.gone_since >= REAP_GRACE:
                        self.log(f"{slot.agent} is gone: closing its socket")
                        self._close_slot(slot)
                else:
                    slot.gone_since = None
                    slot.record = wanted[key]
            for key, agent in wanted.items():
                if key not in self.slots:
                    try:
                        self._open_slot(agent, key)
                    except (ExoError, OSError) as exc:
                        self.log(f"cannot open the socket of {agent.id}: {exc}")


# --------------------------------------------------------------------------- the process


def _detach(ready_fd: int | None) -> None:
    """Fork once more (the starter waits only for this middle process), own session, ``/``, umask 077."""
    if os.fork() > 0:
        os._exit(0)
    with contextlib.suppress(OSError):
        os.setsid()
    os.chdir("/")
    os.umask(0o077)
    if ready_fd is not None:
        os.set_inheritable(ready_fd, False)


def _log_to(path: Path) -> None:
    """stdin from /dev/null; stdout and stderr appended to ``path`` (0600), cut when it grew too long."""
    with contextlib.suppress(OSError):
        if path.stat().st_size > LOG_MAX:
            os.replace(path, path.with_name(path.name + ".1"))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(null)
    import faulthandler

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <broker>`: every thread's stack, logged


def _say(ready_fd: int | None, text: str) -> None:
    if ready_fd is None:
        return
    with contextlib.suppress(OSError):
        os.write(ready_fd, (text.replace("\n", " ") + "\n").encode("utf-8", "replace"))
        os.close(ready_fd)


def serve(env: Env, *, ready_fd: int | None) -> int:
    """Run the broker of ``env``'s repository until it is idle (the exit status of the process)."""
    from exo_cli import registry
    from exo_cli.env import HUMAN, Env
    from exo_cli.ops import broker as ops

    registry.load_all()  # first: its sessions list the tools in `exo mcp`'s order (registry.FIRST)
    try:
        base = Env(env.cwd, env.environ, caller=HUMAN)  # the broker acts for the human when it acts on its own
        paths = ops.paths(base)
        state_dir = base.state_dir
        idle_exit = float(base.config.get("broker.idle_exit"))
        if not base.has_state():
            raise StateError(f"No exo state in {state_dir} to serve")
    except ExoError as exc:
        _say(ready_fd, f"{exc.message}")
        return exc.exit_code
    _detach(ready_fd)
    _log_to(state_dir / "broker.log")
    if brokerio.answers(str(paths.ctl)):
        _say(ready_fd, "running")  # another broker serves this repository: nothing to do
        return 0
    broker = Broker(base, paths, idle_exit=idle_exit)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: broker.stop())
    try:
        broker.start()
    except (ExoError, OSError) as exc:
        broker.log(f"cannot start: {exc}")
        _say(ready_fd, f"cannot start: {exc}")
        broker.shutdown()
        return 1
    _say(ready_fd, "ready")
    _start_background(broker)
    try:
        broker.loop()
    finally:
        broker.shutdown()
        broker.log("stopped")
    _release(broker)
    return 0


def _release(broker: Broker) -> None:
    """The runtime folder goes too once nothing uses it (no live agent, nobody waiting on a doorbell)."""
    from exo_cli.ops.lifecycle import release_runtime

    try:
        release_runtime(broker.env)
    except (ExoError, OSError) as exc:
        broker.log(f"runtime folder kept: {exc}")


def _start_background(broker: Broker) -> None:
    """The forge poller runs here while the broker runs (one per repository, by its own lock)."""
    from exo_cli.ops.watch import background_poller

    def run() -> None:
        try:
            background_poller(broker.env)
        except Exception as exc:
            broker.log(f"forge poller: {type(exc).__name__}: {exc}")

    threading.Thread(target=run, name="exo-bg-poller", daemon=True).start()
