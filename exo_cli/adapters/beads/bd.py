"""``BdSource``: beads through the ``bd`` CLI (the live state).

Every call runs ``bd ... --json``; stdout is parsed (``unwrap_json`` strips bd's
envelopes) and bd's errors on stderr become NotFound, StateError or ExternalFailure.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from exo_cli.adapters.beads.model import Bead, check_bead_id, infer_prefix, sort_beads
from exo_cli.adapters.beads.source import BeadsSource, check_actor, config_prefix, read_yaml_config
from exo_cli.adapters.proc import run
from exo_cli.errors import ExoError, ExternalFailure, NotFound, StateError, external


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
        actor = check_actor(actor)
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
            self._prefix = (config_prefix(read_yaml_config(beads_dir)) or infer_prefix(seen)
                            or infer_prefix(b.id for b in self.all()))
        return self._prefix
