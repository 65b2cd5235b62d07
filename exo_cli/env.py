"""The context every operation runs in: cwd, environment, repository, config, store, caller.

Everything is computed lazily and cached, so a command pays only for what it uses
(``exo --help`` touches none of it; ``exo status`` one git call and one SQLite open).

Who is calling (``identify``) and which state folder is theirs (``find_state_dir``) are
decided here, from exo's own records: see docs/security.md "Roles come from exo's records".
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

from exo_cli.errors import EnvironmentError_, ExoError, InvalidInput, StateError
from exo_cli.lite import NamedTuple
from exo_cli.records import RETIRED_SEP, ROOT
from exo_cli.trust import REASON, store_as_is

TYPE_CHECKING = False
if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Mapping
    from typing import Any

    from exo_cli.adapters.git import Git, RepoInfo
    from exo_cli.adapters.store.base import Store
    from exo_cli.adapters.worktree import Worktrees
    from exo_cli.config import Config
    from exo_cli.records import Agent

# Same names as config.EnvVars (kept here so the hot path does not import tomllib).
AGENT_VAR = "EXO_AGENT"
# The per-agent secret that proves an EXO_AGENT claim. Its name avoids the words agent CLIs
# strip from the environment they pass on (Gemini CLI drops *TOKEN*, *SECRET*, *KEY*, *AUTH*...).
PROOF_VAR = "EXO_AGENT_PROOF"
STATE_DIR_VAR = "EXO_STATE_DIR"
STORE_URL_VAR = "EXO_STORE_URL"
STORE_FOLLOW_VAR = "EXO_STORE_FOLLOW"  # "1" (the broker's): the state folder's store wins over a URL
# The agent's own socket to the team broker (spawn sets it): a process carrying it sends its calls
# there (registry.invoke, hooks, exo mcp) and never touches the state itself.
SOCKET_VAR = "EXO_SOCKET"
# Variables exo sets only in an agent's environment: a process carrying one is an agent until
# its claim is proven or refused, never the human.
MARKER_VARS = (AGENT_VAR, PROOF_VAR, "EXO_PARENT", "EXO_ROLE", SOCKET_VAR)
# Where an agent's record keeps the SHA-256 of its proof (the proof itself is never stored).
PROOF_FIELD = "proof_sha256"
# The state folder's file naming this machine among exo's hosts (see ``Env.host_name``).
HOST_NAME_FILE = "host-name"
ROLE_RANK = {"dev": 1, "tl": 2, "human": 3}


class Caller(NamedTuple):
    """Who is calling: an agent exo recorded, or the human at the root (a cheap record: hot path)."""

    agent_id: str  # "root" for the human
    role: str  # "human" | "tl" | "dev"
    via: str  # "ancestry" | "env" | "socket" (the broker: the agent's own socket) | "worktree" | "none"

    @property
    def is_human(self) -> bool:
        # From the role exo decided, never from a name: no agent is ever recorded as "human".
        return self.role == "human"


HUMAN = Caller(ROOT, "human", "none")


class Env:
    """Lazily resolved context of one exo invocation (CLI command, hook, or MCP server)."""

    # A long-lived process's runner of background work (the broker: ``broker/later.py``), else None.
    defer: Callable[[Env, list[Any]], bool] | None = None

    def __init__(
        self,
        cwd: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None,
        *,
        overrides: Mapping[str, Any] | None = None,
        role_cap: str | None = None,
        pid: int | None = None,
        caller: Caller | None = None,
        shared: Mapping[str, Any] | None = None,
        cwd_given: bool = False,
    ) -> None:
        """``caller`` fixes who is calling instead of ``identify`` (a spawn into another repository acts
        there as that repository's root; the broker, the agent whose socket a request came through).
        ``shared`` hands over values a long-lived front end already has (the broker's ``state_path`` and
        ``store``), so each request does not open the store again, and ``defer``, which takes the work
        ``turnend.after_exit`` is given). ``cwd_given``: the caller named the folder (``-C``) rather
        than running there."""
        if caller is not None:
            self.__dict__["caller"] = caller
        for name, value in (shared or {}).items():
            if name not in ("state_path", "store", "repo", "runtime_dir", "defer"):
                raise ValueError(f"Env cannot share {name!r}")
            self.__dict__[name] = value
        self.cwd_given = cwd_given
        self.cwd = Path(cwd if cwd is not None else os.getcwd()).absolute()
        self.environ: Mapping[str, str] = dict(os.environ if environ is None else environ)
        self.overrides = dict(overrides or {})
        self.role_cap = role_cap
        self.pid = pid if pid is not None else os.getpid()
        # Set by the MCP adapter so blocking operations can stop when the client cancels.
        self.cancel: threading.Event | None = None
        # Set when another host's exo asked this one to spawn (``ops.hosts``): the parent's branch as
        # fetched from the shared remote ({"base_branch", "base_ref", "from_host"}).
        self.via_host: dict[str, Any] | None = None
        self._url_pointed = False  # store_url came from the state folder's pointer

    # -- repository and state ---------------------------------------------------------------
    @cached_property
    def repo(self) -> RepoInfo:
        """The repository around cwd; inside an agent's own clone, the repository exo made it from (the team's)."""
        from exo_cli.adapters.git import Git
        from exo_cli.adapters.gitdir import shared_clone_top

        top = shared_clone_top(self.cwd)  # an agent's clone is found as files: git never runs in it (its config)
        if top is not None:
            from exo_cli.adapters.clones import team_home

            if (home := team_home(top, self.environ)) is not None:
                return Git(home).discover()
        return Git(self.cwd).discover()

    @cached_property
    def state_path(self) -> Path:
        """The state folder (not created): the repository's own; see ``find_state_dir``."""
        return find_state_dir(self)

    @cached_property
    def state_dir(self) -> Path:
        path = self.state_path
        try:
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
        except (FileExistsError, NotADirectoryError) as exc:
            raise InvalidInput(f"The state folder {path} is not a folder: {exc.strerror}",
                               hint=f"Fix or unset ${STATE_DIR_VAR}.", path=str(path)) from exc
        except OSError as exc:
            raise EnvironmentError_(f"Cannot create the state folder {path}: {exc.strerror}",
                                    path=str(path)) from exc
        return path

    @cached_property
    def repo_id(self) -> str:
        from exo_cli.adapters.files import sha1_hex

        return sha1_hex(str(self.state_dir.resolve()).encode())[:10]

    @cached_property
    def runtime_dir(self) -> Path:
        """The short folder of doorbells, FIFOs and records (derived from the state folder and uid; made on use)."""
        from exo_cli.adapters.files import runtime_dir_for

        return runtime_dir_for(str(self.state_dir.resolve()), create=False)

    @cached_property
    def config(self) -> Config:
        from exo_cli.config import load as load_config

        try:
            root: Path | None = self.repo.root
        except Exception:  # config outside a repo: user config and env only
            root = None
        return load_config(repo_root=root, environ=self.environ, overrides=self.overrides)

    @cached_property
    def git(self) -> Git:
        """The git client of the main checkout."""
        from exo_cli.adapters.git import Git

        return Git(self.repo.root)

    @cached_property
    def worktrees(self) -> Worktrees:
        """Worktree creation and removal for this repository (serialized per repository)."""
        from exo_cli.adapters.worktree import Worktrees

        return Worktrees(self.git, self.state_dir, self.repo.common_dir)

    @cached_property
    def worktree_root(self) -> Path:
        """The folder exo creates worktrees in (``EXO_WORKTREE_ROOT``, hangar, ``worktree.root``, ``.exo/worktrees``)."""
        from exo_cli.adapters.worktree import worktrees_folder

        origin = self.config.origin("worktree.root")
        return worktrees_folder(self.repo.root, hangar_override=self.environ.get("HANGAR_ROOT"),
                                configured=str(self.config.get("worktree.root") or "") or None,
                                configured_by_env=origin.startswith("$") or origin == "flag")

    @cached_property
    def store_url(self) -> str | None:
        """The PostgreSQL store's URL, or None for the SQLite database in the state folder. A repository's state records where it lives: the pointer file ``exo store migrate`` (or
        the first process that put the state on PostgreSQL) left in the state folder wins. Without
        one, ``EXO_STORE_URL`` (set, even empty) beats ``[store] url``, else SQLite. A choice that
        contradicts where the state is is a StateError that says to migrate (the broker's
        ``EXO_STORE_FOLLOW`` makes none: it follows the state folder wherever that holds the state).
        """
        from exo_cli.adapters.store import has_state, pointed_url, same_store

        state = self.state_path
        pointed = pointed_url(state)
        chosen = self._chosen_url()
        if self.environ.get(STORE_FOLLOW_VAR) == "1" and (pointed is not None or has_state(state)):
            chosen = None  # the broker's starter (an agent, a keeper's old environment) may predate a move
        if pointed is not None:
            if chosen is not None and chosen != pointed and not same_store(chosen, pointed):
                raise _store_moved(f"exo's state for this repository is in {pointed}, but {chosen or 'SQLite'} "
                                   "is configured", pointed)
            self._url_pointed = True
            return pointed
        if chosen and has_state(state):
            raise _store_moved(f"exo's state for this repository is in its SQLite database ({state}), but "
                               f"{chosen} is configured", "sqlite")
        return chosen or None

    def _chosen_url(self) -> str | None:
        """What the environment or the configuration asks for: a URL, "" for SQLite, None when silent.

        An agent's process (it carries exo's agent variables) follows the state folder only: its
        environment may predate a move. The configuration is parsed only when one of its files
        mentions a store, so the SQLite hot paths never load it.
        """
        if self.markers:
            return None
        if STORE_URL_VAR in self.environ:
            return self.environ[STORE_URL_VAR].strip()
        if _mentions_store(self._config_files()):
            return str(self.config.get("store.url") or "").strip() or None
        return None

    def follow_store(self) -> None:
        """Drop the cached store when the state moved since (long-lived processes: the MCP server)."""
        if "store_url" in self.__dict__:
            was = self.__dict__.pop("store_url")
            if self.store_url != was:
                old = self.__dict__.pop("store", None)
                if old is not None:
                    old.close()

    def _config_files(self) -> list[Path]:
        from exo_cli.config_paths import config_files

        try:
            root: Path | None = self.repo.root
        except Exception:  # outside a repository: the user's file only
            root = None
        return config_files(self.environ, root)

    @cached_property
    def store(self) -> Store:
        if self.relayed:
            raise StateError("An agent reaches exo's state through its broker, never directly",
                             hint=f"Run exo from the agent's own session: ${SOCKET_VAR} names its socket.",
                             socket=self.relayed)
        from exo_cli.adapters.store import open_store, point_to, pointed_team, pointed_url

        url = self.store_url
        team = pointed_team(self.state_path) if url else None
        patience = self._store_patience() if url else None
        store = open_store(self.state_path if url else self.state_dir, lambda: self.runtime_dir, url, team, patience)
        if url and not self._url_pointed and pointed_url(self.state_path) is None:
            # after open_store checked the URL (no password), agents' processes follow the state there; a
            # URL read from the pointer is never written back (a migrate may have just removed the pointer)
            point_to(self.state_dir, url)
        return store

    def _store_patience(self) -> float | None:
        """``timeouts.store``; None (the store's default) when the configuration cannot be read: a bad
        file is reported by the commands that read it, never by every hook of a PostgreSQL team."""
        try:
            return float(self.config.get("timeouts.store"))
        except ExoError:
            return None

    @cached_property
    def host_name(self) -> str:
        """This machine's name among exo's hosts: ``EXO_HOST``, else the state folder's ``host-name``
        (left by the first call that reached this clone as ``[hosts.NAME]``), else the hostname."""
        named = self.environ.get("EXO_HOST", "").strip()
        if named:
            return named
        try:
            named = (self.state_path / HOST_NAME_FILE).read_text().strip()
        except (OSError, ExoError):
            named = ""
        if named:
            return named
        return os.uname().nodename.split(".")[0].lower() or "localhost"

    @cached_property
    def joined(self) -> bool:
        """Whether this clone joined a team that began on another host (its store pointer names the team)."""
        from exo_cli.adapters.store import pointed_team

        return pointed_team(self.state_path) is not None

    def runs_here(self, agent: Agent) -> bool:
        """Whether ``agent`` runs on this machine: its recorded host is this one; a record without a host
        (made before hosts, or on SQLite) belongs to the clone that made it, never to one that joined later."""
        host = agent.host
        return host == self.host_name if host else not self.joined

    def has_state(self) -> bool:
        """True when the state already exists (hooks must not create it)."""
        if self.store_url:
            return self.store.exists()
        from exo_cli.adapters.store import has_state

        return has_state(self.state_path)

    # -- identity -------------------------------------------------------------------------
    @cached_property
    def markers(self) -> tuple[str, ...]:
        """The agent variables this process carries (``EXO_AGENT``, its proof, ``EXO_PARENT``, ``EXO_ROLE``)."""
        return tuple(v for v in MARKER_VARS if self.environ.get(v))

    @cached_property
    def caller(self) -> Caller:
        if self.relayed:  # its broker knows which agent this socket belongs to
            from exo_cli.relay import whoami

            agent_id, role = whoami(self.environ)
            return Caller(agent_id, role, "socket")
        return identify(self)

    @property
    def role(self) -> str:
        """The effective role: the caller's recorded role, lowered by ``exo mcp --role``."""
        role = self.caller.role
        if self.role_cap and ROLE_RANK[self.role_cap] < ROLE_RANK[role]:
            return self.role_cap
        return role

    @property
    def relayed(self) -> str | None:
        """The socket this process's calls go through (an agent's relay), or None to run them here.

        An agent spawned with a socket carries ``EXO_SOCKET``; an ``Env`` whose caller was fixed by
        the front end that made it (the broker, answering on that socket) runs its calls itself.
        """
        if "caller" in self.__dict__:
            return None
        return self.environ.get(SOCKET_VAR) or None

    def caller_agent(self) -> Agent | None:
        if self.caller.is_human:
            return None
        return self.store.agent(self.caller.agent_id)


