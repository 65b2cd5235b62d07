"""Worktrees for agents: where they go, how they are named, created, prepared and removed.

Everything here takes plain values (the repository's folders, exo's state folder, config
values); ``Worktrees`` changes the repository's worktrees through the git client.

Git's metadata operations (``worktree add/remove/prune``, branch creation and deletion) are
serialized per repository by a file lock in exo's state folder (``repo.lock``), so twenty
parallel spawns never fight over ``.git/config.lock`` or half-written ``.git/worktrees``
entries. The checkout itself (``git reset --hard`` in the new worktree, its
own index) runs outside the lock, concurrently. Everything here is argv-only, never a shell.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exo_cli.adapters.files import locked
from exo_cli.adapters.git import Finished, Git, add_exclude
from exo_cli.errors import InvalidInput, StateError, external
from exo_cli.validate import check_branch, check_name

if TYPE_CHECKING:
    pass

EXO_EXCLUDE = "/.exo/"
CONTEXT_FILE = ".exo/context.md"
PC_FILE = ".exo/process-compose.yaml"
PC_LOG = ".exo/logs/process-compose.log"
HANGAR_FILE = "Hangar.toml"

# Themed sets of short memorable names for unnamed workers (as ``spawn_workers`` names them).
NAME_SETS: tuple[tuple[str, ...], ...] = (
    ("john", "paul", "george", "ringo"),
    ("groucho", "harpo", "chico", "zeppo", "gummo"),
    ("ada", "grace", "alan", "edsger", "barbara", "donald"),
    ("mercury", "venus", "earth", "mars", "jupiter", "saturn", "uranus", "neptune"),
    ("oak", "ash", "elm", "yew", "fir", "pine", "birch", "rowan"),
    ("otter", "badger", "heron", "lynx", "marten", "raven", "stoat", "wren"),
)

CREATED_LEDGER = "created-folders.jsonl"  # in exo's state folder: every worktree folder exo made
_TRANSIENT = ("could not lock", ".lock': File exists", "Unable to create", "index.lock", "cannot lock ref")
_lock_guard = threading.Lock()


# --------------------------------------------------------------------------- locations


def hangar_folder(repo_root: Path, override: str | None) -> Path | None:
    """The hangar: ``override`` ($HANGAR_ROOT), else the nearest folder with ``Hangar.toml`` above the repo."""
    if override:
        return Path(os.path.expanduser(override)).absolute()
    start = repo_root.absolute()
    for folder in (start, *start.parents):
        if (folder / HANGAR_FILE).is_file():
            return folder
    return None


def worktrees_folder(repo_root: Path, *, hangar_override: str | None, configured: str | None,
                     configured_by_env: bool = False) -> Path:
    """Where exo puts worktrees, the first that applies.

    ``configured`` (``worktree.root``) when it comes from the environment or a flag
    (``configured_by_env``), then ``<hangar>/worktrees`` (``$HANGAR_ROOT``, else the nearest
    ``Hangar.toml`` above the repository), then ``configured`` from a configuration file, then
    ``<repo>/.exo/worktrees``. An environment variable beats a file, as everywhere.
    """
    if configured and configured_by_env:
        return _under(repo_root, configured)
    hangar = hangar_folder(repo_root, hangar_override)
    if hangar is not None:
        return hangar / "worktrees"
    if configured:
        return _under(repo_root, configured)
    return repo_root / ".exo" / "worktrees"


def _under(repo_root: Path, configured: str) -> Path:
    path = Path(os.path.expanduser(configured))
    return path if path.is_absolute() else repo_root / path


def fill(template: str, key: str, **values: str) -> str:
    """Fill a naming template's ``{placeholders}``; an unknown one is InvalidInput naming ``key``."""
    try:
        return template.format(**values)
    except (KeyError, IndexError, ValueError) as exc:
        raise InvalidInput(
            f"Bad template for {key}: {template!r} ({exc})",
            hint=f"Placeholders available: {', '.join('{' + k + '}' for k in values)}.",
            key=key,
        ) from exc


def bead_names_from(branch_template: str, folder_template: str, short_id: str, slug: str) -> tuple[str, str]:
    """Branch and folder of a bead's worktree (``worktree.bead_branch``/``bead_dir``: ``bd-<id>/<slug>``, ``bd-<id>-<slug>``)."""
    branch = fill(branch_template, "worktree.bead_branch", id=short_id, slug=slug)
    folder = fill(folder_template, "worktree.bead_dir", id=short_id, slug=slug)
    return check_branch(branch, "branch"), check_name(folder, "worktree folder")


