"""Other tool families' tool sets, served on request (``exo mcp --compat NAME``, or ``mcp.compat`` in exo.toml).

Every tool costs every agent context tokens, so exo's default list is its own compact set;
a team whose prompts were written for another orchestrator adds that orchestrator's tool
names and arguments here. Each tool is an adapter onto an existing operation (spawn, send,
read, wait, kill, agents, output): no second implementation. A tool named like one of exo's
own replaces it in that server, taking the same arguments and more, and returning the same
object with more fields.

- claude-team: ``spawn_workers`` with ``workers``/``layout`` (per worker:
  ``project_path``, ``agent_type``, ``use_worktree``, ``skip_permissions``, optional ``name``
  and ``prompt``) and its ``sessions``/``count``/``coordinator_guidance``; ``message_workers``.
- termtile: ``spawn_agent`` (with ``depends_on``), ``send_to_agent``,
  ``read_from_agent`` (``slot``, ``pattern``), ``wait_for_idle``, ``kill_agent``,
  ``list_agents`` (with ``is_idle``), ``get_artifact``. A slot is an agent's name.
- ikigai: ``fork`` (a child started from the caller's conversation) and ``send``
  to one agent (a string) or several (a list).
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

from exo_cli import registry
from exo_cli.errors import ExoError, UsageError
from exo_cli.ops import messages, status
from exo_cli.ops.spawn import op as spawn_op
from exo_cli.ops.spawn.result import WHOLE_CALL, SpawnedAgent, SpawnResult, error_obj
from exo_cli.records import BACKENDS, DONE, IDLE
from exo_cli.registry import Choice, Range, Tool

# exo's own spawn arguments these tools pass on; not ``layout``: claude-team's spawn_workers has its own (panes)
COMMON = tuple(a for a in spawn_op.COMMON if a != "layout")

# --------------------------------------------------------------------------- claude-team

LAYOUTS = ("auto", "new")


@dataclass
class TeamWorker:
    """One worker of claude-team's ``spawn_workers``."""

    project_path: str
    agent_type: Annotated[str, Choice(BACKENDS)] | None = None
    name: str | None = None
    annotation: str | None = None
    bead: str | None = None
    prompt: str | None = None
    skip_permissions: bool | None = None
    use_worktree: bool | None = None


@dataclass(frozen=True)
class TeamSpawnResult(SpawnResult):
    """exo's spawn result plus claude-team's fields: one session per worker, the layout, the count, guidance."""

    sessions: dict[str, SpawnedAgent] = field(default_factory=dict)
    layout: str = "auto"
    count: int = 0
    coordinator_guidance: str = ""


def _team_workers(*, specs: list[spawn_op.WorkerSpec] | None = None, workers: list[TeamWorker] | None = None,
                  layout: Annotated[str, Choice(LAYOUTS)] = "auto") -> list[dict[str, Any]]:
    """One spawn call per group of workers sharing project, worktree use and permissions."""
    if bool(specs) == bool(workers):
        raise UsageError("Give the workers as specs or as workers (claude-team's form), one of them",
                         hint="workers: [{project_path, prompt?, name?, agent_type?, ...}]")
    if specs:
        return [spawn_op.worker_specs(specs=specs)]
    groups: dict[tuple[str, bool | None, bool], list[dict[str, Any]]] = {}
    for w in workers or []:
        d = asdict(w) if not isinstance(w, dict) else w
        key = (d["project_path"], d.get("skip_permissions"), d.get("use_worktree") is not False)
        spec = {"name": d.get("name"), "prompt": d.get("prompt"), "agent": d.get("agent_type"),
                "bead": d.get("bead"), "annotation": d.get("annotation")}
        groups.setdefault(key, []).append({k: v for k, v in spec.items() if v})
    calls = []
    for (path, skip, use_worktree), specs_ in groups.items():
        call: dict[str, Any] = {"specs": specs_}
        if path != "auto":
            call["repo"] = path
        if skip is not None:
            call["skip_permissions"] = skip
        if not use_worktree:
            call["no_worktree"] = True
        calls.append(call)
    return calls


def merged(results: Sequence[SpawnResult | ExoError]) -> dict[str, Any]:
    """The fields of several spawn results, concatenated in call order (warnings once each).

    A call that failed as a whole is reported as spawn reports one: ``["*", message]`` in
    ``failed`` and its error object in ``errors``.
    """
    out: dict[str, Any] = {f: [] for f in ("worktrees", "tabs", "failed", "errors", "agents", "workers_awaiting_task")}
    warnings: list[str] = []
    for r in results:
        if isinstance(r, ExoError):
            out["failed"].append([WHOLE_CALL, r.message])
            out["errors"].append(error_obj(WHOLE_CALL, r))
            continue
        for f in out:
            out[f] += list(getattr(r, f))
        warnings += [w for w in r.warnings if w not in warnings]
    return {**out, "warnings": warnings}


