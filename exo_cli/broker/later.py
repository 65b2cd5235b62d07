"""The work a hook leaves for after its answer, done by the broker itself (``turnend.after_exit``).

A hook that runs in the broker leaves the turn's due checkpoint and the conflict check for later.
Outside the broker a detached shell waits for the hook's process and starts ``exo checkpoint
AGENT --due`` (whose call, from an agent's environment, came back through its relay to this very
broker): a shell, a new exo process (about 100 ms of CPU) and a second discovery of the repository
per turn of every agent. Here one worker thread takes the jobs in order: it waits until the relay
that sent the hook has exited (as the shell did, five seconds at most: the hook's answer and its
exit never compete with the job), then runs each operation with the hook's ``Env`` (the socket's
agent as the caller, its checked folder and environment) through ``registry.invoke``, as the
relayed command ran. One thread: the jobs of thirty agents' turns queue rather than compete with
the hooks for two cores. A broker that dies with jobs queued loses only those: a due checkpoint
stays due, and the agent's next hook, or exo typing into it, takes it first (``ops/turnend.py``).
"""

from __future__ import annotations

import os
import queue
import select
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from exo_cli.env import Env

WAIT = 5.0  # seconds at most a job waits for the hook's relay to exit


class Later:
    """The broker's queue of work for after a hook (``Env.defer``)."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log
        self.jobs: queue.SimpleQueue[tuple[Env, list[Any]]] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.pending = 0  # jobs handed over and not done yet (``ping`` tells: tests and bench/ wait for them)

    def defer(self, env: Env, jobs: list[Any]) -> bool:
        """Queue ``jobs`` (``turnend.Later``) to run as ``env`` once ``env.pid`` has exited; True."""
        with self.lock:
            self.pending += len(jobs)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="exo-later", daemon=True)
                self.thread.start()
        self.jobs.put((env, jobs))
        return True

    def _run(self) -> None:
        from exo_cli import registry

        while True:
            env, jobs = self.jobs.get()
            wait_gone(env.pid, WAIT)
            for job in jobs:
                try:
                    registry.invoke(job.op, env, **job.args)
                except Exception as exc:  # a missed checkpoint or check is taken again later: never the loop's end
                    self.log(f"{env.caller.agent_id} {job.op} after its hook: {type(exc).__name__}: {exc}")
                finally:
                    with self.lock:
                        self.pending -= 1


def wait_gone(pid: int, timeout: float) -> None:
    """Return once process ``pid`` has exited, or after ``timeout`` seconds (a pidfd where there are any)."""
    if pid == os.getpid() or pid <= 1:
        return
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):
        fd = -1
    if fd >= 0:
        try:
            select.select([fd], [], [], timeout)
        finally:
            os.close(fd)
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            pass
        time.sleep(0.05)
