"""Multiplexer layer: start agents in tmux windows, Zellij tabs or headless processes.

``get_mux`` returns the backend for a kind; every backend follows ``Mux`` from
``base``. ``runtime_dir_for`` gives the short private folder for sockets, FIFOs and
locks.
"""

from __future__ import annotations

from pathlib import Path

from exo_cli.adapters.files import runtime_dir_for
from exo_cli.adapters.mux.base import Location, Mux, PaneState
from exo_cli.errors import InvalidInput
from exo_cli.records import MUXES
from exo_cli.validate import check_name

__all__ = ["MUXES", "Location", "Mux", "PaneState", "get_mux", "runtime_dir_for"]


def get_mux(kind: str, *, repo_id: str, runtime_dir: Path, session: str) -> Mux:
    """Return the backend for ``kind``: "tmux", "zellij" or "headless".

    tmux uses the private socket ``exo-<repo_id>`` and session ``session``; Zellij
    acts on the session recorded in each agent's location (so it works from any shell;
    starting an agent in Zellij needs ``Zellij(...)`` inside a session); headless keeps
    its records in ``runtime_dir``.
    """
    if kind == "tmux":
        from exo_cli.adapters.mux.tmux import Tmux

        return Tmux(f"exo-{check_name(repo_id, 'repo id')}", session, runtime_dir=runtime_dir)
    if kind == "headless":
        from exo_cli.adapters.mux.headless import Headless

        return Headless(runtime_dir)
    if kind == "zellij":
        from exo_cli.adapters.mux.zellij import Zellij

        return Zellij(None, runtime_dir=runtime_dir, require=False)
    raise InvalidInput(
        f"Invalid multiplexer {kind!r}", hint=f"Use one of: {', '.join(MUXES)}.", field="mux"
    )