def guidance(agents: list[SpawnedAgent], awaiting: list[str]) -> str:
    """claude-team's coordinator guidance: one line per worker and how to coordinate them."""
    lines = [f"Spawned {len(agents)} worker(s):"]
    for a in agents:
        what = f"bead {a.bead}" if a.bead else ("AWAITING TASK: send it one now" if a.id in awaiting else "custom task")
        lines.append(f"- {a.id} ({a.backend}, branch {a.branch or '-'}): {what}")
    lines.append("Each worker notes you when it needs you and files a PR against your branch when done: "
                 "collect notes and results with wait, answer questions with answer_question, "
                 "merge with merge_pr.")
    return "\n".join(lines)


def _team_result(args: dict[str, Any], results: list[SpawnResult | ExoError]) -> TeamSpawnResult:
    fields = merged(results)
    agents: list[SpawnedAgent] = fields["agents"]
    return TeamSpawnResult(**fields, sessions={a.id: a for a in agents}, layout=args["layout"], count=len(agents),
                           coordinator_guidance=guidance(agents, fields["workers_awaiting_task"]))


def _message_workers(*, session_ids: list[str]) -> dict[str, Any]:
    return {"to": list(session_ids)}


# --------------------------------------------------------------------------- termtile


@dataclass(frozen=True)
class SlotSpawnResult(SpawnResult):
    """exo's spawn result plus termtile's ``slot`` (the agent's name) and ``agent_type``."""

    slot: str | None = None
    agent_type: str = ""


def _spawn_agent(*, agent_type: Annotated[str, Choice(BACKENDS)], task: str | None = None, name: str | None = None,
                 depends_on: list[str] | None = None) -> dict[str, Any]:
    spec = {k: v for k, v in {"name": name, "prompt": task, "agent": agent_type}.items() if v}
    return {"specs": [spec], "agent": agent_type, "after": list(depends_on or [])}


def _slot_result(args: dict[str, Any], results: list[SpawnResult]) -> SlotSpawnResult:
    r = results[0]
    return SlotSpawnResult(**merged(results), slot=r.agents[0].id if r.agents else None,
                           agent_type=args["agent_type"])


def _one_agent(agent: str | None, slot: str | None) -> str:
    if (agent is None) == (slot is None):
        raise UsageError("Give the agent as agent or as slot (its name), one of them", hint="slot: the agent's name")
    return agent if agent is not None else slot  # type: ignore[return-value]


def _send_to_agent(*, slot: str, text: str) -> dict[str, Any]:
    return {"to": [slot], "message": text}


def _read_from_agent(*, agent: str | list[str] | None = None, slot: str | None = None,
                     wait_for: str | None = None, pattern: str | None = None) -> dict[str, Any]:
    if wait_for is not None and pattern is not None:
        raise UsageError("Give the pattern as wait_for or as pattern, one of them")
    target = agent if isinstance(agent, list) else _one_agent(agent, slot)
    if isinstance(agent, list) and slot is not None:
        raise UsageError("Give the agent as agent or as slot (its name), one of them")
    return {"agent": target, "wait_for": wait_for if wait_for is not None else pattern}


@dataclass(frozen=True)
class IdleResult(messages.WaitResult):
    """``wait``'s result plus termtile's ``is_idle`` and ``output`` for the one agent waited on."""

    slot: str = ""
    is_idle: bool = False
    output: str | None = None


def _wait_for_idle(*, slot: str, timeout: Annotated[float, Range(0)] | None = None) -> dict[str, Any]:
    return {"agents": [slot], "timeout": timeout, "until_idle": True}  # a note on the way does not end it


def _idle_result(args: dict[str, Any], results: list[messages.WaitResult]) -> IdleResult:
    r = results[0]
    entry = r.results[0] if r.results else None
    return IdleResult(results=r.results, timed_out=r.timed_out, cancelled=r.cancelled, slot=args["slot"],
                      is_idle=entry is not None and entry.status == "idle",
                      output=entry.message if entry is not None else None)


def _kill_agent(*, slot: str) -> dict[str, Any]:
    return {"agent": slot}


def _get_artifact(*, agent: str | None = None, slot: str | None = None) -> dict[str, Any]:
    return {"agent": _one_agent(agent, slot)}


if TYPE_CHECKING:
    IdleAgentView = status.AgentView
else:  # exo's agent row plus termtile's is_idle (a record derived from exo's, so it cannot drift)
    IdleAgentView = NamedTuple("IdleAgentView", [*typing.get_type_hints(status.AgentView).items(), ("is_idle", bool)])


@dataclass(frozen=True)
class IdleAgentsResult:
    """``exo agents``'s result with ``is_idle`` on every agent (its hooks, or its idle signal, say so)."""

    agents: list[IdleAgentView]
    count: int
    by_status: dict[str, int]
    this_host: str = ""


