"""``JsonlSource``: beads read from the JSONL export in ``.beads/`` and written back safely.

Used when ``bd`` is not installed. The file is ``issues.jsonl``, legacy ``beads.jsonl`` or
the one ``metadata.json`` names. A claim or close rewrites one line under an exclusive lock
and replaces the file atomically; every other line stays byte-identical.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from exo_cli.adapters.beads.model import (
    DEFAULT_CLOSE_REASON,
    INACTIVE_STATUSES,
    JSONL_NAMES,
    Bead,
    BeadGraph,
    check_bead_id,
    infer_prefix,
    now_rfc3339,
)
from exo_cli.adapters.beads.source import (
    BeadsSource,
    check_actor,
    config_prefix,
    read_yaml_config,
)
from exo_cli.adapters.files import atomic_write, locked
from exo_cli.errors import EnvironmentError_, NotFound, StateError


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
            self._config = read_yaml_config(self.beads_dir)
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
        return config_prefix(self.config) or infer_prefix(b.id for b in beads if not b.ephemeral)

    # --- writes ---

    def claim(self, bead_id: str, actor: str) -> Bead:
        actor = check_actor(actor)

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
    """``git commit --only`` of one file: again while another git command holds the index or moves the
    branch (an agent working in that checkout commits too); as ``exo`` without an identity."""
    import time

    config: list[str] = []
    for i in range(attempts):
        proc = git.commit_only([name], message, config=config)
        text = proc.stderr + proc.stdout
        if proc.ok or i + 1 == attempts:
            return proc
        if not config and ("tell me who you are" in text or "auto-detect" in text or "empty ident" in text):
            config = ["-c", "user.name=exo", "-c", "user.email=exo@localhost"]
        elif "index.lock" in text or "cannot lock ref" in text:  # another git command commits in that checkout
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
