"""What every agent backend shares: exo's own command, the launch context, files and undo records.

A backend turns a ``LaunchContext`` into a ``Launch``: the argv, the full environment and the
files it wrote, plus JSON-serializable undo records that ``cleanup`` later replays to remove
every trace exo left outside its own state folder (trust entries, copied transcripts).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from exo_cli.adapters.files import atomic_write, ensure_private_dir, locked
from exo_cli.errors import StateError, UsageError
from exo_cli.selfcmd import exo_command

HOOK_EVENTS = ("session-start", "prompt", "stop", "stop-failure", "session-end", "notification", "tool", "notify")
"""The events ``exo hook`` understands (the hook command contract)."""

ROLES = ("tl", "dev")
SOCKET = "EXO_SOCKET"  # config.EnvVars.SOCKET: the agent's own socket to the team broker


def hook_argv(event: str, cli: str) -> list[str]:
    """Return the argv of one hook: ``<exo> hook <event> --cli <cli>``."""
    if event not in HOOK_EVENTS:
        raise UsageError(f"unknown hook event {event!r}", events=list(HOOK_EVENTS))
    return [*exo_command(), "hook", event, "--cli", cli]


def hook_command(event: str, cli: str) -> str:
    """Return the hook as one shell-quoted command string (agent CLIs run it through a shell)."""
    return shlex.join(hook_argv(event, cli))


def mcp_argv() -> list[str]:
    """Return the argv of exo's MCP server: ``<exo> mcp --role auto``."""
    return [*exo_command(), "mcp", "--role", "auto"]


@dataclass(frozen=True)
class LaunchContext:
    """Everything a backend needs to start one agent.

    ``agent_dir`` is exo's private per-agent folder (mode 0700) where backend config files go;
    ``env`` is the environment of the ``exo spawn`` call; ``created_worktree`` says whether exo
    created the worktree (trust entries are only ever added for folders exo created).
    ``branch`` and ``parent_cwd`` are optional and only used by Claude's ``--fork-session``;
    ``parent_config``: the Claude folder holding the parent's transcript when it is not this
    agent's (a sandboxed agent's ``home`` is its private HOME), ``parent_confined``: that folder
    is a sandboxed parent's own, to be read without following a link it planted.
    ``headless``: the agent runs without a terminal (``--mux headless``), so a CLI with a print
    mode runs one turn per process and continues its session for each message (``Launch.channel``).
    """

    name: str
    role: str
    worktree: Path
    repo_root: Path
    prompt: str | None
    agent_dir: Path
    state_dir: Path
    home: Path
    env: Mapping[str, str]
    skip_permissions: bool = False
    resume_session: str | None = None
    fork_session: bool = False
    extra_args: list[str] = field(default_factory=list)
    created_worktree: bool = False
    branch: str | None = None
    parent_cwd: Path | None = None
    headless: bool = False
    parent_config: Path | None = None
    parent_confined: bool = False


@dataclass
class Launch:
    """How to start one agent: argv, full environment, cwd, files written and undo records.

    ``channel`` says how a headless agent gets its messages (``Headless.start``): ``stdin``
    (written to its stdin), or ``resume`` with the argv of the next turn of the same session
    (``{session}`` and ``{message}`` stand for whole arguments) and the session id, known in
    advance or read from the first turn's output (``session_from``).
    """

    argv: list[str]
    env: dict[str, str]
    cwd: str
    files: list[str] = field(default_factory=list)
    undo: list[dict[str, Any]] = field(default_factory=list)
    channel: dict[str, Any] = field(default_factory=lambda: {"mode": "stdin"})


class Backend:
    """Base class: build a ``Launch`` for one agent CLI and undo what it did outside exo's state."""

    name: ClassVar[str] = ""
    binary: ClassVar[str | None] = None

    def prepare(self, ctx: LaunchContext, identity_env: Mapping[str, str]) -> Launch:
        """Write the backend's config files and return the launch (subclasses implement)."""
        raise NotImplementedError

    def cleanup(self, undo_records: list[dict[str, Any]]) -> None:
        """Replay undo records (any backend can undo any record kind); missing files are fine."""
        cleanup(undo_records)

    # -- helpers shared by subclasses ------------------------------------------------------

    def base_env(self, ctx: LaunchContext, identity_env: Mapping[str, str]) -> dict[str, str]:
        """Return the caller's env plus exo's identity variables (identity_env wins)."""
        if ctx.role not in ROLES:
            raise UsageError(f"unknown role {ctx.role!r}", roles=list(ROLES))
        env = dict(ctx.env)
        env["EXO_AGENT"] = ctx.name
        env["EXO_ROLE"] = ctx.role
        env["EXO_STATE_DIR"] = str(ctx.state_dir)
        env.update({k: str(v) for k, v in identity_env.items()})
        return env

    def mcp_server(self, ctx: LaunchContext, env: Mapping[str, str]) -> dict[str, Any]:
        """Return exo's stdio MCP server entry (command, args, env without any secret).

        The env names what the server must find whatever environment the agent CLI gives it
        (Codex drops ``TMUX_TMPDIR``, for one): the agent, the state folder, the agent's socket to
        the team broker (``EXO_SOCKET``: its ``exo mcp`` is then a relay, proven by the socket
        and its process ancestry) and, when set, where tmux keeps its sockets. The runtime folder
        needs nothing: it follows from the state folder.
        """
        argv = mcp_argv()
        entry_env = {"EXO_AGENT": env["EXO_AGENT"], "EXO_STATE_DIR": env["EXO_STATE_DIR"]}
        if env.get(SOCKET):  # the relay's way to the broker: a path, no secret
            entry_env[SOCKET] = env[SOCKET]
        if env.get("TMUX_TMPDIR"):
            entry_env["TMUX_TMPDIR"] = env["TMUX_TMPDIR"]
        return {"command": argv[0], "args": argv[1:], "env": entry_env}

    def no_resume(self, ctx: LaunchContext) -> None:
        """Refuse resume/fork options for backends that do not support them."""
        if ctx.resume_session or ctx.fork_session:
            raise UsageError(f"the {self.name} backend does not support --resume/--fork-session")


