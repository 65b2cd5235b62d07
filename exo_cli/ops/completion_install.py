"""``exo completion --install``: exo's man pages for the user, and the line that loads exo's
completion in a shell's startup file.

Not an operation (no ``@op``): the ``completion`` command calls ``install`` directly.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from exo_cli.errors import EnvironmentError_, UsageError

SHELLS = ("bash", "zsh", "fish")
MARKER = "# exo shell completion"
LINES = {
    "bash": 'command -v exo >/dev/null 2>&1 && eval "$(exo completion bash)"',
    "zsh": "if (( $+commands[exo] )); then (( $+functions[compdef] )) || { autoload -Uz compinit && compinit; }; "
           'eval "$(exo completion zsh)"; fi',
    "fish": "command -q exo; and exo completion fish | source",
}


class Installed(NamedTuple):
    """What ``exo completion --install`` did."""

    shell: str
    rc_file: str
    line: str
    added: bool  # False: the line was already there, nothing changed
    created: bool = False  # the startup file did not exist: exo created it
    man_dir: str | None = None  # where exo's man pages are now (None: this installation has none)
    man_written: int = 0  # pages written there (new or changed); 0: all were there already
    warnings: tuple[str, ...] = ()


def detect_shell(environ: Mapping[str, str]) -> str:
    """The user's shell from ``$SHELL`` (a UsageError when it is none exo supports)."""
    name = os.path.basename(environ.get("SHELL", "")) or "(unset)"
    if name not in SHELLS:
        raise UsageError(f"Cannot tell which shell to install completion for: $SHELL is {name}",
                         hint="Name it: exo completion --install bash|zsh|fish")
    return name


def home(environ: Mapping[str, str]) -> Path:
    """The user's home folder: ``$HOME``, or the password database's when it is not set.

    An empty or relative ``$HOME`` is refused (EnvironmentError_): the files would land in ``/``
    or wherever exo runs.
    """
    value = environ.get("HOME")
    if value is None:
        import pwd

        value = pwd.getpwuid(os.getuid()).pw_dir
    if not os.path.isabs(value):
        raise EnvironmentError_(f"$HOME is {value!r}, not an absolute folder: exo does not guess where your files go",
                                hint="Set HOME to your home folder.", home=value)
    return Path(value)


def _folder_var(environ: Mapping[str, str], name: str) -> Path | None:
    """A folder variable (``ZDOTDIR``, ``XDG_CONFIG_HOME``) when set to an absolute path; else None, as
    the shells and the XDG rules treat an empty or relative one."""
    value = environ.get(name) or ""
    return Path(value) if os.path.isabs(value) else None


def rc_file(shell: str, environ: Mapping[str, str]) -> Path:
    """The startup file an interactive ``shell`` reads."""
    if shell == "zsh":
        return (_folder_var(environ, "ZDOTDIR") or home(environ)) / ".zshrc"
    if shell == "fish":
        return (_folder_var(environ, "XDG_CONFIG_HOME") or home(environ) / ".config") / "fish" / "config.fish"
    return home(environ) / ".bashrc"


def rc_path(rc: str, environ: Mapping[str, str]) -> Path:
    """The ``--rc FILE`` given: ``~/`` is the user's home; a relative path is relative to the current folder."""
    if rc == "~" or rc.startswith("~/"):
        return home(environ) / rc[2:]
    return Path(rc).absolute()


def install(shell: str, *, environ: Mapping[str, str], rc: str | None = None) -> Installed:
    """Install exo's man pages for the user, and add the completion line for ``shell`` to its
    startup file once (never twice).

    The man pages go to ``~/.local/share/man/man1``, where ``man`` looks when ``~/.local/bin`` is on
    ``PATH`` (as pipx and uv put ``exo`` there). A startup file that does not exist yet is created
    (with its folder, for the shell's own file; a ``--rc`` FILE whose folder does not exist is
    refused: a typo, likely); an existing one gets the line appended in place, so one that is a
    symlink (a dotfiles repository) stays one. The startup file is checked first, then the pages
    are written, then the line: a refusal changes nothing, and a write that fails after the checks
    leaves at most the pages (exo's own files, rewritten by the next run). Raises
    EnvironmentError_ when a file cannot be read or written; its hint is the line to add by hand.
    """
    rcfile = _Startup(rc_path(rc, environ) if rc else rc_file(shell, environ), shell, own_file=rc is None)
    found = rcfile.check()
    man_dir, written, warnings = install_man_pages(environ)
    line = found if found is not None else rcfile.add()
    if shell == "bash" and rc is None:
        warnings += _login_shell_warning(rcfile.path, environ)
    return Installed(shell, str(rcfile.path), line, added=found is None, created=rcfile.created,
                     man_dir=man_dir, man_written=written, warnings=tuple(warnings))


