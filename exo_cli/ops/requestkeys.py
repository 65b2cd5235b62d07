"""Blocking requests sent again under the same key (a relay that lost its broker): no loss, no duplicate.

An agent's relay names each request it sends (``cancel.key()``: the relay's id and the request's
own), and sends it again under that name when its broker was killed before answering. A ``wait``
notes the messages it is about to take under the key *before* taking them, and a ``question``
notes its ticket: the same request sent again takes those messages again (any the killed attempt
noted but did not take yet) and returns them, or waits on the same ticket, never on a second
question nor on other messages. One note per agent and kind (in the store's kv table, so it
outlives the broker): only an agent's latest keyed request can come back.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from exo_cli import cancel

if TYPE_CHECKING:
    from exo_cli.env import Env
    from exo_cli.records import Message

PREFIX = "request-key"


def _kv(kind: str, agent_id: str) -> str:
    return f"{PREFIX}:{kind}:{agent_id}"


def _read(env: Env, kind: str, agent_id: str) -> dict[str, Any]:
    try:
        data = json.loads(env.store.kv_get(_kv(kind, agent_id)) or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def replayed(env: Env, kind: str, agent_id: str) -> Any:
    """What this request noted when it was sent before (under the same key), or None for a new request."""
    key = cancel.key()
    if not key:
        return None
    data = _read(env, kind, agent_id)
    return data.get("value") if data.get("key") == key else None


def note(env: Env, kind: str, agent_id: str, value: Any) -> None:
    """Note ``value`` for this request's key (nothing without a key: a call of the command line or MCP)."""
    key = cancel.key()
    if key:
        env.store.kv_set(_kv(kind, agent_id), json.dumps({"key": key, "value": value}))


def note_taking(env: Env, agent_id: str, ids: list[int]) -> None:
    """Add message ids a ``wait`` is about to take under this request's key (before it takes them)."""
    key = cancel.key()
    if not key or not ids:
        return
    data = _read(env, "wait", agent_id)
    value = data.get("value")
    before: list[Any] = value if data.get("key") == key and isinstance(value, list) else []
    note(env, "wait", agent_id, [*before, *(i for i in ids if i not in before)])


def take(env: Env, agent_id: str, ids: list[int]) -> list[int]:
    """A ``wait`` consumes (and marks delivered) these messages in one write; the ids this call took.

    Under a request key they are noted first: a wait sent again after its broker was killed gets
    them back, whether the killed attempt took them or not.
    """
    note_taking(env, agent_id, ids)
    return env.store.consume(ids, delivered=True)


def taken_before(env: Env, agent_id: str) -> list[Message]:
    """The messages a ``wait`` sent before under this request's key noted, taken (again: those the killed
    attempt noted but had not taken yet); none for a new request."""
    ids = replayed(env, "wait", agent_id)
    if not isinstance(ids, list) or not ids:
        return []
    ids = [i for i in ids if isinstance(i, int)]
    env.store.consume(ids, delivered=True)
    return [m for m in (env.store.message(i) for i in ids) if m is not None]
