"""The beads (``bd``) task-tracker adapter: read, judge readiness, claim and close beads.

Two sources sit behind one interface (``BeadsSource``):

* ``BdSource`` drives the ``bd`` CLI with ``--json`` (the live state; formats.md 1.5);
* ``JsonlSource`` reads the JSONL export in ``.beads/`` (``issues.jsonl``, legacy
  ``beads.jsonl`` or the file ``metadata.json`` names) and rewrites it safely when ``bd`` is
  not installed.

``open_beads`` picks one. Ready/blocked follow current ``bd ready`` (formats.md 1.6) and are
computed by ``compute_ready``/``BeadGraph`` for the JSONL source. Nothing here prints.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import threading
import unicodedata
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from exo_cli.adapters.files import atomic_write, locked
from exo_cli.adapters.proc import run
from exo_cli.errors import (
    EnvironmentError_,
    ExoError,
    ExternalFailure,
    InvalidInput,
    NotFound,
    StateError,
    external,
)

# --- vocabulary (formats.md 1.2, 1.3, 1.6) -------------------------------------------------

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


# --- ready / blocked (formats.md 1.6, current bd) ------------------------------------------


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


def resolve_id(source: BeadsSource, short: object) -> str:
    """Return the full id of an existing bead given a full or short id.

    Validates first (InvalidInput, -32002). ``4hj`` becomes ``<prefix>-4hj`` when the prefix
    is missing (seed 000); full and hierarchical ids (``herdctl-08c.1``) are accepted as is.
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


# --- sources -------------------------------------------------------------------------------


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


def _read_yaml_config(beads_dir: Path | None) -> dict[str, Any]:
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


def _config_prefix(cfg: Mapping[str, Any]) -> str | None:
    for key in ("issue-prefix", "issue_prefix"):
        val = cfg.get(key)
        if isinstance(val, str) and val.strip():
            return val.strip()
    return None


def jsonl_names(metadata: bytes | None) -> list[str]:
    """The JSONL names to look for in ``.beads/``, in order: the one ``metadata.json`` exports, then the defaults."""
    names: list[str] = []
    with contextlib.suppress(ValueError):
        data = json.loads(metadata) if metadata else None
        exp = data.get("jsonl_export") if isinstance(data, dict) else None
        if isinstance(exp, str) and exp and "/" not in exp and "\\" not in exp and exp != "..":
            names.append(exp)
    return names + [n for n in JSONL_NAMES if n not in names]


def committed_jsonl(cwd: Path, rev: str) -> tuple[str, bytes] | None:
    """Return (path, bytes) of the beads JSONL committed on ``rev``, as JsonlSource picks it."""
    from exo_cli.adapters.git import Git

    git = Git(cwd)
    for name in jsonl_names(git.blob(rev, ".beads/metadata.json")):
        blob = git.blob(rev, f".beads/{name}")
        if blob is not None:
            return f".beads/{name}", blob
    return None


