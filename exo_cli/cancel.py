"""Cancellation for blocking operations (``wait``, ``question``) run by the MCP server.

The MCP adapter runs a blocking operation in a worker thread inside ``scope(event)``
and sets the event when the client cancels; the operation checks ``cancelled()``
between short waits and returns. The CLI never sets one (Ctrl-C interrupts it).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_local = threading.local()


def current() -> threading.Event | None:
    return getattr(_local, "event", None)


def cancelled() -> bool:
    ev = current()
    return ev is not None and ev.is_set()


@contextlib.contextmanager
def scope(event: threading.Event) -> Iterator[threading.Event]:
    previous = current()
    _local.event = event
    try:
        yield event
    finally:
        _local.event = previous
