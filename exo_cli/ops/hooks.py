"""``exo hook EVENT --cli CLI``: the agent CLIs' hooks (Claude Code, Gemini CLI, Codex CLI, exo's own).

Each hook reads the CLI's JSON (stdin; Codex ``notify``: the last argv) and answers in that CLI's format:

- additional context: ``{"hookSpecificOutput": {"hookEventName": E, "additionalContext": T}}``
  with E = SessionStart / UserPromptSubmit (Claude, Codex, exo) or SessionStart / BeforeAgent (Gemini);
- keep going after a turn: ``{"decision": "block", "reason": R}`` (Claude, Codex, exo) or
  ``{"decision": "deny", "reason": R}`` (Gemini AfterAgent);
- otherwise ``{}`` (neutral); Codex ``notify`` prints nothing.

Hooks run on the agent's hot path: this module imports only the stdlib and light exo modules, and a
hook fails open (``fail_open``): any error becomes one warning line on stderr, a neutral answer and
exit 0, and a hook never creates a state database.

Per-agent hook bookkeeping (consecutive stop-hook blocks, the last turn id, the Codex
thread, the transcript offset, rebase failures) lives in ``kv`` under ``hook:<agent id>``.
"""

from __future__ import annotations

import json
import os

from exo_cli.adapters.usage import read_usage
from exo_cli.limits import clip
from exo_cli.lite import NamedTuple
from exo_cli.ops import delivery as msgs
from exo_cli.ops import mcpready, turnend
from exo_cli.ops.rebase import REBASE_HERE, rebase_onto_base
from exo_cli.records import (
    AGENT_CLIS,
    DEAD,
    DONE,
    FAILED_TURN,
    IDLE,
    OVER_BUDGET,
    ROOT,
    TEAM_BUDGET_KEY,
    WAITING_PERMISSION,
    WORKING,
    Agent,
)
from exo_cli.registry import op

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from exo_cli.env import Env
    from exo_cli.records import Usage

EVENTS = ("session-start", "prompt", "stop", "stop-failure", "session-end", "notification", "tool", "notify")
CLIS = (*AGENT_CLIS, "exo")  # "exo": the demo agent, which speaks Claude's format
#: Events that count turns or tool calls: an unreadable payload records nothing for them.
COUNTED = ("stop", "tool", "notify")
MAX_BLOCKS = 5  # consecutive stop-hook blocks before the agent is let go idle
TITLE_PREFIX = "Generate a concise"  # Codex's title-generation side thread
PERMISSION_TYPES = ("permission_prompt", "ToolPermission")


class HookResult(NamedTuple):
    """What a hook did, and the JSON it prints for the agent CLI (``output``; None: print nothing).

    A record (NamedTuple) rather than a dataclass, like ``records.Agent``: importing
    ``dataclasses`` (and the ``inspect`` it loads) would cost every hook more than all its
    other imports. ``--json`` prints the same object either way.
    """

    event: str
    cli: str
    agent: str | None
    output: dict[str, Any] | None
    actions: list[str] = []  # noqa: RUF012 - never mutated
    warning: str | None = None


def neutral(event: str, cli: str) -> dict[str, Any] | None:
    return None if event == "notify" else {}


def context_output(cli: str, event: str, text: str) -> dict[str, Any]:
    """Additional context in the CLI's format (empty text: neutral)."""
    if not text:
        return {}
    if event == "session-start":
        name = "SessionStart"
    else:
        name = "BeforeAgent" if cli == "gemini" else "UserPromptSubmit"
    return {"hookSpecificOutput": {"hookEventName": name, "additionalContext": text}}


def block_output(cli: str, reason: str) -> dict[str, Any]:
    """Keep the agent going with ``reason`` as its next instruction."""
    return {"decision": "deny" if cli == "gemini" else "block", "reason": reason}


def parse_payload(payload: str | None) -> tuple[dict[str, Any], str | None]:
    if not payload or not payload.strip():
        return {}, None
    try:
        data = json.loads(payload)
    except ValueError as exc:
        return {}, f"unreadable hook payload ({exc})"
    return (data, None) if isinstance(data, dict) else ({}, "hook payload is not a JSON object")