class JsonlSource(BeadsSource):
    """Beads read from (and written back to) the JSONL file in a ``.beads`` directory.

    Writes (claim, close) hold a lock on the ``.beads`` folder itself, so nothing (no lock or
    temporary file) is left beside the file. With ``commit_writes``, a write to a file that git
    tracks and that had no change of its own is committed at once as its own commit on the
    branch checked out there (``git commit --only``: the user's staged changes stay staged and
    out of it), the way ``bd sync`` kept the tracker in git, so the checkout stays clean for
    merges and ``exo complete``. ``notes`` says what happened to each write.
    """

    kind = "jsonl"

    def __init__(self, beads_dir: str | os.PathLike[str], *, now: Callable[[], datetime] | None = None,
                 commit_writes: bool = False, environ: Mapping[str, str] | None = None):
        self.beads_dir = Path(beads_dir)
        self.path = self._find_jsonl()
        self._now = now
        self._cache_key: tuple[int, int, int] | None = None
        self._cache: dict[str, Bead] = {}
        self._config: dict[str, Any] | None = None
        self.commit_writes = commit_writes
        self.environ = environ
        self.notes: list[str] = []

    def _find_jsonl(self) -> Path:
        meta: bytes | None = None
        with contextlib.suppress(OSError):
            meta = (self.beads_dir / "metadata.json").read_bytes()
        names = jsonl_names(meta)
        for n in names:
            if (self.beads_dir / n).is_file():
                return self.beads_dir / n
        raise EnvironmentError_(
            f"No beads JSONL file in {self.beads_dir} (looked for {', '.join(names)})",
            hint="Install bd (the live database needs it), or export with `bd export -o .beads/issues.jsonl`.",
            beads_dir=str(self.beads_dir),
        )

    @property
    def config(self) -> dict[str, Any]:
        """Return ``config.yaml`` as a dict (empty when absent or unreadable)."""
        if self._config is None:
            self._config = _read_yaml_config(self.beads_dir)
        return self._config

    def now(self) -> datetime:
        return self._now() if self._now else datetime.now(UTC)

    def _load(self) -> dict[str, Bead]:
        try:
            st = self.path.stat()
        except FileNotFoundError as exc:
            raise EnvironmentError_(f"Beads file vanished: {self.path}") from exc
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key != self._cache_key:
            self._cache = {b.id: b for b in _parse_jsonl(self.path.read_bytes())}
            self._cache_key = key
        return self._cache

    def all(self) -> list[Bead]:
        return list(self._load().values())

    def get(self, bead_id: str) -> Bead:
        bead = self._load().get(bead_id)
        if bead is None:
            raise NotFound(f"Bead not found: {bead_id}", bead_id=bead_id)
        return bead

    def exists(self, bead_id: str) -> bool:
        return bead_id in self._load()

    def graph(self) -> BeadGraph:
        """Return a BeadGraph over the current file contents."""
        return BeadGraph(self.all(), now=self.now())

    def ready(self, *, sort: str | None = "priority") -> list[Bead]:
        return self.graph().ready(sort=sort)

    def blockers(self, bead_id: str) -> list[str]:
        self.get(bead_id)
        return self.graph().blockers(bead_id)

    def why_not_ready(self, bead_id: str) -> str | None:
        return self.graph().why_not_ready(self.get(bead_id))

    @property
    def prefix(self) -> str | None:
        beads = self._load().values()
        return _config_prefix(self.config) or infer_prefix(b.id for b in beads if not b.ephemeral)

    # --- writes ---

    def claim(self, bead_id: str, actor: str) -> Bead:
        actor = _check_actor(actor)

        def mutate(obj: dict[str, Any], graph: Callable[[], BeadGraph]) -> bool:
            status = obj.get("status") or "open"
            if status in ("closed", "tombstone"):
                raise StateError(
                    f"Bead is {'deleted' if status == 'tombstone' else 'closed'}: {bead_id}", bead_id=bead_id
                )
            held = obj.get("assignee") or ""
            if held and held != actor:
                raise StateError(
                    f"Bead is already claimed by {held}: {bead_id}", bead_id=bead_id, assignee=held
                )
            if status == "in_progress" and held == actor:
                return False  # idempotent for the same actor
            _set_status(obj, "in_progress")
            obj["assignee"] = actor
            return True

        return self._rewrite(bead_id, mutate, f"beads: {bead_id} claimed by {actor}")

    def close(
        self, bead_id: str, reason: str | None = None, session: str | None = None, *, force: bool = False
    ) -> Bead:
        def mutate(obj: dict[str, Any], graph: Callable[[], BeadGraph]) -> bool:
            status = obj.get("status") or "open"
            if status == "tombstone":
                raise StateError(f"Bead is deleted: {bead_id}", bead_id=bead_id)
            if status == "closed":
                return False
            if not force:
                g = graph()
                blockers = g.blockers(bead_id)
                if blockers:
                    raise StateError(
                        f"cannot close {bead_id}: blocked by open issues [{', '.join(blockers)}]",
                        hint="Close the blockers first, or pass force.",
                        bead_id=bead_id,
                        blockers=blockers,
                    )
                if obj.get("issue_type") == "epic":
                    open_kids = [
                        k for k in g.children.get(bead_id, ()) if g.by_id[k].status not in INACTIVE_STATUSES
                    ]
                    if open_kids:
                        raise StateError(
                            f"cannot close epic {bead_id}: it has open children [{', '.join(open_kids)}]",
                            bead_id=bead_id,
                            children=open_kids,
                        )
            _set_status(obj, "closed")
            obj["close_reason"] = reason if reason else DEFAULT_CLOSE_REASON
            if session:
                obj["closed_by_session"] = session
            return True

        return self._rewrite(bead_id, mutate, f"beads: {bead_id} closed" + (f" ({reason})" if reason else ""))

    def _rewrite(
        self, bead_id: str, mutate: Callable[[dict[str, Any], Callable[[], BeadGraph]], bool], message: str
    ) -> Bead:
        """Change one line of the JSONL under an exclusive lock and replace the file atomically.

        Every other line stays byte-identical and in place; the target line keeps its keys,
        their order and any field exo does not know; only it is re-serialized. The lock is the
        ``.beads`` folder's own (no lock file); with ``commit_writes`` the change is committed
        (see the class).
        """
        check_bead_id(bead_id)
        with locked(self.beads_dir, own_inode=True) as lock:
            if not lock.held:
                raise EnvironmentError_(f"Beads folder vanished: {self.beads_dir}")
            git = self._git()
            state = git.path_state(self.path.name) if git is not None else "none"
            data = self.path.read_bytes()  # re-read under the lock
            lines = data.splitlines(keepends=True)
            needle = json.dumps(bead_id).encode("utf-8")
            index = -1
            obj: dict[str, Any] | None = None
            for i, line in enumerate(lines):
                if needle not in line:
                    continue
                parsed = _parse_line(line)
                if parsed is not None and parsed.get("id") == bead_id:
                    index, obj = i, parsed  # the last occurrence wins, as on read
            if obj is None:
                raise NotFound(f"Bead not found: {bead_id}", bead_id=bead_id)

            def graph() -> BeadGraph:
                return BeadGraph(_parse_jsonl(data), now=self.now())

            if not mutate(obj, graph):
                return Bead.from_dict(obj)
            obj["updated_at"] = now_rfc3339()
            line = lines[index]
            body = line.rstrip(b"\r\n")
            ending = line[len(body) :]
            lines[index] = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + ending
            atomic_write(self.path, b"".join(lines))  # durable, keeps the file's mode
            if git is not None:
                self._commit(git, state, message)
        self._cache_key = None
        return Bead.from_dict(obj)

    def _git(self) -> Any:
        if not self.commit_writes:
            return None
        from exo_cli.adapters.git import Git

        return Git(self.beads_dir, environ=self.environ)

    def _commit(self, git: Any, state: str, message: str) -> None:
        """Commit the file just written when git tracked it unchanged and a branch is checked out."""
        rel = f"{self.beads_dir.name}/{self.path.name}"
        if state == "changed":
            self.notes.append(f"{rel} is not committed: it had uncommitted changes before exo wrote to it")
            return
        if state != "clean":
            return  # not in git (untracked, ignored, or outside a work tree): nothing to keep clean
        if git.current_branch() is None:
            self.notes.append(f"{rel} is not committed: no branch is checked out (detached HEAD) in {git.toplevel()}")
            return
        proc = _commit_retrying(git, self.path.name, message)
        if proc.ok:
            self.notes.append(f"committed {rel}: {message}")
        else:
            why = (proc.stderr or proc.stdout).strip().splitlines()
            self.notes.append(f"{rel} is not committed: git commit failed ({why[-1] if why else proc.returncode})")


