"""Configuration: defaults < user < repo ``exo.toml`` < local ``.exo/config.toml`` < ``EXO_*`` < flags.

Files are read with ``tomllib``; writers use ``tomlkit``, imported only by them. Every key is
declared in ``SCHEMA`` with its type and allowed values, so a bad value is an error that
names the key path and the file it came from.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exo_cli.config_paths import config_files
from exo_cli.errors import InvalidInput
from exo_cli.records import BACKENDS, LAYOUTS, MCP_COMPAT, MUXES
from exo_cli.trust import untrusted_error
from exo_cli.validate import MAX_TIMEOUT

FORGES = ("auto", "local", "github")
SANDBOX_MODES = ("off", "on", "auto")


class EnvVars:
    """Names of every environment variable exo reads."""

    AGENT = "EXO_AGENT"  # identity of the agent a process belongs to (checked against records)
    PROOF = "EXO_AGENT_PROOF"  # the per-agent secret that proves EXO_AGENT (in the agent's env only)
    SOCKET = "EXO_SOCKET"  # the agent's own socket to the team broker: its relays talk to exo through it
    PARENT = "EXO_PARENT"
    ROLE = "EXO_ROLE"
    STATE_DIR = "EXO_STATE_DIR"
    CONFIG_DIR = "EXO_CONFIG_DIR"
    DEBUG = "EXO_DEBUG"
    FAULT = "EXO_FAULT"  # fault-injection points, for reliability tests
    HANGAR_ROOT = "HANGAR_ROOT"
    MCP_WAIT = "EXO_MCP_WAIT"  # seconds Claude's session-start hook waits for the agent's exo MCP server
    PROCESS_READER = "EXO_PROCESS_READER"  # "psutil": read processes through psutil even where /proc exists
    STORE_URL = "EXO_STORE_URL"  # the PostgreSQL store (empty: SQLite); read by env.Env.store_url first
    STORE_FOLLOW = "EXO_STORE_FOLLOW"  # "1" (the broker's): the state folder's store wins over EXO_STORE_URL
    # Configuration overrides: env var -> dotted key.
    CONFIG = {
        "EXO_AGENT_BACKEND": "agent.default",
        "EXO_SKIP_PERMISSIONS": "agent.skip_permissions",
        "EXO_MUX": "mux.default",
        "EXO_FORGE": "forge.kind",
        "EXO_MAX_AGENTS": "limits.max_agents",
        "EXO_WORKTREE_ROOT": "worktree.root",
        "EXO_BASE_BRANCH": "worktree.base",
        "EXO_STORE_URL": "store.url",
        "EXO_STORE_TIMEOUT": "timeouts.store",
        "EXO_SSH_COMMAND": "ssh.command",
        "EXO_BROKER": "broker.enabled",
        "EXO_SANDBOX": "sandbox.mode",
    }
    HOST = "EXO_HOST"  # this machine's name among exo's hosts (else the state folder's host-name, else hostname)


DEFAULTS: dict[str, Any] = {
    "agent": {
        "default": "claude",
        "skip_permissions": False,
        "command": [],  # custom backend: argv template with {prompt} {worktree} {name}
        "args": {backend: [] for backend in BACKENDS},
        "start_timeout": 60,
        "idle_quiet_seconds": 30,  # a custom agent quiet this long (and running no child process) is idle
        "idle_pattern": "",  # a regular expression: a custom agent whose last line matches is idle at once
    },
    "mux": {"default": "tmux"},
    "mcp": {"compat": []},
    "worktree": {
        "root": "",
        "base": "",
        "bead_branch": "bd-{id}/{slug}",
        "bead_dir": "bd-{id}-{slug}",
        "child_branch": "{parent}.{name}",
        "child_dir": "{name}",
        "copy": [],
        "symlink": [],
        "post_create": [],
        "layout": "worktree",
    },
    "services": {},
    "forge": {"kind": "auto", "remote": "origin"},
    "limits": {"max_agents": 0, "on_limit": "fail", "max_depth": 10},
    "cleanup": {
        # ignored files that come back by themselves: never kept, never a reason to refuse a removal
        "regenerable": ["__pycache__/", "*.pyc", "node_modules/", ".venv/", ".pytest_cache/", ".mypy_cache/",
                        ".ruff_cache/"],
        "max_keep_mb": 512,  # the most `exo complete --force` copies into an archive (ignored files, nested repos)
    },
    "checkpoints": {
        "enabled": True,  # a checkpoint of each agent's checkout at the end of every turn (exo undo)
        "keep_turns": 50,  # the newest checkpoints kept whatever their age
        "hourly_days": 7,  # beyond those, one per hour for this many days
        "max_file_mb": 20,  # a bigger file is not kept (listed as not kept)
        "after_complete_days": 7,  # how long the checkpoints of a completed agent stay (complete --force: archived)
    },
    "timeouts": {"question": 3600, "wait": 600, "store": 30},
    "demo": {"script": []},
    "store": {"url": ""},
    "notify": {"command": [], "desktop": False},
    "ssh": {"command": "ssh", "persist": 600},
    # the team broker: every agent reaches exo through its own socket (docs/architecture.md "The broker")
    "broker": {"enabled": True, "idle_exit": 5},
    "hosts": {},
    # bubblewrap around agents that work in their own clone (docs/security.md "The sandbox")
    "sandbox": {"mode": "auto", "env": [], "paths": [], "hide": [], "devices": [],
                # a sandboxed agent's network: its model API and these, nothing else
                "allow_hosts": [],
                # host name -> the address its proxy connects to instead of looking it up (a local mirror)
                "resolve": {}},
    # the merge queue (docs/commands.md: The merge queue): with gates for a base, `pr merge` enqueues instead of merging
    "merge": {"gates": [], "setup": [], "bases": [], "batch": 4, "window": 5},
    "prices": {},  # model -> {input, output, cache_write, cache_read} dollars per million tokens (exo_cli/prices.py)
    # each new agent's budget and the whole team's (0: none; ops/budget.py, ops/teambudget.py)
    "budget": {"agent_usd": 0, "agent_tokens": 0, "team_usd": 0, "team_tokens": 0},
}

_Check = Callable[[Any], bool]


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_seconds(v: Any) -> bool:
    return _is_int(v) and v <= MAX_TIMEOUT


def _is_args_table(v: Any) -> bool:
    return isinstance(v, dict) and all(k in BACKENDS and _is_str_list(x) for k, x in v.items())


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _is_cmd(v: Any) -> bool:
    return isinstance(v, str) or _is_str_list(v)


def _is_regex(v: Any) -> bool:
    import re

    if not isinstance(v, str):
        return False
    try:
        re.compile(v)
    except re.error:
        return False
    return True


def _is_table(v: Any) -> bool:
    return isinstance(v, dict)


def _is_store_url(v: Any) -> bool:
    return isinstance(v, str) and (not v.strip() or v.strip().startswith(("postgresql://", "postgres://")))


HOST_KEYS = ("ssh", "path", "exo", "env")
HOST_NAME = r"[a-z0-9][a-z0-9_-]{0,31}"


def _is_argv(v: Any) -> bool:
    """A command exo splits into words itself (a string split as a shell would, or a list): at least one word."""
    if isinstance(v, str):
        import shlex

        try:
            return bool(shlex.split(v))
        except ValueError:  # an unclosed quote
            return False
    return _is_str_list(v) and bool(v)


def host_problem(name: Any, entry: Any) -> str | None:
    """What is wrong with one ``[hosts.NAME]`` entry, or None."""
    import re

    if not isinstance(name, str) or not re.fullmatch(HOST_NAME, name):
        return f"the host name {_shown(name)} is not 1-32 of a-z, 0-9, _ and - (starting with a letter or digit)"
    if not isinstance(entry, dict):
        return "expected a table with ssh and path"
    unknown = sorted(set(entry) - set(HOST_KEYS))
    if unknown:
        return f"unknown key(s) {', '.join(unknown)} (known: {', '.join(HOST_KEYS)})"
    dest = entry.get("ssh")
    if not isinstance(dest, str) or not dest.strip() or dest.startswith("-") or any(c.isspace() or ord(c) < 32
                                                                                       for c in dest):
        return "ssh must be a destination (user@host or a Host of your ssh config), without spaces or a leading -"
    path = entry.get("path")
    if not isinstance(path, str) or not path.startswith("/") or any(ord(c) < 32 for c in path):
        return "path must be the absolute path of the repository's clone on that host"
    if "exo" in entry and not _is_argv(entry["exo"]):
        return "exo must be a command (a string split as a shell would, or a list of strings)"
    if "env" in entry and not _is_str_list(entry["env"]):
        return "env must be a list of variable names (or globs such as \"MY_*\")"
    return None


PRICE_KEYS = ("input", "output", "cache_write", "cache_read")


def price_problem(model: Any, entry: Any) -> str | None:
    """What is wrong with one ``[prices."MODEL"]`` entry, or None."""
    if not isinstance(model, str) or not model.strip() or any(ord(c) < 32 or ord(c) == 127 for c in model):
        return "the model name must be text without control characters"
    if not isinstance(entry, dict):
        return "expected a table with input, output, cache_write and cache_read"
    unknown = sorted(set(entry) - set(PRICE_KEYS))
    missing = [k for k in PRICE_KEYS if k not in entry]
    if unknown or missing:
        return (f"unknown key(s) {', '.join(unknown)}; " if unknown else "") + \
            (f"missing {', '.join(missing)}; " if missing else "") + "expected exactly " + ", ".join(PRICE_KEYS)
    for k in PRICE_KEYS:
        v = entry[k]
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 1e6:
            return f"{k} must be a number of dollars per million tokens (0 or more)"
    return None


def _is_prices_table(v: Any) -> bool:
    return isinstance(v, dict) and all(price_problem(k, x) is None for k, x in v.items())


def _is_amount(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | float) and 0 <= v < 1e12


def gate_problem(entry: Any) -> str | None:
    """Why one ``[[merge.gates]]`` entry is wrong, or None (``command``: a command; ``timeout``: seconds)."""
    if not isinstance(entry, dict):
        return "expected a table with command and timeout"
    unknown = sorted(set(entry) - {"command", "timeout", "name"})
    if unknown:
        return f"unknown key(s) {', '.join(unknown)} (known: command, timeout, name)"
    if not _is_argv(entry.get("command")):
        return "command must be a command (a string run by sh -c, or a list of strings)"
    if "timeout" in entry and not (_is_seconds(entry["timeout"]) and entry["timeout"] > 0):
        return f"timeout must be a whole number of seconds between 1 and {MAX_TIMEOUT}"
    if "name" in entry and not (isinstance(entry["name"], str) and entry["name"].isprintable()):
        return "name must be a printable string"
    return None


def _is_gates(v: Any) -> bool:
    return isinstance(v, list) and all(gate_problem(x) is None for x in v)


def _is_bases(v: Any) -> bool:
    return v == "*" or (_is_str_list(v) and all(x and x.isprintable() for x in v))


def _is_hosts_table(v: Any) -> bool:
    return isinstance(v, dict) and all(host_problem(k, x) is None for k, x in v.items())


def _host_problem(entries: list[str]) -> str | None:
    """Why an entry of ``sandbox.allow_hosts`` is no host or preset (None when every one is)."""
    from exo_cli.adapters.netpolicy import parse_entry

    for entry in entries:
        try:
            parse_entry(entry)
        except InvalidInput as exc:
            return exc.message
    return None


def _pin_problem(table: dict[str, Any]) -> str | None:
    """Why an entry of ``sandbox.resolve`` is no host name -> address (None when every one is)."""
    from exo_cli.adapters.netpolicy import parse_pins

    try:
        parse_pins(table)
    except InvalidInput as exc:
        return exc.message
    return None


def _choice(*values: str) -> _Check:
    def check(v: Any) -> bool:
        return v in values

    check.__doc__ = "one of " + ", ".join(values)
    return check


# dotted key -> (check, description of what is expected)
SCHEMA: dict[str, tuple[_Check, str]] = {
    "agent.default": (_choice(*BACKENDS), "one of " + ", ".join(BACKENDS)),
    "agent.skip_permissions": (_is_bool, "true or false"),
    "agent.command": (_is_cmd, "a command (string or list of strings)"),
    "agent.args": (_is_args_table, "a table of backend -> list of extra arguments, e.g. "
                   "{ claude = [\"--model\", \"sonnet\"] } (backends: " + ", ".join(BACKENDS) + ")"),
    "agent.start_timeout": (_is_seconds, "a whole number of seconds"),
    "agent.idle_quiet_seconds": (_is_seconds, "a whole number of seconds"),
    "agent.idle_pattern": (_is_regex, "a regular expression"),
    "mux.default": (_choice(*MUXES), "one of " + ", ".join(MUXES)),
    "mcp.compat": (lambda v: _is_str_list(v) and all(x in MCP_COMPAT for x in v),
                   "a list of compatible tool sets: " + ", ".join(MCP_COMPAT)),
    "worktree.root": (_is_str, "a path"),
    "worktree.base": (_is_str, "a branch name"),
    "worktree.bead_branch": (_is_str, "a template string"),
    "worktree.bead_dir": (_is_str, "a template string"),
    "worktree.child_branch": (_is_str, "a template string"),
    "worktree.child_dir": (_is_str, "a template string"),
    "worktree.copy": (_is_str_list, "a list of relative paths"),
    "worktree.symlink": (_is_str_list, "a list of relative paths"),
    "worktree.post_create": (_is_cmd, "a command (string or list of strings)"),
    "worktree.layout": (_choice(*LAYOUTS), "one of " + ", ".join(LAYOUTS)),
    "services": (_is_table, "a table of service name -> settings"),
    "forge.kind": (_choice(*FORGES), "one of " + ", ".join(FORGES)),
    "forge.remote": (_is_str, "a remote name"),
    "limits.max_agents": (_is_int, "a whole number (0 = no limit)"),
    "limits.on_limit": (_choice("fail", "wait"), "fail or wait"),
    "limits.max_depth": (_is_int, "a whole number (0 = no limit)"),
    "cleanup.regenerable": (_is_str_list, "a list of patterns (name/, *.ext, path/from/top)"),
    "cleanup.max_keep_mb": (_is_int, "a whole number of MiB"),
    "checkpoints.enabled": (_is_bool, "true or false"),
    "checkpoints.keep_turns": (_is_int, "a whole number of checkpoints"),
    "checkpoints.hourly_days": (_is_int, "a whole number of days"),
    "checkpoints.max_file_mb": (_is_int, "a whole number of MiB"),
    "checkpoints.after_complete_days": (_is_int, "a whole number of days"),
    "timeouts.question": (_is_seconds, "a whole number of seconds"),
    "timeouts.wait": (_is_seconds, "a whole number of seconds"),
    "timeouts.store": (_is_seconds, "a whole number of seconds"),
    "demo.script": (lambda v: isinstance(v, list), "a list of demo steps"),
    "store.url": (_is_store_url, "a postgresql:// URL without a password, or empty for SQLite"),
    "notify.command": (_is_str_list, "a command as a list of strings (it gets each event as JSON on stdin)"),
    "notify.desktop": (_is_bool, "true or false"),
    "ssh.command": (_is_argv, "a command (a string split as a shell would, or a list of strings), e.g. "
                    "\"ssh -F ~/.ssh/exo\""),
    "ssh.persist": (_is_seconds, "a whole number of seconds"),
    "broker.enabled": (_is_bool, "true or false"),
    "broker.idle_exit": (_is_seconds, "a whole number of seconds"),
    "sandbox.mode": (_choice(*SANDBOX_MODES), "one of " + ", ".join(SANDBOX_MODES)),
    "sandbox.env": (_is_str_list, "a list of variable names (or globs such as \"MY_*\") a sandboxed agent keeps"),
    "sandbox.paths": (lambda v: _is_str_list(v) and all(x.startswith(("/", "~/")) for x in v),
                      "a list of absolute folders (or ~/...) a sandboxed agent may write"),
    "sandbox.hide": (lambda v: _is_str_list(v) and all(x.startswith(("/", "~/")) for x in v),
                     "a list of absolute paths (or ~/...) hidden from sandboxed agents"),
    "sandbox.devices": (lambda v: _is_str_list(v) and all(x.startswith("/dev/") for x in v),
                        "a list of device nodes (/dev/...) sandboxed agents may use, such as GPUs"),
    "sandbox.allow_hosts": (lambda v: _is_str_list(v) and _host_problem(v) is None,
                            "a list of HOST, HOST:PORT, *.DOMAIN, [IPV6]:PORT or presets (npm, pypi, crates, "
                            "goproxy, github)"),
    "sandbox.resolve": (lambda v: isinstance(v, dict) and _pin_problem(v) is None,
                        "a table of host name -> \"ADDRESS\" or \"ADDRESS:PORT\" its proxy connects to"),
    "merge.gates": (_is_gates, "a list of tables { command = COMMAND, timeout = SECONDS }"),
    "merge.setup": (lambda v: isinstance(v, list) and all(_is_argv(x) for x in v),
                    "a list of commands (each a string run by sh -c, or a list of strings)"),
    "merge.bases": (_is_bases, "\"*\" (every base) or a list of branch names (empty: the main branch)"),
    "merge.batch": (lambda v: _is_int(v) and 1 <= v <= 64, "a whole number from 1 to 64"),
    "merge.window": (_is_seconds, "a whole number of seconds"),
    "hosts": (_is_hosts_table, "a table of host name -> { ssh = DESTINATION, path = CLONE, exo = COMMAND, env = [NAMES] }"),
    "budget.agent_usd": (_is_amount, "a number of dollars (0 = no budget)"),
    "budget.agent_tokens": (_is_int, "a whole number of tokens (0 = no budget)"),
    "budget.team_usd": (_is_amount, "a number of dollars (0 = no budget)"),
    "budget.team_tokens": (_is_int, "a whole number of tokens (0 = no budget)"),
    "prices": (_is_prices_table, "a table of model -> { input = N, output = N, cache_write = N, cache_read = N } "
               "in dollars per million tokens"),
}
_SECTIONS = {k.split(".")[0] for k in SCHEMA if "." in k}


@dataclass
class Config:
    """The merged configuration with the origin of every value.

    ``get`` is the one reader of values: a key that needs trust (``exo_cli.trust``) whose value
    came from the repository file and was not pinned by ``exo trust`` is refused there, before
    its reader runs anything. ``peek`` reads without that check, for views that only show values.
    """

    values: dict[str, Any]
    origins: dict[str, str] = field(default_factory=dict)
    repo_file: str | None = None  # the repository file's origin string (values from it may need trust)
    local_file: str | None = None  # the local file's: the repository's too when git tracks it (a clone brings it)
    pins_file: Path | None = None  # where this repository's pins are kept (read on first need)
    _pins: dict[str, Any] | None = field(default=None, repr=False)
    _untrusted: list[str] | None = field(default=None, repr=False)

    def get(self, key: str) -> Any:
        if self.repo_file is not None:
            self.require_trusted(key)
        return self.peek(key)

    def peek(self, key: str) -> Any:
        """The value of ``key``, trusted or not (to show it, never to use it)."""
        node: Any = self.values
        for part in key.split("."):
            node = node[part]
        return node

    def origin(self, key: str) -> str:
        return self.origins.get(key, "default")

    @property
    def pins(self) -> dict[str, Any]:
        if self._pins is None:
            from exo_cli.trust import read_pins

            self._pins = read_pins(self.pins_file) if self.pins_file is not None else {}
        return self._pins

    def carry(self, pins: Mapping[str, Any]) -> None:
        """Also trust ``pins`` (another host's caller's, travelling with its request) in this process."""
        self._pins = {**self.pins, **pins}
        self._untrusted = None

    def from_repo(self) -> dict[str, Any]:
        """The values that need trust and came from the repository file (each differs from exo's default)."""
        out = needing_trust({k: self.peek(k) for k, o in self.origins.items() if o == self.repo_file})
        local = needing_trust({k: self.peek(k) for k, o in self.origins.items() if o == self.local_file})
        if local and self.local_file is not None and _committed_local(Path(self.local_file)):
            out.update(local)
        return out

    def untrusted(self) -> list[str]:
        """The keys of ``from_repo`` whose value is not the one pinned."""
        if self._untrusted is None:
            from exo_cli.trust import canonical

            mine = self.from_repo()
            pins = self.pins if mine else {}
            self._untrusted = sorted(k for k, v in mine.items() if k not in pins or canonical(pins[k]) != canonical(v))
        return self._untrusted

    def require_trusted(self, *prefixes: str) -> None:
        """StateError naming every untrusted key when one is, or lies under or above, one of ``prefixes``."""
        if self.repo_file is None or not {self.repo_file, self.local_file} & set(self.origins.values()):
            return  # nothing comes from the repository's files: nothing to trust (every hot path)
        bad = self.untrusted()
        hit = [k for k in bad if any(k == p or k.startswith(p + ".") or p.startswith(k + ".") for p in prefixes)]
        if hit:
            source = " and ".join(sorted({self.origin(k) for k in bad}))
            raise untrusted_error(bad, source, used=hit[0] if len(prefixes) == 1 else None)


_NONE = object()


def _committed_local(path: Path) -> bool:
    """Whether the local file ``<root>/.exo/config.toml`` came with the repository: git tracks it, or ``.exo``
    is a link (into the repository's own files). Then it is the repository's, and needs trust as exo.toml does."""
    from exo_cli.adapters.git import Git

    root = path.parent.parent
    git = Git(root)
    return git.is_tracked(".exo/config.toml") or ((root / ".exo").is_symlink() and git.is_tracked(".exo"))


def needing_trust(values: Mapping[str, Any]) -> dict[str, Any]:
    """Those of ``values`` (dotted key -> value) that need trust: a listed key set to another value than the default."""
    from exo_cli.trust import canonical, needs_trust

    out: dict[str, Any] = {}
    for key, value in values.items():
        default = _default(key)
        if needs_trust(key) and (default is _NONE or canonical(value) != canonical(default)):
            out[key] = value
    return out


def file_values(text: str) -> dict[str, Any]:
    """The dotted keys and values of a configuration file's text (checked as the repository file's)."""
    import tomllib

    out = _flatten(tomllib.loads(text))
    for key, value in out.items():
        _check(key, value, "exo.toml")
    return out


def _default(key: str) -> Any:
    node: Any = DEFAULTS
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _NONE
        node = node[part]
    return node


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if key in SCHEMA:
            out[key] = v
        elif isinstance(v, dict) and key in _SECTIONS:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _set(values: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = values
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def _check(key: str, value: Any, origin: str) -> None:
    if key not in SCHEMA:
        raise InvalidInput(
            f"Unknown configuration key {key!r} in {origin}",
            hint="Known keys: " + ", ".join(sorted(SCHEMA)),
            key=key,
            source=origin,
        )
    check, expected = SCHEMA[key]
    if check is _is_args_table and isinstance(value, dict):  # name the one entry that is wrong
        for sub, item in value.items():
            if sub not in BACKENDS or not _is_str_list(item):
                _check_entry(f"{key}.{sub}", item, origin, sub in BACKENDS)
    if check is _is_prices_table and isinstance(value, dict):  # name the model that is wrong, and why
        for model, entry in value.items():
            why = price_problem(model, entry)
            if why is not None:
                raise InvalidInput(f"Bad [prices.{_shown(model)}] in {origin}: {why}", hint=f"Fix [prices] in {origin}.",
                                   key=f"prices.{model}", source=origin)
    if check is _is_gates and isinstance(value, list):  # name the gate that is wrong, and why
        for i, entry in enumerate(value):
            why = gate_problem(entry)
            if why is not None:
                raise InvalidInput(f"Bad merge.gates entry {i + 1} in {origin}: {why}",
                                   hint=f"Fix [[merge.gates]] in {origin}.", key="merge.gates", source=origin)
    if check is _is_hosts_table and isinstance(value, dict):  # name the host that is wrong, and why
        for name, entry in value.items():
            why = host_problem(name, entry)
            if why is not None:
                raise InvalidInput(f"Bad [hosts.{_shown(name)}] in {origin}: {why}", hint=f"Fix [hosts] in {origin}.",
                                   key=f"hosts.{name}", source=origin)
    if (key == "sandbox.allow_hosts" and _is_str_list(value)) or (key == "sandbox.resolve" and isinstance(value, dict)):
        why = _host_problem(value) if isinstance(value, list) else _pin_problem(value)  # the entry, and why
        if why is not None:
            raise InvalidInput(f"{why} (in {origin})", hint=f"Fix {key} in {origin}.", key=key, source=origin)
    if not check(value):
        raise InvalidInput(
            f"Bad value for {key} in {origin}: {_shown(value)} (expected {expected})",
            hint=f"Fix {key} in {origin}.",
            key=key,
            source=origin,
        )


def _check_entry(key: str, value: Any, origin: str, known: bool) -> None:
    expected = "a list of strings (one per argument)" if known else f"one of the backends {', '.join(BACKENDS)}"
    raise InvalidInput(
        f"Bad value for {key} in {origin}: {_shown(value)} (expected {expected})",
        hint=f"Fix {key} in {origin}" + (", e.g. [\"--verbose\"]." if known else "."),
        key=key,
        source=origin,
    )


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def _parse_env_value(key: str, raw: str) -> Any:
    check = SCHEMA[key][0]
    if check is _is_bool:
        low = raw.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off", ""):
            return False
        return raw
    if check in (_is_int, _is_seconds):
        try:
            return int(raw)
        except ValueError:
            return raw
    return raw


def read_toml(path: Path) -> dict[str, Any]:
    import tomllib  # here, not at the top: the hooks read EnvVars without paying for it

    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{path} is not valid TOML: {exc}", hint=f"Fix the syntax of {path}.", source=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path} is not UTF-8 text: byte {exc.object[exc.start:exc.start + 1]!r} at offset "
                           f"{exc.start}", hint=f"Save {path} as UTF-8.", source=str(path)) from exc
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidInput(f"Cannot read {path}: {why}", source=str(path)) from exc




def load(
    *,
    repo_root: Path | None,
    environ: Mapping[str, str],
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Merge every source in precedence order and validate each value against SCHEMA."""
    values = copy.deepcopy(DEFAULTS)
    origins: dict[str, str] = {}
    files = config_files(environ, repo_root)
    layers = [(str(path), read_toml(path)) for path in files]
    for origin, table in layers:
        for key, value in _flatten(table).items():
            _check(key, value, origin)
            _set(values, key, value)
            origins[key] = origin
    for var, key in EnvVars.CONFIG.items():
        if var in environ:
            value = _parse_env_value(key, environ[var])
            _check(key, value, f"${var}")
            _set(values, key, value)
            origins[key] = f"${var}"
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        _check(key, value, "the command line")
        _set(values, key, value)
        origins[key] = "flag"
    if repo_root is None:
        return Config(values, origins)
    from exo_cli.trust import pins_path

    return Config(values, origins, repo_file=str(files[1]), local_file=str(files[2]),
                  pins_file=pins_path(environ, repo_root))