def _list_agents_idle(args: dict[str, Any], results: list[status.AgentsResult]) -> IdleAgentsResult:
    r = results[0]
    rows = [IdleAgentView._make([*a, a.status in (IDLE, DONE)]) for a in r.agents]
    return IdleAgentsResult(agents=rows, count=r.count, by_status=r.by_status, this_host=r.this_host)


# --------------------------------------------------------------------------- ikigai


def _fork(*, name: str, prompt: str) -> dict[str, Any]:
    return {"subtree": True, "task": prompt, "branch": name, "fork_session": True}


def _send_one_or_many(*, to: str | list[str]) -> dict[str, Any]:
    return {"to": [to] if isinstance(to, str) else list(to)}


# --------------------------------------------------------------------------- the sets

_SLOT = "The agent, by name (termtile's slot)."

registry.extend(
    "spawn",
    Tool("spawn_workers", compat="claude-team", adapt=_team_workers, passthrough=("agent", *COMMON),
         result=_team_result, result_type=TeamSpawnResult,
         description=registry.get("spawn").tools[2].description,
         help={"specs": "exo's worker specs: name, prompt, and optionally agent, bead, annotation.",
               "workers": "claude-team's workers: project_path (a path, or auto: this repository), and optionally "
               "name (default: a memorable one), prompt (none: the worker awaits a task), agent_type, bead, "
               "annotation, use_worktree (default true), skip_permissions.",
               "layout": "exo starts every worker in its own window, so auto and new do the same."}),
    Tool("spawn_agent", compat="termtile", adapt=_spawn_agent, passthrough=COMMON[:-1], result=_slot_result,
         result_type=SlotSpawnResult,
         description=("Spawn one agent on its own branch <your branch>.<name> in its own window; its slot is its "
                      "name. With depends_on it starts only when those agents are idle or done, with "
                      "{{NAME.output}} in the task replaced by their output."),
         help={"agent_type": "Agent CLI.",
               "task": "The task (none: the agent starts without one and waits for send_to_agent).",
               "name": "The agent's name (default: a memorable one).",
               "depends_on": "Agents (names) that must be idle or done before this one starts."}),
    Tool("fork", compat="ikigai", adapt=_fork, result_type=SpawnResult,
         description=("Create a child agent that starts from your own conversation (claude --fork-session) with "
                      "this prompt, on branch <your branch>.<name>. A CLI that cannot fork a conversation is "
                      "refused; the child can fork, send, wait and kill too."),
         help={"name": "Short name of the child (its branch suffix and how you address it).",
               "prompt": "What the child must do."}),
)
registry.extend(
    "send",
    Tool("message_workers", compat="claude-team", adapt=_message_workers, passthrough=("message",),
         description=("Send a message to one or several workers: typed into an idle worker's pane, else handed "
                      "over at its next hook. Use it to give a worker spawned without a prompt its task."),
         help={"session_ids": "The workers (names or ids)."}),
    Tool("send_to_agent", compat="termtile", adapt=_send_to_agent,
         description=("Send text to an agent: typed into its pane when it is idle, else handed over at its next "
                      "hook. Use it for follow-up instructions."),
         help={"slot": _SLOT, "text": "The text to send."}),
    Tool("send", compat="ikigai", adapt=_send_one_or_many, passthrough=("message",),
         help={"to": "The recipient (a name or id), or a list of them."}),
)
registry.extend(
    "read",
    Tool("read_from_agent", compat="termtile", adapt=_read_from_agent,
         passthrough=("lines", "since_last", "timeout", "clean"),
         help={"agent": registry.get("read").help["agent"], "slot": _SLOT,
               "wait_for": registry.get("read").help["wait_for"], "pattern": "The same as wait_for (termtile's name)."}),
)
registry.extend(
    "wait",
    Tool("wait_for_idle", compat="termtile", adapt=_wait_for_idle, result=_idle_result, result_type=IdleResult,
         description=("Block until an agent is idle or done (its output in output), its turn failed, or it is "
                      "dead, or the timeout passes; the notes it sends meanwhile stay for wait. Use it before "
                      "reading an agent's result."),
         help={"slot": _SLOT, "timeout": registry.get("wait").help["timeout"]}),
)
registry.extend(
    "kill",
    Tool("kill_agent", compat="termtile", adapt=_kill_agent,
         description=registry.get("kill").doc.split("\n\n")[0] + " Use it to stop an agent you no longer need.",
         help={"slot": _SLOT}),
)
registry.extend(
    "agents",
    Tool("list_agents", compat="termtile", result=_list_agents_idle, result_type=IdleAgentsResult),
)
registry.extend(
    "output",
    Tool("get_artifact", compat="termtile", adapt=_get_artifact,
         help={"agent": registry.get("output").help["agent"], "slot": _SLOT}),
)