class _Startup:
    """A shell's startup file and exo's line in it."""

    def __init__(self, path: Path, shell: str, *, own_file: bool) -> None:
        self.path = path
        self.line = f"{LINES[shell]}  {MARKER}"
        self.own_file = own_file
        self.by_hand = f"Add this line to your {shell} startup file yourself:\n  {self.line}"
        self.text: str | None = None
        self.created = False

    def fail(self, message: str) -> EnvironmentError_:
        return EnvironmentError_(message, hint=self.by_hand, rc_file=str(self.path), line=self.line)

    def check(self) -> str | None:
        """The line as it is in the file already, or None when it must be added (and can be)."""
        path = self.path
        try:
            self.text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            if os.path.islink(path):  # a dotfiles link to a file that is gone: never create through it
                raise self.fail(f"{path} is a symbolic link to a file that does not exist ({os.readlink(path)})") from None
            if not self.own_file and not path.parent.is_dir():
                raise self.fail(f"The folder of {path} does not exist") from None
            return None
        except OSError as exc:
            raise self.fail(f"Cannot read {path}: {exc.strerror}") from None
        if MARKER in self.text:
            return next(x for x in self.text.splitlines() if MARKER in x)
        if not os.access(path, os.W_OK):
            raise self.fail(f"{path} is not writable")
        return None

    def add(self) -> str:
        """Create the file with the line, or append the line to it; the line."""
        path, text = self.path, self.text
        try:
            if text is None:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "x", encoding="utf-8") as fh:  # never over a file created meanwhile
                    fh.write(self.line + "\n")
                self.created = True
            else:
                with open(path, "a", encoding="utf-8") as fh:
                    fh.write(("" if not text or text.endswith("\n") else "\n") + self.line + "\n")
        except OSError as exc:
            raise self.fail(f"Cannot {'create' if text is None else 'write'} {path}: {exc.strerror}") from None
        return self.line


def _login_shell_warning(bashrc: Path, environ: Mapping[str, str]) -> list[str]:
    """A warning when bash's login shells (macOS terminals, ssh) would not read ``bashrc``."""
    for name in (".bash_profile", ".bash_login", ".profile"):  # a login bash reads the first that exists
        profile = home(environ) / name
        try:
            text = profile.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        except OSError:
            return []
        if bashrc.name in text:
            return []
        return [f"login shells read {profile}, which does not read {bashrc}: add `. {bashrc}` to it to have "
                "the completion there too"]
    return []


# --------------------------------------------------------------------------- man pages

def man_source() -> Path | None:
    """The folder of this installation's man pages, when it has them: a source checkout's ``man/``,
    else the wheel's data files under the prefix the package is installed in (a virtualenv, pipx's
    or uv's tool folder, ``--prefix``), the interpreter's or the user's (``pip install --user``)."""
    import sysconfig

    package = Path(__file__).resolve().parents[1]
    candidates = [package.parent / "man"] if (package.parent / "pyproject.toml").is_file() else []
    if package.parent.name in ("site-packages", "dist-packages"):  # <prefix>/lib/pythonX.Y/site-packages
        candidates.append(package.parent.parents[2] / "share" / "man" / "man1")
    candidates.append(Path(sysconfig.get_path("data")) / "share" / "man" / "man1")
    candidates.append(Path(sysconfig.get_path("data", sysconfig.get_preferred_scheme("user"))) / "share" / "man" / "man1")
    return next((c for c in candidates if (c / "exo.1").is_file()), None)


def man_dir(environ: Mapping[str, str]) -> Path:
    """Where ``exo completion --install`` puts the man pages: ``~/.local/share/man/man1``."""
    return home(environ) / ".local" / "share" / "man" / "man1"


def install_man_pages(environ: Mapping[str, str]) -> tuple[str | None, int, list[str]]:
    """Copy exo's man pages (``exo.1``, ``exo-*.1``) to ``man_dir``: (the folder, how many were
    written, warnings). Pages already there with the same text are left alone."""
    from exo_cli.adapters.files import atomic_write

    source = man_source()
    if source is None:
        return None, 0, ["this installation of exo has no man pages (they come with its wheel): `man exo` "
                         "will not find them; `exo COMMAND --help` says the same"]
    target = man_dir(environ)
    pages = sorted(p for p in source.iterdir() if p.suffix == ".1" and (p.name == "exo.1" or p.name.startswith("exo-")))
    written = 0
    try:
        if target.exists() and target.resolve() == source.resolve():
            pages = []  # installed there already (pip install --user)
        for page in pages:
            data = page.read_bytes()
            dest = target / page.name
            try:
                if dest.read_bytes() == data:
                    continue
            except OSError:
                pass
            atomic_write(dest, data, mode=0o644, fsync=False)
            written += 1
    except OSError as exc:
        raise EnvironmentError_(f"Cannot write exo's man pages to {target}: {exc.strerror}",
                                hint=f"Make {target} writable, or read `exo COMMAND --help` instead.",
                                man_dir=str(target)) from None
    return str(target), written, _manpath_warning(target, environ)


def _manpath_warning(target: Path, environ: Mapping[str, str]) -> list[str]:
    """A warning when ``man`` would not look in ``target`` (the folder of ``man1``)."""
    share_man = target.parent
    manpath = environ.get("MANPATH")
    if manpath is not None:  # man-db: an entry left empty (a leading, doubled or trailing colon) adds its own paths
        entries = manpath.split(":")
        if str(share_man) in entries or ("" in entries and _on_path(share_man, environ)):
            return []
        return [f"MANPATH does not name {share_man}: add it (export MANPATH=\"{share_man}:$MANPATH\") for `man exo`"]
    if _on_path(share_man, environ):
        return []
    bindir = share_man.parent.parent / "bin"
    return [f"man looks in {share_man} only when {bindir} is on PATH: add it to PATH, or {share_man} to MANPATH, "
            "for `man exo`"]


def _on_path(share_man: Path, environ: Mapping[str, str]) -> bool:
    """Whether man-db derives ``share_man`` (``<prefix>/share/man``) from a ``<prefix>/bin`` on PATH."""
    bindir = os.path.normpath(share_man.parent.parent / "bin")
    return any(os.path.normpath(d) == bindir for d in environ.get("PATH", "").split(os.pathsep) if d)
