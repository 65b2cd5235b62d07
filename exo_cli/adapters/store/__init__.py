"""exo's state store: the interface (``base``) and its implementations (``sqlite``).

``open_store`` is the one place that picks an implementation from plain values; only the
chosen implementation's module (and its driver) is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from exo_cli.adapters.store.base import Store

# The schema version every store implements; a store refuses a database whose version is newer.
SCHEMA_VERSION = 1

# The SQLite database's file name inside exo's state folder.
DB_FILE = "state.db"


def open_store(state_dir: Path, runtime_dir: Path | Callable[[], Path]) -> Store:
    """The store for one repository's state folder (nothing is opened until first use).

    ``runtime_dir`` is the short folder of the wake-up sockets, or a function returning it
    (called only when a wake-up is first needed, so reads never create it).
    """
    from exo_cli.adapters.store.sqlite import SqliteStore

    return SqliteStore(state_dir / DB_FILE, runtime_dir)


def has_state(state_dir: Path) -> bool:
    """True when the state already exists in ``state_dir`` (a check that creates nothing)."""
    return (state_dir / DB_FILE).exists()
