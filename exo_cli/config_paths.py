"""Where the configuration files are: a leaf module, so the hot paths can look without importing config."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def user_config_dir(environ: Mapping[str, str]) -> Path:
    """The folder of the user's own configuration file (``EXO_CONFIG_DIR``, else XDG's)."""
    if environ.get("EXO_CONFIG_DIR"):
        return Path(environ["EXO_CONFIG_DIR"])
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".config")
    return Path(base) / "exo"


def config_files(environ: Mapping[str, str], repo_root: Path | None) -> list[Path]:
    """The configuration files in precedence order: the user's, then the repository's and the local one."""
    files = [user_config_dir(environ) / "config.toml"]
    if repo_root is not None:
        files += [repo_root / "exo.toml", repo_root / ".exo" / "config.toml"]
    return files