def child_names_from(branch_template: str, folder_template: str, parent_branch: str, name: str) -> tuple[str, str]:
    """Branch and folder of a worker or subtree (``worktree.child_branch``/``child_dir``: ``<parent>.<name>``, ``<name>``)."""
    branch = fill(branch_template, "worktree.child_branch", parent=parent_branch, name=name)
    folder = fill(folder_template, "worktree.child_dir", parent=parent_branch.replace("/", "-"), name=name)
    return check_branch(branch, "branch"), check_name(folder, "worktree folder")


def pick_names(count: int, taken: set[str]) -> list[str]:
    """``count`` short memorable names not in ``taken``, from one themed set where possible."""
    out: list[str] = []
    for names in NAME_SETS:  # prefer a set that fits the whole batch
        free = [n for n in names if n not in taken]
        if len(free) >= count:
            return free[:count]
    pool = [n for names in NAME_SETS for n in names]
    n = 2
    while len(out) < count:
        for base in pool:
            cand = base if base not in taken and base not in out else None
            if cand is None:
                cand = f"{base}{n}"
                if cand in taken or cand in out:
                    continue
            out.append(cand)
            if len(out) == count:
                break
        n += 1
    return out


# --------------------------------------------------------------------------- the repo lock


@contextlib.contextmanager
def repo_lock(state_dir: Path, name: str = "repo") -> Iterator[None]:
    """Hold ``<state_dir>/<name>.lock`` exclusively (threads and processes alike)."""
    with locked(state_dir / f"{name}.lock"):
        yield


# --------------------------------------------------------------------------- creating and removing


