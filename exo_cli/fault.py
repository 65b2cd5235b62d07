"""Fault injection for reliability tests: die at a named point when ``EXO_FAULT`` names it.

``EXO_FAULT`` holds a comma-separated list of point names (``spawn.worktree,spawn.started``).
``point(name)`` ends the whole process at once with ``os._exit(137)`` (what a SIGKILL looks
like to a parent shell), without running ``finally`` blocks or flushing anything: exactly
the state a killed ``exo`` leaves behind. Points used by spawn: ``spawn.recorded``,
``spawn.worktree``, ``spawn.prepared``, ``spawn.started``; by complete: ``complete.checked``,
``complete.stopped``, ``complete.archived``, ``complete.removed``; by pr merge:
``merge.locked``, ``merge.moved``; by a checkpoint: ``checkpoint.updated`` (the shadow index
written), ``checkpoint.committed`` (its commit written, no ref yet), ``checkpoint.ref`` (its ref
made, its records not); by undo: ``undo.saved`` (the present checkpointed), ``undo.files`` (the
files written back, the branch not moved yet).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

VAR = "EXO_FAULT"
EXIT_CODE = 137


def armed(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``EXO_FAULT`` (of ``environ``, default the process's) names point ``name``."""
    spec = (os.environ if environ is None else environ).get(VAR, "")
    return bool(spec) and name in {p.strip() for p in spec.split(",")}


def point(name: str, environ: Mapping[str, str] | None = None) -> None:
    """Exit the process immediately (status 137) when point ``name`` is armed."""
    if armed(name, environ):
        os._exit(EXIT_CODE)