# --------------------------------------------------------------------------- the state folder


def find_state_dir(env: Env) -> Path:
    """The state folder of ``env`` (not created): ``<git common dir>/exo`` of the repository around its cwd.

    ``$EXO_STATE_DIR`` may name that same folder (every agent gets it so); naming another one
    is honoured only for a caller that is no agent: one that carries an agent variable, runs
    under an agent's recorded process or inside a live agent's worktree gets InvalidInput,
    so no agent can make itself the human of an empty state. Outside any repository the
    override must be a repository's own state folder for such a caller.
    """
    raw = env.environ.get(STATE_DIR_VAR) or None
    override = _override_path(env, raw) if raw is not None else None
    if override is not None:
        # Every agent names its own state folder: confirm it from the .git files around cwd, without
        # running git (the hooks' hot path); anything else is decided by git below.
        fast = _common_dir_from_files(env)
        if fast is not None and os.path.realpath(override) == os.path.realpath(fast / "exo"):
            return override
    try:
        common = env.repo.common_dir
    except EnvironmentError_:
        if override is None:
            raise
        if env.markers and not _is_repository_state(override):
            raise _foreign_state(raw or "", None, env.markers) from None
        return override
    real = common / "exo"
    if override is None or os.path.realpath(override) == os.path.realpath(real):
        return real
    if env.markers or _agent_here(env, real):
        raise _foreign_state(raw or "", real, env.markers)
    return override


