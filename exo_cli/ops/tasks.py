"""Beads as exo tasks: open the repository's tracker, resolve, pick, claim and close beads.

The glue between the beads adapter (``exo_cli.adapters.beads``) and exo's operations (spawn,
complete, reconstitute, ``exo beads``). Everything takes the ``Env`` of the call, so the
tracker is always the repository's (the main checkout's ``.beads/``, or ``$BEADS_DIR``), seen
with the caller's ``PATH`` (``bd`` when installed). Nothing here prints.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exo_cli.adapters import beads
from exo_cli.adapters.beads import Bead, BeadsSource
from exo_cli.errors import InvalidInput, NotFound
from exo_cli.records import LIVE_STATUSES, ROOT
from exo_cli.validate import slugify

if TYPE_CHECKING:
    from exo_cli.env import Env

#: Where an agent's task context lives, relative to its worktree (git-ignored via info/exclude).
CONTEXT_FILE = ".exo/context.md"
#: The info/exclude pattern hiding exo's per-worktree folder.
EXO_EXCLUDE = "/.exo/"
#: kv key holding the last bead state an agent was shown (JSON of the bead's original object).
SNAPSHOT_KEY = "bead-snapshot:{agent}"
#: kv key holding the sha256 of the tracker file ``exo reconstitute`` last wrote into an agent's worktree.
SYNCED_KEY = "beads-synced:{agent}:{rel}"


def open_repo_beads(env: Env) -> BeadsSource:
    """Return the repository's beads source: ``bd`` when on the caller's PATH, else the JSONL.

    The tracker is ``$BEADS_DIR`` when set (spawned agents get it pointing at the main
    checkout's ``.beads/``), else ``<main checkout>/.beads``. Raises EnvironmentError_ with a
    hint when there is no tracker. Without ``bd``, exo's writes to a JSONL file git tracks are
    committed at once (``JsonlSource``), so they never leave the checkout modified.
    """
    return beads.open_beads(env.repo.root, env=env.environ, commit_writes=True)


def uncommitted_notes(source: BeadsSource) -> list[str]:
    """What the source says about tracker writes it could not commit (empty for ``bd``)."""
    return [n for n in getattr(source, "notes", ()) if "not committed" in n]


@dataclass(frozen=True)
class BeadTask:
    """A bead resolved for spawning: ids, branch-safe slug, the bead and its dependency targets."""

    id: str  # full id, e.g. "bd-4hj"
    short_id: str  # without the prefix, e.g. "4hj" (used in branch and folder names)
    slug: str  # validate.slugify(title)
    title: str
    bead: Bead
    #: The beads this bead depends on that exist (by id), for the context file.
    dependencies: dict[str, Bead] = field(default_factory=dict, compare=False, repr=False)

    def context(self, branch: str, parent_branch: str | None = None) -> str:
        """Return the agent's context markdown (its ``bead.md``) for ``branch``."""
        return beads.render_context(
            self.bead, branch=branch, parent_branch=parent_branch, dependencies_resolved=self.dependencies
        )

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-native view (the bead as ``Bead.to_dict()``)."""
        return {
            "id": self.id,
            "short_id": self.short_id,
            "slug": self.slug,
            "title": self.title,
            "bead": self.bead.to_dict(),
        }


def dependency_targets(source: BeadsSource, bead: Bead) -> dict[str, Bead]:
    """Return the existing targets of ``bead``'s dependencies, by id.

    ``bd show --json`` embeds each target issue in the dependency list, so those are used
    as they are; other targets are fetched from ``source``; dangling ones are left out.
    """
    found: dict[str, Bead] = {}
    for d in bead.raw.get("dependencies") or ():
        if isinstance(d, dict) and isinstance(d.get("id"), str) and "depends_on_id" not in d:
            with contextlib.suppress(ValueError):
                found[d["id"]] = Bead.from_dict(d)
    for dep in bead.dependencies:
        if dep.depends_on_id in found:
            continue
        try:
            found[dep.depends_on_id] = source.get(dep.depends_on_id)
        except (NotFound, InvalidInput):
            continue
    return found


def resolve_bead_task(
    env: Env, short_id: object, *, actor: str | None = None, source: BeadsSource | None = None
) -> BeadTask:
    """Return the BeadTask for a full or short bead id, if an agent may start on it.

    Validation: a bad id (path separator, ``..``, control or shell character)
    raises InvalidInput (-32002); an unknown bead NotFound (-32001) "Bead not found: <id>";
    a blocked one StateError (-32004) "Bead is blocked: <id>"; closed, deferred, pinned,
    claimed by someone other than ``actor`` and not-ready beads StateError too
    (``beads.check_spawnable``). ``source`` reuses an already opened tracker.
    """
    src = source if source is not None else open_repo_beads(env)
    bead = beads.check_spawnable(src, short_id, actor=actor)
    return BeadTask(
        id=bead.id,
        short_id=beads.short_id(bead.id, src.prefix),
        slug=slugify(bead.title or bead.id),
        title=bead.title,
        bead=bead,
        dependencies=dependency_targets(src, bead),
    )


def _id_forms(ids: Iterable[str | None], prefix: str | None) -> set[str]:
    """Return the ids with and without the prefix, so short and full ids compare equal."""
    out: set[str] = set()
    for i in ids:
        if not i:
            continue
        out.add(i)
        out.add(beads.short_id(i, prefix))
        if prefix and not i.startswith(prefix + "-"):
            out.add(f"{prefix}-{i}")
    return out


def live_owners(env: Env) -> dict[str, str]:
    """Return bead id -> agent id for the beads that live agents work on (ids as recorded).

    Liveness is checked first (``panes.alive_ids``: one batched multiplexer call), so an
    agent whose pane or process is gone no longer owns its bead.
    """
    if not env.has_state():
        return {}
    from exo_cli.ops import panes

    agents = [a for a in env.store.agents() if a.id != ROOT and not a.retired and a.status in LIVE_STATUSES]
    running = panes.alive_ids(env, agents)
    return {a.bead: a.id for a in agents if a.bead and a.id in running}


def pick_ready(
    env: Env, n: int, *, exclude_ids: Iterable[str] = (), source: BeadsSource | None = None
) -> list[Bead]:
    """Return the ``n`` best ready beads: priority ascending, then oldest first.

    Skips beads owned by a live agent (its recorded ``bead``, full or short id) and the ids
    in ``exclude_ids``. Fewer than ``n`` come back when fewer are ready. ``n`` below 1 is
    InvalidInput.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidInput(
            f"Invalid number of beads {n!r}: expected a whole number of at least 1", field="ready"
        )
    src = source if source is not None else open_repo_beads(env)
    ready = src.ready(sort="priority")  # first: with bd, the ready list names the prefix too
    prefix = src.prefix
    skip = _id_forms([*live_owners(env), *exclude_ids], prefix)
    picked: list[Bead] = []
    for bead in ready:
        if bead.id in skip or beads.short_id(bead.id, prefix) in skip:
            continue
        picked.append(bead)
        if len(picked) == n:
            break
    return picked


def claim(env: Env, bead_id: str, agent_name: str, *, source: BeadsSource | None = None) -> Bead:
    """Claim a bead for an agent: ``in_progress`` with ``assignee`` = ``agent_name``.

    Accepts a full or short id. Through ``bd update --claim`` when bd is installed, else a
    safe JSONL rewrite. StateError when someone else holds it; idempotent for the same agent.
    """
    src = source if source is not None else open_repo_beads(env)
    return src.claim(beads.resolve_id(src, bead_id), agent_name)


def close(
    env: Env,
    bead_id: str,
    *,
    reason: str | None = None,
    session: str | None = None,
    force: bool = False,
    source: BeadsSource | None = None,
) -> Bead:
    """Close a bead (``bd close`` or a JSONL rewrite), with ``reason`` and ``session``.

    Accepts a full or short id. Closing a closed bead changes nothing. StateError when the
    bead still has open blockers (unless ``force``).
    """
    src = source if source is not None else open_repo_beads(env)
    return src.close(beads.resolve_id(src, bead_id), reason=reason, session=session, force=force)


# --- the agent's context file and bead snapshots -----------------------------------------------


def context_path(worktree: str | os.PathLike[str]) -> Path:
    """Return ``<worktree>/.exo/context.md``."""
    return Path(worktree) / CONTEXT_FILE


def write_context(env: Env, worktree: str | os.PathLike[str], text: str) -> bool:
    """Write the agent's context file atomically; return True when its content changed.

    Makes sure ``/.exo/`` is in the repository's ``info/exclude`` (shared by all worktrees)
    so the file is never committed.
    """
    from exo_cli.adapters.git import add_exclude

    add_exclude(env.repo.common_dir, EXO_EXCLUDE)
    return write_if_changed(Path(worktree), CONTEXT_FILE, text.encode("utf-8"))


def write_if_changed(worktree: Path, rel: str, data: bytes) -> bool:
    """Replace ``worktree/rel`` with ``data`` atomically unless it already holds exactly that, never through a
    link (an agent's checkout is its own: a link there could point anywhere)."""
    from exo_cli.adapters.clones import write_inside
    from exo_cli.errors import StateError

    try:
        return write_inside(worktree, rel, data)
    except OSError as exc:
        raise StateError(f"Not writing {rel} in {worktree}: {exc.strerror or exc} (a folder on the way is a link, "
                         "or no folder)", hint=f"Look at {worktree / rel} and what leads to it; exo never writes "
                         "through a link in an agent's checkout.", path=str(worktree / rel)) from exc


def save_bead_snapshot(env: Env, agent: str, bead: Bead) -> None:
    """Remember ``bead`` as the state ``agent`` last saw (for ``exo reconstitute``'s diff)."""
    env.store.kv_set(
        SNAPSHOT_KEY.format(agent=agent), json.dumps(bead.raw or bead.to_dict(), ensure_ascii=False)
    )


def load_bead_snapshot(env: Env, agent: str) -> Bead | None:
    """Return the bead state ``agent`` last saw, or None."""
    if not env.has_state():
        return None
    text = env.store.kv_get(SNAPSHOT_KEY.format(agent=agent))
    if not text:
        return None
    try:
        return Bead.from_dict(json.loads(text))
    except ValueError:
        return None


# --- the tracker file exo reconstitute writes into a worktree ---------------------------------


def remember_synced(env: Env, agent: str, rel: str, data: bytes) -> None:
    """Record that exo wrote ``data`` to ``rel`` in ``agent``'s worktree (``exo reconstitute``)."""
    import hashlib

    env.store.kv_set(SYNCED_KEY.format(agent=agent, rel=rel), hashlib.sha256(data).hexdigest())


def synced_by_exo(env: Env, agent: str, rel: str, data: bytes) -> bool:
    """Whether ``data`` is exactly what exo last wrote to ``rel`` in ``agent``'s worktree."""
    import hashlib

    return env.store.kv_get(SYNCED_KEY.format(agent=agent, rel=rel)) == hashlib.sha256(data).hexdigest()


def synced_tracker_files(env: Env, agent: str, worktree: str | os.PathLike[str]) -> list[str]:
    """The tracker files of a worktree that differ from its HEAD only by exo's own copy (relative paths).

    ``exo reconstitute`` copies the main branch's beads file into an agent's worktree; that
    copy is exo's write, not the agent's work, and must never make ``exo complete`` (or the
    stop hook's rebase) see the worktree as modified. A file counts only while it holds
    exactly what exo wrote there (an edit by the agent makes it the agent's). Files are read
    without following a link; an agent's clone through exo's own reader.
    """
    with _reading(env, agent, worktree) as git:
        return _synced(env, agent, Path(worktree), git)


def _synced(env: Env, agent: str, wt: Path, git: Any) -> list[str]:
    from exo_cli.adapters.clonestore import read_inside

    if not env.has_state():
        return []
    meta = read_inside(wt, ".beads/metadata.json")
    found: list[str] = []
    for name in beads.jsonl_names(meta):
        rel = f".beads/{name}"
        data = read_inside(wt, rel, limit=1 << 30)
        if data is None:
            continue
        if data != git.blob("HEAD", rel) and synced_by_exo(env, agent, rel, data):
            found.append(rel)
    return found


@contextlib.contextmanager
def _reading(env: Env, agent: str, worktree: str | os.PathLike[str]) -> Iterator[Any]:
    """The git that reads ``agent``'s checkout (its clone through exo's reader)."""
    from exo_cli.adapters.git import Git
    from exo_cli.ops import checkout

    record = env.store.agent(agent) if env.has_state() else None
    if record is not None and checkout.is_clone(record):
        with checkout.reading(env, record) as (git, _synced):
            yield git
    else:
        yield Git(worktree)


def blob_at_head(env: Env, agent: str, worktree: str | os.PathLike[str], rel: str) -> bytes | None:
    """The bytes of ``rel`` at the HEAD of ``agent``'s checkout (its clone through exo's reader)."""
    with _reading(env, agent, worktree) as git:
        data: bytes | None = git.blob("HEAD", rel)
        return data


def restore_synced_tracker(env: Env, agent: str, worktree: str | os.PathLike[str]) -> list[str]:
    """Put exo's own tracker copies in a worktree back as its HEAD has them (``synced_tracker_files``)."""
    with _reading(env, agent, worktree) as git:
        found = _synced(env, agent, Path(worktree), git)
        if found and not git.restore_from_head(found).ok:
            return []
    return found
