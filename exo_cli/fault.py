"""Fault injection for reliability tests: die at a named point when ``EXO_FAULT`` names it.

``EXO_FAULT`` holds a comma-separated list of point names (``spawn.worktree,spawn.started``).
``point(name)`` ends the whole process at once with ``os._exit(137)`` (what a SIGKILL looks
like to a parent shell), without running ``finally`` blocks or flushing anything: exactly
the state a killed ``exo`` leaves behind. Points used by spawn: ``spawn.recorded``,
``spawn.worktree``, ``spawn.prepared``, ``spawn.started``; by complete: ``complete.checked``,
``complete.stopped``, ``complete.archived``, ``complete.removed``; by pr merge:
``merge.locked``, ``merge.moved``; by deinit: ``deinit.archived``, ``deinit.agents``,
``deinit.trees``, ``deinit.stopped``, ``deinit.unwired``, ``deinit.files``, ``deinit.rows``; by store
migrate: ``migrate.held``, ``migrate.loaded``, ``migrate.marked``, ``migrate.committed``,
``migrate.settled``, ``migrate.pointed``; by a checkpoint: ``checkpoint.updated`` (the shadow index
written), ``checkpoint.committed`` (its commit written, no ref yet), ``checkpoint.ref`` (its ref
made, its records not); by a turn's end: ``budget.judged`` (its budget and the team's judged, nothing
recorded yet); by undo: ``undo.saved`` (the present checkpointed), ``undo.files`` (the
files written back, the branch not moved yet).

With ``EXO_FAULT_PAUSE`` naming a folder, an armed point pauses instead: it writes a file
named after the point there (holding its pid) and waits until that file is removed (for at
most ten minutes), then goes on, so that a test can act (cut a connection) at that very step.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

VAR = "EXO_FAULT"
PAUSE_VAR = "EXO_FAULT_PAUSE"
EXIT_CODE = 137


def armed(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``EXO_FAULT`` (of ``environ``, default the process's) names point ``name``."""
    spec = (os.environ if environ is None else environ).get(VAR, "")
    return bool(spec) and name in {p.strip() for p in spec.split(",")}


def point(name: str, environ: Mapping[str, str] | None = None) -> None:
    """Exit the process immediately (status 137) when point ``name`` is armed (or pause there, see above)."""
    if armed(name, environ):
        folder = (os.environ if environ is None else environ).get(PAUSE_VAR)
        if folder:
            _pause(os.path.join(folder, name))
            return
        os._exit(EXIT_CODE)


def _pause(flag: str) -> None:
    import time

    with open(flag, "w") as fh:
        fh.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + 600
    while os.path.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.05)