class Worktrees:
    """The repository's worktrees as exo changes them: git metadata under the repo lock.

    ``git`` is the client at the main checkout, ``state_dir`` exo's state folder (where the
    lock lives) and ``common_dir`` the repository's shared git folder.
    """

    def __init__(self, git: Git, state_dir: Path, common_dir: Path) -> None:
        self.git = git
        self.state_dir = state_dir
        self.common_dir = common_dir

    def locked(self, step: Callable[[], Finished], *, retries: int = 4) -> Finished:
        """Run a git metadata step under the repo lock, retrying transient lock errors with jitter."""
        delay = 0.05
        for attempt in range(retries + 1):
            with repo_lock(self.state_dir):
                proc = step()
            if proc.returncode == 0 or not any(t in proc.stderr for t in _TRANSIENT) or attempt == retries:
                break
            import random

            time.sleep(delay * (1 + random.random()))
            delay *= 2
        return proc

    def create(self, *, path: Path, branch: str, base_commit: str) -> None:
        """Create worktree ``path`` on new branch ``branch`` at ``base_commit`` (``--no-track``).

        The branch and the worktree's metadata are created under the repo lock with
        ``--no-checkout``; the files are checked out afterwards, concurrently with other spawns.
        git itself refuses an existing branch or path: that is a StateError (never reused).
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = os.path.lexists(path)
        proc = self.locked(lambda: self.git.worktree_add(path, branch=branch, start=base_commit))
        if proc.returncode == 0 and not existed:
            record_created(self.state_dir, path)
        if proc.returncode != 0:
            if "already exists" in proc.stderr:
                what = f"Branch {branch}" if "branch" in proc.stderr else f"Worktree {path}"
                raise StateError(f"{what} already exists",
                                 hint="exo never reuses a branch or a worktree; pick another name.",
                                 branch=branch, path=str(path))
            raise external("git worktree add", proc)
        # The checkout touches only this worktree's own index and files: concurrent with other spawns.
        self.git.at(path).reset_hard()

    def create_clone(self, *, path: Path, branch: str, base_commit: str, agent_id: str) -> None:
        """Create agent ``agent_id``'s own ``clone --shared`` at ``path`` on new branch ``branch`` at ``base_commit``.

        The repository gets ``refs/heads/<branch>`` (create-only: an existing branch is a
        StateError, as for a worktree) and ``refs/exo/clones/<id>/base`` (gc keeps the base the
        clone borrows through its alternates) under the repo lock; the clone and its checkout
        are made outside it, concurrently with other spawns.
        """
        from exo_cli.adapters import clones

        if os.path.lexists(path):
            raise StateError(f"Worktree {path} already exists", hint="exo never reuses a worktree; pick another name.",
                             path=str(path))
        refs = f"create refs/heads/{branch} {base_commit}\nupdate {clones.clone_refs(agent_id)}base {base_commit}\n"
        proc = self.locked(lambda: self.git.run(["update-ref", "--stdin"], input=refs, check=False))
        if proc.returncode != 0:
            if "exists" in proc.stderr:
                raise StateError(f"Branch {branch} already exists",
                                 hint="exo never reuses a branch or a worktree; pick another name.", branch=branch)
            raise external("git update-ref", proc)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            clones.make_shared_clone(Path(self.git.path), path, branch=branch, start=base_commit)
            add_exclude(path / ".git", EXO_EXCLUDE)  # its own git never sees exo's folder (not the agent's yet)
        finally:
            if os.path.isdir(path) and not os.path.islink(path):
                record_created(self.state_dir, path)

    def remove_clone(self, path: str | os.PathLike[str], agent_id: str) -> tuple[bool, str]:
        """Delete an agent's clone exo made (the caller checked nothing would be lost) and ``refs/exo/clones/<id>/``."""
        from exo_cli.adapters import clones

        if os.path.lexists(path):
            if not (clones.is_clone(path) and made_by_exo(path, created_folders(self.state_dir))):
                return False, f"{path} is not a clone exo made (its folder or .git was replaced); left as it is"
            try:
                clones.remove_clone(path)
            except OSError as exc:
                return False, str(exc)
        self.locked(lambda: _dropped(self.git, agent_id))
        return True, ""

    def listing(self) -> dict[str, dict[str, str]]:
        """Every worktree: path -> its attributes as git prints them (HEAD, branch, prunable...)."""
        return {w.path: w.attrs for w in self.git.worktrees()}

    def remove(self, path: str | os.PathLike[str], *, force: bool = False) -> tuple[bool, str]:
        """``git worktree remove`` under the repo lock; (True, "") or (False, git's refusal). Never retried with force.

        A forced removal git gave up on half-way (a folder the agent made read-only stops git when
        exo runs as a normal user) after dropping the worktree's metadata leaves a folder that is no
        worktree any more: it is removed (``remove_tree``: never through a link) and git's records pruned.
        """
        proc = self.locked(lambda: self.git.worktree_remove(path, force=force))
        if proc.returncode == 0:
            return True, ""
        said = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        if force and os.path.isdir(path) and os.path.realpath(path) not in {os.path.realpath(p) for p in self.listing()}:
            from exo_cli.adapters.rmtree import remove_tree

            try:
                remove_tree(path)
            except OSError as exc:
                return False, f"{said}; then {exc}"
            self.prune()
            return True, ""
        return False, said

    def delete_branch_if_at(self, branch: str, commit: str) -> bool:
        """Delete ``branch`` only while it still points at ``commit`` (no work of anyone's on it)."""
        return self.locked(lambda: self.git.delete_ref(f"refs/heads/{branch}", commit)).returncode == 0

    def prune(self) -> None:
        """``git worktree prune`` under the repo lock."""
        self.locked(lambda: self.git.worktree_prune())

    def exclude_exo(self) -> None:
        """Keep exo's per-worktree folder out of git everywhere (``/.exo/`` in ``info/exclude``)."""
        with _lock_guard, repo_lock(self.state_dir, "exclude"):
            add_exclude(self.common_dir, EXO_EXCLUDE)


def _dropped(git: Git, agent_id: str) -> Finished:
    from exo_cli.adapters import clones

    clones.drop_refs(git, agent_id)
    return Finished([], 0, "", "")


# --------------------------------------------------------------------------- what exo created


