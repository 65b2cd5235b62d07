"""bubblewrap around an agent: a plan (what it may write, what it must not see) -> the ``bwrap`` command line.

``build(plan)`` is pure: it turns a ``Plan`` into the argv and environment of one sandboxed
command, for a multiplexer's pane, the headless runner or ``run``. What the sandbox holds
(verified in docs/security.md "The sandbox" and the attack tests, tests/test_sandbox_attack.py):

- the root file system read-only; writable only the agent's clone, its private HOME and cache,
  a private /tmp and the paths the user adds; a fresh /dev and /proc (own pid namespace);
- **hidden**, not merely read-only (a socket in a read-only folder still connects): every folder
  in ``hidden`` gets an empty tmpfs over it and every file in ``hidden_files`` an empty file;
  /run (the user's and the system's sockets: D-Bus, ssh-agent, PostgreSQL, docker) and /tmp
  (tmux, X11) always; what must stay visible under a hidden folder (the agent's own socket
  folder, the repository's ``.git`` read-only) is bound again after it: mounts are applied
  outermost first, so a deeper path always wins over the folder that holds it;
- every capability dropped (``--cap-drop ALL``: bwrap run as root keeps them otherwise, and a
  remount then makes a read-only bind writable), no new privileges (bwrap always sets it);
  ``--new-session`` unless the command owns a terminal (a TUI), so it cannot push keystrokes
  (TIOCSTI) into a terminal it shares; a TUI must be its pane's last program;
- the environment is exactly ``plan.env`` (``allowed_env`` builds it from an allow-list): bwrap
  inherits it, so no value ever appears on a command line.

The network is ``Network``: ``host`` (the host's network, today's default), ``none`` (its own
empty network namespace) or ``bridge`` (its own namespace plus read-only binds, variables and a
prelude before the command: the allow-list proxy's ``NetworkPlan``, ``Network.bridge``).
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from exo_cli.errors import EnvironmentError_, InvalidInput

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

    from exo_cli.adapters.procrun import Captured

BWRAP = "bwrap"
NETWORK_KINDS = ("host", "none", "bridge")

# Folders every sandbox hides whatever the plan says: where a Linux system keeps its sockets.
ALWAYS_HIDDEN = ("/run", "/var/run", "/tmp", "/var/tmp", "/dev/shm")
PRIVATE_TEMP = ("/tmp", "/var/tmp", "/dev/shm")  # of those, the ones that stay writable: the sandbox's own
# The user's secret folders and files, relative to the real HOME (``[sandbox] hide`` adds more).
SECRETS = (".ssh", ".aws", ".config/gh", ".gnupg", ".docker", ".kube", ".azure", ".config/gcloud",
           ".password-store", ".netrc", ".git-credentials", ".pgpass", ".npmrc", ".pypirc", ".cargo/credentials.toml",
           ".cargo/credentials", ".config/hub")
# The agent CLIs' own folders of the real HOME: hidden (other projects' transcripts, the login); the
# sandbox's private HOME gets a copy of the settings and the credentials bound read-only per file.
CLI_FOLDERS = (".claude", ".claude.json", ".codex", ".gemini")
# Files the human's own shell or CLIs run at their next start: never writable from a sandbox.
STARTUP_FILES = (".bashrc", ".bash_profile", ".bash_login", ".profile", ".bash_logout", ".zshrc", ".zprofile",
                 ".zshenv", ".zlogin", ".config/fish", ".inputrc", ".gitconfig", ".config/git", ".ssh",
                 ".claude", ".claude.json", ".codex", ".gemini", ".config/exo")

# Variables every sandboxed command keeps (with the CLI's own and ``[sandbox] env``); globs allowed.
BASE_ENV = ("PATH", "TERM", "COLORTERM", "TERM_PROGRAM", "LANG", "LANGUAGE", "LC_*", "TZ", "NO_COLOR", "FORCE_COLOR",
            "CLICOLOR", "COLUMNS", "LINES", "USER", "LOGNAME", "SHELL", "EDITOR", "VISUAL", "PAGER",
            "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy",
            "all_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE",
            "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
            "VIRTUAL_ENV", "PYTHONPATH", "NODE_PATH",
            # exo's own, set by spawn for this agent (its socket is its identity inside a sandbox)
            "EXO_AGENT", "EXO_AGENT_PROOF", "EXO_ROLE", "EXO_PARENT", "EXO_STATE_DIR", "EXO_SOCKET",
            "EXO_MCP_WAIT", "EXO_DEBUG", "EXO_ANTHROPIC_API_KEY")
# Each agent CLI's own variables: its key, base URL, model and switches.
CLI_ENV: dict[str, tuple[str, ...]] = {
    "claude": ("ANTHROPIC_*", "CLAUDE_CODE_*", "DISABLE_*", "IS_SANDBOX", "MCP_*", "MAX_THINKING_TOKENS",
               "BASH_DEFAULT_TIMEOUT_MS", "BASH_MAX_TIMEOUT_MS", "AWS_REGION", "AWS_PROFILE", "CLOUD_ML_REGION",
               "VERTEX_*"),
    "codex": ("OPENAI_*", "CODEX_HOME", "CODEX_*"),
    "gemini": ("GEMINI_*", "GOOGLE_API_KEY", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION",
               "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GEMINI_BASE_URL"),
    "custom": (),
    "demo": (),
}
# Never inside, whatever the allow-list or ``[sandbox] env`` say: each one is a door out.
NEVER_ENV = ("TMUX", "TMUX_PANE", "TMUX_TMPDIR", "SSH_AUTH_SOCK", "SSH_AGENT_PID", "DBUS_SESSION_BUS_ADDRESS",
             "DOCKER_HOST", "DOCKER_CONFIG", "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "XDG_RUNTIME_DIR",
             "GPG_AGENT_INFO", "GNUPGHOME", "KRB5CCNAME", "GIT_ASKPASS", "SSH_ASKPASS", "PGPASSWORD",
             "PGHOST", "PGPASSFILE", "EXO_STORE_URL", "LD_PRELOAD", "LD_LIBRARY_PATH", "ZELLIJ",
             "ZELLIJ_SESSION_NAME", "GIT_DIR", "GIT_WORK_TREE", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM",
             "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_SSH_COMMAND", "GIT_SSH", "BASH_ENV", "ENV",
             "PROMPT_COMMAND", "EXO_RUN")
# The per-agent cache: each tool's variable -> its folder under the plan's cache.
CACHE_ENV = (("XDG_CACHE_HOME", ""), ("npm_config_cache", "npm"), ("PIP_CACHE_DIR", "pip"), ("UV_CACHE_DIR", "uv"),
             ("CARGO_HOME", "cargo"), ("GOMODCACHE", "gomod"))


@dataclass(frozen=True)
class Network:
    """How the sandbox reaches the network: ``host``, ``none`` or ``bridge`` (see the module).

    The shape of the allow-list proxy's ``NetworkPlan`` (issue 32): ``binds``: (host folder,
    folder inside) bound read-only, such as the folder of the proxy's Unix socket (a socket in a
    read-only folder still connects); ``env``: variables set inside (``HTTPS_PROXY``...);
    ``prelude``: a command put before the agent's argv (the bridge's inner end, which ``exec``s the
    agent once its listeners are up). ``bridge`` (and ``none``) get a network namespace of their own.
    """

    kind: str = "host"
    binds: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    prelude: tuple[str, ...] = ()

    @classmethod
    def bridge(cls, plan: Any) -> Network:
        """The ``bridge`` network of a ``NetworkPlan`` (its ``binds``, ``env`` and ``prelude``)."""
        return cls("bridge", tuple((str(a), str(b)) for a, b in plan.binds), tuple(dict(plan.env).items()),
                   tuple(plan.prelude))


@dataclass(frozen=True)
class Plan:
    """Everything one sandboxed command may see and write. Paths are absolute host paths.

    ``writable``: bound read-write at the same path (the clone, the private HOME, the cache, the
    user's ``[sandbox] paths``); ``sockets``: socket folders bound read-only at the same path (the
    agent's own, under a hidden runtime folder: it connects, but cannot replace the socket); ``readable``: bound read-only at the same
    path, to show again what a hidden folder holds (the repository's ``.git``); ``hidden``:
    folders covered by an empty tmpfs; ``hidden_files``: files covered by ``empty`` (an empty file
    exo owns); ``files``: (source, destination) files bound read-only (credentials, a cleaned
    ``.git/config``); ``devices``: device nodes bound in (``[sandbox] devices``, GPUs);
    ``protect``: paths that no writable path may contain (the user's start-up files and CLI folders).
    ``tty``: the command owns a terminal (a TUI): no ``--new-session``.
    """

    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str]
    empty: str
    writable: tuple[str, ...] = ()
    sockets: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    hidden_files: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    devices: tuple[str, ...] = ()
    protect: tuple[str, ...] = ()
    network: Network = field(default_factory=Network)
    tty: bool = False
    die_with_parent: bool = True


# --------------------------------------------------------------------------- the pure builder


def build(plan: Plan, *, bwrap: str = BWRAP) -> tuple[list[str], dict[str, str]]:
    """The ``bwrap`` argv and the environment that run ``plan.argv`` inside the sandbox.

    InvalidInput for a plan that would defeat itself: a relative or odd path, a writable path
    that holds a protected one (``~`` would make ``~/.bashrc`` writable) or a hidden one, an
    unknown network kind, an empty command.
    """
    if not plan.argv:
        raise InvalidInput("nothing to run in the sandbox (an empty command)", field="argv")
    if plan.network.kind not in NETWORK_KINDS:
        raise InvalidInput(f"unknown sandbox network {plan.network.kind!r}", field="network",
                           choices=list(NETWORK_KINDS))
    for path in (plan.cwd, plan.empty, *plan.writable, *plan.sockets, *plan.readable, *plan.hidden,
                 *plan.hidden_files, *plan.devices, *plan.protect, *(p for pair in plan.files for p in pair),
                 *(p for pair in plan.network.binds for p in pair)):
        _check_path(path)
    guarded = [*plan.protect, *plan.hidden, *plan.hidden_files]
    for path in plan.writable:
        for inner in guarded:
            if _within(inner, path):
                raise InvalidInput(f"the sandbox cannot make {path} writable: it holds {inner}, which an agent must "
                                   "never write", field="writable", path=path, holds=inner,
                                   hint="Name a folder inside it instead ([sandbox] paths).")
    # (destination, rank, arguments): applied outermost first; at one path, hide before showing again.
    mounts: list[tuple[str, int, list[str]]] = []
    always = [p for p in ALWAYS_HIDDEN if os.path.isdir(p) and not os.path.islink(p)]  # /var/run: a link to /run
    for path in _unique([*always, *plan.hidden]):
        mounts.append((path, 0, ["--tmpfs", path]))
    for path in _unique(plan.hidden_files):
        mounts.append((path, 1, ["--ro-bind", plan.empty, path]))
    for path in _unique(plan.readable):
        mounts.append((path, 2, ["--ro-bind", path, path]))
    for path in _unique(plan.writable):
        mounts.append((path, 3, ["--bind", path, path]))
    for path in _unique(plan.sockets):  # read-only: a socket there still connects, and cannot be replaced
        mounts.append((path, 3, ["--ro-bind", path, path]))
    for source, dest in plan.files:
        mounts.append((dest, 4, ["--ro-bind", source, dest]))
    for source, dest in plan.network.binds:
        mounts.append((dest, 4, ["--ro-bind", source, dest]))
    for device in _unique(plan.devices):
        mounts.append((device, 6, ["--dev-bind", device, device]))
    mounts.sort(key=lambda m: (_depth(m[0]), m[1]))
    # a hidden folder is read-only too once what it shows again is bound in it: a write there would
    # land in the tmpfs (harmless, but the agent would think it wrote the state or the main checkout)
    for path in _unique(plan.hidden) + [p for p in always if p not in PRIVATE_TEMP]:
        mounts.append((path, 9, ["--remount-ro", path]))

    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for _, _, args in mounts:
        argv += args
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--cap-drop", "ALL"]
    if plan.network.kind != "host":
        argv.append("--unshare-net")
    if not plan.tty:
        argv.append("--new-session")
    if plan.die_with_parent:
        argv.append("--die-with-parent")
    argv += ["--chdir", plan.cwd, "--"]
    command = [*plan.network.prelude, *plan.argv]  # the bridge execs the command once it listens
    env = {k: v for k, v in plan.env.items() if k not in NEVER_ENV}
    env.update(dict(plan.network.env))
    return argv + command, env


def _check_path(path: str) -> None:
    if not isinstance(path, str) or not path.startswith("/") or "\0" in path or "\n" in path:
        raise InvalidInput(f"sandbox paths must be absolute: {path!r}", field="path", path=str(path))


def _norm(path: str) -> str:
    return os.path.normpath(path)


def _within(inner: str, outer: str) -> bool:
    """``inner`` is ``outer`` or lies under it."""
    inner, outer = _norm(inner), _norm(outer)
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def _depth(path: str) -> int:
    norm = _norm(path)
    return 0 if norm == "/" else norm.count("/")


def _unique(paths: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for p in paths:
        seen.setdefault(_norm(p), None)
    return list(seen)


# --------------------------------------------------------------------------- what to hide, what to keep


def allowed_env(environ: Mapping[str, str], *, cli: str, extra: Iterable[str] = ()) -> dict[str, str]:
    """The variables of ``environ`` a sandboxed agent keeps: ``BASE_ENV``, the CLI's own and ``extra``.

    ``extra`` is ``[sandbox] env`` (names or globs). ``NEVER_ENV`` is dropped whatever matches it.
    """
    keep = _globs((*BASE_ENV, *CLI_ENV.get(cli, ()), *extra)).fullmatch
    return {k: v for k, v in environ.items() if k not in NEVER_ENV and keep(k)}


@functools.lru_cache(maxsize=64)
def _globs(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regular expression matching what any of the shell ``patterns`` matches (case-sensitive, as
    ``fnmatchcase``): one match per variable instead of one per pattern (a spawn filters every agent's
    environment)."""
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns) or "(?!)")


def cache_env(cache: str) -> dict[str, str]:
    """The per-agent cache variables, each naming its folder under ``cache``."""
    return {var: os.path.join(cache, sub) if sub else cache for var, sub in CACHE_ENV}


def secret_paths(home: str, extra: Iterable[str] = ()) -> list[str]:
    """The user's secret folders and files (``SECRETS`` under ``home``, then ``extra`` with ``~`` expanded)."""
    return [os.path.join(home, rel) for rel in (*SECRETS, *CLI_FOLDERS)] + [_home_relative(p, home) for p in extra]


def protected_paths(home: str) -> list[str]:
    """The real HOME's start-up files and CLI folders: never writable from a sandbox."""
    return [os.path.join(home, rel) for rel in STARTUP_FILES]


def socket_places(environ: Mapping[str, str], *, home: str, store_url: str | None = None,
                  tmux_socket: str | None = None) -> tuple[list[str], list[str]]:
    """(folders, files) that hold the user's sockets outside /run and /tmp (which are always hidden).

    tmux's socket folder wherever ``TMUX_TMPDIR`` (or exo's pinned socket) puts it, the socket of
    ``TMUX``, ``SSH_AUTH_SOCK``'s folder, ``~/.gnupg``, the PostgreSQL socket folder of ``store_url``,
    ``DOCKER_HOST``'s socket and the D-Bus session bus (a ``unix:path=``; an abstract socket needs
    the ``none``/``bridge`` network). A socket directly in HOME is hidden as a file.
    """
    uid = os.getuid()
    folders: list[str] = [os.path.join(environ.get("GNUPGHOME") or os.path.join(home, ".gnupg"))]
    files: list[str] = []

    def socket(path: str | None) -> None:
        if not path or not path.startswith("/"):
            return
        parent = os.path.dirname(_norm(path))
        if parent in ("/", _norm(home)) or _within(home, parent):
            files.append(_norm(path))
        else:
            folders.append(parent)

    folders.append(os.path.join(environ.get("TMUX_TMPDIR") or "/tmp", f"tmux-{uid}"))
    socket(tmux_socket)
    socket((environ.get("TMUX") or "").split(",")[0])
    socket(environ.get("SSH_AUTH_SOCK"))
    socket(_pg_socket_dir(store_url))
    docker = environ.get("DOCKER_HOST") or ""
    if docker.startswith("unix://"):
        socket(docker[len("unix://"):])
    for part in (environ.get("DBUS_SESSION_BUS_ADDRESS") or "").split(";"):
        for kv in part.partition(":")[2].split(","):
            if kv.startswith("path="):
                socket(kv[len("path="):])
    runtime = environ.get("XDG_RUNTIME_DIR")
    if runtime and runtime.startswith("/"):
        folders.append(runtime)
    return _unique(folders), _unique(files)


def _pg_socket_dir(store_url: str | None) -> str | None:
    """The socket of a ``postgresql://`` URL's ``host`` (a folder: libpq puts ``.s.PGSQL.<port>`` there)."""
    if not store_url:
        return None
    from urllib.parse import parse_qs, unquote, urlsplit

    parts = urlsplit(store_url.strip())
    hosts = [*parse_qs(parts.query).get("host", []), unquote(parts.hostname or "")]
    for host in hosts:
        if host.startswith("/"):
            return os.path.join(host, ".s.PGSQL")  # its folder is what gets hidden
    return None  # a TCP host, or libpq's default socket folder (/run/postgresql: under /run, always hidden)


@dataclass(frozen=True)
class Agent:
    """The places of one sandboxed agent (host paths), from which ``assemble`` makes its ``Plan``.

    ``clone``: its own ``git clone --shared`` (writable, the cwd); ``repository``: the main
    checkout (its work tree hidden, its ``.git`` read-only, ``.git/config`` replaced by
    ``git_config`` when given, else hidden); ``checkouts``: the folder holding every agent's
    checkout (hidden: siblings' files are not this agent's); ``state_dir``/``runtime_dir``: exo's
    (hidden); ``socket_dir``: the agent's own socket folder (shown again); ``home``: the real HOME
    (its secrets hidden, its start-up files protected); ``private_home``/``cache``: writable;
    ``credentials``: (real file, file in the private HOME) bound read-only.
    """

    clone: str
    repository: str
    state_dir: str
    runtime_dir: str
    home: str
    private_home: str
    cache: str
    empty: str
    socket_dir: str | None = None
    checkouts: str | None = None
    git_config: str | None = None
    credentials: tuple[tuple[str, str], ...] = ()


def assemble(agent: Agent, argv: Iterable[str], *, cli: str, environ: Mapping[str, str],
             store_url: str | None = None, tmux_socket: str | None = None, paths: Iterable[str] = (),
             hide: Iterable[str] = (), env: Iterable[str] = (), devices: Iterable[str] = (),
             network: Network | None = None, tty: bool = False, set_env: Mapping[str, str] | None = None) -> Plan:
    """The ``Plan`` of one agent's sandbox: what it writes, what it must not see, its environment.

    ``environ`` is the launch's environment (allow-listed here: ``allowed_env``), ``set_env`` what
    exo sets on top (its identity variables); ``paths``, ``hide``, ``env`` and ``devices`` are
    ``[sandbox]``'s. Hidden paths that do not exist are left out (a missing mount point cannot
    be made on a read-only root); a hidden file gets the empty file, a hidden folder a tmpfs.
    """
    repo = os.path.realpath(agent.repository)
    for device in devices:
        if not os.path.exists(device):
            raise InvalidInput(f"[sandbox] devices names {device!r}, which does not exist here", field="devices",
                               path=device, hint="Remove it from [sandbox] devices, or name the device's /dev node.")
    for path in paths:
        if not os.path.isdir(_home_relative(path, agent.home)):
            raise InvalidInput(f"[sandbox] paths names {path!r}, which is not a folder", field="paths", path=path,
                               hint="Create it, or remove it from [sandbox] paths.")
    folders, socket_files = socket_places(environ, home=agent.home, store_url=store_url, tmux_socket=tmux_socket)
    wanted_hidden = [repo, agent.state_dir, agent.runtime_dir, *folders, *socket_files,
                     *secret_paths(agent.home, hide), os.path.join(repo, ".git", "exo")]
    if agent.checkouts:
        wanted_hidden.append(agent.checkouts)
    hidden: list[str] = []
    hidden_files: list[str] = []
    for path in _unique(os.path.realpath(p) for p in wanted_hidden):  # a linked ~/.aws: what it points at
        if os.path.isdir(path):
            hidden.append(path)
        elif os.path.exists(path):
            hidden_files.append(path)
    files = list(agent.credentials)
    git_dir = os.path.join(repo, ".git")
    config = os.path.join(git_dir, "config")
    if os.path.isfile(config):
        if agent.git_config:
            files.append((agent.git_config, config))
        else:
            hidden_files.append(config)
    # a start-up file linked from a dotfiles folder: the folder it lives in is protected as well
    protect = _unique([*protected_paths(agent.home), *(os.path.realpath(p) for p in protected_paths(agent.home))])
    inside = {**allowed_env(environ, cli=cli, extra=env), **(set_env or {})}
    inside.update(HOME=agent.private_home, TMPDIR="/tmp", **cache_env(agent.cache))
    return Plan(
        argv=tuple(argv), cwd=agent.clone, env=inside, empty=agent.empty,
        writable=tuple(_unique(os.path.realpath(_home_relative(p, agent.home))
                               for p in [agent.clone, agent.private_home, agent.cache, *paths])),
        sockets=(os.path.realpath(agent.socket_dir),) if agent.socket_dir else (),
        readable=(git_dir,) if os.path.isdir(git_dir) else (),
        hidden=tuple(hidden), hidden_files=tuple(hidden_files), files=tuple(files),
        devices=tuple(devices), protect=tuple(protect), network=network or Network(), tty=tty,
    )  # fmt: skip


def _home_relative(path: str, home: str) -> str:
    """``~`` and ``~/x`` as the user's HOME and a path in it; anything else as it is."""
    return os.path.join(home, path[2:]) if path == "~" or path.startswith("~/") else path


def write_clean_git_config(common_dir: Path, dest: Path) -> Path:
    """Write the repository's ``.git/config`` as a sandbox sees it (``clean_git_config``) to ``dest``; ``dest``."""
    from exo_cli.adapters.files import atomic_write

    try:
        text = (common_dir / "config").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    atomic_write(dest, clean_git_config(text), mode=0o600, fsync=False)
    return dest


def clean_git_config(text: str) -> str:
    """The repository's ``.git/config`` as a sandbox sees it: the format keys only.

    Only ``core.repositoryformatversion``, ``core.bare`` and ``[extensions]`` (the object format,
    ref storage) stay: remotes (tokens in URLs), credential helpers and command keys do not.
    """
    out: list[str] = []
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line.strip("[]").strip().lower()
            if section in ("core", "extensions"):
                out.append(f"[{section}]")
            continue
        key = line.split("=", 1)[0].strip().lower()
        if (section == "core" and key in ("repositoryformatversion", "bare")) or (section == "extensions" and key):
            out.append("\t" + line)
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- running it


def bwrap_path(environ: Mapping[str, str] | None = None) -> str | None:
    """Where ``bwrap`` is on PATH, or None."""
    import shutil

    return shutil.which(BWRAP, path=(environ or os.environ).get("PATH"))


def probe(*, path: str | None = None, timeout: float = 20.0) -> tuple[bool, str]:
    """Whether bubblewrap works here: (True, its version) or (False, why not).

    Runs ``true`` (by its path) in the smallest sandbox exo makes (own pid namespace, no capabilities); a
    kernel without unprivileged user namespaces, or a container that forbids them, fails here.
    ``path``: the PATH to look for ``bwrap`` on (this process's by default).
    """
    from exo_cli.adapters.procrun import run_captured

    found = bwrap_path({"PATH": path} if path is not None else None)
    if found is None:
        return False, "bubblewrap is not installed (no bwrap on PATH)"
    # a program by its path: a PATH without ``true`` on it says nothing about bubblewrap
    inner = next(([p] for p in ("/usr/bin/true", "/bin/true") if os.access(p, os.X_OK)), [sys.executable, "-S", "-c", ""])
    argv = [found, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--cap-drop", "ALL",
            "--new-session", "--die-with-parent", "--", *inner]
    try:
        done = run_captured(argv, {"PATH": path or os.environ.get("PATH", "/usr/bin:/bin")}, timeout, None)
        version = run_captured([found, "--version"], {}, timeout, None)
    except OSError as exc:
        return False, f"bwrap cannot start: {exc.strerror or exc}"
    if done.code != 0:
        why = done.err.decode("utf-8", "replace").strip().splitlines()
        return False, "bwrap does not work here: " + (why[-1] if why else f"exit {done.code}")
    return True, version.out.decode("utf-8", "replace").strip() or "bubblewrap"


def run(plan: Plan, *, timeout: float, stdin: bytes | None = None) -> Captured:
    """Run ``plan`` in the sandbox and wait (a post-create command, a probe): its exit code and output.

    The deadline ends bwrap's whole session, and with it the sandbox's pid namespace.
    EnvironmentError when bubblewrap is not installed.
    """
    from exo_cli.adapters.procrun import run_captured

    found = bwrap_path(plan.env) or bwrap_path()
    if found is None:
        raise EnvironmentError_("bubblewrap is not installed (no bwrap on PATH)",
                                hint="Install it (Debian/Ubuntu: apt-get install bubblewrap), or run without the sandbox.")
    argv, env = build(plan, bwrap=found)
    return run_captured(argv, env, timeout, stdin)


def ensure_empty_file(path: Path) -> str:
    """An empty, read-only file exo owns (what hides a file); made when missing, emptied when not empty."""
    try:
        st = os.lstat(path)
        if st.st_size == 0 and not os.path.islink(path) and os.path.isfile(path):
            return str(path)
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o400)
    os.close(fd)
    return str(path)
