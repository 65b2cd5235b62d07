"""Running the tasks of one spawn call side by side, and what the call returns.

``run_tasks`` runs one step per request on the call's threads (each task's failure is its
own; an unexpected OS error becomes a StateError for that task only) and gathers the
outcomes into a ``SpawnResult``: the ``worktrees``/``tabs``/``failed`` pairs of ``spawn_agents``, error
objects, the recorded agents, workers spawned without a task, and the call's warnings.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from exo_cli.errors import BY_NAME, ExoError, InvalidInput, StateError
from exo_cli.ops.spawn.call import PENDING
from exo_cli.ops.spawn.starter import RUN_THREADS, Starter, run_all
from exo_cli.records import ROOT, Agent

if TYPE_CHECKING:
    from exo_cli.ops.spawn.call import Call
    from exo_cli.ops.spawn.plan import Request


@dataclass(frozen=True)
class SpawnedAgent:
    """One agent a spawn recorded (started, or waiting for ``after``)."""

    id: str
    name: str
    role: str
    parent: str
    status: str
    status_reason: str | None
    backend: str
    mux: str
    bead: str | None
    task: str | None
    branch: str | None
    base_branch: str | None
    worktree: str | None
    location: dict[str, Any]
    host: str = ""  # the host it runs on
    layout: str = "worktree"  # where it works: "worktree", "clone" or "none"
    sandboxed: bool = False  # it runs in bubblewrap


class SpawnError(TypedDict):
    """One failed task of a spawn: its id and its error object."""

    id: str
    code: int
    name: str
    message: str
    hint: str | None


@dataclass(frozen=True)
class SpawnResult:
    """The pairs of ``spawn_agents`` plus error objects, the agents, workers without a task, and warnings."""

    worktrees: list[list[str]]
    tabs: list[list[str]]
    failed: list[list[str]]
    errors: list[SpawnError]
    agents: list[SpawnedAgent]
    workers_awaiting_task: list[str]
    warnings: list[str]

    @property
    def exit_code(self) -> int:
        """0 when every task spawned, else the exit code of the first failure's class."""
        if not self.errors:
            return 0
        cls = BY_NAME.get(self.errors[0]["name"])
        return cls.exit_code if cls else 70

    @property
    def tool_error(self) -> bool:
        """Every task failed (no agent recorded): the MCP tool answers ``isError: true`` with this result."""
        return bool(self.errors) and not self.agents


def view(a: Agent) -> SpawnedAgent:
    """The public view of an agent record in a spawn result."""
    return SpawnedAgent(
        id=a.id, name=a.name, role=a.role, parent=a.parent or ROOT, status=a.status,
        status_reason=a.status_reason, backend=a.backend, mux=a.mux, bead=a.bead, task=a.task,
        branch=a.branch, base_branch=a.base_branch, worktree=a.worktree, location=dict(a.location), host=a.host,
        layout=str(a.spec.get("layout") or ("worktree" if a.spec.get("creates_worktree", True) else "none")),
        sandboxed=bool(a.spec.get("sandboxed")),
    )  # fmt: skip


def error_obj(key: str, exc: ExoError) -> SpawnError:
    """One entry of a spawn result's ``errors``."""
    return {"id": key, "code": exc.rpc_code, "name": exc.name, "message": exc.message, "hint": exc.hint}


# The id of a failure of the whole call in ``failed`` and ``errors`` (public JSON; never shown to a human).
WHOLE_CALL = "*"


def failed_call(call: Call, exc: ExoError) -> SpawnResult:
    """The result of a call that failed as a whole (no multiplexer, an unknown ``after`` agent)."""
    return SpawnResult([], [], [[WHOLE_CALL, exc.message]], [error_obj(WHOLE_CALL, exc)], [], [], call.warnings)


def run_tasks(call: Call, reqs: list[Request], step: Callable[[Request], Agent], *,
              duplicates: AbstractSet[str] = frozenset(), starter: Starter | None = None) -> SpawnResult:
    """Run ``step`` for every request on the call's threads; gather the outcomes into the result.

    A request whose agent name appears twice in the call fails alone. With a ``starter``
    (tmux), each task is expected by the agent batch until it starts its agent or ends.
    """
    outcomes: list[Agent | ExoError | None] = [None] * len(reqs)
    if starter is not None:
        starter.reserve(min(len(reqs), RUN_THREADS))  # the first wave, announced before any thread runs

    def one(i: int) -> None:
        req = reqs[i]
        if starter is not None:
            starter.enter()
        try:
            if (req.name or req.key) in duplicates:
                raise InvalidInput(f"Agent name {req.name or req.key} appears twice in this spawn", field="name")
            outcomes[i] = step(req)
        except ExoError as exc:
            outcomes[i] = exc
        except OSError as exc:
            outcomes[i] = StateError(f"{req.key}: {exc}", hint="See the message; nothing was left behind.")
        finally:
            if starter is not None:
                starter.leave()

    run_all(one, len(reqs))
    return _gather(call, reqs, outcomes)


def _gather(call: Call, reqs: list[Request], outcomes: list[Agent | ExoError | None]) -> SpawnResult:
    """The pairs, errors, agents and warnings of a call from its tasks' outcomes, in request order."""
    worktrees: list[list[str]] = []
    tabs: list[list[str]] = []
    failed: list[list[str]] = []
    errors: list[SpawnError] = []
    agents: list[SpawnedAgent] = []
    awaiting: list[str] = []
    for req, out in zip(reqs, outcomes, strict=True):
        key = req.key or req.name or "?"
        if isinstance(out, ExoError):
            failed.append([key, out.message])
            errors.append(error_obj(key, out))
            continue
        assert out is not None
        agents.append(view(out))
        if out.spec.get("phase") == PENDING:
            call.warn(f"{out.id} waits for {', '.join(out.spec.get('after') or [])}; it starts when they are idle or done")
            continue
        if out.spec.get("creates_worktree"):
            worktrees.append([key, out.worktree or ""])
        loc = out.location
        tabs.append([key, str(loc.get("pane") or loc.get("tab") or loc.get("pid") or "")])
        if req.kind == "worker" and not req.prompt:
            awaiting.append(out.id)
    if awaiting:
        call.warn("WORKERS NEED TASKS: " + ", ".join(awaiting) + " — send each its task now (exo send)")
    return SpawnResult(worktrees, tabs, failed, errors, agents, awaiting, call.warnings)
