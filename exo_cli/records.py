"""Records exo keeps and results operations return: frozen dataclasses with JSON-native fields."""

from __future__ import annotations

import json

from exo_cli.lite import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

ROOT = "root"
#: Joins a retired agent's name and a number into its history id (``w1@1712345678``); never part of a name.
RETIRED_SEP = "@"
#: kv keys exo keeps per agent that the hooks and lifecycle share (forgotten when an agent is retired).
HOOK_STATE_KEY = "hook:{agent}"
MCP_READY_KEY = "mcp-ready:{agent}"
TEAM_BELL = "=team"  # the doorbell rung after every change of an agent or a message (the board listens)

# Agent statuses (docs/concepts.md says what each means).
STARTING = "starting"
WORKING = "working"
IDLE = "idle"
ASKING = "asking"
BLOCKED_ON_DIALOG = "blocked-on-dialog"
WAITING_PERMISSION = "waiting-permission"
FAILED_TURN = "failed-turn"  # its last turn ended with an error (an API error); alive, takes new messages
TEAM_BUDGET_KEY = "budget:team"  # the store's key of the team's budget (ops/teambudget.py)
TEAM_OVER = "over budget: the team "  # how the status_reason of an agent the team's budget holds starts
OVER_BUDGET = "over-budget"  # it reached its budget: alive and idle, messages held until `exo budget` raises it
DONE = "done"
DEAD = "dead"
REMOVAL_DEFERRED = "completed by itself; removal deferred"  # the status reason of an agent that completed itself
UNKNOWN = "unknown"
UNREACHABLE = "unreachable"  # shown, never recorded: the agent's host cannot be reached just now
LIVE_STATUSES = (STARTING, WORKING, IDLE, ASKING, BLOCKED_ON_DIALOG, WAITING_PERMISSION, FAILED_TURN, UNKNOWN,
                 UNREACHABLE, OVER_BUDGET)
# Statuses in which an agent waits at its input for the next message (it can be typed into).
AT_REST = (IDLE, FAILED_TURN)

# What an agent's ``backend`` and ``mux`` can be: the one list of each (config, the adapters and
# the operations read these; kept here because this module is cheap, even on the hooks' path).
AGENT_CLIS = ("claude", "gemini", "codex")  # the agent CLIs exo wires its hooks and MCP server into
BACKENDS = (*AGENT_CLIS, "custom", "demo")
# How to install each agent CLI (its npm package), for the hints of `exo init` and `exo spawn`.
AGENT_CLI_INSTALL = {cli: f"npm install -g {package}" for cli, package in
                     (("claude", "@anthropic-ai/claude-code"), ("gemini", "@google/gemini-cli"), ("codex", "@openai/codex"))}
# Where an agent works: a linked worktree of the repository, or its own ``git clone --shared`` (sandboxable).
LAYOUTS = ("worktree", "clone")
PANE_MUXES = ("tmux", "zellij")  # multiplexers that show an agent in a pane (a terminal to read and type into)
MUXES = (*PANE_MUXES, "headless")
# Other tool families' sets ``exo mcp --compat`` (and the ``mcp.compat`` key) can add to exo's own.
MCP_COMPAT = ("claude-team", "termtile", "ikigai")


