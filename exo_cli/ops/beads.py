"""``exo beads ready|show|list`` and ``exo reconstitute``: what exo sees in the beads tracker."""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from exo_cli.errors import InvalidInput, StateError
from exo_cli.registry import Range, op

if TYPE_CHECKING:
    from exo_cli.adapters.beads import Bead, BeadsSource
    from exo_cli.env import Env


@dataclass(frozen=True)
class BeadsListResult:
    """Beads as JSON-native dicts (``Bead.to_dict()``) with counts."""

    source: str  # "bd" | "jsonl"
    beads: list[dict[str, Any]]
    count: int  # beads listed
    total: int  # beads matching before the limit
    by_status: dict[str, int]
    owned: dict[str, str]  # bead id -> live agent working on it (among the listed beads)


@dataclass(frozen=True)
class BeadShowResult:
    """One bead with its readiness, blockers and dependency targets."""

    source: str
    bead: dict[str, Any]
    short_id: str
    ready: bool
    why_not_ready: str | None
    blocked_by: list[str]
    dependencies: list[dict[str, Any]]  # {id, type, title, status, found}
    agent: str | None  # the live agent working on it, if any


@dataclass(frozen=True)
class ReconstituteResult:
    """What ``exo reconstitute`` brought into the agent's worktree."""

    agent: str
    worktree: str
    bead: str | None
    source: str  # "bd" | "jsonl"
    main_branch: str | None
    files_updated: list[str]
    context_file: str | None
    context_updated: bool
    changes: dict[str, Any]


def _owned(env: Env, source: BeadsSource, ids: list[str]) -> dict[str, str]:
    from exo_cli.adapters import beads
    from exo_cli.ops import tasks

    prefix = source.prefix if ids else None
    owners = tasks.live_owners(env)
    out: dict[str, str] = {}
    for i in ids:
        agent = owners.get(i) or owners.get(beads.short_id(i, prefix))
        if agent:
            out[i] = agent
    return out


def _list_result(
    env: Env, source: BeadsSource, chosen: list[Bead], total: int, counted: list[Bead]
) -> BeadsListResult:
    return BeadsListResult(
        source=source.kind,
        beads=[b.to_dict() for b in chosen],
        count=len(chosen),
        total=total,
        by_status=dict(Counter(b.status for b in counted)),
        owned=_owned(env, source, [b.id for b in chosen]),
    )