def _commit_retrying(git: Any, name: str, message: str, attempts: int = 5) -> Any:
    """``git commit --only`` of one file: again while another git command holds the index; as ``exo`` without an identity."""
    import time

    config: list[str] = []
    for i in range(attempts):
        proc = git.commit_only([name], message, config=config)
        text = proc.stderr + proc.stdout
        if proc.ok or i + 1 == attempts:
            return proc
        if not config and ("tell me who you are" in text or "auto-detect" in text or "empty ident" in text):
            config = ["-c", "user.name=exo", "-c", "user.email=exo@localhost"]
        elif "index.lock" in text:
            time.sleep(0.1 * (i + 1))
        else:
            return proc
    return proc


def _set_status(obj: dict[str, Any], status: str) -> None:
    """Set ``status`` keeping bd's invariant: ``closed_at`` set iff status is closed."""
    obj["status"] = status
    if status == "closed":
        obj["closed_at"] = now_rfc3339()
    else:
        obj.pop("closed_at", None)


def _check_actor(actor: object) -> str:
    if not isinstance(actor, str) or not actor.strip():
        raise InvalidInput("Invalid actor: expected a non-empty string", field="actor")
    if any(unicodedata.category(c).startswith("C") for c in actor) or len(actor) > 200:
        raise InvalidInput(f"Invalid actor {actor[:80]!r}: control character or too long", field="actor")
    return actor


