"""The beads (``bd``) task-tracker adapter: read, judge readiness, claim and close beads.

Two sources sit behind one interface (``BeadsSource``):

* ``BdSource`` drives the ``bd`` CLI with ``--json`` (the live state);
* ``JsonlSource`` reads the JSONL export in ``.beads/`` (``issues.jsonl``, legacy
  ``beads.jsonl`` or the file ``metadata.json`` names) and rewrites it safely when ``bd`` is
  not installed.

``open_beads`` picks one. Ready/blocked follow current ``bd ready`` and are computed by
``compute_ready``/``BeadGraph`` for the JSONL source. Nothing here prints.

The modules: ``model`` (vocabulary, ``Bead``, ready rules, ids), ``source`` (the interface,
``resolve_id``, ``check_spawnable``), ``jsonl`` and ``bd`` (the two sources), ``context``
(an agent's task context, bead diffs). Import from the package: every name is here.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from exo_cli.adapters.beads.bd import BdSource, unwrap_json
from exo_cli.adapters.beads.context import diff_beads, render_context
from exo_cli.adapters.beads.jsonl import JsonlSource, committed_jsonl, jsonl_names
from exo_cli.adapters.beads.model import (
    BLOCKING_DEP_TYPES,
    BUILTIN_STATUSES,
    BUILTIN_TYPES,
    DEFAULT_CLOSE_REASON,
    EXCLUDED_READY_TYPES,
    INACTIVE_STATUSES,
    JSONL_NAMES,
    MAX_ID,
    PARENT_CHILD,
    WAITS_FOR,
    Bead,
    BeadGraph,
    Comment,
    Dependency,
    check_bead_id,
    compute_ready,
    infer_prefix,
    now_rfc3339,
    parse_ts,
    short_id,
    sort_beads,
)
from exo_cli.adapters.beads.source import BeadsSource, check_spawnable, resolve_id
from exo_cli.errors import EnvironmentError_


def open_beads(
    repo_root: str | os.PathLike[str],
    *,
    beads_dir: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    bd: str | None = None,
    commit_writes: bool = False,
) -> BeadsSource:
    """Return the beads source for a repository: ``bd`` when installed, else the JSONL.

    ``commit_writes`` makes the JSONL source commit its writes (see ``JsonlSource``).

    The ``.beads`` directory is ``beads_dir``, else ``$BEADS_DIR``, else ``<repo>/.beads``;
    raises EnvironmentError_ with a hint when there is none. ``bd`` names the binary (path or
    name); without it ``bd`` is looked up on ``PATH`` (of ``env``).
    """
    environ = dict(env if env is not None else os.environ)
    root = Path(repo_root)
    if beads_dir is not None:
        bdir = Path(beads_dir)
    elif environ.get("BEADS_DIR"):
        bdir = Path(environ["BEADS_DIR"])
    else:
        bdir = root / ".beads"
    if not bdir.is_dir():
        raise EnvironmentError_(
            f"No beads tracker in {root} (no {bdir})",
            hint="Run `bd init` in the repository, or set BEADS_DIR to an existing .beads directory.",
            beads_dir=str(bdir),
        )
    if bd is not None:
        bd_path = shutil.which(bd, path=environ.get("PATH")) if os.sep not in bd else bd
        if not bd_path or not os.access(bd_path, os.X_OK):
            raise EnvironmentError_(
                f"bd is not installed at {bd}", hint="Install bd or leave it unset.", bd=bd
            )
    else:
        bd_path = shutil.which("bd", path=environ.get("PATH"))
    if bd_path:
        if beads_dir is not None or environ.get("BEADS_DIR"):
            environ["BEADS_DIR"] = str(bdir)
        return BdSource(bd_path, root, environ, beads_dir=bdir)
    return JsonlSource(bdir, commit_writes=commit_writes, environ=environ)


__all__ = [
    "BLOCKING_DEP_TYPES",
    "BUILTIN_STATUSES",
    "BUILTIN_TYPES",
    "DEFAULT_CLOSE_REASON",
    "EXCLUDED_READY_TYPES",
    "INACTIVE_STATUSES",
    "JSONL_NAMES",
    "MAX_ID",
    "PARENT_CHILD",
    "WAITS_FOR",
    "BdSource",
    "Bead",
    "BeadGraph",
    "BeadsSource",
    "Comment",
    "Dependency",
    "JsonlSource",
    "check_bead_id",
    "check_spawnable",
    "committed_jsonl",
    "compute_ready",
    "diff_beads",
    "infer_prefix",
    "jsonl_names",
    "now_rfc3339",
    "open_beads",
    "parse_ts",
    "render_context",
    "resolve_id",
    "short_id",
    "sort_beads",
    "unwrap_json",
]