# ---------------------------------------------------------------------------------- the operation


@op(
    "hook",
    cli="hook",
    tools=[],
    no_tools="the agent CLIs run it as their hook command; a model never calls it",
    roles=("tl", "dev"),
    help={
        "event": "The hook event: session-start, prompt, stop, stop-failure, session-end, notification, tool or "
        "notify.",
        "cli": "The agent CLI whose payload and answer format to use: claude, gemini, codex or exo.",
        "payload": "The hook's JSON payload (Codex notify passes it as the last argument; otherwise stdin).",
    },
)
def hook(env: Env, *, event: str, cli: str = "claude", payload: str | None = None) -> HookResult:
    """Handle an agent CLI's hook event and answer in that CLI's format.

    session-start injects the task context and pending messages and records the CLI's
    session id; prompt marks the agent working and injects pending messages; stop marks it
    idle, records its output, rebases onto a parent branch that moved ahead (local refs
    only) and keeps it going with pending messages (never more than 5 times in a row);
    stop-failure (Claude's StopFailure: an API error ended the turn) marks it failed-turn with
    the error and tells the parent; session-end marks it dead unless done; notification marks
    it waiting-permission; tool counts tool calls; notify handles Codex's agent-turn-complete
    of the agent's own thread. Fails open: on any problem it warns on stderr and lets the agent
    continue.
    """
    if cli not in CLIS:
        cli_warning = f"unknown --cli {cli!r}, answering in Claude's format"
        cli = "claude"
    else:
        cli_warning = None
    if event not in EVENTS:
        return HookResult(event, cli, None, {}, warning=f"unknown hook event {event!r}; nothing done")
    data, warning = parse_payload(payload)
    if warning and event in COUNTED:  # not a hook payload: count nothing, change nothing
        return HookResult(event, cli, None, neutral(event, cli), warning=warning + "; nothing recorded")
    warning = warning or cli_warning
    if not env.has_state():
        return HookResult(event, cli, None, neutral(event, cli),
                          warning=warning or "no exo state for this repository; hook did nothing")
    caller = env.caller  # an agent's claim exo cannot prove is refused (StateError), never the human
    if caller.is_human:
        return HookResult(event, cli, None, neutral(event, cli), warning=warning)
    agent = env.store.agent(caller.agent_id)
    if agent is None:
        return HookResult(event, cli, None, neutral(event, cli), warning=warning)
    result = HANDLERS[event](env, agent, cli, data)
    if warning and result.warning is None:
        return HookResult(result.event, result.cli, result.agent, result.output, result.actions, warning)
    return result


# ---------------------------------------------------------------------------------- state


def _key(agent_id: str) -> str:
    from exo_cli.records import HOOK_STATE_KEY

    return HOOK_STATE_KEY.format(agent=agent_id)


def load_state(env: Env, agent_id: str) -> dict[str, Any]:
    raw = env.store.kv_get(_key(agent_id))
    try:
        state = json.loads(raw) if raw else {}
    except ValueError:
        state = {}
    return state if isinstance(state, dict) else {}


def save_state(env: Env, agent_id: str, state: dict[str, Any]) -> None:
    env.store.kv_set(_key(agent_id), json.dumps(state, separators=(",", ":")))


def _update(env: Env, agent: Agent, **changes: Any) -> None:
    if agent.status == DONE:
        changes.pop("status", None)
        changes.pop("status_reason", None)
    if changes:
        env.store.update_agent(agent.id, **changes)


# ---------------------------------------------------------------------------------- handlers


CONTEXT_LIMIT = 1 << 20  # bytes of a worktree's .exo/context.md read