def _common_dir_from_files(env: Env) -> Path | None:
    """The git common dir around ``env.cwd`` read from ``.git`` files as git does, or None to ask git.

    Handles a main checkout (``.git/``) and a linked worktree (``.git`` file -> gitdir ->
    ``commondir``); anything unusual (``GIT_DIR`` and friends, a bare repository, cwd inside
    ``.git``, an unreadable file) returns None.
    """
    if any(env.environ.get(v) for v in ("GIT_DIR", "GIT_COMMON_DIR", "GIT_WORK_TREE")):
        return None
    try:
        for folder in (env.cwd, *env.cwd.parents):
            if folder.name == ".git":
                return None
            dotgit = folder / ".git"
            if dotgit.is_dir():
                return dotgit if not (dotgit / "commondir").exists() else None
            if dotgit.is_file():  # a checkout's files (an agent's to write): never a FIFO, a device or a link
                from exo_cli.adapters import gitdir as gd

                found = gd.git_dir_of(folder)
                return gd.common_of(found) if found is not None else None
    except (OSError, ValueError):
        return None
    return None


def _override_path(env: Env, raw: str) -> Path:
    """``$EXO_STATE_DIR`` as an absolute path; InvalidInput when it cannot be a folder."""
    if "\x00" in raw:
        raise InvalidInput(f"Invalid ${STATE_DIR_VAR}: it contains a NUL byte", field=STATE_DIR_VAR)
    path = Path(os.path.expanduser(raw))
    path = path if path.is_absolute() else env.cwd / path
    try:
        is_other = path.exists() and not path.is_dir()
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"Invalid ${STATE_DIR_VAR} {raw!r}: {exc}", field=STATE_DIR_VAR) from exc
    if is_other:
        raise InvalidInput(
            f"${STATE_DIR_VAR}={raw} is not a folder (it is a file)",
            hint=f"Unset {STATE_DIR_VAR} (exo finds the state folder from the repository) or point it at a folder.",
            field=STATE_DIR_VAR,
            path=str(path),
        )
    return path


