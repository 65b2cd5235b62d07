"""Write a config file into a worktree without ever making the worktree (or any checkout) dirty.

Used where an agent CLI offers no way to load config from outside the project (Gemini CLI's
``.gemini/settings.json``). The guarantees (termtile's ``project_file`` rollback):

- a file the project tracks is merged, then marked ``git update-index --skip-worktree`` in
  *this worktree's* index only (each linked worktree has its own index);
- a file the project does not track is hidden by a ``.gitignore`` exo creates next to it, which
  ignores only itself and that file and exists only in this worktree's folder, so the same
  name in the main checkout or any other worktree stays visible;
- the original bytes are kept in exo's private agent folder (mode 0600) and ``cleanup``
  restores them exactly, clears the skip-worktree bit and removes what exo created.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from exo_cli.adapters.files import atomic_write, ensure_private_dir
from exo_cli.adapters.git import Git


def is_tracked(worktree: Path, relpath: str) -> bool:
    """Return whether ``relpath`` is in the worktree's index."""
    return Git(worktree).is_tracked(relpath)


def _write_bytes(path: Path, data: bytes, mode: int) -> None:
    atomic_write(path, data, mode=mode)


def edit_project_file(
    worktree: Path,
    relpath: str,
    render: Callable[[bytes | None], bytes],
    backup_dir: Path,
) -> list[dict[str, Any]]:
    """Write ``render(original bytes or None)`` to ``worktree/relpath`` keeping git clean.

    Returns the undo records (apply them in reverse order). Parent folders exo creates are
    removed again by the undo when they are empty.
    """
    target = worktree / relpath
    undo: list[dict[str, Any]] = []
    # Folders exo creates, outermost first, so undo (reverse order) removes innermost first.
    missing: list[Path] = []
    parent = target.parent
    while not parent.exists() and parent != worktree:
        missing.append(parent)
        parent = parent.parent
    for folder in reversed(missing):
        folder.mkdir()
        undo.append({"kind": "remove-empty-dir", "path": str(folder)})

    original = target.read_bytes() if target.is_file() else None
    tracked = is_tracked(worktree, relpath)
    if tracked:
        # Undo runs in reverse: the bit is cleared only after the bytes are restored.
        Git(worktree).skip_worktree(relpath)
        undo.append({"kind": "git-no-skip-worktree", "worktree": str(worktree), "relpath": relpath})
    if original is None:
        _write_bytes(target, render(None), 0o600)
        undo.append({"kind": "remove-file", "path": str(target)})
    else:
        ensure_private_dir(backup_dir, parents=True)
        digest = hashlib.sha256(str(target).encode()).hexdigest()[:16]
        backup = backup_dir / f"{target.name}.{digest}.orig"
        _write_bytes(backup, original, 0o600)
        mode = target.stat().st_mode & 0o7777
        _write_bytes(target, render(original), mode)
        undo.append({"kind": "restore-file", "path": str(target), "backup": str(backup), "mode": mode})
    if not tracked and original is None:
        undo += _ignore_here(worktree, relpath, backup_dir)
    return undo


def _ignore_here(worktree: Path, relpath: str, backup_dir: Path) -> list[dict[str, Any]]:
    """Make git ignore an untracked ``relpath`` in this worktree only; return undo records."""
    target = worktree / relpath
    ignore_rel = str(Path(relpath).parent / ".gitignore") if Path(relpath).parent != Path(".") else ".gitignore"
    line = f"/{target.name}\n"
    ignore = worktree / ignore_rel
    if not ignore.exists():
        # Ignores itself too, so it never shows as untracked.
        _write_bytes(ignore, f"# written by exo for this worktree only; removed when the agent ends\n{line}/.gitignore\n".encode(), 0o600)
        return [{"kind": "remove-file", "path": str(ignore)}]

    def add_line(old: bytes | None) -> bytes:
        text = (old or b"").decode("utf-8", "surrogateescape")
        if text and not text.endswith("\n"):
            text += "\n"
        return (text + line).encode("utf-8", "surrogateescape")

    return edit_project_file(worktree, ignore_rel, add_line, backup_dir)


def _undo_restore_file(record: Mapping[str, Any]) -> None:
    from exo_cli.adapters.clones import write_inside

    backup = Path(record["backup"])
    if not backup.exists():
        return
    path = Path(record["path"])  # in the agent's checkout: never written through a folder it turned into a link
    with contextlib.suppress(OSError):
        write_inside(path.parent, path.name, backup.read_bytes(), mode=int(record.get("mode", 0o644)))
    with contextlib.suppress(FileNotFoundError):
        backup.unlink()


def _undo_no_skip_worktree(record: Mapping[str, Any]) -> None:
    from exo_cli.adapters.clones import is_clone

    worktree = Path(record["worktree"])
    if worktree.is_dir() and not is_clone(worktree):  # an agent's own clone: exo runs no git there (it goes anyway)
        Git(worktree).skip_worktree(record["relpath"], on=False, check=False)


def _undo_remove_empty_dir(record: Mapping[str, Any]) -> None:
    with contextlib.suppress(FileNotFoundError, OSError):
        os.rmdir(record["path"])


# The undo kinds this module's records use (``base.cleanup`` replays them).
UNDO: dict[str, Callable[[Mapping[str, Any]], None]] = {
    "restore-file": _undo_restore_file,
    "git-no-skip-worktree": _undo_no_skip_worktree,
    "remove-empty-dir": _undo_remove_empty_dir,
}