def tail_json_lines(path: str, limit: int = 256 * 1024, *, containing: bytes | None = None) -> list[Any]:
    """The JSON objects of the last ``limit`` bytes of a JSONL file (a transcript); [] when unreadable.

    With ``containing``, [] at once (nothing parsed) when those bytes do not occur in the tail.
    """
    from exo_cli.adapters.usage import open_regular

    fh = open_regular(path)
    if fh is None:  # missing, or not a regular file (a FIFO would block the hook)
        return []
    try:
        with fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - limit))
            data = fh.read()
    except OSError:
        return []
    if containing is not None and containing not in data:
        return []
    out = []
    for line in data.splitlines():
        if not line.startswith(b"{"):
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


# -- private files ---------------------------------------------------------------------------


def write_private(path: Path, text: str) -> str:
    """Write ``text`` to ``path`` atomically with mode 0600 and return the path as a string."""
    ensure_private_dir(path.parent, parents=True)
    atomic_write(path, text, mode=0o600)
    return str(path)


def write_private_json(path: Path, data: Any) -> str:
    """Write ``data`` as indented JSON to ``path`` (mode 0600)."""
    return write_private(path, json.dumps(data, indent=2) + "\n")


# -- atomic JSON merge into a file someone else owns -----------------------------------------


@dataclass(frozen=True)
class JsonStyle:
    """How a JSON file was laid out, so a rewrite keeps its bytes when the content is equal."""

    indent: int | None
    trailing_newline: bool

    @classmethod
    def detect(cls, text: str) -> JsonStyle:
        """Guess the indent and trailing newline of ``text`` (JSON.stringify(x, null, n) style)."""
        indent: int | None = None
        lines = text.splitlines()
        if len(lines) > 1:
            second = lines[1]
            width = len(second) - len(second.lstrip(" "))
            indent = width if width > 0 else None
            if second.startswith("\t"):
                indent = None
        return cls(indent=indent, trailing_newline=text.endswith("\n"))

    def dumps(self, data: Any) -> str:
        """Serialize ``data`` in this style."""
        if self.indent is None:
            text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        else:
            text = json.dumps(data, ensure_ascii=False, indent=self.indent)
        return text + ("\n" if self.trailing_newline else "")


def merge_json_file(
    path: Path, mutate: Callable[[dict[str, Any]], bool], *, create: bool
) -> tuple[bool, bool]:
    """Apply ``mutate`` to the JSON object in ``path`` atomically; return (changed, created).

    The file is read and rewritten under an flock on it, through a temp file in the same
    folder and ``os.replace``, keeping its mode and layout. Keys ``mutate`` does not touch are
    kept as they are. A missing file is created (mode 0600) only when ``create`` is true.
    ``mutate`` returns whether it changed anything; nothing is written otherwise.
    """
    with locked(path, own_inode=True) as lock:
        fd = lock.fd
        if fd is None:
            if not create:
                return False, False
            data: dict[str, Any] = {}
            style = JsonStyle(indent=2, trailing_newline=False)
            mode = 0o600
            created = True
        else:
            raw = _read_fd(fd)
            text = raw.decode("utf-8")
            try:
                loaded = json.loads(text) if text.strip() else {}
            except json.JSONDecodeError as exc:
                raise StateError(
                    f"{path} is not valid JSON: {exc}", hint="Fix or move the file, then retry.", path=str(path)
                ) from exc
            if not isinstance(loaded, dict):
                raise StateError(f"{path} does not hold a JSON object", path=str(path))
            data = loaded
            style = JsonStyle.detect(text) if text.strip() else JsonStyle(2, False)
            mode = os.fstat(fd).st_mode & 0o7777
            created = False
        if not mutate(data) and not created:
            return False, False
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp_fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.exo-", suffix=".tmp")
        try:
            with os.fdopen(tmp_fd, "w", encoding="utf-8") as fh:
                fh.write(style.dumps(data))
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, mode)
            if created and path.exists():
                # Someone created the file between our check and now: never clobber it.
                os.unlink(tmp)
                return merge_json_file(path, mutate, create=create)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return True, created


