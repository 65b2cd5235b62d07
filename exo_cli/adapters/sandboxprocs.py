"""The processes of a sandboxed agent that its process group does not hold, and exo's own beside it.

bubblewrap runs the agent under its init, in a session of its own (``--new-session``), so the agent's
process group (what ``proc.kill_group`` stops, what the watcher looks under) holds only bwrap; the
network's bridge runs as the agent's child and a pane's broker keeper as bwrap's. ``stop_marked`` stops
them by the identity they carry, ``sandboxed_children`` finds the agent's own children among them.
"""

from __future__ import annotations

import os
import time

from exo_cli.adapters.proc import _signal_each, carrying, children_of, cmdline, command_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


def stop_marked(marks: Mapping[str, str], *, grace: float = 3.0) -> list[int]:
    """Stop the live processes whose environment has every ``name=value`` of ``marks`` and wait until they are gone:
    SIGTERM, then SIGKILL after ``grace`` seconds; which were found. For what left a group ``kill_group`` stopped,
    such as the inside of a sandbox (bwrap starts it in a session of its own, torn down only after bwrap ends)."""
    import signal

    def found() -> set[int]:
        if not marks:
            return set()
        (name, value), *rest = marks.items()
        return set(carrying(name, value, also=dict(rest))) - {os.getpid()}

    first = left = found()
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        if not left:
            break
        _signal_each(left, sig)
        deadline = time.monotonic() + wait
        while (left := found()) and time.monotonic() < deadline:
            time.sleep(0.02)
    return sorted(first)


def sandboxed_children(pid: int) -> list[int]:
    """The child processes of a sandboxed agent whose sandbox is ``pid``: below bwrap and its init, without exo's
    own beside it (the network's bridge, the agent's child; a pane's broker keeper, bwrap's)."""
    here = os.path.dirname(os.path.abspath(__file__))
    ours = {os.path.join(here, "netbridge.py"), os.path.join(here, "mux", "_runner.py"), "exo-keeper"}

    def agents(parent: int) -> list[int]:
        return [c for c in children_of(parent)  # (bwrap's own command line names the bridge: the agent's prelude)
                if command_name(c) == "bwrap" or not ours & set(cmdline(c).split(" "))]

    for _ in range(3):  # bwrap, then its init
        if command_name(pid) != "bwrap":
            break
        inner = agents(pid)
        if len(inner) != 1:
            return inner
        pid = inner[0]
    return agents(pid)


def sandbox_of(pid: int) -> int:
    """The bwrap of the agent process ``pid``: itself (a pane's launcher execs it), else its bwrap child (the
    headless runner's), else ``pid``."""
    if command_name(pid) == "bwrap":
        return pid
    return next((c for c in children_of(pid) if command_name(c) == "bwrap"), pid)


def runs_sandboxed(pid: int | None) -> bool:
    """Whether the agent process ``pid`` (a pane's, or the headless runner / Zellij launcher that runs it) is a
    bubblewrap sandbox: what ``exo doctor`` records of an agent whose record was lost."""
    return bool(pid) and command_name(sandbox_of(pid or 0)) == "bwrap"