def task_context(agent: Agent) -> str:
    """The agent's ``.exo/context.md`` when its worktree has one, else its task."""
    if agent.worktree:
        path = os.path.join(agent.worktree, ".exo", "context.md")
        from exo_cli.adapters.files import read_regular_text

        text = (read_regular_text(path, limit=CONTEXT_LIMIT, follow=False) or "").strip()  # the agent's to write
        if text:
            return text
    lines = [f"You are exo agent {agent.name} (role {agent.role}); your parent is {agent.parent or ROOT}."]
    if agent.task:
        lines.append(f"Your task: {agent.task}")
    if agent.bead:
        lines.append(f"Your bead: {agent.bead} (`bd show {agent.bead} --json`).")
    if agent.branch:
        lines.append(f"Your branch: {agent.branch} (parent branch {agent.base_branch or '-'}).")
    return "\n".join(lines)


def _pending_text(env: Env, agent: Agent) -> str:
    taken = msgs.claim_pending(env, agent.id)
    return msgs.render_all(taken)


def on_session_start(env: Env, agent: Agent, cli: str, data: dict[str, Any]) -> HookResult:
    _checkpoint(env, agent, None, due=True)  # a headless CLI's next turn is a new session: the last one's checkpoint
    sid = data.get("session_id")
    changes: dict[str, Any] = {"status": WORKING, "status_reason": "session started"}
    if isinstance(sid, str) and sid:
        changes["session_id"] = sid
    _update(env, agent, **changes)
    state = load_state(env, agent.id)
    state["blocks"] = 0
    if cli == "codex" and isinstance(sid, str) and sid and data.get("source", "startup") == "startup":
        state.setdefault("thread", sid)
    transcript = data.get("transcript_path")
    if isinstance(transcript, str) and transcript:
        state["transcript"] = transcript  # where a failed turn is read from (Codex, Gemini)
    save_state(env, agent.id, state)
    text = task_context(agent)
    pending = _pending_text(env, agent)
    if pending:
        text += "\n\nMessages for you:\n" + pending
    actions = ["working", "session_id" if "session_id" in changes else "no-session-id"]
    warning = None
    wait = mcpready.mcp_wait(env) if cli == "claude" else 0.0  # a Gemini or Codex child of a Claude agent inherits it
    if wait > 0:
        if mcpready.wait_mcp_ready(env, agent.id, wait):
            actions.append("mcp-ready")
        else:
            warning = f"exo's MCP server did not answer within {wait:g}s; starting without waiting for it"
    return HookResult("session-start", cli, agent.id, context_output(cli, "session-start", text), actions,
                      warning)


def _checkpoint(env: Env, agent: Agent, turn: int | None, *, due: bool = False) -> str:
    """The turn's checkpoint taken now ("checkpoint"; "" when none): only then does the heavy module load."""
    if not (turnend.is_due(env, agent) if due else turnend.eligible(agent)):
        return ""
    from exo_cli.ops.checkpoints import take_quietly
    return "checkpoint" * take_quietly(env, agent, turn=turn, due=due)


def on_prompt(env: Env, agent: Agent, cli: str, data: dict[str, Any]) -> HookResult:
    _checkpoint(env, agent, None, due=True)  # the last turn's checkpoint, before this turn can change a file
    _update(env, agent, status=WORKING, status_reason=None)
    pending = _pending_text(env, agent)
    return HookResult("prompt", cli, agent.id, context_output(cli, "prompt", pending),
                      ["working", *(["messages"] if pending else [])])


def on_tool(env: Env, agent: Agent, cli: str, data: dict[str, Any]) -> HookResult:
    env.store.record_tool_call(agent.id)
    return HookResult("tool", cli, agent.id, {}, ["tool_calls+1"])


def on_session_end(env: Env, agent: Agent, cli: str, data: dict[str, Any]) -> HookResult:
    if agent.status in (DONE, DEAD):
        return HookResult("session-end", cli, agent.id, {}, [])
    if agent.mux == "headless" and agent.backend in AGENT_CLIS:
        # A headless CLI runs one turn per process: its session ends after every turn, and the
        # next message continues it. The agent lives as long as its runner does.
        return HookResult("session-end", cli, agent.id, {}, ["turn-process-ended"])
    reason = str(data.get("reason") or "session ended")
    if not env.store.update_agent(agent.id, if_status=agent.status, status=DEAD,
                                  status_reason=f"session ended ({reason})"):
        return HookResult("session-end", cli, agent.id, {}, [])
    msgs.notify_parent(env, agent, "dead", f"{agent.name} ended its session ({reason})", reason=reason)
    msgs.fail_dependents(env, agent, f"{agent.name} ended its session ({reason})")
    from exo_cli.ops import attention

    attention.signal(env, "dead", agent, f"session ended ({reason})", reason=reason)
    return HookResult("session-end", cli, agent.id, {}, ["dead"])