def _is_repository_state(path: Path) -> bool:
    """Whether ``path`` is ``<git common dir>/exo``: its parent holds a repository's HEAD, objects and refs."""
    parent = path.parent
    try:
        return (path.name == "exo" and (parent / "HEAD").is_file() and (parent / "objects").is_dir()
                and (parent / "refs").is_dir() and not (parent / "commondir").exists())
    except OSError:
        return False


def _foreign_state(raw: str, real: Path | None, markers: tuple[str, ...]) -> InvalidInput:
    why = f"this process carries {', '.join(markers)}" if markers else "this process belongs to an agent"
    where = f"this repository's state folder is {real}" if real is not None else "it is no repository's state folder"
    return InvalidInput(
        f"${STATE_DIR_VAR}={raw} is refused: {where}, and {why}",
        hint="An agent always works on its repository's own state: unset EXO_STATE_DIR, or run exo from "
        "inside the repository the agent belongs to.",
        field=STATE_DIR_VAR,
        state_dir=raw,
    )


def _agent_here(env: Env, real: Path) -> bool:
    """Whether the repository's real state records an agent this process runs under or in."""
    from exo_cli.adapters.files import runtime_dir_for
    from exo_cli.adapters.store import has_state, open_store

    if not has_state(real):
        return False
    try:
        store = open_store(real, lambda: runtime_dir_for(os.path.realpath(real), create=False))
        try:
            return _by_ancestry(env, store) is not None or _by_worktree(env, store) is not None
        finally:
            store.close()
    except Exception:  # an unreadable state proves nothing either way
        return False