def record_created(state_dir: Path, path: Path) -> None:
    """Note in exo's ledger that exo made folder ``path`` (its real path and inode, so a namesake is not it)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    line = json.dumps({"path": os.path.realpath(path), "dev": st.st_dev, "ino": st.st_ino, "at": time.time()})
    fd = os.open(state_dir / CREATED_LEDGER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (line + "\n").encode("utf-8"))  # one short append: atomic between writers
    finally:
        os.close(fd)


def created_folders(state_dir: Path) -> dict[str, tuple[int, int]]:
    """Every folder exo recorded making: real path -> (device, inode)."""
    out: dict[str, tuple[int, int]] = {}
    try:
        text = (state_dir / CREATED_LEDGER).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
            rec = json.loads(line)
            out[str(rec["path"])] = (int(rec["dev"]), int(rec["ino"]))
    return out


def made_by_exo(path: str | os.PathLike[str], ledger: dict[str, tuple[int, int]]) -> bool:
    """Whether folder ``path`` is one exo made (same real path and same inode as recorded; never a link)."""
    try:
        if os.path.islink(path):
            return False
        st = os.stat(path)
    except OSError:
        return False
    return ledger.get(os.path.realpath(path)) == (st.st_dev, st.st_ino)


# --------------------------------------------------------------------------- preparing


def _rel(value: str, key: str) -> str:
    p = Path(value)
    if not value or p.is_absolute() or ".." in p.parts:
        raise InvalidInput(f"Bad path in {key}: {value!r} (expected a relative path inside the repo)", key=key)
    return value


def copy_into(worktree: Path, source_root: Path, *, copy: Sequence[str] = (),
              symlink: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """Copy ``copy`` and symlink ``symlink`` (``worktree.copy``/``worktree.symlink``); (created, warnings).

    Sources are relative to ``source_root`` (the main checkout). A path the worktree already
    has (a tracked file) is left alone; a missing source is a warning, not a failure.
    """
    created: list[str] = []
    warnings: list[str] = []
    for key, link, rels in (("worktree.copy", False, copy), ("worktree.symlink", True, symlink)):
        for rel in rels or []:
            _rel(rel, key)
            src = source_root / rel
            dst = worktree / rel
            if not (src.exists() or src.is_symlink()):
                warnings.append(f"{key}: {rel} does not exist in {source_root}; skipped")
                continue
            if dst.exists() or dst.is_symlink():
                warnings.append(f"{key}: {rel} already exists in the worktree; left as is")
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            if link:
                os.symlink(src, dst, target_is_directory=src.is_dir())
            elif src.is_dir() and not src.is_symlink():
                shutil.copytree(src, dst, symlinks=True)
            else:
                shutil.copy2(src, dst, follow_symlinks=False)
            created.append(str(dst))
    return created, warnings


def post_create_command(cmd: str | Sequence[str] | None) -> list[str] | None:
    """The post-create command (``worktree.post_create``) as argv; a string is split like a shell would, never run by one."""
    if not cmd:
        return None
    if isinstance(cmd, str):
        import shlex

        try:
            argv = shlex.split(cmd)
        except ValueError as exc:
            raise InvalidInput(f"Bad worktree.post_create: {exc}", key="worktree.post_create") from exc
    else:
        argv = list(cmd)
    return argv or None


def run_post_create_argv(argv: Sequence[str] | None, worktree: Path, agent_env: Mapping[str, str]) -> None:
    """Run the post-create command in the new worktree with the agent's environment."""
    if argv is None:
        return
    from exo_cli.adapters.proc import run

    proc = run(argv, what="worktree.post_create", cwd=worktree, env=agent_env, check=False, timeout=900)
    if proc.returncode != 0:
        raise external(
            "worktree.post_create", proc, hint="Fix the command in exo.toml (worktree.post_create) and spawn again."
        )