def _read_fd(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


# -- undo --------------------------------------------------------------------------------------


def cleanup(undo_records: list[dict[str, Any]]) -> None:
    """Replay undo records in reverse order; each kind is idempotent."""
    from exo_cli.adapters.agents.project_file import UNDO as PROJECT_FILE_UNDO

    handlers = {**_UNDO, **PROJECT_FILE_UNDO}
    # Records that created a shared parent container (``projects`` in .claude.json) go last, so
    # the container is empty - and removed - once every entry exo put in it is gone, whatever
    # order concurrent spawns happened to create them in.
    ordered = sorted(reversed(undo_records), key=lambda r: bool(r.get("added_parents")))
    for record in ordered:
        kind = record.get("kind")
        handler = handlers.get(str(kind))
        if handler is None:
            raise UsageError(f"unknown undo record kind {kind!r}")
        handler(record)


def _undo_remove_file(record: Mapping[str, Any]) -> None:
    from exo_cli.adapters.clones import unlink_in

    with contextlib.suppress(OSError):  # gone, or its folder is a link now: nothing of exo's to remove there
        unlink_in(Path(record["path"]))  # never through a folder the agent turned into a link


def _undo_json_entry(record: Mapping[str, Any]) -> None:
    """Remove exactly what exo added under ``record["keypath"]`` in a JSON file."""
    path = Path(record["path"])
    keypath: list[str] = list(record["keypath"])
    added_container = bool(record.get("added_entry"))
    added_keys: list[str] = list(record.get("added_keys", []))
    added_parents: list[str] = list(record.get("added_parents", []))
    replaced: dict[str, Any] = dict(record.get("replaced", {}))

    def mutate(data: dict[str, Any]) -> bool:
        parents: list[dict[str, Any]] = [data]
        node: Any = data
        for key in keypath[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
            if not isinstance(node, dict):
                return False
            parents.append(node)
        parent = parents[-1]
        leaf = keypath[-1]
        if leaf not in parent:
            return False
        if added_container:
            del parent[leaf]
        else:
            entry = parent[leaf]
            if not isinstance(entry, dict):
                return False
            changed = False
            for key in added_keys:
                if key in entry:
                    del entry[key]
                    changed = True
            for key, old in replaced.items():
                if entry.get(key) != old:
                    entry[key] = old
                    changed = True
            if not changed:
                return False
        # Drop parent containers exo created that are now empty (innermost first).
        for depth in range(len(keypath) - 1, 0, -1):
            key = keypath[depth - 1]
            if key in added_parents and parents[depth] == {}:
                del parents[depth - 1][key]
        return True

    merge_json_file(path, mutate, create=False)
    if record.get("created_file"):
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            if json.loads(path.read_text(encoding="utf-8") or "{}") == {}:
                path.unlink()


_UNDO: dict[str, Callable[[Mapping[str, Any]], None]] = {
    "remove-file": _undo_remove_file,
    "json-entry": _undo_json_entry,
}


def add_json_entry(path: Path, keypath: list[str], values: Mapping[str, Any]) -> dict[str, Any] | None:
    """Set ``values`` in the object at ``keypath`` of JSON file ``path``; return its undo record.

    Keys that already hold the wanted value are left alone and not recorded; keys exo adds are
    recorded in ``added_keys`` and keys it changes keep their old value in ``replaced``, so the
    undo removes or restores exactly what exo touched. Returns None when nothing changed.
    """
    record: dict[str, Any] = {"kind": "json-entry", "path": str(path), "keypath": list(keypath)}

    def mutate(data: dict[str, Any]) -> bool:
        node = data
        added_parents: list[str] = []
        for key in keypath[:-1]:
            if not isinstance(node.get(key), dict):
                if key in node:
                    raise StateError(f"{path}: {key!r} is not an object", path=str(path))
                node[key] = {}
                added_parents.append(key)
            node = node[key]
        leaf = keypath[-1]
        added_entry = leaf not in node
        if added_entry:
            node[leaf] = {}
        entry = node[leaf]
        if not isinstance(entry, dict):
            raise StateError(f"{path}: {leaf!r} is not an object", path=str(path))
        added_keys = [k for k in values if k not in entry]
        replaced = {k: entry[k] for k in values if k in entry and entry[k] != values[k]}
        for key in [*added_keys, *replaced]:
            entry[key] = values[key]
        record.update(
            added_entry=added_entry, added_keys=added_keys, replaced=replaced, added_parents=added_parents
        )
        return bool(added_keys or replaced or added_entry)

    changed, created = merge_json_file(path, mutate, create=True)
    if not changed:
        return None
    record["created_file"] = created
    return record
