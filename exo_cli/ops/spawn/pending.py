"""Deferred starts (``--after``): agents recorded now that start when others are idle or done.

When an agent listed in ``after`` is not yet ``idle``/``done``, each new agent is recorded
with status ``starting``, reason ``waiting for A`` and spec phase ``pending`` holding the
whole request; nothing else is created. When an agent's turn ends (its Stop hook, or
``exo done``), the operation ending it asks ``delivery.ready_dependents`` which pending
agents may start now, with ``{{A.output}}`` substituted into their prompts, and hands them
to ``start_dependents``, which launches each (``launch_pending``: the real start, claimed
once, so two dependencies finishing at once start it once).
"""

from __future__ import annotations

import os
import time
from collections.abc import Set as AbstractSet
from dataclasses import asdict
from typing import TYPE_CHECKING

from exo_cli.errors import ExoError, InvalidInput, NotFound, StateError
from exo_cli.ops.spawn.call import PENDING, Call, host_fields
from exo_cli.ops.spawn.plan import common_from_spec, request_from_spec
from exo_cli.ops.spawn.recovery import spawn_lock
from exo_cli.ops.spawn.result import SpawnResult, run_tasks
from exo_cli.ops.spawn.task import start_all
from exo_cli.records import DEAD, DONE, IDLE, STARTING, Agent
from exo_cli.validate import check_agent_name, check_name, check_text

if TYPE_CHECKING:
    from exo_cli.env import Env
    from exo_cli.ops.spawn.plan import Request


def waiting_for(env: Env, after: list[str]) -> list[str]:
    """The agents of ``after`` that are not idle or done yet.

    NotFound for unknown ones; StateError for a dead one (it will never be idle or done, so
    the new agent could never start).
    """
    waiting = []
    for a in after:
        check_name(a, "agent")
        rec = env.store.agent(a)
        if rec is None:
            raise NotFound(f"No agent named {a!r} to wait for", hint="List agents with `exo agents`.", agent=a)
        if rec.status == DEAD:
            raise StateError(f"Agent {a} is dead ({rec.status_reason or 'stopped'}): nothing to wait for",
                             hint="Spawn without --after, or after another agent.", agent=a)
        if rec.status not in (IDLE, DONE):
            waiting.append(a)
    return waiting


def record_all(call: Call, reqs: list[Request], waits: list[str], *,
               duplicates: AbstractSet[str] = frozenset()) -> SpawnResult:
    """Record every task of the call as pending on ``waits``; nothing else is created."""
    return run_tasks(call, reqs, lambda req: _record_pending(call, req, waits), duplicates=duplicates)


def _record_pending(call: Call, req: Request, waits: list[str]) -> Agent:
    env = call.env
    agent_id = check_agent_name(req.name or req.key)
    with spawn_lock(env, agent_id):
        if env.store.agent(agent_id) is not None:
            raise StateError(f"Agent {agent_id} already exists", hint="Pick another name.", agent=agent_id)
        now = time.time()
        rec = Agent(
            id=agent_id, name=agent_id, role="tl" if req.kind == "subtree" else "dev", parent=call.common.parent,
            status=STARTING, backend=req.agent, mux=call.common.mux, task=req.task or req.prompt,
            bead=req.bead, base_branch=call.common.parent_branch, repo=str(env.repo.root),
            status_reason=f"waiting for {', '.join(waits)}", created_at=now, updated_at=now, status_at=now,
            spec={"phase": PENDING, "request": asdict(req), "common": asdict(call.common), "after": waits,
                  **host_fields(env)},
        )  # fmt: skip
        env.store.insert_agent(rec)
        return rec


def launch_pending(env: Env, agent_id: str, *, prompt: str | None = None) -> SpawnResult:
    """Start an agent recorded as waiting for ``after``; ``prompt`` replaces its recorded prompt.

    Call it when every agent the record waits for (``spec["after"]``) is idle or done, with
    the prompt after ``{{A.output}}`` substitution. Only the first caller launches (a kv
    claim); others get a StateError. Returns the same result shape as ``spawn``. NotFound
    when there is no such record, StateError when it is not waiting.
    """
    rec = env.store.agent(check_name(agent_id, "agent name"))
    if rec is None:
        raise NotFound(f"No agent named {agent_id!r}", agent=agent_id)
    if rec.spec.get("phase") != PENDING:
        raise StateError(f"Agent {agent_id} is not waiting to start", agent=agent_id, status=rec.status)
    if prompt is not None:
        try:  # the outputs it waited for made its prompt too long: it never starts, and its parent is told
            check_text(prompt, "prompt", kind="prompt")
        except InvalidInput as exc:
            from exo_cli.ops.delivery import fail_pending

            fail_pending(env, rec, exc.message)
            raise
    from exo_cli.ops import teambudget

    held = teambudget.over(env)
    if held is not None:  # no new agent starts while the team is over its budget: it never will, and its parent hears why
        from exo_cli.ops.delivery import fail_pending

        fail_pending(env, rec, f"the team is over its budget ({held.text()})")
        raise StateError(f"Agent {agent_id} was not started: the team is over its budget", hint=teambudget.HINT,
                         agent=agent_id)
    key = f"launch:{agent_id}:{rec.created_at}"
    if not env.store.kv_claim(key, str(os.getpid())):
        raise StateError(f"Agent {agent_id} is already being launched", agent=agent_id)
    req = request_from_spec(rec.spec)
    if prompt is not None:
        if req.kind == "subtree":
            req.task = prompt
        else:
            req.prompt = prompt
    return start_all(Call(env, common_from_spec(rec.spec)), [req], launching=True)


def start_dependents(env: Env, after: str, ready: list[tuple[str, str]]) -> list[str]:
    """Launch the pending agents ``ready`` names ((id, prompt) pairs, from ``delivery.ready_dependents``).

    Returns the ids that started. A failed launch is recorded as an ``after-failed`` event
    and never fails the caller (a hook, or ``exo done``).
    """
    started: list[str] = []
    for agent_id, prompt in ready:
        try:
            result = launch_pending(env, agent_id, prompt=prompt)
        except Exception as exc:  # never fail the hook or `done` that triggered it
            message = exc.message if isinstance(exc, ExoError) else f"{type(exc).__name__}: {exc}"
            env.store.event("after-failed", agent_id, {"after": after, "error": message})
            continue
        if not result.failed:
            started.append(agent_id)
    return started