def write_file(path: Path, text: str, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` atomically (creating folders)."""
    from exo_cli.adapters.files import atomic_write

    atomic_write(path, text, mode=mode, fsync=False)


# --------------------------------------------------------------------------- services


_RESTART = ("always", "on_failure", "exit_on_failure", "no")


def _svc_err(name: str, key: str, expected: str) -> InvalidInput:
    return InvalidInput(f"Bad value for services.{name}.{key} (expected {expected})", key=f"services.{name}.{key}")


def check_services(services: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Validate config ``services``: name -> {command, port?, readiness?, restart?, max_restarts?, shutdown?, ...}."""
    out: dict[str, dict[str, Any]] = {}
    for name, svc in services.items():
        check_name(name, "service name")
        if not isinstance(svc, dict):
            raise InvalidInput(f"services.{name} must be a table", key=f"services.{name}")
        if not isinstance(svc.get("command"), str) or not svc["command"].strip():
            raise _svc_err(name, "command", "a command string")
        port = svc.get("port")
        if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536):
            raise _svc_err(name, "port", "a port number")
        if svc.get("restart", "on_failure") not in _RESTART:
            raise _svc_err(name, "restart", "one of " + ", ".join(_RESTART))
        for key in ("max_restarts", "initial_delay", "period", "failure_threshold", "shutdown_timeout"):
            v = svc.get(key)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise _svc_err(name, key, "a whole number")
        for key in ("readiness", "shutdown"):
            v = svc.get(key)
            if v is not None and not isinstance(v, str):
                raise _svc_err(name, key, "a command string")
        http = svc.get("readiness_http")
        if http is not None and not isinstance(http, str):
            raise _svc_err(name, "readiness_http", "a URL path such as /health")
        env = svc.get("environment", {})
        if not isinstance(env, dict) or not all(isinstance(v, str | int) for v in env.values()):
            raise _svc_err(name, "environment", "a table of strings")
        deps = svc.get("depends_on", [])
        if not isinstance(deps, list) or not all(d in services for d in deps):
            raise _svc_err(name, "depends_on", "a list of declared service names")
        out[name] = dict(svc)
    return out


def port_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:``port`` (and we may bind it)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def allocate_ports(services: Mapping[str, Mapping[str, Any]], used: set[int], *, step: int = 10) -> dict[str, int]:
    """A port per service: its declared port plus a multiple of ``step``, unused by other agents and free now."""
    ports: dict[str, int] = {}
    declared = {n: int(s["port"]) for n, s in services.items() if s.get("port")}
    if not declared:
        return ports
    for k in range(0, 2000):
        cand = {n: p + k * step for n, p in declared.items()}
        if any(p > 65535 for p in cand.values()):
            break
        if any(p in used for p in cand.values()) or len(set(cand.values())) != len(cand):
            continue
        if all(port_free(p) for p in cand.values()):
            return cand
    raise StateError("No free ports left for the declared services", hint="Stop some agents or change services.*.port.")


def port_env(ports: Mapping[str, int]) -> dict[str, str]:
    """``<SERVICE>_PORT`` variables for every allocated port."""
    return {f"{n.upper().replace('-', '_').replace('.', '_')}_PORT": str(p) for n, p in ports.items()}


def process_compose(
    services: Mapping[str, Mapping[str, Any]], ports: Mapping[str, int], worktree: Path
) -> dict[str, Any]:
    """The process-compose document for the declared services of one worktree."""
    processes: dict[str, Any] = {}
    shared = port_env(ports)
    for name, svc in services.items():
        env = {**shared, **{k: str(v) for k, v in (svc.get("environment") or {}).items()}}
        if name in ports:
            env["PORT"] = str(ports[name])
        proc: dict[str, Any] = {
            "command": svc["command"],
            "working_dir": str(worktree),
            "environment": [f"{k}={v}" for k, v in sorted(env.items())],
        }
        probe: dict[str, Any] | None = None
        if svc.get("readiness"):
            probe = {"exec": {"command": svc["readiness"]}}
        elif svc.get("readiness_http") and name in ports:
            probe = {"http_get": {"host": "127.0.0.1", "scheme": "http", "path": svc["readiness_http"],
                                  "port": ports[name]}}
        if probe is not None:
            probe.update(
                initial_delay_seconds=int(svc.get("initial_delay", 2)),
                period_seconds=int(svc.get("period", 3)),
                failure_threshold=int(svc.get("failure_threshold", 10)),
            )
            proc["readiness_probe"] = probe
        proc["availability"] = {
            "restart": svc.get("restart", "on_failure"),
            "max_restarts": int(svc.get("max_restarts", 5)),
        }
        shutdown: dict[str, Any] = {"timeout_seconds": int(svc.get("shutdown_timeout", 5))}
        if svc.get("shutdown"):
            shutdown["command"] = svc["shutdown"]
        proc["shutdown"] = shutdown
        if svc.get("depends_on"):
            proc["depends_on"] = {
                d: {"condition": "process_healthy" if _has_probe(services[d]) else "process_started"}
                for d in svc["depends_on"]
            }
        processes[name] = proc
    return {"version": "0.5", "log_location": str(worktree / PC_LOG), "processes": processes}


def _has_probe(svc: Mapping[str, Any]) -> bool:
    return bool(svc.get("readiness") or svc.get("readiness_http"))


def write_process_compose(doc: Mapping[str, Any], worktree: Path) -> Path:
    """Write ``.exo/process-compose.yaml`` (ignored by git through ``/.exo/``)."""
    import yaml

    path = worktree / PC_FILE
    write_file(path, yaml.safe_dump(dict(doc), sort_keys=False, default_flow_style=False))
    (worktree / PC_LOG).parent.mkdir(parents=True, exist_ok=True)
    return path


def services_argv(worktree: Path) -> list[str]:
    """The side window's command: ``process-compose up -f <file> -L <log> --no-server``."""
    return ["process-compose", "up", "--config", str(worktree / PC_FILE), "--log-file", str(worktree / PC_LOG),
            "--no-server"]
