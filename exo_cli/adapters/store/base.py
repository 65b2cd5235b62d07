"""The state store's interface: every method operations call, and the wake-up part on its own.

Operations never see a connection or write SQL: each thing they do to the state is one
named method here, and each method is one short transaction (or a read) whose atomicity
the implementation guarantees under many concurrent processes (twenty agents' hooks, MCP
servers, the human's shell). An implementation is bound to one repository's state.

``SqliteStore`` (``sqlite.py``, the embedded default) implements it with WAL and
``BEGIN IMMEDIATE`` plus a bounded retry, and its wake-ups with doorbell sockets.
``PostgresStore`` (``postgres.py``) implements the same methods (rows keyed by the
repository identity it is built with, deadlocks and serialization failures retried inside)
and its wake-ups with LISTEN/NOTIFY; no operation changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from exo_cli.records import Agent, AgentKey, Message, PullRequest, Usage


class Waiter(Protocol):
    """What a waiter blocks on after ``Wakeups.listen``."""

    def wait(self, timeout: float | None) -> bool:
        """Block until a ring or ``timeout`` seconds; drain pending rings; True when rung."""
        ...


class Wakeups(Protocol):
    """Wake-ups between processes, so nobody polls the store in a loop.

    The contract, which every waiter in exo relies on: enter ``listen`` first, then read
    the store, then ``wait``; a write committed after ``listen`` returned always wakes the
    waiter. A ring may be spurious or duplicated (waiters re-read), and a waiter also
    wakes on its own timeout in case a ring is missed.
    """

    def ring(self, key: str) -> int:
        """Wake every waiter on ``key``; return how many were rung (may be 0)."""
        ...

    def listen(self, keys: Iterable[str]) -> AbstractContextManager[Waiter]:
        """Start listening on ``keys``; the waiter wakes when any of them rings."""
        ...


class Store(Protocol):
    """exo's state: agents, messages, events, pull requests and a small key/value table."""

    @property
    def bell(self) -> Wakeups:
        """The store's wake-ups (``post`` rings the recipient after its commit)."""
        ...

    def close(self) -> None:
        """Release this thread's connection (the next call opens a new one)."""
        ...

    def exists(self) -> bool:
        """True when this repository's state exists (a check that creates nothing)."""
        ...

    # -- agents ------------------------------------------------------------------------
    def agent(self, agent_id: str) -> Agent | None:
        """One agent's record, or None."""
        ...

    def agents(self) -> list[Agent]:
        """Every agent, oldest first."""
        ...

    def agent_keys(self, *, pids: Sequence[int] | None = None, ids: Sequence[str] | None = None) -> list[AgentKey]:
        """What identifying a caller needs of agents, oldest first (far cheaper than ``agents``).

        Every agent; with ``pids``, only those whose recorded process or process group is one
        of them; with ``ids``, only those.
        """
        ...

    def insert_agent(self, agent: Agent) -> None:
        """Record a new agent (its id must be unused)."""
        ...

    def update_agent(self, agent_id: str, *, if_status: str | None = None, **changes: Any) -> bool:
        """Set columns of one agent; ``updated_at`` follows, ``status_at`` when status changes.

        With ``if_status``, only while the agent's status is that one (checked and set in
        one transaction). Returns whether a record changed. KeyError on an unknown column.
        """
        ...

    def bump_agent(self, agent_id: str, **deltas: int) -> None:
        """Add to counters (turns, tool_calls, tokens) atomically."""
        ...

    def record_tool_call(self, agent_id: str) -> None:
        """Count one tool call; a permission wait ends (one write)."""
        ...

    def record_turn(self, agent_id: str, changes: Mapping[str, Any], *, turns: int, tokens: int,
                    kv: tuple[str, str], turn: int = 0, usage: Sequence[Usage] = ()) -> None:
        """Record the end of a turn in one transaction.

        Sets ``changes`` (as ``update_agent``), adds ``turns`` and ``tokens`` to the
        counters, stores the pair ``kv`` (the hook's bookkeeping) and the ``usage`` rows of
        turn number ``turn``: never one without the others.
        """
        ...

    def record_usage(self, agent_id: str, turn: int, usage: Sequence[Usage]) -> None:
        """Add the ``usage`` rows of turn ``turn`` and their sum to the agent's ``tokens`` (one transaction)."""
        ...

    def usage(self, agent_ids: Sequence[str] | None = None) -> list[tuple[str, Usage]]:
        """Tokens summed per agent and model (every agent's, or only those of ``agent_ids``), by agent then model."""
        ...

    def delete_agent(self, agent_id: str) -> None:
        """Remove an agent's record."""
        ...

    def retire_agent(self, agent_id: str, new_id: str, *, forget_keys: Sequence[str] = (),
                     forget_prefixes: Sequence[str] = (), created_at: float | None = None) -> bool:
        """Move a finished agent's record to ``new_id`` (its history), freeing its id for a new agent.
        With ``created_at``, only the record made then (a namesake spawned since is another agent).

        In one transaction: the record, the messages it sent or got, its events, the PRs it
        filed and its children's ``parent`` follow it to ``new_id``; the kv keys
        ``forget_keys`` and those starting with one of ``forget_prefixes`` are deleted. False
        when there is no such record (or ``new_id`` is taken).
        """
        ...

    def pending_agent_ids(self) -> list[str]:
        """Ids of agents that may be waiting to start (``--after``).

        Status starting and a spec that mentions ``pending``: a cheap filter; callers read
        each record and check ``spec["phase"]``.
        """
        ...

    # -- messages ----------------------------------------------------------------------
    def post(self, kind: str, sender: str, recipient: str, body: str, *, data: dict[str, Any] | None = None,
             reply_to: int | None = None, state: str | None = None) -> int:
        """Store a message durably, then ring the recipient; return its id."""
        ...

    def message(self, msg_id: int) -> Message | None:
        """One message, or None."""
        ...

    def messages(self, *, recipient: str | None = None, sender: str | None = None, kinds: Sequence[str] | None = None,
                 unconsumed: bool = False, undelivered: bool = False, reply_to: int | None = None,
                 limit: int | None = None) -> list[Message]:
        """Messages matching every filter given, oldest first."""
        ...

    def last_message_by_sender(self) -> dict[str, str]:
        """The body of the newest message each sender said, by sender id.

        A notice (``data["notice"]`` true: exo telling its recipient something, such as a foreseen
        conflict or a merged PR, posted from whichever process noticed it) is nobody's words and is
        left out, so it never shows as the sender's last message.
        """
        ...

    def mark_messages(self, ids: Iterable[int], **changes: Any) -> int:
        """Set delivered_at / consumed_at / state on messages; return how many changed."""
        ...

    def consume(self, ids: Iterable[int], *, delivered: bool = False) -> list[int]:
        """Mark unconsumed messages consumed in one write; return the ids this call took.

        Exactly once: of several callers racing for a message, one gets it. With
        ``delivered``, a message not yet marked delivered is marked delivered too.
        """
        ...

    def claim_pending(self, recipient: str) -> list[Message]:
        """Take ``recipient``'s undelivered, unconsumed messages (delivered and consumed now).

        Returns the ones this call took, oldest first; a racing caller never gets the same one.
        """
        ...

    def claim_delivery(self, msg_id: int) -> bool:
        """Mark one undelivered, unconsumed message delivered; True when this call did.

        Undo with ``mark_messages([msg_id], delivered_at=None)`` when the delivery fails.
        """
        ...

    # -- events ------------------------------------------------------------------------
    def event(self, kind: str, agent: str | None, data: dict[str, Any] | None = None) -> int:
        """Record a lifecycle event; return its id."""
        ...

    def events(self, agent: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The newest events (of one agent), newest first."""
        ...

    # -- pull requests -------------------------------------------------------------------
    def insert_pr(self, **values: Any) -> int:
        """Record a pull request; return its number."""
        ...

    def update_pr(self, number: int, **changes: Any) -> None:
        """Set columns of one pull request; ``updated_at`` follows."""
        ...

    def pr(self, number: int) -> PullRequest | None:
        """One pull request, or None."""
        ...

    def prs(self, *, head: str | None = None, state: str | None = None) -> list[PullRequest]:
        """Pull requests matching the filters, by number."""
        ...

    # -- small key/value -----------------------------------------------------------------
    def kv_get(self, key: str) -> str | None:
        """A value, or None."""
        ...

    def kv_set(self, key: str, value: str) -> None:
        """Set a value (insert or replace)."""
        ...

    def kv_claim(self, key: str, value: str) -> bool:
        """Set ``key`` only when it is absent; True when this call set it (one winner of a race)."""
        ...

    def named_lock(self, name: str, *, host: str, wait: float | None) -> AbstractContextManager[bool]:
        """Hold the lock ``name`` of this repository, exclusive among exo's processes on every host, while the
        block runs: yields True when held, False when another held it for ``wait`` seconds (0: one try; None:
        wait). Freed when the holder dies (``baselock.py``: a PostgreSQL session lock, a SQLite leased row)."""
        ...

    # -- reaching the store ------------------------------------------------------------------
    def patience(self, seconds: float | None) -> AbstractContextManager[None]:
        """Inside the block, keep trying to reach a store that restarts or is full for up to ``seconds``
        (the caller's own timeout) before an EnvironmentError; None: the store's default. SQLite: nothing to do."""
        ...

    # -- moving the state between stores (`exo store migrate`) -------------------------------
    def counts(self) -> dict[str, int]:
        """How many rows each table holds for this repository (``TABLES`` order)."""
        ...

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        """Every row of this repository, by table, as the SQLite columns name them (ids kept)."""
        ...

    def hold(self, holder: str) -> AbstractContextManager[None]:
        """Hold every writer of this repository's state until the block ends (every exo process, every host).

        Writers wait at most ``moving.HOLD_SECONDS``, then fail with a StateError naming ``holder``;
        reads go on. Inside the block this process's own calls (``dump``, ``agents``,
        ``mark_moved``) see a state nobody else changes. StateError when the state moved already.
        """
        ...

    def mark_moved(self, location: str) -> None:
        """Inside ``hold``: record that the state moved to ``location`` (``moving``'s form).

        From then on every write here fails with a StateError naming it (reads still see the state
        as it was); it takes effect for others when the hold ends.
        """
        ...

    def moved_to(self) -> str | None:
        """Where this repository's state moved (its marker), or None while it is here; raises nothing of that."""
        ...

    def set_aside(self) -> str | None:
        """After the move: remove this repository's old state; return where a copy is kept, if anywhere."""
        ...

    def forget(self) -> None:
        """Remove this repository's state from this store for good (``exo deinit``): its rows (PostgreSQL,
        other repositories' rows untouched) or its database file (SQLite)."""
        ...

    def load(self, rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        """Insert ``dump``'s rows, ids kept, in one transaction, as a copy nobody uses until ``settle``.

        StateError when this store already holds state for the repository (a copy an interrupted
        migrate left is replaced).
        """
        ...

    def settle(self) -> None:
        """Make ``load``'s copy this repository's state (the moved marker of an earlier move away cleared)."""
        ...

    def discard(self) -> None:
        """Remove ``load``'s copy (nothing that was ever settled)."""
        ...
