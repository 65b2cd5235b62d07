"""Attention signals: when an agent needs the human, tell them (the ``[notify]`` configuration).

``signal`` is called exactly once per event, where the event happens: a question to the
root (``question``), an agent waiting for a permission (the notification hook), a startup
dialog (``agentctl.check_dialogs``), a PR filed to the root (``pr file``), an agent dead
(session end, or its pane or process found gone) or done (``exo done``). With
``notify.command`` set, that command gets the event as one JSON object on its standard input;
with ``notify.desktop``, ``notify-send`` shows it. Both are off by default; the board rings
the terminal bell and uses tmux's status line itself. Nothing here may slow the caller:
the programs are started detached and never waited for, and any failure is ignored.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exo_cli.env import Env
    from exo_cli.records import Agent

KINDS = ("question", "waiting-permission", "blocked-on-dialog", "pr-filed", "dead", "done")
TEXT_MAX = 4000


def event(kind: str, agent: Agent, text: str, **data: Any) -> dict[str, Any]:
    """The JSON object a notifier receives."""
    return {"event": kind, "agent": agent.id, "name": agent.name, "parent": agent.parent, "role": agent.role,
            "task": (agent.task or "")[:TEXT_MAX] if agent.task else agent.task, "bead": agent.bead, "branch": agent.branch, "repo": agent.repo,
            "text": text[:TEXT_MAX], "time": round(time.time(), 3), **data}


def summary(ev: dict[str, Any]) -> str:
    """One line for a status bar or a desktop notification."""
    what = {"question": "asks", "waiting-permission": "waits for a permission", "blocked-on-dialog": "shows a dialog",
            "pr-filed": "filed a PR", "dead": "died", "done": "is done"}.get(ev["event"], ev["event"])
    text = " ".join(str(ev.get("text") or "").split())
    return f"exo: {ev['name']} {what}" + (f": {text[:120]}" if text else "")


def signal(env: Env, kind: str, agent: Agent, text: str, **data: Any) -> None:
    """Send the event to the configured notifiers; never raises, never waits."""
    try:
        command = env.config.get("notify.command")
        desktop = env.config.get("notify.desktop")
        if not command and not desktop:
            return
        from exo_cli.adapters import notify

        ev = event(kind, agent, text, **data)
        if command:
            notify.start_detached(list(command), stdin=json.dumps(ev, ensure_ascii=False).encode() + b"\n",
                                  environ=env.environ)
        if desktop:
            notify.desktop("exo", summary(ev), env.environ)
    except Exception:  # noqa: BLE001 - a notifier must never break the operation that raised the event
        return