def _parse_line(line: bytes) -> dict[str, Any] | None:
    text = line.strip()
    if not text:
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _parse_jsonl(data: bytes) -> list[Bead]:
    """Parse JSONL bytes into beads; unparsable, non-issue and id-less lines are skipped."""
    out: dict[str, Bead] = {}
    for line in data.splitlines():
        obj = _parse_line(line)
        if obj is None or obj.get("_type", "issue") != "issue":
            continue
        try:
            bead = Bead.from_dict(obj)
        except ValueError:
            continue
        out.pop(bead.id, None)
        out[bead.id] = bead  # a later line for the same id replaces the earlier one
    return list(out.values())


# --- bd CLI --------------------------------------------------------------------------------


def unwrap_json(payload: Any) -> Any:
    """Strip bd's envelopes: ``{"data": X}`` -> X, ``{"items": [...]}`` -> [...]."""
    for _ in range(3):
        if isinstance(payload, dict) and "error" not in payload:
            if "data" in payload:
                payload = payload["data"]
                continue
            if isinstance(payload.get("items"), list):
                payload = payload["items"]
                continue
        break
    return payload


def _as_issue_list(payload: Any, *keys: str) -> list[dict[str, Any]]:
    payload = unwrap_json(payload)
    if isinstance(payload, dict):
        for k in keys:
            if k in payload:
                return _as_issue_list(payload[k])
        return [payload] if "id" in payload else []
    if isinstance(payload, list):
        return [x for x in payload if isinstance(x, dict) and isinstance(x.get("id"), str)]
    return []


def _stderr_error(stderr: str) -> tuple[str, str]:
    """Return (message, code) from bd's JSON error on stderr, else the last stderr line."""
    text = stderr.strip()
    candidates = [text] + [ln for ln in reversed(text.splitlines()) if ln.strip().startswith("{")]
    for cand in candidates:
        try:
            obj = json.loads(cand)
        except ValueError:
            continue
        if isinstance(obj, dict) and "error" in obj:
            err = obj["error"]
            if isinstance(err, dict):
                return str(err.get("message", "")), str(err.get("code", obj.get("code", "")))
            return str(err), str(obj.get("code", ""))
    lines = text.splitlines()
    return (lines[-1] if lines else ""), ""


