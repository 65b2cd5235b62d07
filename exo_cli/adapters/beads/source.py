"""The interface every beads source implements, and the checks made through it.

``BeadsSource`` is what exo needs of a tracker (read, ready, blockers, claim, close);
``resolve_id`` and ``check_spawnable`` answer "which bead is this" and "may an agent start
on it" through any source. The config.yaml readers serve both sources.
"""

from __future__ import annotations

import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from exo_cli.adapters.beads.model import EXCLUDED_READY_TYPES, Bead, BeadGraph, check_bead_id
from exo_cli.errors import InvalidInput, NotFound, StateError


class BeadsSource(ABC):
    """Where beads come from and where claims and closes go."""

    kind: str = "?"

    @abstractmethod
    def all(self) -> list[Bead]:
        """Return every bead, closed ones included (tombstones too, for JSONL)."""

    @abstractmethod
    def get(self, bead_id: str) -> Bead:
        """Return one bead by full id; raise NotFound "Bead not found: <id>"."""

    @abstractmethod
    def ready(self, *, sort: str | None = "priority") -> list[Bead]:
        """Return all ready beads (no limit), priority ASC then oldest first by default."""

    @abstractmethod
    def blockers(self, bead_id: str) -> list[str]:
        """Return the ids blocking ``bead_id`` (empty when it is not blocked)."""

    @abstractmethod
    def claim(self, bead_id: str, actor: str) -> Bead:
        """Set ``in_progress`` + ``assignee=actor`` atomically; StateError if held by another."""

    @abstractmethod
    def close(
        self, bead_id: str, reason: str | None = None, session: str | None = None, *, force: bool = False
    ) -> Bead:
        """Close the bead (``closed_at``, ``close_reason``, ``closed_by_session``)."""

    @property
    @abstractmethod
    def prefix(self) -> str | None:
        """Return the issue prefix (``issue-prefix`` in config.yaml, else inferred)."""

    def is_blocked(self, bead_id: str) -> bool:
        """Return True when the bead has open blockers."""
        return bool(self.blockers(bead_id))

    @abstractmethod
    def why_not_ready(self, bead_id: str) -> str | None:
        """Return None when ``bd ready`` would list the bead, else a short reason."""

    def exists(self, bead_id: str) -> bool:
        """Return True when a bead with exactly this id exists."""
        try:
            self.get(bead_id)
        except NotFound:
            return False
        return True

    def prefetch(self, bead_ids: Iterable[str]) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """Read these beads (full or short ids) ahead, in as few tracker calls as the source allows."""


def read_yaml_config(beads_dir: Path | None) -> dict[str, Any]:
    """Return ``config.yaml`` of ``beads_dir`` as a dict (empty when absent or unreadable)."""
    if beads_dir is None:
        return {}
    path = beads_dir / "config.yaml"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def config_prefix(cfg: Mapping[str, Any]) -> str | None:
    """Return the ``issue-prefix`` config.yaml sets, or None."""
    for key in ("issue-prefix", "issue_prefix"):
        val = cfg.get(key)
        if isinstance(val, str) and val.strip():
            return val.strip()
    return None


def resolve_id(source: BeadsSource, short: object) -> str:
    """Return the full id of an existing bead given a full or short id.

    Validates first (InvalidInput, -32002). ``4hj`` becomes ``<prefix>-4hj`` when the prefix
    is missing; full and hierarchical ids (``herdctl-08c.1``) are accepted as is.
    Raises NotFound (-32001) "Bead not found: <id>".
    """
    value = check_bead_id(short)
    prefix = source.prefix
    candidates: list[str] = []
    if prefix and not value.startswith(prefix + "-"):
        candidates.append(f"{prefix}-{value}")
    candidates.append(value)
    for cand in candidates:
        if source.exists(cand):
            return cand
    raise NotFound(
        f"Bead not found: {candidates[0]}",
        hint="List beads with `bd list` (or `bd ready`).",
        bead_id=candidates[0],
    )


def check_spawnable(source: BeadsSource, bead_id: object, *, actor: str | None = None) -> Bead:
    """Return the bead if an agent may start on it; else raise StateError saying why.

    Resolves the id (InvalidInput / NotFound). Blocked (stored status ``blocked`` or open
    blockers) raises exactly "Bead is blocked: <full-id>". A bead ``in_progress``/``hooked``
    is refused unless ``actor`` is its assignee (resuming one's own claim). Closed, deleted,
    deferred, pinned and never-workable types (gate, molecule, ...) are refused too, and so
    is an open bead ``bd ready`` would not list ("Bead is not ready (<why>): <id>").
    """
    full = resolve_id(source, bead_id)
    bead = source.get(full)
    if bead.status == "closed":
        raise StateError(f"Bead is closed: {full}", hint="Reopen it with `bd reopen` first.", bead_id=full)
    if bead.status == "tombstone":
        raise StateError(f"Bead is deleted: {full}", bead_id=full)
    if bead.status == "blocked" or source.is_blocked(full):
        blockers = source.blockers(full)
        raise StateError(
            f"Bead is blocked: {full}",
            hint=f"Check its blockers with `bd show {full}`; close them first.",
            bead_id=full,
            blockers=blockers,
        )
    if bead.status in ("in_progress", "hooked"):
        if actor and bead.assignee == actor:
            return bead
        who = bead.assignee or "nobody"
        raise StateError(
            f"Bead is already {bead.status} (assignee: {who}): {full}",
            hint="Another agent holds it; pick another bead or release it with `bd update --status open`.",
            bead_id=full,
            status=bead.status,
            assignee=bead.assignee,
        )
    if bead.status == "deferred" or (bead.defer_until and BeadGraph([bead]).is_deferred(bead)):
        raise StateError(f"Bead is deferred: {full}", bead_id=full, defer_until=bead.defer_until)
    if bead.status == "pinned" or bead.pinned:
        raise StateError(f"Bead is pinned: {full}", bead_id=full)
    if bead.status != "open":
        raise StateError(
            f"Bead is not open (status: {bead.status}): {full}", bead_id=full, status=bead.status
        )
    if bead.issue_type in EXCLUDED_READY_TYPES:
        raise StateError(
            f"Bead of type {bead.issue_type} is not workable: {full}",
            bead_id=full,
            issue_type=bead.issue_type,
        )
    why = source.why_not_ready(full)  # children of deferred parents, ephemeral...
    if why:
        raise StateError(f"Bead is not ready ({why}): {full}", bead_id=full, reason=why)
    return bead


def check_actor(actor: object) -> str:
    """Return ``actor`` if it can be a bead's assignee; raise InvalidInput otherwise."""
    if not isinstance(actor, str) or not actor.strip():
        raise InvalidInput("Invalid actor: expected a non-empty string", field="actor")
    if any(unicodedata.category(c).startswith("C") for c in actor) or len(actor) > 200:
        raise InvalidInput(f"Invalid actor {actor[:80]!r}: control character or too long", field="actor")
    return actor
