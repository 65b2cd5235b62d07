"""Cancellation for blocking operations (``wait``, ``question``) run by the MCP server and the broker.

The MCP adapter (and the broker, for an agent's own ``exo wait``) runs a blocking operation in a
worker thread inside ``scope(event)`` and sets the event when the client cancels or goes away;
the operation checks ``cancelled()`` between short waits and returns. The CLI never sets one
(Ctrl-C interrupts it).

``scope(event, key=...)`` also names the request: a relay that lost its broker sends the same
request again under the same key, and a blocking operation that already consumed something for
that key hands the same back instead of consuming more (``key()``).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator

_local = threading.local()
# The request's key: a context variable, so the MCP server's worker threads (anyio copies the
# context into them) see the key the session set for the tool call they run.
REQUEST_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("exo_request_key", default=None)
_KEEP = object()


def current() -> threading.Event | None:
    return getattr(_local, "event", None)


def cancelled() -> bool:
    ev = current()
    return ev is not None and ev.is_set()


def key() -> str | None:
    """The key of the request being served (a relay's request id), or None."""
    return REQUEST_KEY.get()


@contextlib.contextmanager
def scope(event: threading.Event, *, key: str | None | object = _KEEP) -> Iterator[threading.Event]:
    """Run the block with ``event`` as its cancellation (and ``key`` as its request key, when given)."""
    previous = current()
    _local.event = event
    token = REQUEST_KEY.set(key) if key is not _KEEP else None  # type: ignore[arg-type]
    try:
        yield event
    finally:
        _local.event = previous
        if token is not None:
            REQUEST_KEY.reset(token)