class BdSource(BeadsSource):
    """Beads through the ``bd`` CLI (always ``--json``; stdout parsed, stderr for errors).

    One source is one look at the tracker: what it read is kept (the ready list, ``bd
    blocked``, each bead shown), so a spawn of N beads costs one ``bd ready``, one ``bd show``
    of all of them (``prefetch``) and one ``bd update --claim`` per bead (each claim carries
    its own actor, so claims cannot share a call). A claim updates what is kept; a close
    forgets it (closing can unblock others). Open a new source to see later changes.
    """

    kind = "bd"

    def __init__(
        self,
        bd_path: str,
        cwd: str | os.PathLike[str],
        env: Mapping[str, str] | None = None,
        *,
        beads_dir: str | os.PathLike[str] | None = None,
        timeout: float = 60,
    ) -> None:
        self.bd_path = bd_path
        self.cwd = Path(cwd)
        self.env = dict(env if env is not None else os.environ)
        self.beads_dir = Path(beads_dir) if beads_dir else None
        self.timeout = timeout
        self._prefix: str | None = None
        self._shown: dict[str, Bead] = {}
        self._missing: set[str] = set()
        self._ready: list[Bead] | None = None
        self._blocked: list[dict[str, Any]] | None = None
        self._lock = threading.Lock()  # a spawn's tasks share one source from several threads

    def _run(self, args: Sequence[str], *, bead_id: str | None = None, actor: str | None = None) -> Any:
        env = dict(self.env)
        if actor is not None:
            env["BEADS_ACTOR"] = actor
        argv = [self.bd_path, *args, "--json"]
        proc = run(argv, what=f"bd {args[0]}", cwd=self.cwd, env=env, check=False, timeout=self.timeout)
        if proc.returncode != 0:
            raise self._error(args[0], proc, bead_id)
        try:
            return json.loads(proc.stdout) if proc.stdout.strip() else None
        except ValueError as exc:
            raise ExternalFailure(
                f"bd {args[0]} printed output that is not JSON",
                command=argv,
                stdout=proc.stdout[-2000:],
            ) from exc

    def _error(self, cmd: str, proc: Any, bead_id: str | None) -> ExoError:
        message, code = _stderr_error(proc.stderr or "")
        low = message.lower()
        if bead_id and (code == "not_found" or "not found" in low or "no issue" in low):
            return NotFound(f"Bead not found: {bead_id}", bead_id=bead_id, detail=message)
        if (
            bead_id
            and cmd in ("update", "close")
            and (
                "claimed" in low
                or "cannot close" in low
                or "already" in low
                or "blocked" in low
                or "pinned" in low
                or code in ("conflict", "already_claimed", "blocked")
            )
        ):
            return StateError(f"bd {cmd} {bead_id} refused: {message}", bead_id=bead_id, code=code)
        return external(f"bd {cmd}", proc, code=code)

    def all(self) -> list[Bead]:
        return [Bead.from_dict(o) for o in _as_issue_list(self._run(["list", "--all", "--limit", "0"]))]

    def prefetch(self, bead_ids: Iterable[str]) -> None:
        """``bd show`` every bead not read yet in one call (short ids get the prefix), and ``bd ready``.

        Best effort: when the batch fails (an unknown id makes bd refuse it), each bead is
        shown on its own later, which names the one that is missing.
        """
        ids = [check_bead_id(raw) for raw in bead_ids]
        self.ready(sort=None)
        prefix = self.prefix if ids else None  # after the ready list: it names the prefix without bd list
        wanted: list[str] = []
        for raw in ids:
            full = f"{prefix}-{raw}" if prefix and not raw.startswith(prefix + "-") else raw
            with self._lock:
                if full not in self._shown and full not in wanted:
                    wanted.append(full)
        if wanted:
            with contextlib.suppress(ExoError):
                self._show(wanted)

    def _show(self, ids: list[str]) -> list[Bead]:
        items = _as_issue_list(self._run(["show", *ids], bead_id=ids[0] if len(ids) == 1 else None))
        beads = [Bead.from_dict(o) for o in items]
        with self._lock:
            for bead in beads:
                self._shown[bead.id] = bead
        return beads

    def get(self, bead_id: str) -> Bead:
        check_bead_id(bead_id)
        with self._lock:
            if bead_id in self._shown:
                return self._shown[bead_id]
            if bead_id in self._missing:
                raise NotFound(f"Bead not found: {bead_id}", bead_id=bead_id)
        try:
            items = self._show([bead_id])
        except NotFound:
            with self._lock:
                self._missing.add(bead_id)
            raise
        for b in items:
            if b.id == bead_id:
                return b
        if items:  # bd accepted a partial id: the answer names the full one
            return items[0]
        raise NotFound(f"Bead not found: {bead_id}", bead_id=bead_id)

    def exists(self, bead_id: str) -> bool:
        try:
            return self.get(bead_id).id == bead_id
        except NotFound:
            return False

    def ready(self, *, sort: str | None = "priority") -> list[Bead]:
        with self._lock:
            cached = self._ready
        if cached is None:
            items = _as_issue_list(self._run(["ready", "--limit", "0"]), "ready")
            cached = [Bead.from_dict(o) for o in items]
            with self._lock:
                self._ready = cached
        return sort_beads(cached, sort)

    def _is_ready(self, bead_id: str) -> bool:
        return any(b.id == bead_id for b in self.ready(sort=None))

    def _blocked_entry(self, bead_id: str) -> dict[str, Any] | None:
        check_bead_id(bead_id)
        with self._lock:
            cached = self._blocked
        if cached is None:
            cached = _as_issue_list(self._run(["blocked"]), "blocked")
            with self._lock:
                self._blocked = cached
        for o in cached:
            if o.get("id") == bead_id:
                return o
        return None

    def blockers(self, bead_id: str) -> list[str]:
        """Return the ids blocking ``bead_id`` according to ``bd blocked --json``."""
        entry = self._blocked_entry(bead_id)
        out: list[str] = []
        for b in (entry or {}).get("blocked_by") or ():
            if isinstance(b, str):
                out.append(b)
            elif isinstance(b, dict) and isinstance(b.get("id"), str):
                out.append(b["id"])
        return out

    def is_blocked(self, bead_id: str) -> bool:
        """Return True when ``bd blocked --json`` lists the bead (a ready bead is not asked about)."""
        if self._is_ready(bead_id):
            return False
        return self._blocked_entry(bead_id) is not None

    def why_not_ready(self, bead_id: str) -> str | None:
        """Return None when ``bd ready`` lists the bead, else a short reason."""
        check_bead_id(bead_id)
        return None if self._is_ready(bead_id) else "bd ready does not list it"

    def claim(self, bead_id: str, actor: str) -> Bead:
        check_bead_id(bead_id)
        actor = _check_actor(actor)
        items = _as_issue_list(self._run(["update", bead_id, "--claim"], bead_id=bead_id, actor=actor))
        with self._lock:
            self._shown.pop(bead_id, None)
            if self._ready is not None:  # a claimed bead is no longer ready; nothing else changes
                self._ready = [b for b in self._ready if b.id != bead_id]
        claimed = Bead.from_dict(items[0]) if items else self.get(bead_id)
        with self._lock:
            self._shown[claimed.id] = claimed
        return claimed

    def close(
        self, bead_id: str, reason: str | None = None, session: str | None = None, *, force: bool = False
    ) -> Bead:
        check_bead_id(bead_id)
        args = ["close", bead_id]
        if reason:
            args += ["--reason", reason]
        if session:
            args += ["--session", session]
        if force:
            args.append("--force")
        items = _as_issue_list(self._run(args, bead_id=bead_id), "closed")
        with self._lock:  # closing may unblock others: forget what was read
            self._shown.clear()
            self._ready = self._blocked = None
        return Bead.from_dict(items[0]) if items else self.get(bead_id)

    @property
    def prefix(self) -> str | None:
        """``issue-prefix`` of config.yaml, else inferred from the beads already read, else from ``bd list``."""
        if self._prefix is None:
            beads_dir = self.beads_dir
            if beads_dir is None:
                env_dir = self.env.get("BEADS_DIR")
                beads_dir = Path(env_dir) if env_dir else self.cwd / ".beads"
            with self._lock:
                seen = [b.id for b in (self._ready or ())] + list(self._shown)
            self._prefix = (_config_prefix(_read_yaml_config(beads_dir)) or infer_prefix(seen)
                            or infer_prefix(b.id for b in self.all()))
        return self._prefix


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


