"""``exo spawn``: one operation behind ``spawn_agents``, ``spawn_subtree`` and ``spawn_workers``.

For each task (a bead, a named or auto-named worker, or one subtree), in parallel threads:
validate, record the agent as ``starting`` with its whole request, create the worktree and
branch, prepare it, start the agent in its multiplexer with the first prompt on its command
line, then emit ``spawned`` and tell the parent. One task failing never stops the others;
the result keeps the ``worktrees``/``tabs``/``failed`` pairs that ``spawn_agents`` returns.

The parts of ``ops/spawn/``, in the order a call meets them: ``plan`` (the arguments become
requests), ``pending`` (``--after``: record now, start later), ``task`` (one task's steps),
``starter`` (threads, and one tmux call for all windows), ``recovery`` (the spawn lock,
interrupted spawns), with ``context`` (what the agent reads first), ``result`` (what the
call returns) and ``call`` (what the parts share) below them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated, Any

from exo_cli.errors import ExoError, UsageError
from exo_cli.ops import attention
from exo_cli.ops.budget import budget_for
from exo_cli.ops.spawn import pending
from exo_cli.ops.spawn.call import Call
from exo_cli.ops.spawn.plan import (
    FORKING,
    Request,
    WorkerSpec,
    choose_backend,
    choose_mux,
    common_for,
    demo_script_path,
    duplicate_names,
    own_backend,
    plan,
    read_prompts,
    target_env,
)
from exo_cli.ops.spawn.result import WHOLE_CALL, SpawnedAgent, SpawnResult, failed_call
from exo_cli.ops.spawn.task import start_all
from exo_cli.records import AGENT_CLIS, BACKENDS, LAYOUTS, MUXES
from exo_cli.registry import Choice, Range, Tool, op

if TYPE_CHECKING:
    from exo_cli.env import Env

__all__ = ["BACKENDS", "COMMON", "MUXES", "WHOLE_CALL", "SpawnResult", "SpawnedAgent", "WorkerSpec", "first_failure_exit",
           "spawn", "worker_specs"]


# --------------------------------------------------------------------------- the MCP tools' arguments

# What every spawn tool takes as it is, besides its own arguments (spawn_agents names the backend
# ``backend``, the word its tool family uses; the others take ``agent``).
COMMON = ("mux", "from_branch", "no_worktree", "layout", "repo", "skip_permissions", "sandbox", "after", "host",
          "budget_usd", "budget_tokens")


def _adapt_agents(*, bead_ids: list[str] | None = None, backend: Annotated[str, Choice(BACKENDS)] | None = None,
                  prompt: str | None = None) -> dict[str, Any]:
    return {"beads": list(bead_ids or []), "agent": backend, "prompt": [prompt] if prompt is not None else []}


def _adapt_subtree(*, task: str, branch_name: str, parent_session_id: str | None = None) -> dict[str, Any]:
    return {"subtree": True, "task": task, "branch": branch_name, "parent_session_id": parent_session_id}


def worker_specs(*, specs: list[WorkerSpec]) -> dict[str, Any]:
    """``spawn_workers``' specs as the operation's (unset fields dropped)."""
    out = []
    for s in specs:
        d = asdict(s) if dataclasses.is_dataclass(s) else dict(s)
        out.append({k: v for k, v in d.items() if v is not None})
    return {"specs": out}


SPAWN_HELP = {
    "beads": "Bead ids to work on, with or without the tracker's prefix (4hj or bd-4hj).",
    "worker": "Name of a leaf worker to spawn (repeatable); its branch is <parent branch>.<name>.",
    "prompt": "The task: one prompt for all workers, or one per {--worker} in order; extra instructions for beads.",
    "prompt_file": "Read the prompt from this file.",
    "edit": "Write the prompt in $EDITOR (CLI only).",
    "subtree": "Spawn a child team lead that can spawn its own children (needs {--task} and {--branch}).",
    "task": "The subtree's responsibility.",
    "branch": "The subtree's name and branch suffix: <parent branch>.<branch>.",
    "fork_session": "Start a Claude subtree from its parent's conversation (as `claude --resume ID --fork-session`).",
    "parent_session_id": "The parent's Claude session id to fork from (default: the caller's recorded one).",
    "ready": "Spawn the N best ready beads (priority, then age), skipping ones a live agent owns.",
    "specs": "Worker specs as objects {name, prompt, agent?, bead?, annotation?}.",
    "agent": "Agent backend (default: agent.default in exo.toml; forking a session: the caller's own).",
    "mux": "Where agents run (default: mux.default in exo.toml).",
    "from_branch": "Base the new branches on this branch or ref (default: the parent's branch).",
    "no_worktree": "Run the agent in the repository itself instead of a new worktree.",
    "layout": "Where each agent works: a linked worktree, or its own `git clone --shared` that exo reads as "
              "hostile (default: worktree.layout in exo.toml).",
    "repo": "Spawn into the repository at this path (it keeps its own exo state).",
    "skip_permissions": "Let agents run tools without asking (default: agent.skip_permissions in exo.toml).",
    "sandbox": "Run the agents in bubblewrap, each in its own clone, or not (default: sandbox.mode in exo.toml).",
    "after": "Start only when these agents are idle or done (their output can go in the prompt as {{A.output}}).",
    "demo_script": "Script file for the demo agent.",
    "host": "Start the agents on this host of [hosts] (over ssh; needs a shared PostgreSQL store).",
    "budget_usd": "Each agent's budget in dollars (default: budget.agent_usd; a team lead's child: at most what "
                  "the lead has left).",
    "budget_tokens": "Each agent's budget in tokens (default: budget.agent_tokens; a team lead's child: at most "
                     "what the lead has left).",
}


@op(
    "spawn",
    cli="spawn",
    tools=[
        Tool(
            "spawn_agents",
            adapt=_adapt_agents,
            description=(
                "Create a git worktree and start an agent for each bead id, in parallel; returns "
                "{worktrees, tabs, failed} pairs plus error objects. Use it to dispatch ready beads from "
                "the tracker; a blocked or unknown bead fails alone while the others start."
            ),
            help={
                "bead_ids": "Bead ids, short (4hj) or full (bd-4hj); or none with ready.",
                "backend": "Agent CLI (default: agent.default in exo.toml).",
                "prompt": "Extra instructions for every bead's agent.",
            },
            passthrough=("ready", *COMMON),
        ),
        Tool(
            "spawn_subtree",
            adapt=_adapt_subtree,
            description=(
                "Fork a child team lead on branch <your branch>.<branch_name> when decomposing work into "
                "sub-problems that may need further decomposition: the child gets the coordination tools and "
                "can spawn its own children. Prefer it when the task has 3+ distinct components or needs "
                "architectural decisions."
            ),
            help={
                "task": "The subtree's responsibility.",
                "branch_name": "Branch suffix: 'auth' becomes '<your branch>.auth'.",
            },
            passthrough=("fork_session", "agent", *COMMON),
        ),
        Tool(
            "spawn_workers",
            adapt=worker_specs,
            description=(
                "Spawn leaf workers, each in its own worktree on branch <your branch>.<name>, when work is "
                "concrete enough to execute without further decomposition: give each a focused, bounded task "
                "with the exact files and commands. Workers cannot spawn; they file a PR against your branch."
            ),
            help={"specs": "One object per worker: name, prompt, and optionally agent, bead, annotation."},
            passthrough=("agent", *COMMON),
        ),
    ],
    roles=("tl",),
    help=SPAWN_HELP,
    names={"from_branch": "from"},
    cli_only={
        "worker": "the tools name each worker in its spec (specs[].name)",
        "prompt_file": "a tool passes the prompt text itself (task, specs[].prompt, prompt)",
        "edit": "it opens $EDITOR, which needs a terminal",
        "demo_script": "a test and demo aid: the tools' demo agents read [demo] script from the configuration",
    },
    paths=("prompt_file", "repo", "demo_script"),
    reads={"prompt_file": "prompt"},
)
def spawn(
    env: Env,
    *,
    beads: list[str] | None = None,
    worker: list[str] | None = None,
    prompt: list[str] | None = None,
    prompt_file: str | None = None,
    edit: bool = False,
    subtree: bool = False,
    task: str | None = None,
    branch: str | None = None,
    fork_session: bool | None = None,
    parent_session_id: str | None = None,
    ready: Annotated[int, Range(1)] | None = None,
    specs: list[dict[str, Any]] | None = None,
    agent: Annotated[str, Choice(BACKENDS)] | None = None,
    mux: Annotated[str, Choice(MUXES)] | None = None,
    from_branch: str | None = None,
    no_worktree: bool = False,
    layout: Annotated[str, Choice(LAYOUTS)] | None = None,
    repo: str | None = None,
    skip_permissions: bool | None = None,
    sandbox: bool | None = None,
    after: list[str] | None = None,
    demo_script: str | None = None,
    host: str | None = None,
    budget_usd: Annotated[float, Range(0)] | None = None,
    budget_tokens: Annotated[int, Range(1)] | None = None,
) -> SpawnResult:
    """Start agents: one worktree, branch and agent per bead, worker or subtree.

    Each task gets a git worktree and branch of its own, made from the parent's branch (or
    {--from_branch}), and its agent starts there in a tmux pane, a Zellij tab or headless
    ({--mux}). Tasks run in parallel; one failing never stops the others, and the result
    lists each task's worktree and pane, or its error. A spawn interrupted at any step leaves
    a record that the same spawn again (or `exo doctor`) cleans up before starting over; a
    name a live agent already has is refused. With {--host}, exo on that host makes the
    worktrees from the parent's branch as pushed to the shared remote and starts the agents
    there.
    """
    attention.remember_human(env)  # what the notifier gets when these agents' events reach the human
    prompts = read_prompts(env, list(prompt or []), prompt_file, edit=edit)
    if host is not None and host != env.host_name:
        from exo_cli.ops import teambudget
        from exo_cli.ops.remote import spawn_there

        teambudget.take_config(env)  # the human's side: a changed [budget] team_* first (exo there checks it too)
        teambudget.refuse_spawn(env)
        return spawn_there(env, host, dict(
            beads=beads, worker=worker, prompt=prompts, subtree=subtree, task=task, branch=branch,
            fork_session=fork_session, parent_session_id=parent_session_id, ready=ready, specs=specs, agent=agent,
            mux=mux, from_branch=from_branch, no_worktree=no_worktree, layout=layout, repo=repo,
            skip_permissions=skip_permissions, after=after, demo_script=demo_script, budget_usd=budget_usd,
            budget_tokens=budget_tokens, **({"sandbox": sandbox} if sandbox is not None else {})))
    target = target_env(env, repo)
    backend = choose_backend(target, agent or (own_backend(env) if fork_session else None))
    if fork_session and backend not in FORKING:
        raise UsageError(
            f"The {backend} backend cannot start from its parent's conversation: only "
            f"{', '.join(FORKING)} can fork a session",
            hint="Spawn a fresh subtree instead (spawn_subtree, or exo spawn --subtree without --fork-session).",
            agent=backend,
        )
    kind = choose_mux(target, mux)
    demo_script = demo_script_path(demo_script)
    warnings: list[str] = []
    common = common_for(env, target, mux=kind, from_branch=from_branch, no_worktree=no_worktree, layout=layout,
                        skip_permissions=skip_permissions, demo_script=demo_script, fork_session=fork_session,
                        parent_session_id=parent_session_id, after=list(after or []), warnings=warnings,
                        backend=backend, sandbox=sandbox,
                        budget=budget_for(env, target, backend, usd=budget_usd, tokens=budget_tokens))
    call = Call(target, common)
    reqs = plan(env, target, beads=list(beads or []), worker=list(worker or []), prompt=prompts,
                subtree=subtree, task=task, branch=branch, ready=ready, specs=list(specs or []),
                agent=backend, warnings=warnings, tracker=call.beads)
    call.warnings.extend(warnings)
    if not common.skip_permissions and any(r.agent in AGENT_CLIS for r in reqs):
        call.warn("Agents will ask before running tools; pass --skip-permissions to let them run unattended")
    return execute(call, reqs, duplicates=duplicate_names(reqs))


def execute(call: Call, reqs: list[Request], *, duplicates: set[str]) -> SpawnResult:
    """Spawn the planned tasks now, or record them as pending while an ``after`` agent works."""
    if call.common.after:
        try:
            waits = pending.waiting_for(call.env, call.common.after)
        except ExoError as exc:
            return failed_call(call, exc)
        if waits:
            return pending.record_all(call, reqs, waits, duplicates=duplicates)
        call.mux()  # a missing multiplexer is an error of the call itself here
    return start_all(call, reqs, duplicates=duplicates)


def first_failure_exit(result: SpawnResult) -> int:
    """The CLI's exit code for a spawn result."""
    return result.exit_code
