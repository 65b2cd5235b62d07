"""Wire the human's own agent session as the root team lead (``exo init --agent claude|gemini|codex``),
and take that wiring out again (``unwire``, for ``exo deinit``).

Writes the project-level files each agent CLI reads, merging into what is there and never
dropping the user's keys: the ``exo`` MCP server entry (``exo mcp --role auto``, which
serves the human's session as the root team lead) and hooks calling ``<abs exo> hook EVENT --cli
CLI``. Re-running is idempotent; exo's own earlier entries (even with an older exo path)
are replaced, not duplicated. A file exo creates is hidden through ``.git/info/exclude``
(it holds this machine's absolute paths); a file the user already had is left visible.
What it changed is recorded (``footprint``): ``unwire`` puts a file exo has not seen changed
since back exactly as it was, and takes only exo's entries out of one the user edited since.

- claude: ``.mcp.json`` ``mcpServers.exo`` and ``.claude/settings.local.json`` hooks plus
  ``enabledMcpjsonServers: ["exo"]`` (the local settings may approve project servers).
- gemini: ``.gemini/settings.json`` ``mcpServers.exo``, hooks, ``hooksConfig.enabled``.
- codex: ``.codex/config.toml`` ``[mcp_servers.exo]`` (edited with tomlkit: comments and layout kept)
  and ``.codex/hooks.json``. Codex
  reads both only in a trusted project; exo never edits ``$CODEX_HOME/config.toml`` (the
  result's notes give the ``codex mcp add`` command for a user-wide entry instead).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exo_cli.adapters.git import add_exclude
from exo_cli.errors import InvalidInput
from exo_cli.records import AGENT_CLIS
from exo_cli.selfcmd import exo_command

if TYPE_CHECKING:
    from collections.abc import Callable

    from exo_cli.adapters.git import RepoInfo

AGENTS = AGENT_CLIS  # the agent CLIs whose project wiring exo writes
SERVER = "exo"

# The hook tables are the backends' own (one source of truth for what exo hooks where):
# (agent CLI event, exo hook event, matcher or None, timeout in the CLI's unit).
HookTable = tuple[tuple[str, str, str | None, int], ...]


def _hook_tables() -> dict[str, HookTable]:
    from exo_cli.adapters.agents import claude, codex, gemini

    return {"claude": claude.HOOKS, "gemini": gemini.HOOKS, "codex": codex.HOOKS}


@dataclass(frozen=True)
class AgentWiring:
    """What ``exo init --agent`` wrote for the human's own agent session."""

    agent: str
    mcp_command: list[str]
    files: list[str]
    changed: list[str]
    excluded: list[str]
    notes: list[str]


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path} is not valid JSON: {exc}", hint="Fix or move the file, then run exo init again.",
                           file=str(path)) from exc
    if not isinstance(data, dict):
        raise InvalidInput(f"{path} does not hold a JSON object", hint="Fix or move the file, then run exo init again.",
                           file=str(path))
    return data