def on_notification(env: Env, agent: Agent, cli: str, data: dict[str, Any]) -> HookResult:
    kind = data.get("notification_type")
    text = str(data.get("message") or "")
    if not (kind in PERMISSION_TYPES or (kind is None and "permission" in text.lower())):
        return HookResult("notification", cli, agent.id, {}, [])
    before: Agent | None = agent
    for _ in range(5):  # compare-and-set: whoever changes the status meanwhile, the wait is recorded once
        if before is None or before.status in (DONE, DEAD):
            return HookResult("notification", cli, agent.id, {}, [])
        if env.store.update_agent(agent.id, if_status=before.status, status=WAITING_PERMISSION,
                                  status_reason=text[:200] or "permission prompt"):
            break
        before = env.store.agent(agent.id)
    else:
        return HookResult("notification", cli, agent.id, {}, [], warning="the agent's status kept changing")
    if before.status == WAITING_PERMISSION:  # the same wait told again: the human was told once already
        return HookResult("notification", cli, agent.id, {}, [WAITING_PERMISSION])
    msgs.notify_parent(env, agent, WAITING_PERMISSION,
                       f"{agent.name} is waiting for permission: {text or 'a tool needs approval'}", message=text)
    from exo_cli.ops import attention

    attention.signal(env, WAITING_PERMISSION, agent, text or "a tool needs approval")
    return HookResult("notification", cli, agent.id, {}, [WAITING_PERMISSION])