# --------------------------------------------------------------------------- the caller


def _store_moved(message: str, where: str) -> StateError:
    target = "sqlite" if where == "sqlite" else "URL"
    return StateError(message, hint=f"Move the state with `exo store migrate --to {target}`, or set [store] url / "
                      "EXO_STORE_URL to where the state is (or remove them).", store=where)


def _mentions_store(files: list[Path]) -> bool:
    """Whether any of these configuration files may set the store (a byte search, no TOML parsing)."""
    for path in files:
        try:
            if b"store" in path.read_bytes():
                return True
        except OSError:
            continue
    return False


def identify(env: Env) -> Caller:
    """Find the caller: process ancestry, then EXO_AGENT proven by its secret, then the worktree.

    Roles come from exo's records, never from what a process claims. A process that carries
    an agent variable must be proven (by ancestry or by its agent's proof): otherwise
    StateError, never the human, whatever the state says (missing, empty, unreadable). Only
    a process that is none of these and carries no agent variable is the human at the root.
    """
    markers = env.markers
    try:
        env.state_path  # noqa: B018 - InvalidInput: a state folder this caller may not use
    except InvalidInput:
        raise
    except ExoError as exc:  # outside any repository: no agent can be matched or proven there
        if markers:
            raise _unproven(env, f"it runs outside any repository ({env.cwd})", reason="no-repository") from exc
        return HUMAN
    try:
        if not env.has_state():
            if markers:
                claimed = env.environ.get(AGENT_VAR) or "?"
                raise _unproven(
                    env, f"exo's state database is missing: {AGENT_VAR}={claimed} names an agent, but this "
                    "repository has no exo state", reason="no-state",
                    hint="The state folder (.git/exo) was removed: run `exo doctor` in the repository (it "
                    "rebuilds the records of the agents it finds running in exo's sessions, and of exo's "
                    "worktrees), or spawn the agent again with `exo spawn`.")
            return HUMAN
        store = env.store
        hit = _by_ancestry(env, store)
    except ExoError as exc:
        if markers or exc.data.get("store"):
            raise  # an unreachable store is said as such: it never makes the caller the human
        return identify(store_as_is(env)) if exc.data.get("reason") == REASON else HUMAN  # untrusted store: as it is
    except Exception as exc:  # an unreadable state database
        if markers:
            raise StateError(f"exo cannot read its state database to check who is calling: {exc}",
                             hint="Run `exo doctor` in the repository.") from exc
        return HUMAN
    if hit is not None:
        return Caller(hit.id, hit.role, "ancestry")
    if markers:
        return _by_proof(env, store)
    try:
        hit = _by_worktree(env, store)
    except Exception:  # an unreadable state database: nobody to match
        return HUMAN
    if hit is not None:
        return Caller(hit.id, hit.role, "worktree")
    return HUMAN