def _object(parent: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = parent.setdefault(key, {})
    if not isinstance(value, dict):
        raise InvalidInput(f"{path}: `{key}` is not an object", hint="Fix the file, then run exo init again.",
                           file=str(path), key=key)
    return value


def _write(path: Path, text: str) -> None:
    from exo_cli.adapters.files import atomic_write

    atomic_write(path, text)


def _is_exo_hook(handler: Any, cli: str) -> bool:
    """True for a handler exo wrote: ``<...exo or python -m exo_cli> hook EVENT --cli CLI``."""
    if not isinstance(handler, dict) or not isinstance(handler.get("command"), str):
        return False
    try:
        argv = shlex.split(handler["command"])
    except ValueError:
        return False
    if len(argv) < 5 or argv[-4] != "hook" or argv[-2:] != ["--cli", cli]:
        return False
    head = argv[:-4]
    return os.path.basename(head[0]) == "exo" or head[-2:] == ["-m", "exo_cli"]


def merge_hooks(settings: dict[str, Any], path: Path, cli: str, table: HookTable,
                exo: list[str], *, named: bool = False) -> None:
    """Put one exo handler group per event into ``settings["hooks"]``, keeping the user's own."""
    hooks = _object(settings, "hooks", path)
    for event, exo_event, matcher, timeout in table:
        groups = hooks.get(event, [])
        if not isinstance(groups, list):
            raise InvalidInput(f"{path}: hooks.{event} is not a list", hint="Fix the file, then run exo init again.",
                               file=str(path), key=f"hooks.{event}")
        kept = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                handlers = [h for h in group["hooks"] if not _is_exo_hook(h, cli)]
                if not handlers:
                    continue  # a group that held only exo's handler
                group = {**group, "hooks": handlers}
            kept.append(group)
        handler: dict[str, Any] = {"type": "command", "command": shlex.join([*exo, "hook", exo_event, "--cli", cli]),
                                   "timeout": timeout}
        if named:
            handler = {"name": f"exo-{exo_event}", **handler}
        kept.append({"matcher": matcher, "hooks": [handler]} if matcher else {"hooks": [handler]})
        hooks[event] = kept


def _json_file(path: Path, update: Any) -> bool:
    """Apply ``update(data)`` to a JSON object file; write only on change. True when written."""
    before = _read_json(path)
    data = json.loads(json.dumps(before)) if before is not None else {}
    update(data)
    if before is not None and data == before:
        return False
    _write(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return True


def _codex_config(path: Path, entry: dict[str, Any]) -> bool:
    """Set ``[mcp_servers.exo]`` in a project ``.codex/config.toml``, keeping the user's text (tomlkit).

    The file is edited in place, format-preserving: the user's comments, order and layout stay;
    only exo's table is added or replaced. Nothing is written when it already holds exo's entry.
    """
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    text = path.read_text(encoding="utf-8") if path.exists() else ""
    try:
        doc = tomlkit.parse(text)
    except TOMLKitError as exc:
        raise InvalidInput(f"{path} is not valid TOML: {exc}", hint="Fix or move the file, then run exo init again.",
                           file=str(path)) from exc
    servers = doc.get("mcp_servers")
    if servers is None:
        servers = tomlkit.table(is_super_table=True)
        doc["mcp_servers"] = servers
    elif not isinstance(servers, dict):
        raise InvalidInput(f"{path}: mcp_servers is not a table", hint="Fix or move the file, then run exo init again.",
                           file=str(path))
    current = servers.get(SERVER)
    if current is not None and current.unwrap() == entry:
        return False
    table = tomlkit.table()
    table.update(entry)
    servers[SERVER] = table
    _write(path, tomlkit.dumps(doc))
    return True


def wire_agent(repo: RepoInfo, agent: str, *, record: Path | None = None) -> AgentWiring:
    """Wire ``agent`` (claude, gemini or codex) in ``repo`` as the root team lead's session; note what
    changed in the ``footprint`` of the state folder ``record``."""
    if agent not in AGENTS:
        raise InvalidInput(f"Unknown agent {agent!r}", hint=f"Use one of: {', '.join(AGENTS)}.", agent=agent)
    root = repo.root
    exo = exo_command()
    server_argv = [*exo, "mcp", "--role", "auto"]
    entry = {"command": server_argv[0], "args": server_argv[1:]}
    notes: list[str] = []
    files: dict[Path, bool] = {}  # path -> existed before
    before: dict[Path, str | None] = {}  # path -> its text before this run
    made_dirs: list[Path] = []  # folders this run creates for the files

    def track(rel: str) -> Path:
        path = root / rel
        if path not in files:
            files[path] = path.exists()
            before[path] = path.read_text(encoding="utf-8") if files[path] else None
            parent = path.parent
            while parent != root and not parent.exists():
                made_dirs.append(parent)
                parent = parent.parent
        return path

    changed: list[Path] = []
    if agent == "claude":
        mcp_json = track(".mcp.json")
        if _json_file(mcp_json, lambda d: _object(d, "mcpServers", mcp_json).__setitem__(
                SERVER, {"type": "stdio", **entry})):
            changed.append(mcp_json)
        local = track(".claude/settings.local.json")

        def claude_settings(d: dict[str, Any]) -> None:
            merge_hooks(d, local, "claude", _hook_tables()["claude"], exo)
            enabled = d.setdefault("enabledMcpjsonServers", [])
            if isinstance(enabled, list) and SERVER not in enabled:
                enabled.append(SERVER)

        if _json_file(local, claude_settings):
            changed.append(local)
        notes.append(f"Start `claude` in {root}: it loads the exo server from .mcp.json (approved in "
                     ".claude/settings.local.json) and exo's hooks once you trust the folder; your session "
                     "is then the team lead at the root of the tree.")
    elif agent == "gemini":
        settings = track(".gemini/settings.json")

        def gemini_settings(d: dict[str, Any]) -> None:
            _object(d, "mcpServers", settings)[SERVER] = dict(entry)
            merge_hooks(d, settings, "gemini", _hook_tables()["gemini"], exo, named=True)
            cfg = _object(d, "hooksConfig", settings)
            if cfg.get("enabled") is False:
                notes.append(f"{settings}: hooksConfig.enabled is false (your choice, kept): exo's hooks will "
                             "not run until you enable them.")
            cfg.setdefault("enabled", True)

        if _json_file(settings, gemini_settings):
            changed.append(settings)
        notes.append(f"Start `gemini` in {root}: Gemini reads .gemini/settings.json only in a trusted folder "
                     "(trust it when asked); your session is then the team lead at the root of the tree.")
    else:
        config = track(".codex/config.toml")
        if _codex_config(config, entry):
            changed.append(config)
        hooks_json = track(".codex/hooks.json")
        if _json_file(hooks_json, lambda d: merge_hooks(d, hooks_json, "codex", _hook_tables()["codex"], exo)):
            changed.append(hooks_json)
        notes.append(f"Codex reads .codex/config.toml and .codex/hooks.json only in a trusted project: trust {root} "
                     "when Codex asks (and review the hooks with /hooks). exo never edits $CODEX_HOME/config.toml; "
                     f"for a user-wide entry run: codex mcp add {SERVER} -- {shlex.join(server_argv)}")
    excluded, added = [], []
    for path, existed in files.items():
        if not existed and path.exists():
            rel = "/" + path.relative_to(root).as_posix()
            if add_exclude(repo.common_dir, rel):
                added.append(rel)
            excluded.append(rel)
    if record is not None:
        _note(record, root, files, before, changed, made_dirs, added)
    return AgentWiring(
        agent=agent,
        mcp_command=server_argv,
        files=[str(p) for p in files],
        changed=[str(p) for p in changed],
        excluded=excluded,
        notes=notes,
    )


# --------------------------------------------------------------------------- the record, and unwiring

# The project files ``wire_agent`` writes, by the agent CLI whose format they hold, and their folders.
FILES = {".mcp.json": "claude", ".claude/settings.local.json": "claude", ".gemini/settings.json": "gemini",
         ".codex/config.toml": "codex", ".codex/hooks.json": "codex"}
WIRED_DIRS = (".claude", ".gemini", ".codex")
EXCLUDED = tuple("/" + rel for rel in FILES)  # the info/exclude lines wire_agent may add


def _note(state_dir: Path, root: Path, files: dict[Path, bool], before: dict[Path, str | None],
          changed: list[Path], made_dirs: list[Path], excluded: list[str]) -> None:
    """Record in the footprint what this run changed: each file's state before exo first touched it, and
    the digest of what exo wrote."""
    from exo_cli.ops import footprint

    def change(data: dict[str, Any]) -> None:
        known = data.setdefault("files", {})
        for path in files:
            rel = path.relative_to(root).as_posix()
            entry = known.setdefault(rel, {"existed": files[path], "original": before[path]})
            if path in changed:
                entry["written"] = footprint.digest(path.read_text(encoding="utf-8"))
        dirs = data.setdefault("dirs", [])
        dirs += [d.relative_to(root).as_posix() for d in made_dirs if d.relative_to(root).as_posix() not in dirs]
        for line in excluded:
            footprint.add_excluded(data, line)

    footprint.update(state_dir, change)


def _is_exo_server(entry: Any) -> bool:
    """True for the MCP server entry exo wrote: ``<...exo or python -m exo_cli> mcp ...``."""
    if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
        return False
    args = entry.get("args")
    argv = [entry["command"], *(a for a in (args if isinstance(args, list) else []) if isinstance(a, str))]
    head = argv[:argv.index("mcp")] if "mcp" in argv else []
    return bool(head) and (os.path.basename(head[0]) == "exo" or head[-2:] == ["-m", "exo_cli"])


def _strip_json(data: dict[str, Any], cli: str) -> None:
    """Take exo's entries out of an agent CLI's settings object, and the containers left empty by that."""
    servers = data.get("mcpServers")
    if isinstance(servers, dict) and _is_exo_server(servers.get(SERVER)):
        del servers[SERVER]
        if not servers:
            del data["mcpServers"]
    hooks = data.get("hooks")
    if isinstance(hooks, dict):
        for event, groups in list(hooks.items()):
            if not isinstance(groups, list):
                continue
            kept = []
            for group in groups:
                if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                    handlers = [h for h in group["hooks"] if not _is_exo_hook(h, cli)]
                    if not handlers:
                        continue
                    group = {**group, "hooks": handlers}
                kept.append(group)
            if kept:
                hooks[event] = kept
            else:
                del hooks[event]
        if not hooks:
            del data["hooks"]
            if data.get("hooksConfig") == {"enabled": True}:  # exo's own switch, with no hook left to run
                del data["hooksConfig"]
    enabled = data.get("enabledMcpjsonServers")
    if isinstance(enabled, list) and SERVER in enabled:
        enabled.remove(SERVER)
        if not enabled:
            del data["enabledMcpjsonServers"]


def _stripped(rel: str, text: str) -> tuple[str, bool] | None:
    """``text`` without exo's entries and whether nothing else is left in it; None when it holds none of exo's."""
    if rel.endswith(".toml"):
        import tomlkit
        from tomlkit.exceptions import TOMLKitError

        try:
            doc = tomlkit.parse(text)
        except TOMLKitError:
            return None
        servers = doc.get("mcp_servers")
        if not isinstance(servers, dict) or not _is_exo_server(servers.get(SERVER)):
            return None
        del servers[SERVER]
        if not servers:
            del doc["mcp_servers"]
        out = tomlkit.dumps(doc)
        return out, not out.strip()
    try:
        data = json.loads(text or "{}")
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    stripped = json.loads(json.dumps(data))
    _strip_json(stripped, FILES.get(rel, "claude"))
    if stripped == data:
        return None
    return json.dumps(stripped, indent=2, ensure_ascii=False) + "\n", not stripped


def unwire(root: Path, record: dict[str, Any], excluded: list[str], *, apply: bool, kept: list[str],
           committed: Callable[[str], str | None]) -> list[str]:
    """Take out what ``wire_agent`` wrote (with ``apply`` False, only say what that would do).

    A file exo recorded and that still holds exactly what exo wrote goes back to its text before
    exo init (or goes, when exo created it); any other file that holds exo's entries (the user
    edited it since, or it was wired before exo kept a record) loses only those entries, and
    goes too when exo created it (its line in ``excluded``, the info/exclude lines) and nothing
    else is left. Folders exo made for them go once empty. A file git tracks (``committed`` gives
    its committed text, None when untracked) is changed only to go back to exactly that text;
    otherwise ``kept`` says why it stays. What it did, one line each.
    """
    from exo_cli.adapters.files import atomic_write
    from exo_cli.ops import footprint

    known: dict[str, Any] = record.get("files") or {}
    done: list[str] = []
    gone: set[Path] = set()
    for rel in FILES:  # only these: a record naming other paths (written by someone else) names nothing
        path = root / rel
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        info = known.get(rel) if isinstance(known.get(rel), dict) else None
        in_git = committed(rel)
        if in_git is not None:  # a team may commit exo's entries on purpose: only ever back to the commit
            ours = info is not None and info.get("written") == footprint.digest(text)
            if ours and text != in_git and info is not None and info.get("original") == in_git:
                done.append(f"{path}: put back as committed")
                if apply:
                    atomic_write(path, in_git)
            elif _stripped(rel, text) is not None:
                kept.append(f"{path}: committed, so exo's entries in it are kept")
            continue
        if info is not None and info.get("written") == footprint.digest(text):
            original = info.get("original")
            if info.get("existed") and isinstance(original, str):
                done.append(f"{path}: put back as it was before exo init")
                if apply:
                    atomic_write(path, original)
            elif not info.get("existed"):
                done.append(f"{path}: removed (exo init created it)")
                gone.add(path)
            continue
        stripped = _stripped(rel, text)
        if stripped is None:
            continue
        new, empty = stripped
        created = (not info.get("existed")) if info is not None else ("/" + rel) in excluded
        if created and empty:
            done.append(f"{path}: removed (exo init created it)")
            gone.add(path)
        else:
            done.append(f"{path}: exo's entries taken out, the rest kept")
            if apply:
                atomic_write(path, new)
    for path in gone:
        if apply:
            path.unlink(missing_ok=True)
    dirs = [root / d for d in record.get("dirs") or [] if d in WIRED_DIRS]
    dirs += [p.parent for p in gone if p.parent != root and p.parent not in dirs and not record]
    for folder in sorted(set(dirs), key=lambda p: len(p.parts), reverse=True):
        try:
            left = [p for p in folder.iterdir() if p not in gone]
        except OSError:
            continue
        if not left:
            done.append(f"{folder}: removed (exo init made it)")
            gone.add(folder)
            if apply:
                with contextlib.suppress(OSError):
                    folder.rmdir()
    return done
