"""Reconcile recorded agent status with process liveness (status from hooks first, liveness second)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from exo_cli.core.models import DEAD, DONE, Agent

if TYPE_CHECKING:
    from exo_cli.env import Env


def pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        state = data[data.rfind(b")") + 2 : data.rfind(b")") + 3]
        return state != b"Z"
    except OSError:
        return True


def refresh(env: Env, agents: list[Agent]) -> list[Agent]:
    """Mark agents whose process is gone as dead; return the updated list."""
    out: list[Agent] = []
    for a in agents:
        pid = a.location.get("pid")
        if a.status not in (DEAD, DONE) and a.mux == "headless" and isinstance(pid, int) and not pid_alive(pid):
            env.store.update_agent(a.id, status=DEAD, status_reason="process exited")
            a = env.store.agent(a.id) or a
        out.append(a)
    return out