def _by_ancestry(env: Env, store: Store) -> Agent | None:
    """The agent whose recorded process (pane process or process group) this process descends from.

    The store is asked only for the agents recorded with one of this process's ancestors
    (``Store.agent_keys``), so this costs about the same with 5 agents or 500.
    """
    from exo_cli.adapters.proc import ancestors, proc_start_time

    chain = ancestors(env.pid)
    by_pid: dict[int, str] = {}
    for k in store.agent_keys(pids=chain):  # oldest first: a pid's first recorded agent wins
        if k.id == ROOT or RETIRED_SEP in k.id:  # history never calls
            continue
        for pid in (k.pid, k.pgid):
            if isinstance(pid, int) and not isinstance(pid, bool) and pid > 1:
                by_pid.setdefault(pid, k.id)
    for pid in chain:
        agent_id = by_pid.get(pid)
        if agent_id is None:
            continue
        agent = store.agent(agent_id)
        if agent is None:
            continue
        start = agent.location.get("start_time") if pid == agent.location.get("pid") else None
        if isinstance(start, int) and proc_start_time(pid) not in (None, start):
            continue  # the recorded process is gone and its pid was reused
        return agent
    return None


def _by_worktree(env: Env, store: Store) -> Agent | None:
    """The live agent whose worktree (created by exo) holds this process's cwd (the deepest one)."""
    cwd = str(env.cwd.resolve())
    inside = [k for k in store.agent_keys() if k.id != ROOT and RETIRED_SEP not in k.id and k.live and k.worktree
              and (cwd == k.worktree or cwd.startswith(k.worktree.rstrip("/") + "/"))]
    for k in sorted(inside, key=lambda k: -len(k.worktree or "")):  # the deepest worktree first
        record = store.agent(k.id)
        if record is not None and record.spec.get("worktree_created", True):
            return record
        # else: a human in a finished agent's folder, or in the repo itself, is the human
    return None


