"""What both stores share for ``exo store migrate``: the hold, the moved marker and the digests.

While a migrate copies a repository's state, it *holds* the source store: every writer of
that repository (every exo process on every host: hooks, MCP servers, the human's shell,
remote host-calls) waits, at most ``HOLD_SECONDS``, then fails with a StateError naming the
migrate. When the copy is checked (``digests``: every row of every table, not counts), the
source gets a *moved marker* in the same transaction that ends the hold: from then on, a
process that still uses the old store fails on its next read or write with a StateError
naming the new location (``moved_error``), so nothing is ever written there silently.

A location is a PostgreSQL URL (never a password) or ``sqlite:<host>:<path>``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from exo_cli.adapters.store import HOLD_SECONDS, MOVED_APP_ID
from exo_cli.errors import StateError

__all__ = ["HOLD_SECONDS", "MOVED_APP_ID", "describe", "digests", "held_error", "moved_error"]
# The primary key of each table (the order of rows in a digest).
KEYS = {"agents": ("id",), "messages": ("id",), "events": ("id",), "prs": ("number",), "kv": ("key",)}


def sqlite_location(host: str, path: str) -> str:
    return f"sqlite:{host}:{path}"


def describe(location: str) -> str:
    """A location as people read it: the URL, or "SQLite (PATH on HOST)"."""
    if location.startswith("sqlite:"):
        host, _, path = location[len("sqlite:"):].partition(":")
        return f"SQLite ({path} on {host})"
    return location


def holder_text(target: str) -> str:
    """Who holds the state: this process, as writers' errors name it."""
    return f"exo store migrate --to {describe(target)} (pid {os.getpid()} on {os.uname().nodename})"


def moved_error(location: str) -> StateError:
    """The error of a process that still uses the store the state moved away from."""
    return StateError(
        f"exo's state for this repository moved to {describe(location)} (exo store migrate); "
        "this process still used the old store, so nothing was written",
        hint="Run the command again: exo follows the state folder's record of where the state is (agents' "
        "hooks and MCP servers follow it on their next call).",
        moved_to=location,
    )


def held_error(holder: str | None, seconds: float) -> StateError:
    """The error of a writer that waited longer than ``seconds`` for the state."""
    if holder:
        return StateError(f"{holder} holds exo's state; this write waited {seconds:.0f} s for it",
                          hint="Run the command again once the migrate has ended.", held_by=holder)
    return StateError(f"exo's state stayed locked for {seconds:.0f} s; nothing was written",
                      hint="Another exo process holds a long write; run the command again.")


def digests(rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, str]:
    """A SHA-256 of every row of every table (``dump``'s form), by table: equal digests, equal contents.

    Rows are taken in primary-key order, each as canonical JSON (columns sorted; floats keep every digit),
    so the same state on SQLite and on PostgreSQL gives the same digests.
    """
    import hashlib

    out: dict[str, str] = {}
    for table, key in KEYS.items():
        h = hashlib.sha256()
        for row in sorted(rows.get(table, ()), key=lambda r: tuple(r[k] for k in key)):
            h.update(json.dumps(dict(row), sort_keys=True,
                                ensure_ascii=False).encode("utf-8", "surrogatepass"))
            h.update(b"\n")
        out[table] = h.hexdigest()
    return out
