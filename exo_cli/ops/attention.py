"""Attention signals: when an agent needs the human, tell them (the ``[notify]`` configuration).

``NEEDS_HUMAN`` is the one rule of which statuses need the human (``exo board`` flags exactly
those agents, plus a PR ready for the human to merge): each is entered through ``signal``,
called exactly once per entry, where it happens: a question to the root (``question``, and the
stop hook's question about a rebase it cannot do), an agent waiting for a permission (the
notification hook), a startup dialog (``agentctl.check_dialogs``), a turn that failed
(``hooks.turn_failed``), an agent dead (session end, its pane or process found gone, ``exo
kill``, ``exo doctor``, ``exo complete`` refusing after it stopped it, an ``--after`` agent
whose dependency died); and, besides, a PR filed to the root (``pr file``) and an agent done
(``exo done``, a custom agent that exited 0). With ``notify.command`` set, that command gets
the event as one JSON object on its standard input; with ``notify.desktop``, ``notify-send``
shows it. Both are off by default; the board rings the terminal bell and uses tmux's status
line itself. Nothing here may slow the caller: the programs are started detached and never
waited for, and any failure is ignored. They run as the human's whoever raised the event (an agent's
hook, usually): see ``human_environ``.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import TYPE_CHECKING, Any

from exo_cli.records import (
    ASKING,
    BLOCKED_ON_DIALOG,
    DEAD,
    FAILED_TURN,
    OVER_BUDGET,
    ROOT,
    WAITING_PERMISSION,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from exo_cli.env import Env
    from exo_cli.records import Agent

# The merge queue's events, raised for a child of the root's pull request (ops/mergequeue.py, ops/queuerun.py)
QUEUE_KINDS = ("pr-queued", "pr-bounced")
# The statuses in which an agent needs the human, and the event raised once when it enters one.
NEEDS_HUMAN = {ASKING: "question", WAITING_PERMISSION: "waiting-permission", BLOCKED_ON_DIALOG: "blocked-on-dialog",
               FAILED_TURN: "failed-turn", DEAD: "dead", OVER_BUDGET: "over-budget"}
KINDS = ("question", "waiting-permission", "blocked-on-dialog", "failed-turn", "pr-filed", "dead", "done", "over-budget")
TEXT_MAX = 4000


def needs_human(status: str, parent: str | None) -> str | None:
    """The event of ``status`` when an agent in it (under ``parent``) needs the human; None when it needs nobody.

    A question needs the human only when it goes to the root: a TL agent answers its own children's.
    """
    kind = NEEDS_HUMAN.get(status)
    if kind == "question" and (parent or ROOT) != ROOT:
        return None
    return kind


def event(kind: str, agent: Agent, text: str, **data: Any) -> dict[str, Any]:
    """The JSON object a notifier receives."""
    return {"event": kind, "agent": agent.id, "name": agent.name, "parent": agent.parent, "role": agent.role,
            "task": (agent.task or "")[:TEXT_MAX] if agent.task else agent.task, "bead": agent.bead, "branch": agent.branch, "repo": agent.repo,
            "text": text[:TEXT_MAX], "time": round(time.time(), 3), **data}


def summary(ev: dict[str, Any]) -> str:
    """One line for a status bar or a desktop notification."""
    what = {"question": "asks", "waiting-permission": "waits for a permission", "blocked-on-dialog": "shows a dialog",
            "failed-turn": "'s turn failed", "pr-filed": "filed a PR", "dead": "died",
            "pr-queued": "'s PR joined the merge queue", "pr-bounced": "'s PR bounced from the merge queue",
            "done": "is done"}.get(ev["event"], ev["event"])
    text = " ".join(str(ev.get("text") or "").split())
    sep = "" if what.startswith("'") else " "
    return f"exo: {ev['name']}{sep}{what}" + (f": {text[:120]}" if text else "")


# The human's session variables a notifier gets, and nothing else: no API key, token, store URL, ssh agent,
# GIT_*, PYTHON*/LD_* or EXO_* identity variable can reach it (EXO_CONFIG_DIR names where the human's own
# configuration is). LC_* pass too.
HUMAN_VARS = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "COLORTERM", "NO_COLOR",
              "DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME",
              "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_CONFIG_DIRS", "XDG_DATA_DIRS",
              "XDG_SESSION_TYPE", "XDG_CURRENT_DESKTOP", "TMPDIR", "EXO_CONFIG_DIR")


def session_vars(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed session variables of ``environ`` (see ``HUMAN_VARS``)."""
    return {k: v for k, v in environ.items() if (k in HUMAN_VARS or k.startswith("LC_")) and "\0" not in v}


def _is_human(env: Env) -> bool:
    if env.markers:
        return False
    try:
        return env.caller.is_human
    except Exception:  # noqa: BLE001 - who is calling is unknown: not the human
        return False


def remember_human(env: Env) -> None:
    """Keep the human's session variables for the notifier (a human caller only; never raises)."""
    try:
        if _is_human(env):
            from exo_cli.adapters import notify

            notify.remember(env.state_dir, session_vars(env.environ))
    except Exception:  # noqa: BLE001 - a notifier's comfort never fails the command that records it
        return


def human_environ(env: Env) -> dict[str, str]:
    """The environment of a process exo starts for the human from any caller's event (the notifier).

    The allow-listed session variables (``HUMAN_VARS``): from this process when the human runs
    it, else as the human last had them (kept by ``remember_human`` when the human spawns, and
    by every event the human's own commands raise), else HOME, USER, LOGNAME and SHELL from the
    user database with the system's default PATH. An agent's variables never pass: not its
    identity (EXO_AGENT, EXO_AGENT_PROOF, EXO_PARENT, EXO_ROLE), not its keys, not its PATH.
    """
    from exo_cli.adapters import notify

    if _is_human(env):
        remember_human(env)
        return session_vars(env.environ)
    kept = None
    with contextlib.suppress(Exception):
        kept = notify.recall(env.state_path)
    if kept:
        return session_vars(kept)
    return {**notify.account(), "PATH": os.defpath}


def human_cwd(env: Env) -> str:
    """Where such a process starts: the repository's main checkout (never an agent's worktree)."""
    try:
        return str(env.repo.root)
    except Exception:  # noqa: BLE001 - outside a repository: the home folder
        return os.path.expanduser("~")


def signal(env: Env, kind: str, agent: Agent, text: str, **data: Any) -> None:
    """Send the event to the configured notifiers; never raises, never waits.

    The notifiers run as the human's, whoever raised the event: ``human_environ`` in
    ``human_cwd``, as nobody's child (an ``exo`` they run is the human, never the agent).
    """
    try:
        command = env.config.get("notify.command")
        desktop = env.config.get("notify.desktop")
        if not command and not desktop:
            return
        from exo_cli.adapters import notify

        ev = event(kind, agent, text, **data)
        environ, cwd = human_environ(env), human_cwd(env)
        if command:
            notify.start_detached(list(command), stdin=json.dumps(ev, ensure_ascii=False).encode() + b"\n",
                                  environ=environ, cwd=cwd)
        if desktop:
            notify.desktop("exo", summary(ev), environ, cwd=cwd)
    except Exception:  # noqa: BLE001 - a notifier must never break the operation that raised the event
        return