def _by_proof(env: Env, store: Store) -> Caller:
    """The agent ``EXO_AGENT`` names, when ``EXO_AGENT_PROOF`` matches its recorded proof; else StateError."""
    claimed = env.environ.get(AGENT_VAR) or ""
    if not claimed:
        raise _unproven(env, f"it carries {', '.join(env.markers)} without {AGENT_VAR}", reason="no-claim")
    if claimed == ROOT:
        raise _unproven(env, f"{AGENT_VAR}={ROOT} names the human at the root, who carries no {AGENT_VAR}",
                        reason="root-claim")
    try:
        record = store.agent(claimed) if RETIRED_SEP not in claimed else None
    except Exception as exc:  # an unreadable state database
        raise StateError(f"exo cannot read its state database to check who is calling: {exc}",
                         hint="Run `exo doctor` in the repository.") from exc
    if record is None:
        raise _unproven(env, f"{AGENT_VAR}={claimed} is not an agent exo recorded", reason="unknown-agent")
    given = env.environ.get(PROOF_VAR) or ""
    stored = record.spec.get(PROOF_FIELD)
    if not given:
        raise _unproven(env, f"{AGENT_VAR}={claimed} comes without {PROOF_VAR}", reason="no-proof")
    if not isinstance(stored, str) or not proof_matches(given, stored):
        raise _unproven(env, f"{PROOF_VAR} does not prove {AGENT_VAR}={claimed}", reason="wrong-proof")
    return Caller(record.id, record.role, "env")


def _unproven(env: Env, why: str, *, reason: str, hint: str | None = None) -> StateError:
    claimed = env.environ.get(AGENT_VAR) or None
    return StateError(
        why if reason == "no-state" else f"exo cannot tell who is calling: {why}",
        hint=hint or "Run exo from the agent's own session (its pane, its hooks or its MCP server), which exo "
        "started with the agent's identity. In a shell of your own, unset "
        f"{', '.join(MARKER_VARS)}.",
        reason=reason,
        claimed=claimed,
        markers=list(env.markers),
    )


# --------------------------------------------------------------------------- the per-agent proof


def new_proof() -> tuple[str, str]:
    """A fresh per-agent secret and the digest exo records (the secret goes only into the agent's env)."""
    import secrets

    proof = secrets.token_hex(32)
    return proof, proof_digest(proof)


def proof_digest(proof: str) -> str:
    """The SHA-256 (hex) of ``proof``, as recorded in the agent's spec."""
    from exo_cli.adapters.files import sha256_hex  # no hashlib (OpenSSL) on the hooks' path

    return sha256_hex(proof.encode("utf-8", "surrogateescape"))


def proof_matches(proof: str, digest: str) -> bool:
    """Whether ``proof`` hashes to ``digest`` (compared in constant time)."""
    from _operator import _compare_digest  # hmac.compare_digest itself, without hmac's OpenSSL (hooks' path)

    return _compare_digest(proof_digest(proof).encode("ascii"), digest.encode("ascii", "replace"))