# --- context and diffs ---------------------------------------------------------------------


def render_context(
    bead: Bead,
    *,
    branch: str,
    parent_branch: str | None = None,
    dependencies_resolved: Mapping[str, Bead] | Sequence[Bead] | None = None,
) -> str:
    """Return the task context markdown for an agent (seed 000's ``bead.md``).

    ``dependencies_resolved`` gives the dependency targets (by id or as a list) so each line
    shows the target's title and status; an unknown target is shown as such.
    """
    if dependencies_resolved is None:
        targets: dict[str, Bead] = {}
    elif isinstance(dependencies_resolved, Mapping):
        targets = dict(dependencies_resolved)
    else:
        targets = {b.id: b for b in dependencies_resolved}
    out = [f"# Task: {bead.title}", ""]
    out.append(f"**ID:** {bead.id}")
    out.append(f"**Status:** {bead.status}")
    out.append(f"**Priority:** {bead.priority}")
    out.append(f"**Type:** {bead.issue_type}")
    out.append(f"**Branch:** {branch}")
    if parent_branch:
        out.append(f"**Parent branch:** {parent_branch}")
    if bead.labels:
        out.append(f"**Labels:** {', '.join(bead.labels)}")
    for heading, text in (
        ("Description", bead.description),
        ("Design", bead.design),
        ("Acceptance criteria", bead.acceptance_criteria),
        ("Notes", bead.notes),
    ):
        if text.strip():
            out += ["", f"## {heading}", "", text.strip()]
    if bead.dependencies:
        out += ["", "## Dependencies", ""]
        for dep in bead.dependencies:
            t = targets.get(dep.depends_on_id)
            kind = "" if dep.type == "blocks" else f" [{dep.type}]"
            if t is None:
                out.append(f"- {dep.depends_on_id}: (not found){kind}")
            else:
                out.append(f"- {t.id}: {t.title} ({t.status}){kind}")
    push = f"git push -u origin {branch}"
    out += [
        "",
        "## Workflow",
        "",
        "1. Implement changes",
        f"2. Commit: [{bead.id}] <description>",
        f"3. Push: {push}",
        "4. File PR: Call the 'file_pr' tool (or run `exo pr file`); do NOT use the gh cli manually"
        + (f" (base: {parent_branch})" if parent_branch else ""),
        "5. Report progress, blockers and questions with `exo note` (the 'note' tool)",
        "",
    ]
    return "\n".join(out)


