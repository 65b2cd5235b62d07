"""The live part of the page: snapshots pushed to every open page over Server-Sent Events.

One thread waits on the team doorbell (``records.TEAM_BELL``, rung after every change of an
agent or a message, in SQLite and PostgreSQL alike) and takes one ``board`` snapshot per ring,
sent to every page only when it changed. Another reads the panes of the agents whose pages are
open, all of them in one ``read`` (one capture call per multiplexer), every ``pane_every``
seconds. Each page has a queue; ``close`` ends every stream at once, so the server stops within
its deadline with pages open.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from exo_cli.errors import ExoError
from exo_cli.records import TEAM_BELL
from exo_cli.registry import invoke
from exo_cli.web.views import to_json

TICK = 0.25  # the longest a thread sleeps before it looks at ``stop`` again
PANE_LINES = 300
KEEPALIVE = 15.0  # seconds between comments on a quiet stream (proxies drop silent ones)
END = ("", "")  # the sentinel that ends a stream
QUEUE_MAX = 16  # events waiting for a page that reads slowly (or not at all); the oldest go first


def failure_json(exc: BaseException) -> str:
    """An error for the page: an ExoError's message and hint; anything else named as a bug in exo."""
    if isinstance(exc, ExoError):
        return to_json({"message": exc.message, "hint": getattr(exc, "hint", None)})
    return to_json({"message": f"internal error: {type(exc).__name__}: {exc}",
                    "hint": "This is a bug in exo; `exo board` shows the same team."})


def frame(event: str, data: str) -> str:
    """One SSE message; ``data`` is JSON (one line: json.dumps never writes a raw newline)."""
    return f"event: {event}\ndata: {data}\n\n"


@dataclass(eq=False)
class Page:
    """One open page: its queue, and the agent whose pane it shows ("" for none)."""

    loop: asyncio.AbstractEventLoop
    agent: str = ""
    queue: asyncio.Queue[tuple[str, str]] = field(default_factory=lambda: asyncio.Queue(QUEUE_MAX))
    pane: str | None = None  # the last pane text sent

    def push(self, item: tuple[str, str]) -> None:
        with contextlib.suppress(RuntimeError):  # its loop is closed: the server is stopping
            self.loop.call_soon_threadsafe(self._offer, item)

    def _offer(self, item: tuple[str, str]) -> None:
        """In the page's loop: a page that stopped reading keeps only the newest events (each snapshot is
        whole, so an older one is worth nothing); the end of the stream always gets through."""
        if item == END:
            while not self.queue.empty():
                self.queue.get_nowait()
        elif self.queue.full():
            self.queue.get_nowait()
        self.queue.put_nowait(item)


class Hub:
    """The open pages and the two threads that feed them."""

    def __init__(self, env: Any, *, fallback: float = 5.0, pane_every: float = 1.0) -> None:
        self.env = env
        self.fallback, self.pane_every = fallback, pane_every
        self.pages: set[Page] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.board: str | None = None  # the last snapshot's JSON
        self.changed = threading.Event()  # set by an action: take a snapshot now
        self.threads: list[threading.Thread] = []
        self.unreadable: set[str] = set()  # agents whose pane could not be read: read alone (``panes``)

    # -- pages ---------------------------------------------------------------------------------
    def open(self, agent: str = "") -> Page:
        page = Page(loop=asyncio.get_running_loop(), agent=agent)
        with self.lock:
            self.pages.add(page)
            board = self.board
        if board is not None:
            page.push(("board", board))
        return page

    def leave(self, page: Page) -> None:
        with self.lock:
            self.pages.discard(page)

    async def stream(self, page: Page) -> AsyncIterator[str]:
        """The page's SSE stream: a comment at once (the browser's ``onopen``), then its events."""
        try:
            yield ": open\n\n"
            while not self.stop.is_set():
                try:
                    event, data = await asyncio.wait_for(page.queue.get(), KEEPALIVE)
                except TimeoutError:
                    yield ": keepalive\n\n"
                    continue
                if (event, data) == END:
                    return
                yield frame(event, data)
        finally:
            self.leave(page)

    def _send(self, event: str, data: str, to: Callable[[Page], bool] = lambda p: True) -> None:
        with self.lock:
            pages = [p for p in self.pages if to(p)]
        for p in pages:
            p.push((event, data))

    # -- threads -------------------------------------------------------------------------------
    def start(self) -> None:
        for target in (self._watch_team, self._watch_panes):
            t = threading.Thread(target=target, name=f"exo-ui{target.__name__}", daemon=True)
            t.start()
            self.threads.append(t)

    def close(self) -> None:
        """End every stream now and stop the threads (the server's Ctrl-C)."""
        self.stop.set()
        self.changed.set()
        self._send(*END)

    def snapshot(self) -> None:
        """Take a board snapshot; send it to every page when it changed."""
        try:
            data = to_json(invoke("board", self.env))
        except Exception as exc:  # a refusal (state unreadable) or a bug: said on the page, the watch goes on
            self._send("failure", failure_json(exc))
            return
        with self.lock:
            if data == self.board:
                return
            self.board = data
        self._send("board", data)

    def _watch_team(self) -> None:
        """Snapshots at every ring until ``stop``; a store that fails (PostgreSQL down) is said on the pages and
        listened to again after ``fallback`` seconds, so the page comes back with the store."""
        while not self.stop.is_set():
            try:
                self._listen()
            except Exception as exc:
                self._send("failure", failure_json(exc))
                self.stop.wait(self.fallback)

    def _listen(self) -> None:
        while not self.stop.is_set() and not self.env.has_state():  # no agent yet: wait for the first one
            self.snapshot()
            self.changed.wait(self.fallback)
            self.changed.clear()
        if self.stop.is_set():
            return
        with self.env.store.bell.listen([TEAM_BELL]) as waiter:
            while not self.stop.is_set():
                self.snapshot()
                self.changed.clear()
                quiet = 0.0
                while not self.stop.is_set() and not self.changed.is_set() and quiet < self.fallback:
                    if waiter.wait(TICK):
                        break
                    quiet += TICK

    def _watch_panes(self) -> None:
        while not self.stop.wait(self.pane_every):
            with self.lock:
                wanted = sorted({p.agent for p in self.pages if p.agent})
            if wanted:
                try:
                    self.panes(wanted)
                except Exception as exc:  # a bug: said on the pages, the panes keep being read
                    self._send("failure", failure_json(exc))

    def panes(self, agents: list[str]) -> None:
        """Read the panes of ``agents`` in one call and send each page its agent's text when it changed.

        An agent that cannot be read (gone, not started yet) would fail the whole call: it is read alone
        from then on, until it can be, and the others stay in the one call."""
        batch = [a for a in agents if a not in self.unreadable]
        alone = [a for a in agents if a in self.unreadable]
        results: list[Any] = []
        if batch:
            try:
                results = list(invoke("read", self.env, agent=batch, lines=PANE_LINES, clean=True).results)
            except ExoError:
                alone = agents
        for a in alone:
            try:
                results.append(invoke("read", self.env, agent=a, lines=PANE_LINES, clean=True))
            except ExoError:
                self.unreadable.add(a)
            else:
                self.unreadable.discard(a)
        for r in results:
            data = to_json(r)
            with self.lock:
                pages = [p for p in self.pages if p.agent == r.agent and p.pane != data]
                for p in pages:
                    p.pane = data
            for p in pages:
                p.push(("pane", data))
