"""Which configuration keys need the user's trust, and the pins that grant it (``exo trust``).

A repository's committed ``exo.toml`` can make exo run commands, send the team's state or an
agent's keys elsewhere, or widen the sandbox. Such a key, when its value comes from the
repository file (not the user's own file, the local ``.exo/config.toml``, a variable or a
flag), is used only once the user pinned that very value with ``exo trust``. Pins hold values,
never the file's digest: a comment or an unrelated key merged from an agent's pull request
revokes nothing. They live outside the repository, in the user's configuration folder
(``trust/<digest of the main checkout's path>.json``), where no committed file can put them.

A leaf module (stdlib only): ``config`` reads it on first use of a key, the hooks never do.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from exo_cli.errors import StateError

# Importing typing would cost every hook (env.py imports this module); type checkers still see it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

# The one table of keys that need trust when the repository file sets them: a rule ``X`` covers the
# key X and every key under it, ``X.*`` the keys under the section X. Keys added later under a
# listed section (``sandbox.*``, ``forge.*``, ``merge.gates``...) are covered by their name alone.
TRUST_RULES: dict[str, str] = {
    "agent.command": "the command line of the custom agent",
    "agent.args": "extra arguments on every agent CLI's command line",
    "agent.skip_permissions": "agents run tools without asking",
    "worktree.post_create": "a command run in each new worktree",
    "worktree.copy": "files copied from the main checkout into each worktree",
    "worktree.symlink": "files linked from the main checkout into each worktree",
    "services": "programs started beside each agent",
    "notify.command": "a program run on each attention event",
    "ssh.command": "the program exo runs to reach other hosts",
    "hosts": "machines that get agents, their keys and the team's work",
    "store.url": "the server that gets the team's state",
    "forge.*": "where pull requests and branches are pushed",
    "merge.gates": "commands the merge queue runs on each candidate",
    "merge.setup": "a command the merge queue runs before its gates",
    "sandbox.*": "what sandboxed agents may reach",
}
FOLDER = "trust"  # under the user's configuration folder
REASON = "untrusted-config"  # data.reason of the refusal


def store_as_is(env: Any) -> Any:
    """``env`` (an ``Env``) with the store the state folder names (its pointer, else SQLite), never an untrusted
    ``[store] url``: who is calling is decided there, so a repository's store URL cannot make an agent the human."""
    from exo_cli.adapters.store import pointed_url

    # EXO_STORE_URL (env.STORE_URL_VAR; named here, not imported: env imports this module) beats the files
    return type(env)(env.cwd, {**env.environ, "EXO_STORE_URL": pointed_url(env.state_path) or ""}, pid=env.pid)


def needs_trust(key: str) -> bool:
    """Whether ``key`` (a dotted configuration key) needs trust when the repository file sets it."""
    for rule in TRUST_RULES:
        base = rule[:-2] if rule.endswith(".*") else rule
        if key == base or key.startswith(base + "."):
            return True
    return False


def canonical(value: Any) -> str:
    """One spelling per value (tables sorted, TOML dates as ISO text tagged with their type)."""
    return json.dumps(jsonable(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def jsonable(value: Any) -> Any:
    """``value`` as JSON (a TOML date or time becomes ``{"$toml": TYPE, "value": ISO}``)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    iso = getattr(value, "isoformat", None)
    return {"$toml": type(value).__name__, "value": iso() if callable(iso) else repr(value)}


def pins_path(environ: Mapping[str, str], repo_root: Path) -> Path:
    """The file of the pins of the repository whose main checkout is ``repo_root``."""
    from exo_cli.adapters.files import sha256_hex
    from exo_cli.config_paths import user_config_dir

    key = os.path.realpath(repo_root)
    return user_config_dir(environ) / FOLDER / (sha256_hex(key.encode("utf-8", "surrogateescape"))[:24] + ".json")


def read_pins(path: Path) -> dict[str, Any]:
    """The pinned values in ``path`` (key -> value); none when it is missing or unreadable.

    An unreadable or hand-broken file trusts nothing: every value is refused until
    ``exo trust`` writes it again.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    pins = data.get("pins") if isinstance(data, dict) else None
    return dict(pins) if isinstance(pins, dict) else {}


def pins_text(repo_root: Path, pins: Mapping[str, Any]) -> str:
    """The content of a pins file."""
    body = {"repository": os.path.realpath(repo_root), "pins": {k: jsonable(v) for k, v in sorted(pins.items())}}
    return json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def refuse_secrets(pins: Mapping[str, Any]) -> None:
    """InvalidInput when a value to pin carries a password (a store URL's): no password lands in a pins file."""
    from urllib.parse import parse_qs, urlsplit

    from exo_cli.errors import InvalidInput

    url = pins.get("store.url")
    if not isinstance(url, str):
        return
    try:
        parts = urlsplit(url.strip())
        secret = parts.password is not None or any(k.lower() == "password" for k in parse_qs(parts.query))
    except ValueError:
        secret = "password" in url.lower()
    if secret:
        raise InvalidInput("The store URL carries a password; exo keeps passwords out of URLs, files and command lines",
                           hint="Remove the password from store.url and give it to libpq instead: PGPASSWORD, "
                           "~/.pgpass or a service file (PGSERVICE).", key="store.url")


def untrusted_error(keys: list[str], source: str, used: str | None = None) -> StateError:
    """The refusal of a value nobody trusted: it names every such key and ``exo trust``."""
    return StateError(
        f"{source} sets {', '.join(keys)}, which exo uses only once you trust {'it' if len(keys) == 1 else 'them'}"
        + (f" (needed: {used})" if used and used not in keys else ""),
        hint="Review the values with `exo trust --show`, then run `exo trust` in the repository (for another host: "
        "where you called it from; your trust travels with the call), or set them in .exo/config.toml or your "
        "own config file instead.",
        reason=REASON, keys=list(keys), source=source, **({"key": used} if used else {}),
    )
