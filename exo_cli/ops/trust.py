"""``exo trust``: pin the repository file's values of the keys that run things (``exo_cli.trust``).

Human only and no MCP tool: an agent could otherwise trust the configuration it wrote. The
pins are values, kept in the user's configuration folder (never in the repository): a comment
or another key changed in ``exo.toml`` revokes nothing; a changed value needs ``exo trust`` again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from exo_cli.registry import op

if TYPE_CHECKING:
    from pathlib import Path

    from exo_cli.config import Config
    from exo_cli.env import Env

TRUSTED, DIFFERS, NEW = "trusted", "differs", "new"


@dataclass(frozen=True)
class TrustEntry:
    key: str
    current: Any  # the value the repository file sets (JSON: a TOML date is {"$toml": TYPE, "value": ISO})
    pinned: Any  # the value pinned for it; None when none is
    state: str  # trusted (the pinned value) | differs (another value is pinned) | new (nothing pinned)
    what: str  # what the key makes exo do


@dataclass(frozen=True)
class TrustResult:
    repository: str  # the main checkout
    file: str  # the repository file the values come from
    pins_file: str  # where the pins are kept
    pinned: bool  # the values were pinned now (false for --show)
    entries: list[TrustEntry]


@op("trust", cli="trust", roles=("human",), idempotent=True,
    no_tools="the human's consent to what the repository's exo.toml runs; an agent must never grant it",
    help={"show": "List each value and whether it is trusted; pin nothing."})
def trust(env: Env, *, show: bool = False) -> TrustResult:
    """Trust the repository exo.toml's commands, hosts, store and sandbox.

    A committed `exo.toml` can make exo run programs (`agent.command`, `worktree.post_create`,
    `services`, `notify.command`, `ssh.command`, `merge.gates`...), send the team's state or an
    agent's keys elsewhere (`store.url`, `hosts`, `forge.*`) or widen the sandbox (`sandbox.*`).
    exo uses such a value only once it is pinned here: this pins every such value the file sets
    now (replacing the earlier pins), and lists them. A value equal to exo's default needs no
    trust; the user's own file and `.exo/config.toml` are always trusted. With {--show}, nothing
    is pinned: each value is listed as trusted, differs (another value is pinned) or new.
    """
    from exo_cli.trust import pins_path

    root = env.repo.root
    conf = env.config
    path = pins_path(env.environ, root)
    values = conf.from_repo()
    if not show:
        write_pins(root, path, values)
    return TrustResult(repository=str(root), file=str(root / "exo.toml"), pins_file=str(path), pinned=not show,
                       entries=entries(conf, values, None if show else values))


def entries(conf: Config, values: Mapping[str, Any], pins: Mapping[str, Any] | None) -> list[TrustEntry]:
    """Each value the repository file sets that needs trust, with its pin and state."""
    from exo_cli.trust import TRUST_RULES, canonical, jsonable

    pinned = conf.pins if pins is None else pins
    out = []
    for key in sorted(values):
        pin = pinned.get(key)
        state = NEW if key not in pinned else TRUSTED if canonical(pin) == canonical(values[key]) else DIFFERS
        what = next((w for r, w in TRUST_RULES.items() if key == r.removesuffix(".*")
                     or key.startswith(r.removesuffix(".*") + ".")), "")
        out.append(TrustEntry(key, jsonable(values[key]), jsonable(pin) if key in pinned else None, state, what))
    return out


def write_pins(root: Path, path: Path, values: Mapping[str, Any]) -> None:
    """Replace the pins of the repository at ``root`` with ``values`` (mode 0600 in a 0700 folder); no values:
    no file (nothing of exo is left in the user's folder for a repository that needs no trust)."""
    from exo_cli.adapters.files import atomic_write, ensure_private_dir
    from exo_cli.errors import EnvironmentError_
    from exo_cli.trust import pins_text, refuse_secrets

    refuse_secrets(values)
    try:
        if not values:
            path.unlink(missing_ok=True)
            return
        ensure_private_dir(path.parent, parents=True)
        atomic_write(path, pins_text(root, values), mode=0o600)
    except OSError as exc:
        raise EnvironmentError_(f"Cannot write the trusted values to {path}: {exc.strerror or exc}",
                                path=str(path)) from exc


def trust_written(env: Env, text: str) -> None:
    """Pin the values of ``text``, the repository file exo just wrote (``exo init``): what exo wrote is trusted."""
    from exo_cli.config import file_values, needing_trust
    from exo_cli.trust import pins_path, read_pins

    root = env.repo.root
    path = pins_path(env.environ, root)
    written = needing_trust(file_values(text))
    if written:
        write_pins(root, path, {**read_pins(path), **written})


def problems(env: Env) -> list[tuple[str, str, str, str]]:
    """`exo doctor`'s problems: each untrusted key (kind, key, what is wrong, what to do), left for the human."""
    conf = env.config
    return [("untrusted-config", key, f"{conf.origin(key)} sets it ("
             + ("another value is pinned" if key in conf.pins else "never trusted") + "): exo refuses to use it",
             "review it with `exo trust --show`, then run `exo trust`") for key in conf.untrusted()]