def to_jsonable(obj: Any) -> Any:
    """Turn dataclasses, records (NamedTuple) and tuples into JSON-native values, recursively."""
    if hasattr(type(obj), "__dataclass_fields__"):  # dataclasses.is_dataclass, without importing it here
        import dataclasses

        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.repr}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return {k: to_jsonable(v) for k, v in zip(obj._fields, obj, strict=True)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    return obj


class Agent(NamedTuple):
    """One agent exo started (a record: immutable, cheap to define on the hooks' hot path)."""

    id: str
    name: str
    role: str  # "tl" | "dev"
    parent: str | None
    status: str
    backend: str
    mux: str
    task: str | None = None
    bead: str | None = None
    worktree: str | None = None
    branch: str | None = None
    base_branch: str | None = None
    repo: str | None = None
    location: dict[str, Any] = {}  # noqa: RUF012 - records are never mutated in place
    session_id: str | None = None
    output: str | None = None
    status_reason: str | None = None
    turns: int = 0
    tool_calls: int = 0
    tokens: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    status_at: float = 0.0
    completed_at: float | None = None
    spec: dict[str, Any] = {}  # noqa: RUF012
    undo: list[Any] = []  # noqa: RUF012

    @property
    def live(self) -> bool:
        return self.status in LIVE_STATUSES

    @property
    def host(self) -> str:
        """The host the agent runs on (``[hosts.NAME]``, or this machine's name); "" for records made before hosts."""
        return str(self.spec.get("host") or "")

    @property
    def retired(self) -> bool:
        """A finished agent kept as history under ``<name>@<n>`` (its name is free for a new agent)."""
        return RETIRED_SEP in self.id


AGENT_JSON_FIELDS = ("location", "spec", "undo")

USAGE_KINDS = ("input", "output", "cache_write", "cache_read")


class Usage(NamedTuple):
    """Tokens used with one model, by kind (one turn's, or a sum); input excludes the cache reads and writes."""

    model: str
    input: int = 0
    output: int = 0
    cache_write: int = 0
    cache_read: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output + self.cache_write + self.cache_read


def in_subtree(agents: list[Agent], ancestor: str, agent_id: str) -> bool:
    """Whether ``agent_id`` descends from ``ancestor`` (a child, a grandchild...) among ``agents``."""
    by_id = {a.id: a for a in agents}
    cur = by_id.get(agent_id)
    hops = 0
    while cur is not None and hops < 1000:
        if cur.parent == ancestor:
            return True
        cur = by_id.get(cur.parent or "")
        hops += 1
    return False


def checkpoint_key(agent: Agent) -> str:
    """The key of an agent's checkpoints (``refs/exo/checkpoints/<key>/``): its name and creation time.

    Never its id alone: a name is free again once its agent is retired, and the next agent of
    that name must not inherit (or prune) the checkpoints of the one before.
    """
    safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in agent.name).strip(".-") or "agent"
    return f"{safe}-{round(agent.created_at * 1_000_000)}"


def pick_agent(agents: list[Agent], ref: str) -> Agent | None:
    """The agent ``ref`` names among ``agents``: by id, else by name, else by bead; a live one first, then
    the newest."""
    for attr in ("id", "name", "bead"):
        hits = [a for a in agents if getattr(a, attr) == ref]
        if hits:
            live = [a for a in hits if a.live] or hits
            return max(live, key=lambda a: a.created_at)
    return None


class AgentKey(NamedTuple):
    """What finding the caller needs of one agent (``Store.agent_keys``), without reading whole records.

    Every hook and command identifies its caller first; with hundreds of agents, parsing every
    record's spec and undo list for that would cost more than the rest of a hook.
    """

    id: str
    role: str
    status: str
    worktree: str | None
    pid: int | None  # the recorded location's process (tmux: the pane's) and group
    pgid: int | None

    @property
    def live(self) -> bool:
        return self.status in LIVE_STATUSES


class Message(NamedTuple):
    """A durable message: note, question, answer, send, or a lifecycle event."""

    id: int
    kind: str
    sender: str
    recipient: str
    body: str
    data: dict[str, Any] = {}  # noqa: RUF012
    created_at: float = 0.0
    delivered_at: float | None = None
    consumed_at: float | None = None
    reply_to: int | None = None
    state: str | None = None


class PullRequest(NamedTuple):
    """A pull request of an agent's branch into its parent branch."""

    number: int
    forge: str
    title: str
    body: str
    head: str
    base: str
    author: str
    state: str  # open | merged | closed
    draft: bool = False
    url: str | None = None
    remote_number: int | None = None
    strategy: str | None = None
    merge_commit: str | None = None
    review_state: str | None = None
    checks_state: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    merged_at: float | None = None
    data: dict[str, Any] = {}  # noqa: RUF012


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
