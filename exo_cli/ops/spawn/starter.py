"""Starting the agents of one spawn call: threads for the tasks, one batched tmux call for the windows.

``run_all`` runs the call's tasks on plain threads; ``Starter`` collects the agents the tasks
are ready to start and, on tmux, starts them with one ``new-window`` client call. Nothing
here knows what a task is: the task steps (``task.py``) call ``enter``/``leave``/``start``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exo_cli.errors import ExoError

if TYPE_CHECKING:
    from exo_cli.adapters.mux import Mux

RUN_THREADS = 16  # spawn tasks running at once


def run_all(fn: Any, count: int, *, max_threads: int = RUN_THREADS) -> None:
    """Run ``fn(0) .. fn(count - 1)`` on up to ``max_threads`` threads; re-raise the first unexpected error.

    Plain threads rather than concurrent.futures (whose import costs ~15 ms of CPU at every
    spawn); every task gets its own thread up to the cap, so all of them queue for the repo
    lock at once and the serialized ``git worktree add`` calls run back to back.
    """
    if count <= 1:
        for i in range(count):
            fn(i)
        return
    lock = threading.Lock()
    indexes = iter(range(count))
    errors: list[BaseException] = []

    def worker() -> None:
        while True:
            with lock:
                i = next(indexes, None)
            if i is None:
                return
            try:
                fn(i)
            except BaseException as exc:  # noqa: BLE001 - handed to the calling thread below
                errors.append(exc)

    threads = [threading.Thread(target=worker, name=f"exo-spawn-{k}") for k in range(min(count, max_threads))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _quietly(fn: Any) -> None:
    """Call ``fn()``, ignoring exo's and the OS's errors (the caller repeats the call where it matters)."""
    with contextlib.suppress(ExoError, OSError):
        fn()


class _StartItem:
    """One agent waiting in a ``Starter`` batch."""

    def __init__(self, name: str, argv: list[str], cwd: str, env: dict[str, str], keeper: Any = None) -> None:
        self.request = (name, argv, cwd, env, keeper)
        self.result: Any = None
        self.done = False


class Starter:
    """Start the agents of one call together: on tmux, one ``new-window`` call for all windows.

    Every task of the call is expected (``enter``) until it either hands its agent to
    ``start`` or ends without one (``leave``; also before it waits for a free agent slot, so
    a full ``limits.max_agents`` can never hold the others back). The batch runs when no
    expected task is left, or ``patience`` seconds after a task queued. Until then the
    queued tasks wait, so the serialized ``git worktree add`` calls of the other tasks do
    not compete with agents starting up, and the whole call costs one tmux client call.
    Other multiplexers start each agent at once, from its own task's thread.
    """

    def __init__(self, mux: Mux, *, patience: float = 3.0) -> None:
        self.mux = mux
        self.patience = patience
        self._many = getattr(mux, "start_many", None)
        self._cond = threading.Condition()
        self._expected = 0
        self._reserved = 0
        self._queue: list[_StartItem] = []
        self._local = threading.local()
        self._warm: threading.Thread | None = None

    def warm_up(self) -> None:
        """Start the tmux server and session in the background (once), while the tasks make worktrees.

        Called when the first task has recorded its agent; ``start_many`` checks again
        (and reports any error) when the batch runs.
        """
        ensure = getattr(self.mux, "ensure_session", None)
        if self._many is None or not callable(ensure):
            return
        with self._cond:
            if self._warm is not None:
                return
            self._warm = threading.Thread(target=_quietly, args=(ensure,), name="exo-spawn-tmux", daemon=True)
            self._warm.start()

    def reserve(self, count: int) -> None:
        """Expect ``count`` tasks before their threads run (so a fast one cannot batch alone)."""
        with self._cond:
            self._expected += count
            self._reserved += count

    def enter(self) -> None:
        """The calling thread's task may start an agent: wait for it before running a batch."""
        with self._cond:
            if self._reserved > 0:
                self._reserved -= 1  # already counted by reserve()
            else:
                self._expected += 1
            self._local.expected = True

    def leave(self) -> None:
        """The calling thread's task will not queue an agent (now): run the batch if all others wait."""
        batch = None
        with self._cond:
            if self._no_longer_expected():
                batch = self._take()
        if batch:
            self._run(batch)

    def start(self, name: str, argv: list[str], *, cwd: str, env: dict[str, str], log_path: Path,
              **extra: Any) -> Any:
        """Start one agent (batched on tmux); its Location, or its ExoError raised.

        ``extra`` are the multiplexer's own start options (a headless agent's message channel,
        Zellij's service panes, a pane agent's ``keeper``); tmux takes only the keeper.
        """
        if self._many is None:
            return self.mux.start(name, argv, cwd=cwd, env=env, log_path=log_path, **extra)
        item = _StartItem(name, argv, cwd, env, extra.get("keeper"))
        with self._cond:
            self._queue.append(item)
            self._no_longer_expected()
            batch = self._take()
        if batch:
            self._run(batch)
        deadline = time.monotonic() + self.patience
        with self._cond:
            while not item.done:
                left = deadline - time.monotonic()
                if left <= 0 and item in self._queue:  # a slow task holds the batch back: go now
                    batch, self._queue = self._queue, []
                    break
                self._cond.wait(max(left, 0.05))
            else:
                batch = []
        if batch:
            self._run(batch)
        if isinstance(item.result, BaseException):
            raise item.result
        return item.result

    def _no_longer_expected(self) -> bool:
        """Stop expecting the calling thread's task; whether it was expected (call with the lock held)."""
        if not getattr(self._local, "expected", False):
            return False
        self._local.expected = False
        self._expected -= 1
        return True

    def _take(self) -> list[_StartItem]:
        """The queue, when no expected task is left (call with the lock held)."""
        if self._expected > 0 or not self._queue:
            return []
        batch, self._queue = self._queue, []
        return batch

    def _run(self, batch: list[_StartItem]) -> None:
        from exo_cli.adapters.mux.tmux import StartRequest

        assert self._many is not None
        with self._cond:
            warm = self._warm
        if warm is not None:
            warm.join()
        try:
            results = self._many([StartRequest(*item.request) for item in batch])
        except BaseException as exc:
            results = [exc] * len(batch)
            raise
        finally:
            with self._cond:
                for item, result in zip(batch, results, strict=True):
                    item.result = result
                    item.done = True
                self._cond.notify_all()