def diff_beads(old: Bead | None, new: Bead) -> dict[str, Any]:
    """Return what changed from ``old`` to ``new`` (JSON-native), for ``exo reconstitute``.

    Keys: ``id``, ``new`` (no old version), ``status`` (``{"from", "to"}`` or None),
    ``dependencies_added``/``dependencies_removed`` (dependency dicts), ``comments_added``
    (comment dicts), ``fields_changed`` (names of other exo fields whose value changed) and
    ``changed`` (anything at all).
    """
    old_deps = {(d.depends_on_id, d.type): d for d in (old.dependencies if old else ())}
    new_deps = {(d.depends_on_id, d.type): d for d in new.dependencies}
    old_comments = {_comment_key(c) for c in (old.comments if old else ())}
    added_comments = [c.to_dict() for c in new.comments if _comment_key(c) not in old_comments]
    status = None
    if old is None or old.status != new.status:
        status = {"from": old.status if old else None, "to": new.status}
    fields_changed: list[str] = []
    if old is not None:
        for name in (
            "title", "priority", "issue_type", "description", "design", "acceptance_criteria",
            "notes", "assignee", "labels", "close_reason", "defer_until",
        ):  # fmt: skip
            if getattr(old, name) != getattr(new, name):
                fields_changed.append(name)
    result: dict[str, Any] = {
        "id": new.id,
        "new": old is None,
        "status": status,
        "dependencies_added": [new_deps[k].to_dict() for k in new_deps if k not in old_deps],
        "dependencies_removed": [old_deps[k].to_dict() for k in old_deps if k not in new_deps],
        "comments_added": added_comments,
        "fields_changed": fields_changed,
    }
    result["changed"] = bool(
        result["new"]
        or status
        or result["dependencies_added"]
        or result["dependencies_removed"]
        or added_comments
        or fields_changed
    )
    return result


def _comment_key(c: Comment) -> tuple[str, str, str, str]:
    return (c.id, c.author, c.created_at, c.text)
