"""What ``exo init`` put into a repository, recorded so that ``exo deinit`` takes exactly that out again.

Not an operation. The record is ``footprint.json`` in the state folder (mode 0600): the digest
of the ``exo.toml`` exo wrote, the ``info/exclude`` lines it added, and, for each agent CLI
settings file ``exo init --agent`` changed, whether it existed, its text before exo first
changed it and the digest of what exo last wrote there, plus the folders exo made for those
files. A file whose text is still what exo wrote goes back to exactly what it was; one the user
changed since keeps their changes (``rootwire.unwire`` then takes out only exo's entries).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

FILE = "footprint.json"


def digest(text: str) -> str:
    from exo_cli.adapters.files import sha256_hex

    return sha256_hex(text.encode("utf-8"))


def load(state_path: Path) -> dict[str, Any]:
    """The record (empty when there is none, or it does not parse: exo then recognises its entries by their shape)."""
    try:
        data = json.loads((state_path / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def update(state_dir: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``change`` to the record under the state folder's lock, and write it back."""
    from exo_cli.adapters.files import atomic_write, state_lock

    with state_lock(state_dir, "footprint"):
        data = load(state_dir)
        change(data)
        atomic_write(state_dir / FILE, json.dumps(data, indent=2, ensure_ascii=False) + "\n", mode=0o600)


def add_excluded(data: dict[str, Any], line: str) -> None:
    """Note an ``info/exclude`` line exo added."""
    lines = data.setdefault("exclude", [])
    if line not in lines:
        lines.append(line)