def _last_message(data: dict[str, Any]) -> str | None:
    for key in ("last_assistant_message", "prompt_response", "last-assistant-message"):
        value = data.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def on_stop(env: Env, agent: Agent, cli: str, data: dict[str, Any], *, can_block: bool = True) -> HookResult:
    event = "notify" if not can_block else "stop"
    if cli == "gemini" and data.get("prompt_response") == NO_RESPONSE:
        # Gemini's AfterAgent also fires after an API error, with no response text: the error
        # is in its transcript. That is a failed turn, not an idle agent.
        error = _gemini_error(data)
        if error:
            return on_stop_failure(env, agent, cli, {"error": "api_error", "last_assistant_message": error},
                                   event="stop")
    actions: list[str] = []
    state = load_state(env, agent.id)
    turn = data.get("turn_id") or data.get("turn-id")
    first_for_turn = not turn or state.get("last_turn") != turn
    if turn:
        state["last_turn"] = turn
    text = _last_message(data)
    cut = None
    if text is not None:  # an output over exo's limit is kept up to it, and the hook says so (fail open)
        text, cut = clip(text, "output", "output")
    active = bool(data.get("stop_hook_active"))
    tpath = data.get("transcript_path")
    usage = read_usage(cli, tpath, state, text) if isinstance(tpath, str) and tpath else []

    reasons: list[str] = []
    turn_no = agent.turns + (1 if first_for_turn else 0)  # the turn this stop ends, as its checkpoints say
    budget, spent = _budget(env, agent, usage)  # "over": no new turn; "warn": told once at 80%
    if can_block:
        rebase = rebase_onto_base(env, agent, state, turn=turn_no)
        sha, base = rebase.sha or "", rebase.base
        if rebase.status not in ("none", "up-to-date"):
            actions.append(f"rebase:{rebase.status}")
        if rebase.status == "agent-side":  # an agent's own clone: its side rebases (hookrun.agent_side)
            actions.append(f"{REBASE_HERE}{sha}")
        if rebase.status == "agent-side-failed" and not active:
            failures = state.setdefault("rebase_failures", {})
            n = failures[sha] = int(failures.get(sha, 0)) + 1
            if n == 1:
                reasons.append(
                    f"Your parent branch {base} moved ahead, and exo could not rebase your clone onto it (uncommitted "
                    "changes, files in the way or a conflict). Commit your work, then run `git fetch origin && "
                    f"git rebase origin/{base}`, fix any conflicts, `git add` them and `git rebase --continue`. "
                    "If you cannot, ask your parent with `exo question`."
                )
        if rebase.status == "in-the-way":
            failures = state.setdefault("rebase_failures", {})
            n = failures[sha] = int(failures.get(sha, 0)) + 1
            if n == 1 and not active:  # told once per parent tip
                reasons.append(
                    f"Your parent branch {base} moved ahead, but exo did not rebase your branch onto it: the rebase "
                    f"would overwrite these untracked or ignored files of yours: {', '.join(rebase.files)}. "
                    "Move them out of the way (or delete them if they are generated), then run "
                    f"`git rebase {base}` yourself."
                )
        if rebase.status == "conflict":
            failures = state.setdefault("rebase_failures", {})
            n = failures[sha] = int(failures.get(sha, 0)) + 1
            listed = ", ".join(rebase.files) or "(see git status)"
            if n == 1 and not active:
                reasons.append(
                    f"Your parent branch {base} moved ahead and rebasing onto it conflicts in: {listed}. "
                    "exo aborted the rebase, so your tree is exactly as before. Resolve it: commit your work, run "
                    f"`git rebase {base}`, fix the conflicts, `git add` them and "
                    "`git rebase --continue`. If you cannot, ask your parent with `exo question`."
                )
            elif n == 2:
                asked = (f"My branch {agent.branch} cannot be rebased onto {base}: "
                         f"conflicts in {listed}. How should I resolve them?")
                ticket = msgs.post(env, msgs.QUESTION, agent.id, agent.parent or ROOT, asked, state=msgs.PENDING,
                                   data={"rebase": sha})
                if (agent.parent or ROOT) == ROOT:  # a question to the human: told, as `exo question` tells it
                    from exo_cli.ops import attention

                    attention.signal(env, "question", agent, asked, ticket=ticket)
                actions.append("asked-parent")
                state["base_ok"] = sha  # asked once for this tip: do not retry it every turn
        pending = env.store.messages(recipient=agent.id, unconsumed=True, undelivered=True, limit=1)
        if pending and budget != "over" and env.store.kv_get(TEAM_BUDGET_KEY):  # went over since it was judged?
            budget, spent = _team_now(env, budget, spent)
        if budget == "over":  # its messages stay held, and nothing keeps it going
            reasons = []
        elif pending or reasons:
            if int(state.get("blocks", 0)) < MAX_BLOCKS:
                taken = msgs.claim_pending(env, agent.id)
                if taken:
                    reasons.append(msgs.render_all(taken))
            else:
                reasons = []
                actions.append("block-limit")
    blocking = bool(reasons)
    state["blocks"] = int(state.get("blocks", 0)) + 1 if blocking else 0

    changes: dict[str, Any] = {}
    if text is not None:
        changes["output"] = text
    if blocking:
        changes.update(status=WORKING, status_reason="continuing with messages")
    elif budget == "over" and spent is not None:
        changes.update(status=OVER_BUDGET, status_reason=f"over budget: {spent.text()}"[:500])
    else:
        changes.update(status=IDLE, status_reason=None)
    if budget == "warn":
        from exo_cli.ops.budget import with_warned

        changes["spec"] = with_warned(agent, True)
    if agent.status == DONE:
        changes.pop("status", None)
        changes.pop("status_reason", None)
    foresee = agent.status != DONE and _foresight_due(env, agent, state)
    # one short transaction for the record, counters and bookkeeping
    env.store.record_turn(agent.id, changes, turns=1 if first_for_turn else 0, tokens=sum(u.total for u in usage),
                          kv=(_key(agent.id), json.dumps(state, separators=(",", ":"))), turn=turn_no, usage=usage)
    # The turn's checkpoint: before the answer when the agent goes on at once, else in the background.
    ckpt = _checkpoint(env, agent, turn_no) if blocking else "checkpoint-due" * turnend.mark_due(env, agent, turn=turn_no)
    later = [turnend.due_command(agent)] if ckpt == "checkpoint-due" else []
    if foresee:  # the merges of conflict foresight too: the answer never waits for them
        from exo_cli.ops.foresight import check_command

        later.append(check_command(agent))
    if turnend.after_exit(env, later):
        actions += ["foresight"] * foresee
    actions += [ckpt] if ckpt else []
    if budget != "over" and changes.get("status") == IDLE and env.store.kv_get(TEAM_BUDGET_KEY):  # went over since?
        budget, spent = _team_now(env, budget, spent, agent)
    if budget == "over" and spent is not None:  # it rests at its input, its messages held: no idle, no dependents
        actions.append(_tell_budget(env, agent, budget, spent))
        return HookResult(event, cli, agent.id, neutral(event, cli), actions, cut)
    if not blocking and can_block and agent.status != DONE and "block-limit" not in actions:
        # A message posted while this hook ran saw the agent still working and was queued; now
        # that the record says idle, a later sender types it, and one in between is taken here.
        if env.store.messages(recipient=agent.id, unconsumed=True, undelivered=True, limit=1):
            late = msgs.claim_pending(env, agent.id)
            if late:
                if _checkpoint(env, agent, None, due=True):  # it goes on at once: its checkpoint cannot wait
                    actions.append("checkpoint")
                state["blocks"] = 1
                env.store.update_agent(agent.id, status=WORKING, status_reason="continuing with messages")
                save_state(env, agent.id, state)
                if budget == "warn" and spent is not None:  # it goes on anyway: its next hook hands the warning over
                    actions.append(_tell_budget(env, agent, budget, spent))
                return HookResult(event, cli, agent.id, block_output(cli, msgs.render_all(late)),
                                  [*actions, "late-messages"], cut)
    if not blocking and agent.status != DONE and (first_for_turn or agent.status != IDLE):
        msgs.notify_parent(env, agent, "idle", f"{agent.name} is idle" + (f": {_short(text)}" if text else ""),
                           output=(text or "")[:4000])
        actions.append("idle")
        ready = msgs.ready_dependents(env, agent.id)
        if ready:  # spawn loads only when an agent waits for this one
            from exo_cli.ops.spawn.pending import start_dependents

            start_dependents(env, agent.id, ready)
    if budget == "warn" and spent is not None:  # after the late messages: its next turn's hooks hand it over
        actions.append(_tell_budget(env, agent, budget, spent))
    out = block_output(cli, "\n\n".join(reasons)) if blocking else neutral(event, cli)
    return HookResult(event, cli, agent.id, out, actions, cut)


