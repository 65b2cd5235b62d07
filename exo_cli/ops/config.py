"""``exo config``: the effective configuration, each value with the place it came from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from exo_cli.errors import InvalidInput
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.env import Env


class ConfigEntry(NamedTuple):
    key: str
    value: Any
    origin: str  # "default", a file's path, "$EXO_..." or "flag"


@dataclass(frozen=True)
class ConfigResult:
    entries: list[ConfigEntry]
    files: list[str]  # the configuration files that exist, lowest precedence first


@op(
    "config",
    cli="config",
    no_tools="a person's view of exo's files and variables, for setting exo up; an agent works with the settings it was started with",
    read_only=True,
    idempotent=True,
    help={"keys": "Keys to show, such as agent.default (default: every key)."},
)
def config(env: Env, *, keys: list[str] | None = None) -> ConfigResult:
    """Show the effective configuration and where it comes from.

    Every key with its value after merging the defaults, the user file, the repository's
    `exo.toml`, the local `.exo/config.toml` and the `EXO_*` variables, and the origin of
    that value (`default`, a file, or a variable). Outside a repository only the user
    file and the environment count. A key exo does not know is an error.
    """
    from exo_cli.config import SCHEMA
    from exo_cli.config_paths import config_files

    wanted = list(keys or sorted(SCHEMA))
    unknown = [k for k in wanted if k not in SCHEMA]
    if unknown:
        raise InvalidInput(f"Unknown configuration key {unknown[0]!r}", hint="Known keys: " + ", ".join(sorted(SCHEMA)),
                           key=unknown[0])
    conf = env.config
    try:
        root = env.repo.root
    except Exception:  # outside a repository: the user file only
        root = None
    files = [str(p) for p in config_files(env.environ, root) if p.is_file()]
    return ConfigResult([ConfigEntry(k, conf.peek(k), conf.origin(k)) for k in wanted], files)