@op(
    "beads_ready",
    cli="beads ready",
    tools=["beads_ready"],
    roles=("tl", "dev"),
    read_only=True,
    idempotent=True,
    help={"limit": "Show at most this many beads (default: all; 0 = all)."},
)
def beads_ready(env: Env, *, limit: Annotated[int, Range(0)] | None = None) -> BeadsListResult:
    """List the ready beads, best first (priority, then oldest).

    Ready exactly as `bd ready` decides: open, no open blocker (direct, inherited from a
    blocked parent, or an unmet `waits-for`), not deferred, pinned or ephemeral, and of a
    workable type. Read through `bd` when it is installed, else from `.beads/*.jsonl`.
    `owned` names the live agents already working on listed beads.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise InvalidInput(f"Invalid limit {limit!r}: expected a whole number >= 0", field="limit")
    from exo_cli.ops import tasks

    source = tasks.open_repo_beads(env)
    ready = source.ready(sort="priority")
    chosen = ready[:limit] if limit else ready
    return _list_result(env, source, chosen, len(ready), ready)


_STATUS_RE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


@op(
    "beads_list",
    cli="beads list",
    tools=["beads_list"],
    roles=("tl", "dev"),
    read_only=True,
    idempotent=True,
    flags={"show_all": "--all"},
    help={
        "status": "Only beads with this status (open, in_progress, blocked, deferred, closed, ...).",
        "show_all": "Include closed beads (by default only beads that are not closed are listed).",
    },
)
def beads_list(env: Env, *, status: str | None = None, show_all: bool = False) -> BeadsListResult:
    """List beads, by priority then age; closed ones only with {--show_all} or {--status}.

    Deleted beads (tombstones) are never listed. `by_status` counts every bead of the
    tracker that is not deleted, whatever the filter.
    """
    if status is not None and (not isinstance(status, str) or not _STATUS_RE.match(status)):
        raise InvalidInput(
            f"Invalid status {status!r}: expected a status name such as 'open'", field="status"
        )
    from exo_cli.adapters import beads
    from exo_cli.ops import tasks

    source = tasks.open_repo_beads(env)
    every = [b for b in source.all() if b.status != "tombstone"]
    if status is not None:
        chosen = [b for b in every if b.status == status]
    elif show_all:
        chosen = every
    else:
        chosen = [b for b in every if b.status != "closed"]
    chosen = beads.sort_beads(chosen, "priority")
    return _list_result(env, source, chosen, len(chosen), every)


@op(
    "beads_show",
    cli="beads show",
    tools=["beads_show"],
    roles=("tl", "dev"),
    read_only=True,
    idempotent=True,
    help={"bead_id": "The bead, by full id (bd-4hj) or without its prefix (4hj)."},
)
def beads_show(env: Env, *, bead_id: str) -> BeadShowResult:
    """Show one bead: fields, readiness, blockers, dependencies and the agent on it.

    A short id gets the tracker's prefix (`4hj` -> `bd-4hj`). A bead the tracker does not
    have is an error, and so is an id with a path separator, `..` or a shell character.
    """
    from exo_cli.adapters import beads
    from exo_cli.ops import tasks

    source = tasks.open_repo_beads(env)
    full = beads.resolve_id(source, bead_id)
    bead = source.get(full)
    targets = tasks.dependency_targets(source, bead)
    deps = []
    for d in bead.dependencies:
        t = targets.get(d.depends_on_id)
        deps.append(
            {
                "id": d.depends_on_id,
                "type": d.type,
                "title": t.title if t else None,
                "status": t.status if t else None,
                "found": t is not None,
            }
        )
    why = source.why_not_ready(full)
    return BeadShowResult(
        source=source.kind,
        bead=bead.to_dict(),
        short_id=beads.short_id(full, source.prefix),
        ready=why is None,
        why_not_ready=why,
        blocked_by=source.blockers(full),
        dependencies=deps,
        agent=_owned(env, source, [full]).get(full),
    )


# --- reconstitute ---------------------------------------------------------------------------------


def main_branch(env: Env) -> str:
    """Return the main branch (``branches.base_branch``: config ``worktree.base``, else the main checkout's branch)."""
    from exo_cli.adapters.git import Git
    from exo_cli.ops.branches import base_branch

    base = base_branch(env)
    if not Git(env.repo.root).ref_exists(base):
        raise StateError(
            f"The main branch {base!r} does not exist",
            hint="Set worktree.base in exo.toml (or EXO_BASE_BRANCH) to an existing branch.",
            branch=base,
        )
    return base


def _sync_jsonl(env: Env, agent: str, worktree: Path, rel: str, data: bytes, force: bool) -> bool:
    """Write main's JSONL into the worktree if it differs; refuse to clobber local edits.

    The copy is remembered as exo's own write (``tasks.remember_synced``): ``exo complete``
    and the stop hook's rebase put it back as the branch has it instead of counting it as work.
    """
    from exo_cli.adapters.clonestore import read_inside
    from exo_cli.ops import tasks

    path = worktree / rel
    current = read_inside(worktree, rel, limit=1 << 30)  # never through a link the agent planted
    if current is None and os.path.lexists(path):
        raise StateError(f"{rel} in {worktree} is not a regular file (a link?); not writing there",
                         hint=f"Look at it and remove it ({path}), then run reconstitute again.", path=str(path))
    if current == data:
        return False
    if current is not None and not force:
        at_head = tasks.blob_at_head(env, agent, worktree, rel)
        if current != at_head and not tasks.synced_by_exo(env, agent, rel, current):
            raise StateError(
                f"{rel} in {worktree} has local changes; not overwriting them",
                hint="Commit or discard them (git checkout -- " + rel + "), or pass --force.",
                path=str(path),
            )
    changed = tasks.write_if_changed(worktree, rel, data)
    tasks.remember_synced(env, agent, rel, data)
    return changed


@op(
    "reconstitute",
    cli="reconstitute",
    tools=["exo_reconstitute"],
    roles=("tl", "dev"),
    idempotent=True,
    help={"force": "Overwrite local, uncommitted edits of the worktree's beads file."},
)
def reconstitute(env: Env, *, force: bool = False) -> ReconstituteResult:
    """Sync beads from the main branch and refresh the agent's context.

    With `bd` installed nothing is copied (`bd` reads the shared database through
    `BEADS_DIR`); otherwise the beads JSONL committed on the main branch (`worktree.base`,
    else the main checkout's branch) is written into the agent's worktree when it differs,
    and no other file is touched. Then the agent's `.exo/context.md` is rewritten from its
    bead as the tracker holds it (`bd`, or the main checkout's `.beads/`, where claims and
    closes are written), and `changes` reports what changed for that bead since the agent last looked:
    status, dependencies added or removed, new comments, other fields. At the root (no
    agent), the main checkout's tracker is only re-read.
    """
    from exo_cli.adapters import beads
    from exo_cli.adapters.git import Git
    from exo_cli.ops import tasks

    repo = env.repo
    caller = env.caller
    record = None if caller.is_human else env.store.agent(caller.agent_id)
    worktree = Path(record.worktree) if record and record.worktree else repo.root
    in_main_checkout = worktree.resolve() == repo.root.resolve()
    source = tasks.open_repo_beads(env)
    files: list[str] = []
    branch_name: str | None = None
    if source.kind != "bd":
        branch_name = main_branch(env)
        found = beads.committed_jsonl(repo.root, branch_name)
        if found is not None and not in_main_checkout:
            rel, data = found
            if _sync_jsonl(env, caller.agent_id, worktree, rel, data, force):
                files.append(str(worktree / rel))
    bead_ref = record.bead if record else None
    if not bead_ref:
        return ReconstituteResult(
            agent=caller.agent_id,
            worktree=str(worktree),
            bead=None,
            source=source.kind,
            main_branch=branch_name,
            files_updated=files,
            context_file=None,
            context_updated=False,
            changes={},
        )
    full = beads.resolve_id(source, bead_ref)
    bead = source.get(full)
    targets = tasks.dependency_targets(source, bead)
    branch = (record.branch if record else None) or (Git(worktree).current_branch() if record is None else None) or full
    text = beads.render_context(
        bead,
        branch=branch,
        parent_branch=record.base_branch if record else None,
        dependencies_resolved=targets,
    )
    context_updated = tasks.write_context(env, worktree, text)
    old = tasks.load_bead_snapshot(env, caller.agent_id)
    changes = beads.diff_beads(old, bead)
    tasks.save_bead_snapshot(env, caller.agent_id, bead)
    return ReconstituteResult(
        agent=caller.agent_id,
        worktree=str(worktree),
        bead=full,
        source=source.kind,
        main_branch=branch_name,
        files_updated=files,
        context_file=str(tasks.context_path(worktree)),
        context_updated=context_updated,
        changes=changes,
    )