def _budget(env: Env, agent: Agent, usage: list[Usage]) -> tuple[str | None, Any]:
    """The verdict of its budget and the team's on the turn that ended (``ops/budget.py``, loaded only when
    the agent or the team has a budget: the hook stays light)."""
    if agent.status == DONE or not (agent.spec.get("budget") or env.store.kv_get(TEAM_BUDGET_KEY)):
        return None, None
    from exo_cli.ops.budget import verdict

    return verdict(env, agent, usage)


def _team_now(env: Env, budget: str | None, spent: Any, rested: Agent | None = None) -> tuple[str | None, Any]:
    from exo_cli.ops.teambudget import settle

    return settle(env, rested, budget, spent)


def _tell_budget(env: Env, agent: Agent, budget: str, spent: Any) -> str:
    from exo_cli.ops.budget import tell

    return tell(env, agent, budget, spent)


NO_RESPONSE = "[no response text]"  # Gemini's AfterAgent prompt_response when the turn produced no text


def _gemini_error(data: dict[str, Any]) -> str | None:
    path = data.get("transcript_path")
    if not isinstance(path, str) or not path:
        return None
    from exo_cli.adapters.agents.gemini import turn_error

    return turn_error(path)


def on_stop_failure(env: Env, agent: Agent, cli: str, data: dict[str, Any], *, event: str = "stop-failure") -> HookResult:
    """Claude's StopFailure (and Gemini's AfterAgent after an API error): the turn ended with an error."""
    error = _last_message(data) or str(data.get("error") or "the turn failed")
    kind = data.get("error") if isinstance(data.get("error"), str) else None
    actions = ["failed-turn"] if turn_failed(env, agent, error, kind=kind) else []
    return HookResult(event, cli, agent.id, neutral(event, cli), actions)


