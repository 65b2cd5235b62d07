"""Showing an agent's tmux window to the human: a popup in their own tmux, a window, or an attach.

From inside the user's own tmux (``$TMUX`` names another server), exo opens the agent in a
``display-popup`` (tmux 3.2 and newer) that attaches to exo's private server by its full
socket path (the popup's environment comes from the user's server, so ``-L`` with a
``TMUX_TMPDIR`` would miss it). Before that, the agent's window gets ``window-size manual``
(that window only: a global ``set -g window-size manual`` crashes tmux 3.3a's server at the
next new window), or the popup's smaller client would shrink the agent's window for good.
Older tmux gets a new window in the user's session instead, where leaving takes the prefix
twice (``C-b C-b d``). Outside tmux it is a plain attach; inside exo's own server, a switch.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from typing import NamedTuple

from exo_cli.adapters.mux.base import Location
from exo_cli.adapters.mux.tmux import Tmux, literal

POPUP_MIN = (3, 2)  # display-popup appeared in tmux 3.2


class AttachPlan(NamedTuple):
    mode: str  # attach | switch | popup | window
    argv: list[str]
    hint: str | None


def parse_version(text: str) -> tuple[int, int] | None:
    """``3.3a`` -> (3, 3); ``next-3.5`` -> (3, 5); None when there is no version in it."""
    m = re.search(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def user_tmux_version(binary: str, environ: Mapping[str, str]) -> tuple[int, int] | None:
    """The version of the tmux server the caller is inside (``display -p '#{version}'`` through ``$TMUX``)."""
    import subprocess

    try:
        proc = subprocess.run([binary, "display-message", "-p", "#{version}"], capture_output=True, text=True,
                              env=dict(environ), stdin=subprocess.DEVNULL, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_version(proc.stdout) if proc.returncode == 0 else None


def socket_path(mux: Tmux) -> str:
    """The full path of exo's server socket, as the server itself reports it."""
    proc = mux._exec("display-message", "-p", "#{socket_path}", check=False)
    path = proc.stdout.strip()
    return path if proc.returncode == 0 and path else mux.socket_path()


def plan(mux: Tmux, loc: Location, *, name: str, environ: Mapping[str, str],
         version: tuple[int, int] | None = None) -> AttachPlan:
    """How to show ``loc`` to a human whose environment is ``environ``.

    ``version`` stands for the user's tmux version (asked from their server when None).
    Opening a popup or a window sets ``window-size manual`` on the agent's window.
    """
    target = loc.window or loc.pane or f"={mux.session}:"
    inside = environ.get("TMUX", "").split(",")[0]
    if not inside:
        return AttachPlan("attach", mux.attach_argv(loc), f"Attaching to {name}; detach with C-b d to come back.")
    sock = socket_path(mux)
    if os.path.realpath(inside) == os.path.realpath(sock):
        return AttachPlan("switch", mux._argv("select-window", "-t", target, ";", "switch-client", "-t", target),
                          None)
    if version is None:
        version = user_tmux_version(mux.binary, environ)
    mux._exec("set-option", "-w", "-t", target, "window-size", "manual", check=False)
    inner = shlex.join([mux.binary, "-S", sock, "attach-session", "-t", target])
    if version is not None and version >= POPUP_MIN:
        return AttachPlan("popup", [mux.binary, "display-popup", "-E", "-w", "90%", "-h", "90%", inner],
                          f"Opening {name} in a popup; detach with your prefix then d (C-b d) to come back.")
    name = f"exo:{name}"
    return AttachPlan("window", [mux.binary, "new-window", "-n", literal(name), inner],
                      f"Opened {name} in a new window ({name}) of your tmux session; your tmux is older than "
                      "3.2 (no popups), so press your prefix twice then d (C-b C-b d) to come back.")
