"""A full disk under exo's SQLite state: an EnvironmentError that says so.

SQLite reports a full disk as "database or disk is full", or, when it cannot grow its
shared-memory index or journal, as a plain "disk I/O error"; either once read as a broken
database would send people to move the state aside and lose its messages.
"""

from __future__ import annotations

import os
from pathlib import Path

from exo_cli.errors import EnvironmentError_

ROOM = 1 << 20  # below this much free space where the database lives, an I/O error is the full disk's


def full_error(path: Path, exc: BaseException) -> EnvironmentError_ | None:
    """The error to raise instead of ``exc`` when it comes from a full disk under ``path``, else None."""
    text = str(exc).lower()
    if "disk is full" not in text and "disk i/o error" not in text:
        return None
    try:
        st = os.statvfs(path.parent)
        free: int | None = st.f_bavail * st.f_frsize
    except OSError:
        free = None
    if "disk is full" not in text and (free is None or free >= ROOM):
        return None
    return EnvironmentError_(f"No space left on the disk of exo's state ({path.parent}): {exc}",
                             hint="Free some space on that disk, then run it again: nothing was written, and the "
                                  "state is intact.", path=str(path), free_bytes=free)


def raise_if_full(path: Path, exc: BaseException) -> None:
    """Raise ``full_error`` (caused by ``exc``) when ``exc`` comes from a full disk under ``path``."""
    full = full_error(path, exc)
    if full is not None:
        raise full from exc