def turn_failed(env: Env, agent: Agent, error: str, *, kind: str | None = None) -> bool:
    """Record that the agent's turn ended with an error: status ``failed-turn``, the error as its output.

    The reason is ``turn failed: <error>``; the parent gets a ``failed-turn`` event with the
    error text, and the human a ``failed-turn`` attention event when it enters the status. The
    agent is alive at its input: a message (``exo send``) starts its next turn. Agents waiting
    ``--after`` it keep waiting. False when nothing changed (it is done or dead, or already
    recorded).
    """
    if agent.status in (DONE, DEAD):
        return False
    error = clip(error, "error", "output")[0]
    text = " ".join(error.split())
    reason = f"turn failed: {text}"[:500]
    if agent.status == FAILED_TURN and agent.status_reason == reason:
        return False
    if not env.store.update_agent(agent.id, if_status=agent.status, status=FAILED_TURN, status_reason=reason,
                                  output=error):
        return False
    env.store.bump_agent(agent.id, turns=1)
    msgs.notify_parent(env, agent, FAILED_TURN, f"{agent.name}'s turn failed: {_short(text, 400)}",
                       error=error[:4000], **({"error_kind": kind} if kind else {}))
    if agent.status != FAILED_TURN:  # it needs the human now (a new error of a failed turn was told already)
        from exo_cli.ops import attention

        attention.signal(env, FAILED_TURN, agent, text, **({"error_kind": kind} if kind else {}))
    return True


def _foresight_due(env: Env, agent: Agent, state: dict[str, Any]) -> bool:
    """Whether conflict foresight (``ops/foresight.py``) should look at this agent's branch again.

    True when its branch, its base or a live sibling's branch moved since the last look (the
    tips are read from the ref files: no git process, no import of the foresight module).
    """
    if not (agent.branch and agent.worktree and agent.base_branch):
        return False
    from exo_cli.ops.rebase import ref_sha

    # an agent's own clone: its files are never read here; its branch as fetched at this stop is the repository's
    wt = str(env.repo.root) if agent.spec.get("layout") == "clone" else agent.worktree
    tips = [ref_sha(wt, f"refs/heads/{agent.branch}"), ref_sha(wt, f"refs/heads/{agent.base_branch}")]
    tips += [f"{a.id}={ref_sha(wt, f'refs/heads/{a.branch}')}" for a in env.store.agents()
             if a.parent == agent.parent and a.id != agent.id and a.branch
             and a.branch not in (agent.branch, agent.base_branch) and a.status not in (DEAD, DONE)]
    if state.get("foresight") == tips:
        return False
    state["foresight"] = tips
    return True


def _short(text: str, n: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def on_notify(env: Env, agent: Agent, cli: str, data: dict[str, Any]) -> HookResult:
    """Codex ``notify``: agent-turn-complete of the agent's own thread only (not its title threads)."""
    if data.get("type") != "agent-turn-complete":
        return HookResult("notify", cli, agent.id, None, [])
    inputs = data.get("input-messages") or []
    if inputs and isinstance(inputs[0], str) and inputs[0].startswith(TITLE_PREFIX):
        return HookResult("notify", cli, agent.id, None, ["ignored:title-thread"])
    thread = data.get("thread-id")
    state = load_state(env, agent.id)
    if thread:
        own = state.get("thread")
        if own is None:
            state["thread"] = thread
            save_state(env, agent.id, state)
        elif own != thread:
            return HookResult("notify", cli, agent.id, None, ["ignored:other-thread"])
    return on_stop(env, agent, cli, data, can_block=False)


HANDLERS = {
    "session-start": on_session_start,
    "prompt": on_prompt,
    "stop": on_stop,
    "stop-failure": on_stop_failure,
    "session-end": on_session_end,
    "notification": on_notification,
    "tool": on_tool,
    "notify": on_notify,
}

