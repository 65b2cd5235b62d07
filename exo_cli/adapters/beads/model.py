"""Beads as records: the vocabulary, the ``Bead`` model, ready/blocked rules and bead ids.

``Bead.from_dict`` reads a JSONL line or a ``bd --json`` object of any era; ``BeadGraph``
and ``compute_ready`` judge readiness as current ``bd ready`` does;
``check_bead_id``, ``infer_prefix`` and ``short_id`` handle ids. Pure: no files, no processes.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from exo_cli.errors import InvalidInput

# --- vocabulary: bd's statuses, issue types and dependency types ---------------------------

#: Statuses that neither block others nor count as open work.
INACTIVE_STATUSES = frozenset({"closed", "pinned"})
#: Built-in statuses of current bd (plus legacy ``tombstone``).
BUILTIN_STATUSES = frozenset(
    {"open", "in_progress", "blocked", "deferred", "closed", "pinned", "hooked", "tombstone"}
)
#: Built-in issue types (and the input aliases bd normalizes, in case an old file kept one).
BUILTIN_TYPES = frozenset(
    {
        "bug", "feature", "task", "epic", "chore", "decision", "message", "molecule", "gate",
        "spike", "story", "milestone", "event",
        "enhancement", "feat", "dec", "adr", "investigation", "timebox", "user-story",
    }
)  # fmt: skip
#: Types ``bd ready`` never lists (unless ``--type`` is given).
EXCLUDED_READY_TYPES = frozenset({"merge-request", "gate", "molecule", "message", "agent", "role", "rig"})
#: Dependency types that block (``AffectsReadyWork``); every other type is informational.
BLOCKING_DEP_TYPES = frozenset({"blocks", "conditional-blocks"})
PARENT_CHILD = "parent-child"
WAITS_FOR = "waits-for"

#: What ``bd close`` stores when no reason is given.
DEFAULT_CLOSE_REASON = "Closed"

JSONL_NAMES = ("issues.jsonl", "beads.jsonl")

# --- model ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dependency:
    """One edge stored on the dependent bead: this bead depends on ``depends_on_id``."""

    depends_on_id: str
    type: str = "blocks"
    #: The edge's metadata as stored (bd keeps a JSON string such as ``'{"gate":"any-children"}'``).
    metadata: Any = None

    @property
    def gate(self) -> str:
        """Return the waits-for gate: ``all-children`` (default) or ``any-children``."""
        meta = self.metadata
        if isinstance(meta, str):
            try:
                meta = json.loads(meta) if meta.strip() else None
            except ValueError:
                meta = None
        if isinstance(meta, dict) and meta.get("gate") == "any-children":
            return "any-children"
        return "all-children"

    def to_dict(self) -> dict[str, Any]:
        return {"depends_on_id": self.depends_on_id, "type": self.type, "metadata": self.metadata}


@dataclass(frozen=True)
class Comment:
    """A comment; ``id`` is a string whether the file stored an int (< 1.0) or a string."""

    id: str
    author: str
    text: str
    created_at: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "author": self.author, "text": self.text, "created_at": self.created_at}


@dataclass(frozen=True)
class Bead:
    """One bead (bd issue), with the fields exo uses and the whole original object in ``raw``."""

    id: str
    title: str = ""
    status: str = "open"
    priority: int = 2
    issue_type: str = "task"
    description: str = ""
    design: str = ""
    acceptance_criteria: str = ""
    notes: str = ""
    assignee: str = ""
    labels: tuple[str, ...] = ()
    created_at: str = ""
    updated_at: str = ""
    closed_at: str = ""
    close_reason: str = ""
    defer_until: str = ""
    pinned: bool = False
    ephemeral: bool = False
    dependencies: tuple[Dependency, ...] = ()
    comments: tuple[Comment, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Bead:
        """Build a Bead from a JSONL line or a ``bd --json`` object, tolerating any era.

        Dependencies may be stored records (``{depends_on_id, type}``) or ``bd show``'s
        embedded target issues (``{id, ..., dependency_type}``). Missing ``status`` means
        ``open`` and missing ``issue_type`` means ``task`` (bd's defaults).
        """
        if not isinstance(obj, Mapping) or not isinstance(obj.get("id"), str) or not obj["id"]:
            raise ValueError("a bead object needs a string 'id'")
        deps: list[Dependency] = []
        for d in obj.get("dependencies") or ():
            if not isinstance(d, Mapping):
                continue
            if isinstance(d.get("depends_on_id"), str):
                deps.append(Dependency(d["depends_on_id"], _s(d.get("type")) or "blocks", d.get("metadata")))
            elif isinstance(d.get("id"), str):  # bd show: the target issue + dependency_type
                deps.append(Dependency(d["id"], _s(d.get("dependency_type")) or "blocks", d.get("metadata")))
        comments: list[Comment] = []
        for c in obj.get("comments") or ():
            if isinstance(c, Mapping):
                cid = c.get("id")
                comments.append(
                    Comment(
                        id="" if cid is None else str(cid),
                        author=_s(c.get("author")),
                        text=_s(c.get("text")),
                        created_at=_s(c.get("created_at")),
                    )
                )
        labels = obj.get("labels") or ()
        return cls(
            id=obj["id"],
            title=_s(obj.get("title")),
            status=_s(obj.get("status")) or "open",
            priority=_int(obj.get("priority"), 2),
            issue_type=_s(obj.get("issue_type")) or "task",
            description=_s(obj.get("description")),
            design=_s(obj.get("design")),
            acceptance_criteria=_s(obj.get("acceptance_criteria")),
            notes=_s(obj.get("notes")),
            assignee=_s(obj.get("assignee")),
            labels=tuple(str(x) for x in labels) if isinstance(labels, list | tuple) else (),
            created_at=_s(obj.get("created_at")),
            updated_at=_s(obj.get("updated_at")),
            closed_at=_s(obj.get("closed_at")),
            close_reason=_s(obj.get("close_reason")),
            defer_until=_s(obj.get("defer_until")),
            pinned=obj.get("pinned") is True,
            ephemeral=obj.get("ephemeral") is True,
            dependencies=tuple(deps),
            comments=tuple(comments),
            raw=dict(obj),
        )

    @property
    def parent_ids(self) -> list[str]:
        """Return the ids this bead is a ``parent-child`` child of."""
        return [d.depends_on_id for d in self.dependencies if d.type == PARENT_CHILD]

    def to_dict(self, *, include_raw: bool = False) -> dict[str, Any]:
        """Return a JSON-native view (lists, dicts, strings, ints, bools)."""
        out: dict[str, Any] = {
            "id": self.id,
            "title": self.title,
            "status": self.status,
            "priority": self.priority,
            "issue_type": self.issue_type,
            "description": self.description,
            "design": self.design,
            "acceptance_criteria": self.acceptance_criteria,
            "notes": self.notes,
            "assignee": self.assignee,
            "labels": list(self.labels),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "closed_at": self.closed_at,
            "close_reason": self.close_reason,
            "defer_until": self.defer_until,
            "pinned": self.pinned,
            "ephemeral": self.ephemeral,
            "dependencies": [d.to_dict() for d in self.dependencies],
            "comments": [c.to_dict() for c in self.comments],
        }
        if include_raw:
            out["raw"] = dict(self.raw)
        return out


def _s(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any, default: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def parse_ts(value: str | None) -> datetime | None:
    """Parse a bd RFC3339 timestamp (``Z`` or offset, µs or ns) to an aware datetime."""
    if not value or not isinstance(value, str):
        return None
    text = value.strip()
    # Trim fractional seconds beyond microseconds for any Python that minds.
    text = re.sub(r"(\.\d{6})\d+", r"\1", text)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def now_rfc3339() -> str:
    """Return the current UTC time as RFC3339 with microseconds and ``Z``."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


# --- ready / blocked, as current bd decides them ------------------------------------------


class BeadGraph:
    """Blocked/ready judgement over a set of beads, as current ``bd ready`` decides it.

    Tombstones are treated as absent (a dependency on one is dangling); dangling targets
    never block; unknown dependency types never block; cycles never block. An issue type
    exo does not know (a ``types.custom`` value such as Gas Town's ``convoy``) is workable:
    bd accepted it when it stored the bead, and ``bd ready`` filters only its own list of
    never-ready types, so readiness needs no ``config.yaml``.
    """

    def __init__(self, beads: Iterable[Bead], *, now: datetime | None = None) -> None:
        self.by_id: dict[str, Bead] = {}
        for b in beads:
            if b.status != "tombstone":
                self.by_id[b.id] = b
        self.now = now or datetime.now(UTC)
        self.children: dict[str, list[str]] = {}
        for b in self.by_id.values():
            for pid in b.parent_ids:
                self.children.setdefault(pid, []).append(b.id)
        self._memo: dict[str, list[str]] = {}

    def blockers(self, bead_id: str) -> list[str]:
        """Return the ids that block ``bead_id`` (empty when it is not blocked).

        ``blocks``/``conditional-blocks`` targets that are not closed/pinned; the blocked
        parent of a ``parent-child`` edge (inherited downward, transitively); the target of a
        ``waits-for`` edge whose children gate is not satisfied.
        """
        return list(self._blockers(bead_id, frozenset()))

    def is_blocked(self, bead_id: str) -> bool:
        """Return True when ``bead_id`` is blocked (``is_blocked = 1`` in bd)."""
        return bool(self._blockers(bead_id, frozenset()))

    def _blockers(self, bead_id: str, seen: frozenset[str]) -> list[str]:
        if bead_id in self._memo:
            return self._memo[bead_id]
        bead = self.by_id.get(bead_id)
        if bead is None or bead_id in seen or bead.status in INACTIVE_STATUSES:
            return []
        seen = seen | {bead_id}
        found: list[str] = []
        for dep in bead.dependencies:
            target = self.by_id.get(dep.depends_on_id)
            if target is None:
                continue  # dangling (or tombstoned): ignored, as bd does
            if dep.type in BLOCKING_DEP_TYPES:
                if target.status not in INACTIVE_STATUSES:
                    found.append(target.id)
            elif dep.type == PARENT_CHILD:
                if self._blockers(target.id, seen):
                    found.append(target.id)
            elif dep.type == WAITS_FOR:
                kids = [self.by_id[k] for k in self.children.get(target.id, ())]
                open_kids = [k for k in kids if k.status not in INACTIVE_STATUSES]
                if dep.gate == "any-children":
                    if kids and len(open_kids) == len(kids):
                        found.append(target.id)
                elif open_kids:
                    found.append(target.id)
        # Only a complete (cycle-free) answer is memoized.
        if not seen - {bead_id}:
            self._memo[bead_id] = found
        return found

    def is_deferred(self, bead: Bead) -> bool:
        """Return True when ``bead`` is deferred (status or ``defer_until`` in the future)."""
        if bead.status == "deferred":
            return True
        if bead.defer_until:
            when = parse_ts(bead.defer_until)
            return when is None or when > self.now  # unparsable: stay hidden
        return False

    def why_not_ready(self, bead: Bead) -> str | None:
        """Return why ``bead`` is not ready (a short phrase), or None when it is ready."""
        if bead.status != "open":
            return f"status is {bead.status}"
        if bead.pinned:
            return "pinned"
        if bead.ephemeral:
            return "ephemeral"
        if bead.issue_type in EXCLUDED_READY_TYPES:
            return f"type {bead.issue_type} is never ready"
        if self.is_deferred(bead):
            return f"deferred until {bead.defer_until}" if bead.defer_until else "deferred"
        for pid in bead.parent_ids:
            parent = self.by_id.get(pid)
            if parent is not None and self.is_deferred(parent):
                return f"parent {pid} is deferred"
        if self.is_blocked(bead.id):
            return "blocked by " + ", ".join(self.blockers(bead.id))
        return None

    def ready(self, *, sort: str | None = "priority") -> list[Bead]:
        """Return the ready beads, sorted (see ``sort_beads``)."""
        out = [b for b in self.by_id.values() if self.why_not_ready(b) is None]
        return sort_beads(out, sort)


def compute_ready(beads: Iterable[Bead], *, now: datetime | None = None, sort: str | None = "priority") -> list[Bead]:
    """Return the beads current ``bd ready`` would list (no limit)."""
    return BeadGraph(beads, now=now).ready(sort=sort)


_FAR_FUTURE = datetime.max.replace(tzinfo=UTC)


def sort_beads(beads: Iterable[Bead], sort: str | None = "priority") -> list[Bead]:
    """Sort beads: ``priority`` = priority ASC, created_at ASC (oldest first), id; ``oldest``
    = created_at ASC, id; None keeps the given order.
    """
    items = list(beads)
    if sort is None:
        return items

    def age(b: Bead) -> datetime:
        return parse_ts(b.created_at) or _FAR_FUTURE

    if sort == "priority":
        return sorted(items, key=lambda b: (b.priority, age(b), b.id))
    if sort == "oldest":
        return sorted(items, key=lambda b: (age(b), b.id))
    raise InvalidInput(f"Invalid sort {sort!r}: use 'priority' or 'oldest'", field="sort")


# --- ids -----------------------------------------------------------------------------------

_ID_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_ID = 200


def check_bead_id(value: object) -> str:
    """Return ``value`` if it is a safe bead id; raise InvalidInput ("Invalid bead ID ...").

    Rejects path separators, ``..``, control characters, shell metacharacters, whitespace and
    a leading ``-`` (it would read as a flag to ``bd``).
    """
    if not isinstance(value, str):
        raise InvalidInput("Invalid bead ID: expected a string", field="bead_id")
    shown = value if len(value) <= 80 else value[:77] + "..."
    why: str | None = None
    if not value:
        why = "it is empty"
    elif "/" in value or "\\" in value:
        why = "it contains a path separator"
    elif ".." in value:
        why = "it contains '..'"
    elif any(unicodedata.category(c).startswith("C") for c in value):
        why = "it contains a control character"
    elif value.startswith("-"):
        why = "it starts with '-'"
    elif len(value) > MAX_ID:
        why = f"it is longer than {MAX_ID} characters"
    elif not _ID_OK.match(value):
        why = "it contains a character that is not allowed (shell metacharacter or space)"
    if why:
        raise InvalidInput(
            f"Invalid bead ID {shown!r}: {why}",
            hint="Use an id such as 'bd-4hj', '4hj' or 'bd-4hj.1' (letters, digits, '.', '_', '-').",
            field="bead_id",
        )
    return value


def infer_prefix(ids: Iterable[str]) -> str | None:
    """Return the most common id prefix, splitting each id on its LAST '-'."""
    counts: Counter[str] = Counter()
    for i in ids:
        base = i.split(".", 1)[0]  # hierarchical children share the parent's prefix
        if "-" in base:
            pre = base.rsplit("-", 1)[0]
            if pre.endswith("-wisp"):  # Gas Town wisps: <prefix>-wisp-<hash>
                pre = pre[: -len("-wisp")]
            counts[pre] += 1
    return counts.most_common(1)[0][0] if counts else None


def short_id(full_id: str, prefix: str | None) -> str:
    """Return ``full_id`` without ``<prefix>-`` (``bd-4hj`` -> ``4hj``)."""
    if prefix and full_id.startswith(prefix + "-"):
        return full_id[len(prefix) + 1 :]
    return full_id
