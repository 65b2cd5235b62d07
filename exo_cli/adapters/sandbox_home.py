"""A sandboxed agent's private HOME: the CLI's settings copied in, its credentials bound read-only per file.

The real ``~/.claude``, ``~/.claude.json``, ``~/.codex`` and ``~/.gemini`` are hidden from a
sandbox and the real start-up files are read-only there, so an agent cannot plant a hook that the
human's next session runs. Instead exo fills the agent's own HOME (a folder in exo's agent folder,
writable by the agent):

- the user's settings are **copied** (``settings.json``, memory files, user-made agents, commands
  and skills; Codex's ``config.toml``); never projects, transcripts, history or caches;
- ``~/.claude.json`` is copied without its ``projects`` (other folders' history and trust),
  with onboarding done and the clone trusted;
- credentials (``.credentials.json``, ``auth.json``, ``oauth_creds.json``...) are **bound**
  read-only over an empty file of the same name: ``Agent.credentials`` pairs for the builder;
- a ``.gitconfig`` with the user's name and e-mail, nothing else (no helper, hook or include).

The private HOME is the agent's to write between runs: every write here replaces a file without
following a link and every folder is checked to be a real folder (a link the agent planted is
removed first), so a respawn never writes through a link into the user's files.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

from exo_cli.adapters.files import atomic_write, ensure_private_dir
from exo_cli.adapters.rmtree import remove_tree

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

# cli -> (its folder under HOME, the variable that moves it, settings copied, folders copied, credential files)
LAYOUT: dict[str, tuple[str, str | None, tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "claude": (".claude", "CLAUDE_CONFIG_DIR", ("settings.json", "CLAUDE.md"),
               ("agents", "commands", "skills", "output-styles"), (".credentials.json",)),
    "codex": (".codex", "CODEX_HOME", ("config.toml", "AGENTS.md", "hooks.json"), ("prompts",), ("auth.json",)),
    "gemini": (".gemini", None, ("settings.json", "GEMINI.md", "installation_id"), ("commands",),
               ("oauth_creds.json", "google_accounts.json", "mcp-oauth-tokens.json")),
}
CLAUDE_STATE = ".claude.json"
TRUST = {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}
MAX_COPY = 8 << 20  # a settings file bigger than this is not a settings file: not copied


def make_home(private: Path, *, real_home: Path, cli: str, clone: str, environ: Mapping[str, str],
              identity: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """Fill ``private`` for an agent of ``cli`` working in ``clone``; the (real, private) credential binds.

    ``identity``: ``{"name": ..., "email": ...}`` for the private ``.gitconfig``. Missing user
    files are skipped. Every CLI gets the git identity; Claude, Codex and Gemini their folder.
    """
    ensure_private_dir(private, parents=True)
    binds: list[tuple[str, str]] = []
    if identity and (identity.get("name") or identity.get("email")):
        lines = ["[user]"] + [f"\t{k} = {_git_value(v)}" for k, v in identity.items() if v and k in ("name", "email")]
        _write(private, ".gitconfig", "\n".join(lines) + "\n")
    layout = LAYOUT.get(cli)
    if layout is None:
        return binds
    folder, var, settings, folders, credentials = layout
    real = Path(environ.get(var) or real_home / folder) if var else real_home / folder
    own = _folder(private, folder)
    for name in settings:
        data = _read(real / name)
        if data is not None:
            _write(own, name, data)
    for name in folders:
        _copy_tree(real / name, own, name)
    for name in credentials:
        source = real / name
        if os.path.isfile(source):
            binds.append((str(source.resolve()), _placeholder(own, name)))
    if cli == "claude":
        state_file = (Path(environ["CLAUDE_CONFIG_DIR"]) if environ.get("CLAUDE_CONFIG_DIR") else real_home) / CLAUDE_STATE
        _write(private, CLAUDE_STATE, json.dumps(claude_state(_read(state_file), clone), indent=2) + "\n")
    return binds


def claude_state(raw: bytes | None, clone: str) -> dict[str, object]:
    """The private ``.claude.json``: the user's without ``projects``, onboarding done, ``clone`` trusted."""
    data: dict[str, object] = {}
    if raw:
        try:
            loaded = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            loaded = {}
        if isinstance(loaded, dict):
            data = {k: v for k, v in loaded.items() if k not in ("projects", "history", "tipsHistory")}
    data["hasCompletedOnboarding"] = True
    data["projects"] = {clone: dict(TRUST)}
    return data


def _git_value(value: str) -> str:
    """A git config value, quoted (control characters dropped: a name is one line)."""
    clean = "".join(c for c in value if c >= " " and c != "\x7f")
    return '"' + clean.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _folder(parent: Path, name: str) -> Path:
    """``parent/name`` as a real folder of ours: a link or file the agent put there is removed first."""
    path = parent / name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
    elif st is not None and st.st_uid != os.getuid():
        remove_tree(path)
    return ensure_private_dir(path)


def _write(folder: Path, name: str, data: bytes | str) -> None:
    """Replace ``folder/name`` (a link there is replaced, never followed), mode 0600."""
    atomic_write(folder / name, data, mode=0o600, fsync=False)


def _read(path: Path) -> bytes | None:
    """The bytes of a user's regular file (a link is followed: dotfile managers link settings), or None."""
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > MAX_COPY:
            return None
        return path.read_bytes()
    except OSError:
        return None


def _copy_tree(source: Path, parent: Path, name: str) -> None:
    """Copy the user's folder ``source`` to ``parent/name`` afresh (what the agent changed there goes)."""
    if not os.path.isdir(source):
        return
    target = parent / name
    if os.path.lexists(target):
        if os.path.islink(target) or not os.path.isdir(target):
            os.unlink(target)
        else:
            remove_tree(target)
    shutil.copytree(source, target, symlinks=False, ignore_dangling_symlinks=True)


def _placeholder(folder: Path, name: str) -> str:
    """An empty regular file ``folder/name`` (mode 0600): the mount point of a credential bound over it."""
    path = folder / name
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_size == 0:
            return str(path)
        if stat.S_ISDIR(st.st_mode):
            remove_tree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    return str(path)


def open_inside(folder: Path, parts: tuple[str, ...]) -> int | None:
    """A read descriptor of the regular file ``folder/parts...``, or None.

    No link is followed on the way (each folder opened below the last one, ``O_NOFOLLOW``):
    ``folder`` is a sandboxed agent's own HOME, where it could plant a link to the user's secrets
    for exo to copy out.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(folder, flags | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        for name in parts[:-1]:
            if name in ("", ".", "..") or "/" in name:
                return None
            nxt = os.open(name, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        last = os.open(parts[-1], flags | getattr(os, "O_NONBLOCK", 0), dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(last).st_mode):
        os.close(last)
        return None
    return last


def copy_in(private: Path, parts: tuple[str, ...], source: int) -> Path:
    """Copy the open file ``source`` to ``private/parts...``: folders made as real folders of ours, the file
    made afresh (a link or file there is replaced, never followed), mode 0600. The new file's path."""
    folder = private
    for name in parts[:-1]:
        folder = _folder(folder, name)
    target = folder / parts[-1]
    if os.path.lexists(target):
        if os.path.isdir(target) and not os.path.islink(target):
            remove_tree(target)
        else:
            os.unlink(target)
    out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        while chunk := os.read(source, 1 << 20):
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view):]
    finally:
        os.close(out)
    return target
