"""``exo spawn``: one operation behind ``spawn_agents``, ``spawn_subtree`` and ``spawn_workers``.

For each task (a bead, a named or auto-named worker, or one subtree), in parallel threads:
validate, record the agent as ``starting`` with its whole request (before anything is
created, so a killed spawn leaves a record that a retry or ``exo doctor`` can finish or
clean), create the worktree and branch (git metadata serialized by the repo lock), prepare
it (copies, symlinks, post-create command, ``.exo/context.md``, the backend's config,
``.exo/process-compose.yaml``), start the agent in its multiplexer with the first prompt on
its command line, then emit ``spawned`` and tell the parent. One task failing never stops
the others; the result keeps seed 000's ``worktrees``/``tabs``/``failed`` pairs.

Crash safety: every spawn of agent ``X`` holds the flock ``<state>/locks/spawn-X.lock`` for
its whole duration. A record whose phase is not ``spawned`` (or ``pending``) and whose lock
is free belongs to an interrupted spawn: a retry (or doctor) cleans exactly what the record
says exo created — window, backend files, worktree at the recorded base commit, branch still
at that commit — and starts over. Fault points (``exo_cli.fault``): ``spawn.recorded``,
``spawn.worktree``, ``spawn.prepared``, ``spawn.started``.

Deferred starts (``after``): when an agent listed in ``after`` is not yet ``idle``/``done``,
the new agent is recorded with status ``starting``, reason ``waiting for A`` and spec phase
``pending`` holding the whole request; nothing else is created. ``launch_pending(env, id,
prompt=...)`` performs the real start later (the messages helper calls it when A goes idle,
after substituting ``{{A.output}}`` into the prompt). It is idempotent: only one caller
launches a given pending agent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exo_cli import fault
from exo_cli.adapters import worktree as wt
from exo_cli.errors import (
    BY_NAME,
    EnvironmentError_,
    ExoError,
    InvalidInput,
    NotFound,
    StateError,
    UsageError,
)
from exo_cli.records import (
    DONE,
    IDLE,
    LIVE_STATUSES,
    ROOT,
    STARTING,
    WORKING,
    Agent,
)
from exo_cli.registry import Tool, op
from exo_cli.validate import check_name, check_text, slugify

if TYPE_CHECKING:
    from exo_cli.adapters.beads import BeadsSource
    from exo_cli.adapters.mux import Mux
    from exo_cli.env import Env

BACKENDS = ("claude", "gemini", "codex", "custom", "demo")
MUXES = ("tmux", "zellij", "headless")
# Spec phases, in order; "pending" waits for `after`, "spawned" is complete.
PHASES = ("recorded", "worktree", "prepared", "started", "spawned")
PENDING = "pending"
# Environment variables of the caller that never pass to an agent (identity is exo's to set).
_DROP_VARS = ("EXO_AGENT", "EXO_PARENT", "EXO_ROLE", "EXO_FAULT", "TMUX_PANE")


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class SpawnedAgent:
    """One agent a spawn recorded (started, or waiting for ``after``)."""

    id: str
    name: str
    role: str
    parent: str
    status: str
    status_reason: str | None
    backend: str
    mux: str
    bead: str | None
    task: str | None
    branch: str | None
    base_branch: str | None
    worktree: str | None
    location: dict[str, Any]


@dataclass(frozen=True)
class SpawnResult:
    """Seed 000's pairs plus error objects, the agents, workers without a task, and warnings."""

    worktrees: list[list[str]]
    tabs: list[list[str]]
    failed: list[list[str]]
    errors: list[dict[str, Any]]
    agents: list[SpawnedAgent]
    workers_awaiting_task: list[str]
    warnings: list[str]

    @property
    def exit_code(self) -> int:
        """0 when every task spawned, else the exit code of the first failure's class."""
        if not self.errors:
            return 0
        cls = BY_NAME.get(str(self.errors[0].get("name")))
        return cls.exit_code if cls else 70


# --------------------------------------------------------------------------- requests


@dataclass
class Request:
    """One task of a spawn call (JSON-native: stored in the agent's spec for retry and launch)."""

    kind: str  # "bead" | "worker" | "subtree"
    key: str  # the id reported in the result pairs
    name: str | None = None
    prompt: str | None = None
    task: str | None = None
    bead: str | None = None
    annotation: str | None = None
    agent: str = "claude"


@dataclass
class Common:
    """What every task of one call shares (JSON-native: stored in the spec too)."""

    mux: str
    parent: str
    parent_branch: str | None
    base: str | None
    parent_cwd: str | None
    no_worktree: bool = False
    skip_permissions: bool = False
    demo_script: str | None = None
    fork_session: bool | None = None
    session_id: str | None = None
    after: list[str] = field(default_factory=list)
    origin: dict[str, Any] = field(default_factory=dict)


@dataclass
class WorkerSpec:
    """One worker of ``spawn_workers`` (seeds 001/002): name and prompt, optional agent, bead, annotation."""

    name: str
    prompt: str
    agent: str | None = None
    bead: str | None = None
    annotation: str | None = None


# --------------------------------------------------------------------------- helpers


@contextlib.contextmanager
def spawn_lock(env: Env, agent_id: str, *, blocking: bool = True) -> Iterator[bool]:
    """Hold the per-agent spawn lock; yields False (without holding it) when not blocking and busy."""
    folder = env.state_dir / "locks"
    folder.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(folder / f"spawn-{agent_id}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def spawn_in_progress(env: Env, agent_id: str) -> bool:
    """Whether some process is spawning ``agent_id`` right now (its spawn lock is held)."""
    with spawn_lock(env, agent_id, blocking=False) as got:
        return not got


def is_stale(env: Env, agent: Agent) -> bool:
    """Whether ``agent`` is the record of an interrupted spawn (incomplete and nobody spawning it)."""
    phase = agent.spec.get("phase")
    if phase in (None, "spawned", PENDING):
        return False
    return not spawn_in_progress(env, agent.id)


def _agent_env(env: Env) -> dict[str, str]:
    """The spawning call's environment minus identity variables exo sets itself."""
    return {k: v for k, v in env.environ.items() if k not in _DROP_VARS}


def _view(a: Agent) -> SpawnedAgent:
    return SpawnedAgent(
        id=a.id, name=a.name, role=a.role, parent=a.parent or ROOT, status=a.status,
        status_reason=a.status_reason, backend=a.backend, mux=a.mux, bead=a.bead, task=a.task,
        branch=a.branch, base_branch=a.base_branch, worktree=a.worktree, location=dict(a.location),
    )  # fmt: skip


def _update_spec(env: Env, agent_id: str, spec: dict[str, Any], **more: Any) -> None:
    env.store.update_agent(agent_id, spec=spec, **more)


def _error_obj(key: str, exc: ExoError) -> dict[str, Any]:
    return {"id": key, "code": exc.rpc_code, "name": exc.name, "message": exc.message, "hint": exc.hint}


def _private_dir(path: Path) -> None:
    """Create ``path`` and its missing parents with mode 0700 (``mkdir(parents=True)`` would use the umask)."""
    if not path.parent.is_dir():
        _private_dir(path.parent)
    path.mkdir(exist_ok=True, mode=0o700)


def _exists(path: Path, kind: str) -> bool:
    """Whether ``path`` is a directory (``kind`` "dir") or a file; False for names the OS refuses."""
    try:
        return path.is_dir() if kind == "dir" else path.is_file()
    except (OSError, ValueError):  # too long, NUL byte, ...
        return False


def _target_env(env: Env, repo: str | None) -> Env:
    if not repo:
        return env
    from exo_cli.env import Env as EnvCls

    path = Path(os.path.expanduser(repo))
    if not path.is_absolute():
        path = env.cwd / path
    if not _exists(path, "dir"):
        raise NotFound(f"Repository {path} does not exist", hint="Pass the path of a git repository to --repo.")
    target = EnvCls(cwd=path, environ=env.environ, overrides=env.overrides)
    target.repo  # noqa: B018 - EnvironmentError_ when it is not a repository
    return target


def _check_mux(env: Env, kind: str) -> Mux:
    """The multiplexer for ``kind``, or EnvironmentError_ when it cannot run here."""
    from exo_cli.ops import agentctl

    if kind == "tmux" and shutil.which("tmux") is None:
        raise EnvironmentError_("tmux is not installed or not on PATH", hint="Install tmux, or use --mux headless.")
    if kind == "zellij":
        from exo_cli.adapters.mux.zellij import Zellij

        services = bool(env.config.get("services")) and shutil.which("process-compose") is not None
        return Zellij(None, runtime_dir=env.runtime_dir, environ=env.environ, services=services)
    return agentctl.mux_for(env, kind)


def _backend_for(env: Env, name: str, common: Common, agent_dir: Path) -> Any:
    from exo_cli.adapters import agents as backends

    if name == "custom":
        return backends.get_backend("custom", command=env.config.get("agent.command") or None)
    if name == "demo":
        script = common.demo_script
        inline = env.config.get("demo.script")
        if not script and inline:
            import json

            _private_dir(agent_dir)
            path = agent_dir / "demo-script.json"
            wt.write_file(path, json.dumps(inline), 0o600)
            script = str(path)
        return backends.get_backend("demo", script=script)
    return backends.get_backend(name)


def _check_backend(env: Env, name: str) -> None:
    """EnvironmentError_ when the backend's program cannot be found on the caller's PATH."""
    from exo_cli.adapters import agents as backends

    if name == "demo":
        import importlib.util

        if importlib.util.find_spec("exo_cli.demo_agent") is None:
            raise EnvironmentError_(
                "The demo agent (exo_cli.demo_agent) is not part of this exo build",
                hint="Use --agent custom with agent.command in exo.toml, or another backend.",
            )
        return
    if name == "custom":
        cmd = env.config.get("agent.command") or None
        if cmd is None:
            raise InvalidInput(
                "The custom backend needs a command: set agent.command in exo.toml",
                hint='For example: [agent]\ncommand = ["my-agent", "{prompt}"]',
                key="agent.command",
            )
        if backends.available("custom", env.environ.get("PATH"), command=cmd) is None:
            from exo_cli.adapters.agents.custom import parse_template

            prog = parse_template(cmd)[0]
            raise EnvironmentError_(f"{prog} is not installed or not on PATH", hint="Fix agent.command in exo.toml.")
        return
    if backends.available(name, env.environ.get("PATH")) is None:
        raise EnvironmentError_(
            f"{name} is not installed or not on PATH",
            hint=f"Install the {name} CLI, or choose another backend with --agent.",
            binary=name,
        )


# --------------------------------------------------------------------------- cleanup


def cleanup_partial(env: Env, agent: Agent) -> list[str]:
    """Undo what an interrupted or failed spawn of ``agent`` created, as its record says; return notes.

    Stops and closes its window(s), replays the backend's undo records, removes the files exo
    copied, removes the worktree exo created (forced only when no agent ever ran in it and its
    branch is still at the recorded base commit: then every file in it is exo's), deletes the
    branch while it still points at that commit, and removes exo's agent folder. Raises
    StateError when the worktree cannot be removed safely (it is then left as it is).
    """
    from exo_cli.adapters.mux import Location
    from exo_cli.ops import agentctl

    notes: list[str] = []
    spec = agent.spec
    ran = spec.get("phase") in ("started", "spawned") or bool(agent.location)
    for loc_dict in (agent.location, spec.get("services_location") or {}):
        if loc_dict and loc_dict.get("mux"):
            loc = Location.from_dict(loc_dict)
            with contextlib.suppress(ExoError, OSError):
                mux = agentctl.mux_for(env, loc.mux) if loc.mux != "zellij" else None
                if mux is not None:
                    mux.kill(loc, grace=1.0)
                    mux.close(loc, force=True)
                    notes.append(f"closed {loc.name or loc.key}")
    if agent.undo:
        from exo_cli.adapters import agents as backends

        try:
            backends.cleanup(list(agent.undo))
            notes.append("backend files removed")
        except Exception as exc:  # noqa: BLE001 - keep cleaning the rest
            notes.append(f"backend cleanup: {exc}")
    for path in spec.get("created_files") or []:
        p = Path(path)
        with contextlib.suppress(OSError):
            if p.is_symlink() or p.is_file():
                p.unlink()
            elif p.is_dir():
                shutil.rmtree(p)
    path = agent.worktree
    branch = agent.branch
    base_commit = spec.get("base_commit")
    if spec.get("creates_worktree") and path:
        registered = wt.list_worktrees(env)
        entry = next((v for k, v in registered.items() if os.path.realpath(k) == os.path.realpath(path)), None)
        ours = entry is not None and entry.get("branch") == f"refs/heads/{branch}"
        if ours:
            head = wt.rev(path, "HEAD") if os.path.isdir(path) else None
            force = not ran and head is not None and head == base_commit
            ok, why = wt.remove(env, path, force=force)
            if not ok:
                raise StateError(
                    f"Could not remove the partial worktree {path}: {why}",
                    hint=f"Look at it, then remove it yourself: git worktree remove {path}",
                    path=path,
                )
            notes.append(f"removed worktree {path}")
        elif entry is None and os.path.isdir(path):
            with contextlib.suppress(OSError):
                os.rmdir(path)  # an empty folder left by a crash before git wrote anything
        wt.prune(env)
        if branch and base_commit and wt.delete_branch_if_at(env, branch, base_commit):
            notes.append(f"deleted branch {branch}")
    agent_dir = spec.get("agent_dir")
    if agent_dir and Path(agent_dir).is_dir() and Path(agent_dir).parent == env.state_dir / "agents":
        shutil.rmtree(agent_dir, ignore_errors=True)
    return notes


# --------------------------------------------------------------------------- one task


def _quietly(fn: Any) -> None:
    """Call ``fn()``, ignoring exo's and the OS's errors (the caller repeats the call where it matters)."""
    with contextlib.suppress(ExoError, OSError):
        fn()


class _StartItem:
    """One agent waiting in a ``_Starter`` batch."""

    def __init__(self, name: str, argv: list[str], cwd: str, env: dict[str, str]) -> None:
        self.request = (name, argv, cwd, env)
        self.result: Any = None
        self.done = False


class _Starter:
    """Start the agents of one call together: on tmux, one ``new-window`` call for all windows.

    Every task of the call is expected (``enter``) until it either hands its agent to
    ``start`` or ends without one (``leave``; also before it waits for a free agent slot, so
    a full ``limits.max_agents`` can never hold the others back). The batch runs when no
    expected task is left, or ``patience`` seconds after a task queued. Until then the
    queued tasks wait, so the serialized ``git worktree add`` calls of the other tasks do
    not compete with agents starting up, and the whole call costs one tmux client call.
    Other multiplexers start each agent at once, from its own task's thread.
    """

    def __init__(self, mux: Mux, *, patience: float = 3.0) -> None:
        self.mux = mux
        self.patience = patience
        self._many = getattr(mux, "start_many", None)
        self._cond = threading.Condition()
        self._expected = 0
        self._reserved = 0
        self._queue: list[_StartItem] = []
        self._local = threading.local()
        self._warm: threading.Thread | None = None

    def warm_up(self) -> None:
        """Start the tmux server and session in the background (once), while the tasks make worktrees.

        Called when the first task has recorded its agent; ``start_many`` checks again
        (and reports any error) when the batch runs.
        """
        ensure = getattr(self.mux, "ensure_session", None)
        if self._many is None or not callable(ensure):
            return
        with self._cond:
            if self._warm is not None:
                return
            self._warm = threading.Thread(target=_quietly, args=(ensure,), name="exo-spawn-tmux", daemon=True)
            self._warm.start()

    def reserve(self, count: int) -> None:
        """Expect ``count`` tasks before their threads run (so a fast one cannot batch alone)."""
        with self._cond:
            self._expected += count
            self._reserved += count

    def enter(self) -> None:
        """The calling thread's task may start an agent: wait for it before running a batch."""
        with self._cond:
            if self._reserved > 0:
                self._reserved -= 1  # already counted by reserve()
            else:
                self._expected += 1
            self._local.expected = True

    def leave(self) -> None:
        """The calling thread's task will not queue an agent (now): run the batch if all others wait."""
        batch = None
        with self._cond:
            if getattr(self._local, "expected", False):
                self._local.expected = False
                self._expected -= 1
                batch = self._take()
        if batch:
            self._run(batch)

    def start(self, name: str, argv: list[str], *, cwd: str, env: dict[str, str], log_path: Path) -> Any:
        """Start one agent (batched on tmux); its Location, or its ExoError raised."""
        if self._many is None:
            return self.mux.start(name, argv, cwd=cwd, env=env, log_path=log_path)
        item = _StartItem(name, argv, cwd, env)
        with self._cond:
            self._queue.append(item)
            if getattr(self._local, "expected", False):
                self._local.expected = False
                self._expected -= 1
            batch = self._take()
        if batch:
            self._run(batch)
        deadline = time.monotonic() + self.patience
        with self._cond:
            while not item.done:
                left = deadline - time.monotonic()
                if left <= 0 and item in self._queue:  # a slow task holds the batch back: go now
                    batch, self._queue = self._queue, []
                    break
                self._cond.wait(max(left, 0.05))
            else:
                batch = None
        if batch:
            self._run(batch)
        if isinstance(item.result, BaseException):
            raise item.result
        return item.result

    def _take(self) -> list[_StartItem]:
        """The queue, when no expected task is left (call with the lock held)."""
        if self._expected > 0 or not self._queue:
            return []
        batch, self._queue = self._queue, []
        return batch

    def _run(self, batch: list[_StartItem]) -> None:
        from exo_cli.adapters.mux.tmux import StartRequest

        assert self._many is not None
        with self._cond:
            warm = self._warm
        if warm is not None:
            warm.join()
        try:
            results = self._many([StartRequest(*item.request) for item in batch])
        except BaseException as exc:
            results = [exc] * len(batch)
            raise
        finally:
            with self._cond:
                for item, result in zip(batch, results, strict=True):
                    item.result = result
                    item.done = True
                self._cond.notify_all()


class _Call:
    """State shared by the tasks of one spawn call."""

    def __init__(self, env: Env, common: Common) -> None:
        self.env = env
        self.common = common
        self.warnings: list[str] = []
        self._lock = threading.Lock()
        self._beads: BeadsSource | None = None
        self._mux: Mux | None = None
        self._heads: set[str] | None = None
        self._commits: dict[str, str | None] = {}
        self._backends_ok: set[str] = set()
        self._starter: _Starter | None = None
        self._exclude_lock = threading.Lock()
        self._excluded = False

    def warn(self, text: str) -> None:
        with self._lock:
            if text not in self.warnings:
                self.warnings.append(text)

    def beads(self) -> BeadsSource:
        with self._lock:
            if self._beads is None:
                from exo_cli.ops import tasks

                self._beads = tasks.open_repo_beads(self.env)
            return self._beads

    def heads(self) -> set[str]:
        """The repository's local branch names, listed once per call."""
        with self._lock:
            if self._heads is None:
                from exo_cli.adapters import git as gitutil

                proc = gitutil.git(["for-each-ref", "--format=%(refname:short)", "refs/heads/"], cwd=self.env.repo.root)
                self._heads = set(proc.stdout.split())
            return self._heads

    def commit(self, ref: str) -> str | None:
        """The commit ``ref`` names, resolved once per call."""
        with self._lock:
            if ref not in self._commits:
                self._commits[ref] = wt.rev(self.env.repo.root, ref)
            return self._commits[ref]

    def check_backend(self, name: str) -> None:
        """``_check_backend`` once per backend and call (its config and PATH do not change)."""
        if name in self._backends_ok:
            return
        _check_backend(self.env, name)
        with self._lock:
            self._backends_ok.add(name)

    def exclude_exo(self) -> None:
        """Put ``/.exo/`` in the repository's info/exclude once per call, before any task writes there."""
        with self._exclude_lock:
            if not self._excluded:
                wt.exclude_exo(self.env)
                self._excluded = True

    def mux(self) -> Mux:
        with self._lock:
            if self._mux is None:
                self._mux = _check_mux(self.env, self.common.mux)
            return self._mux

    def starter(self) -> _Starter:
        """The call's agent starter (batched windows on tmux)."""
        mux = self.mux()
        with self._lock:
            if self._starter is None:
                self._starter = _Starter(mux)
            return self._starter


def _resolve_bead(call: _Call, req: Request) -> tuple[str, str, str, str, str]:
    """(full id, short id, agent id, branch slug, title) of a bead request; InvalidInput/NotFound as seed 000."""
    from exo_cli.adapters import beads

    src = call.beads()
    full = beads.resolve_id(src, req.bead)
    short = beads.short_id(full, src.prefix)
    bead = src.get(full)
    agent_id = check_name(req.name or short, "agent name")
    return full, short, agent_id, slugify(bead.title or full), bead.title or full


def _live_owner(env: Env, bead_full: str, agent_id: str) -> Agent | None:
    for a in env.store.agents():
        if a.bead == bead_full and a.id != agent_id and a.status in LIVE_STATUSES:
            return a
    return None


def _slot(call: _Call, agent: Agent) -> Agent:
    """Insert ``agent`` once a slot is free (limits.max_agents); allocate service ports with it."""
    env = call.env
    limit = int(env.config.get("limits.max_agents") or 0)
    services = wt.check_services(env.config.get("services") or {})
    waited = False
    while True:
        with wt.repo_lock(env.state_dir, "slots"):
            others = [a for a in env.store.agents() if a.id != ROOT and a.status in LIVE_STATUSES]
            live = [a for a in others if a.spec.get("phase") != PENDING]
            if limit and len(live) >= limit:
                from exo_cli.ops import agentctl

                live = [a for a in agentctl.refresh(env, live) if a.status in LIVE_STATUSES]
            if not limit or len(live) < limit:
                spec = dict(agent.spec)
                if services:
                    used = {int(p) for a in others for p in (a.spec.get("ports") or {}).values()}
                    spec["ports"] = wt.allocate_ports(services, used)
                agent = agent._replace(spec=spec)
                env.store.insert_agent(agent)
                return agent
        if env.config.get("limits.on_limit") != "wait":
            raise StateError(
                f"Too many agents: {len(live)} running, limits.max_agents is {limit}",
                hint="Wait for an agent to finish (exo wait), kill one (exo kill), raise limits.max_agents, "
                "or set limits.on_limit = \"wait\" to queue spawns.",
                limit=limit,
            )
        if not waited:
            call.warn(f"Waiting for a free agent slot (limits.max_agents = {limit})")
            waited = True
            if call.common.mux == "tmux":
                call.starter().leave()  # never hold the call's other agents back while waiting
        from exo_cli import cancel

        for _ in range(10):
            if cancel.cancelled():
                raise StateError("Spawn cancelled while waiting for a free agent slot")
            time.sleep(0.1)


def _context(req: Request, *, agent_id: str, role: str, branch: str | None, parent: str,
             parent_branch: str | None, worktree: str, bead_text: str | None) -> str:
    if bead_text is not None:
        text = bead_text
        if req.prompt:
            text += f"\n## Additional instructions\n\n{req.prompt.strip()}\n"
        return text
    body = (req.task or req.prompt or "").strip()
    title = body.splitlines()[0][:80] if body else "(no task yet: wait for a message from your parent)"
    out = [f"# Task: {title}", "", f"**Agent:** {agent_id} ({role})", f"**Parent:** {parent}",
           f"**Worktree:** {worktree}"]
    if branch:
        out.append(f"**Branch:** {branch}")
    if parent_branch:
        out.append(f"**Parent branch:** {parent_branch}")
    if req.annotation:
        out.append(f"**Annotation:** {req.annotation}")
    out += ["", "## Task", "", body or "No task was given yet. Your parent will send it as a message.", ""]
    out += ["## Workflow", "", "1. Work only inside this worktree (use relative paths)."]
    if role == "tl":
        out += ["2. Split the work: `spawn_workers` for concrete leaf tasks, `spawn_subtree` for parts that need",
                "   further decomposition; collect results with `wait`, answer questions, merge with `merge_pr`."]
    else:
        out.append("2. Implement the change and its tests.")
    out += [
        f"3. Commit on your branch{f' {branch}' if branch else ''}.",
        "4. Report progress with `exo note \"...\"` (the 'note' tool); ask with `exo question` when blocked.",
        f"5. File a PR{f' against {parent_branch}' if parent_branch else ''}: `exo pr file --title ... --body ...`"
        " (the 'file_pr' tool).",
        "",
    ]
    return "\n".join(out)


def _first_prompt(req: Request, agent_id: str, bead_full: str | None, title: str | None) -> str | None:
    if req.kind == "bead":
        text = f"You are agent {agent_id}. Work on bead {bead_full}: {title}. Your task context is in .exo/context.md."
        return text + (f"\n\n{req.prompt}" if req.prompt else "")
    if req.kind == "subtree":
        return req.task or req.prompt
    return req.prompt or None


def _run_task(call: _Call, req: Request, *, launching: bool = False) -> Agent:
    """Spawn one task; raise ExoError (the task's failure) or return the recorded agent."""
    env = call.env
    common = call.common
    if req.agent not in BACKENDS:
        raise InvalidInput(f"Invalid agent backend {req.agent!r}", hint=f"Use one of: {', '.join(BACKENDS)}.")
    bead_full = title = slug = short = None
    if req.kind == "bead":
        bead_full, short, agent_id, slug, title = _resolve_bead(call, req)
    else:
        agent_id = check_name(req.name, "agent name")
    role = "tl" if req.kind == "subtree" else "dev"
    with spawn_lock(env, agent_id):
        existing = env.store.agent(agent_id)
        if existing is not None:
            phase = existing.spec.get("phase")
            if launching and phase == PENDING:
                env.store.delete_agent(agent_id)
            elif phase not in ("spawned", PENDING):  # an interrupted spawn (its lock is ours now)
                resumed = _resume_started(call, req, existing)
                if resumed is not None:
                    return resumed
                cleanup_partial(env, existing)
                env.store.delete_agent(agent_id)
                call.warn(f"{agent_id}: cleaned up an interrupted earlier spawn and started again")
            elif existing.status in LIVE_STATUSES:
                raise StateError(
                    f"Agent {agent_id} already exists ({existing.status})",
                    hint=f"It is already running: see `exo agents`, attach with `exo attach {agent_id}`.",
                    agent=agent_id,
                    status=existing.status,
                )
            else:
                raise StateError(
                    f"An agent named {agent_id} is still recorded ({existing.status})",
                    hint="Forget dead agents with `exo reap`, or pick another name.",
                    agent=agent_id,
                    status=existing.status,
                )
        bead_task = None
        if bead_full is not None:
            from exo_cli.ops import tasks

            owner = _live_owner(env, bead_full, agent_id)
            if owner is not None:
                raise StateError(
                    f"Bead {bead_full} is already being worked on by {owner.id} ({owner.status})",
                    hint=f"See `exo agents`; kill {owner.id} first to hand the bead to a new agent.",
                    bead_id=bead_full,
                    agent=owner.id,
                )
            # Seed 000's checks ("Bead is blocked: <id>", ...); our own earlier claim is fine.
            bead_task = tasks.resolve_bead_task(env, bead_full, actor=agent_id, source=call.beads())
        # Names, places and checks, before anything is created.
        parent_branch = common.parent_branch
        if common.no_worktree:
            path = Path(common.parent_cwd or env.repo.toplevel)
            branch = parent_branch
        else:
            if parent_branch is None:
                raise StateError(
                    "The parent is not on a branch (detached HEAD)",
                    hint="Check out a branch, or choose the base with --from BRANCH.",
                )
            if req.kind == "bead":
                branch, folder = wt.bead_names(env, short or agent_id, slug or "task")
            else:
                branch, folder = wt.child_names(env, parent_branch, agent_id)
            path = wt.worktree_root(env) / folder
            if path.exists() or path.is_symlink():
                raise StateError(
                    f"Worktree already exists at {path}",
                    hint=f"exo never reuses a worktree. Remove it (git worktree remove {path}) or pick another name.",
                    path=str(path),
                )
            if branch in call.heads():
                raise StateError(
                    f"Branch {branch} already exists",
                    hint=f"exo never reuses a branch. Pick another name, or delete it: git branch -d {branch}",
                    branch=branch,
                )
        call.check_backend(req.agent)
        mux = call.mux()
        base_commit = None
        if not common.no_worktree:
            base_commit = call.commit(common.base or parent_branch or "HEAD")
            if base_commit is None:
                raise StateError(f"Base {common.base!r} does not name a commit", hint="Pass a branch with --from.")
        agent_dir = env.state_dir / "agents" / agent_id
        now = time.time()
        spec: dict[str, Any] = {
            "request": asdict(req),
            "common": asdict(common),
            "phase": "recorded",
            "creates_worktree": not common.no_worktree,
            "worktree_created": False,
            "branch_created": False,
            "base": common.base or parent_branch,
            "base_commit": base_commit,
            "created_files": [],
            "agent_dir": str(agent_dir),
            "after": list(common.after),
            "spawner_pid": os.getpid(),
        }
        agent = Agent(
            id=agent_id, name=agent_id, role=role, parent=common.parent, status=STARTING,
            backend=req.agent, mux=common.mux, task=req.task or req.prompt or title, bead=bead_full,
            worktree=str(path), branch=branch, base_branch=parent_branch, repo=str(env.repo.root),
            status_reason="spawning", created_at=now, updated_at=now, status_at=now, spec=spec,
        )  # fmt: skip
        agent = _slot(call, agent)
        if common.mux == "tmux":
            call.starter().warm_up()
        spec = dict(agent.spec)
        try:
            fault.point("spawn.recorded", env.environ)
            return _build(call, req, agent, spec, mux=mux, bead_task=bead_task)
        except BaseException as exc:
            if isinstance(exc, ExoError | OSError):
                current = env.store.agent(agent_id) or agent
                with contextlib.suppress(ExoError, OSError):
                    cleanup_partial(env, current)
                    env.store.delete_agent(agent_id)
            raise


def _build(call: _Call, req: Request, agent: Agent, spec: dict[str, Any], *, mux: Mux, bead_task: Any) -> Agent:
    """Create, prepare and start one recorded agent (its record is updated after each phase)."""
    from exo_cli.adapters.agents import LaunchContext

    env = call.env
    common = call.common
    agent_id = agent.id
    path = Path(agent.worktree or "")
    bead_full = bead_task.id if bead_task is not None else None
    title = bead_task.title if bead_task is not None else None
    if not common.no_worktree:
        wt.create(env, path=path, branch=agent.branch or "", base_commit=spec["base_commit"])
        spec.update(phase="worktree", worktree_created=True, branch_created=True)
        _update_spec(env, agent_id, spec)
        fault.point("spawn.worktree", env.environ)
    # Prepare.
    call.exclude_exo()
    identity = {
        "EXO_AGENT": agent_id,
        "EXO_PARENT": common.parent,
        "EXO_ROLE": agent.role,
        "EXO_STATE_DIR": str(env.state_dir),
        "BEADS_DIR": str(env.repo.root / ".beads"),
        **wt.port_env(spec.get("ports") or {}),
    }
    base_env = _agent_env(env)
    if not common.no_worktree:
        created, warns = wt.copy_files(env, path)
        spec["created_files"] = created
        for w in warns:
            call.warn(f"{agent_id}: {w}")
        if created:  # nothing copied: the record already says so
            _update_spec(env, agent_id, spec)
        wt.run_post_create(env, path, {**base_env, **identity})
    bead_text = None
    if bead_task is not None:
        bead_text = bead_task.context(agent.branch or "", agent.base_branch)
    ctx_name = wt.CONTEXT_FILE if not common.no_worktree else f".exo/context.{agent_id}.md"
    wt.write_file(path / ctx_name, _context(
        req, agent_id=agent_id, role=agent.role, branch=agent.branch, parent=common.parent,
        parent_branch=agent.base_branch, worktree=str(path), bead_text=bead_text,
    ))  # fmt: skip
    spec["context_file"] = str(path / ctx_name)
    services = wt.check_services(env.config.get("services") or {})
    if services:
        doc = wt.process_compose(services, spec.get("ports") or {}, path)
        spec["process_compose"] = str(wt.write_process_compose(doc, path))
    agent_dir = Path(spec["agent_dir"])
    _private_dir(agent_dir)
    backend = _backend_for(env, req.agent, common, agent_dir)
    fork = False
    resume = None
    if req.kind == "subtree" and req.agent == "claude" and common.fork_session is not False:
        resume = common.session_id
        fork = resume is not None
        if common.fork_session and not fork:
            raise UsageError(
                "--fork-session needs the parent's Claude session id",
                hint="Pass --parent-session-id (spawn_subtree's parent_session_id).",
            )
    elif common.fork_session and req.kind == "subtree":
        call.warn(f"{agent_id}: --fork-session only works with the claude backend; started fresh")
    prompt = _first_prompt(req, agent_id, bead_full, title)
    extra = list((env.config.get("agent.args") or {}).get(req.agent, []) or [])
    home = Path(env.environ.get("HOME") or os.path.expanduser("~"))
    lctx = LaunchContext(
        name=agent_id, role=agent.role, worktree=path, repo_root=env.repo.root, prompt=prompt,
        agent_dir=agent_dir, state_dir=env.state_dir, home=home, env=base_env,
        skip_permissions=common.skip_permissions, resume_session=resume, fork_session=fork,
        extra_args=extra, created_worktree=not common.no_worktree, branch=agent.branch,
        parent_cwd=Path(common.parent_cwd) if common.parent_cwd else None,
    )  # fmt: skip
    launch = backend.prepare(lctx, identity)
    spec["phase"] = "prepared"
    spec["launch_files"] = list(launch.files)
    env.store.update_agent(agent_id, spec=spec, undo=list(launch.undo))
    if bead_task is not None:
        from exo_cli.ops import tasks

        claimed = tasks.claim(env, bead_task.id, agent_id, source=call.beads())
        tasks.save_bead_snapshot(env, agent_id, claimed)  # what `exo reconstitute` diffs against
        spec["claimed"] = True
    fault.point("spawn.prepared", env.environ)
    # Start.
    logs = env.state_dir / "logs"
    logs.mkdir(mode=0o700, exist_ok=True)
    loc = call.starter().start(agent_id, list(launch.argv), cwd=launch.cwd, env=dict(launch.env),
                               log_path=logs / f"{agent_id}.log")
    spec["phase"] = "started"
    env.store.update_agent(agent_id, spec=spec, location=loc.to_dict())
    fault.point("spawn.started", env.environ)
    if services and common.mux != "zellij" and shutil.which("process-compose", path=base_env.get("PATH")):
        svc_name = f"{agent_id[:58]}-svc"
        with contextlib.suppress(ExoError):
            sloc = mux.start(svc_name, wt.services_argv(path), cwd=str(path), env={**launch.env},
                             log_path=logs / f"{svc_name}.log")
            spec["services_location"] = sloc.to_dict()
    return _finish(env, req, agent._replace(location=loc.to_dict()), spec)


def _finish(env: Env, req: Request, agent: Agent, spec: dict[str, Any]) -> Agent:
    """Mark a started agent spawned: status, the ``spawned`` event and the parent's message."""
    spec["phase"] = "spawned"
    status, reason = STARTING, "started"
    if req.agent == "custom":
        status, reason = WORKING, "no hooks: status from liveness only"
    env.store.update_agent(agent.id, spec=spec, status=status, status_reason=reason)
    data = {"event": "spawned", "agent": agent.id, "branch": agent.branch, "worktree": agent.worktree,
            "parent": agent.parent, "location": dict(agent.location), "backend": req.agent}
    env.store.event("spawned", agent.id, data)
    env.store.post("event", agent.id, agent.parent or ROOT,
                   f"[SPAWNED {agent.id}] {agent.role} on branch {agent.branch} in {agent.worktree}", data=data)
    return env.store.agent(agent.id) or agent


def _resume_started(call: _Call, req: Request, existing: Agent) -> Agent | None:
    """Finish a spawn that was interrupted after its agent started, if the agent still runs."""
    from exo_cli.ops import agentctl

    loc = agentctl.location(existing)
    if existing.spec.get("phase") != "started" or loc is None:
        return None
    try:
        alive = agentctl.mux_for(call.env, loc.mux).alive(loc)
    except (ExoError, OSError):
        return None
    if not alive:
        return None
    call.warn(f"{existing.id}: finished an interrupted earlier spawn (its agent was already running)")
    return _finish(call.env, req, existing, dict(existing.spec))


# --------------------------------------------------------------------------- planning


def _caller_context(env: Env, *, from_branch: str | None, no_worktree: bool) -> dict[str, Any]:
    """parent id, parent branch, base ref, the parent's folder and Claude session id."""
    from exo_cli.adapters import git as gitutil

    caller = env.caller
    record = env.caller_agent() if not caller.is_human else None
    if record is not None and record.worktree:
        parent_cwd = record.worktree
        branch = record.branch or gitutil.current_branch(record.worktree)
    else:
        parent_cwd = str(env.repo.toplevel)
        branch = gitutil.current_branch(env.repo.toplevel)
    base = from_branch or None
    if from_branch:
        from exo_cli.validate import check_branch

        check_branch(from_branch, "base branch")
        if gitutil.ref_exists(env.repo.root, f"refs/heads/{from_branch}"):
            branch = from_branch  # the tree follows the chosen base: children of from_branch
        elif wt.rev(env.repo.root, from_branch) is None:
            raise NotFound(f"Base {from_branch!r} does not exist", hint="Pass an existing branch or ref to --from.")
    elif env.config.get("worktree.base"):
        base = str(env.config.get("worktree.base"))
    return {
        "parent": caller.agent_id,
        "parent_branch": branch,
        "base": base,
        "parent_cwd": parent_cwd,
        "session_id": record.session_id if record is not None else None,
    }


def _plan(env: Env, call_env: Env, *, beads: list[str], worker: list[str], prompt: list[str],
          subtree: bool, task: str | None, branch: str | None, ready: int | None,
          specs: list[dict[str, Any]], agent: str, warnings: list[str]) -> list[Request]:
    """Turn the call's arguments into one Request per task (names picked for unnamed workers)."""
    reqs: list[Request] = []
    if subtree:
        if beads or worker or specs or ready:
            raise UsageError("--subtree spawns one subtree; do not combine it with beads or workers")
        text = task or (prompt[0] if len(prompt) == 1 else None)
        if not text or not branch:
            raise UsageError("--subtree needs --task TEXT and --branch NAME")
        if len(prompt) > 1:
            raise UsageError("--subtree takes one task")
        check_text(text, "task")
        name = check_name(branch, "branch name")
        return [Request(kind="subtree", key=name, name=name, task=text, agent=agent)]
    if task or branch:
        raise UsageError("--task and --branch go with --subtree")
    for p in prompt:
        check_text(p, "prompt")
    bead_prompt = None
    if beads or ready:
        if worker or len(prompt) > 1:
            raise UsageError("Give beads, or workers with prompts, not both in one call")
        bead_prompt = prompt[0] if prompt else None
        prompt = []
    for b in beads:
        reqs.append(Request(kind="bead", key=b, bead=b, prompt=bead_prompt, agent=agent))
    if ready:
        if isinstance(ready, bool) or ready < 1:
            raise InvalidInput(f"Invalid --ready {ready!r}: expected a whole number of at least 1", field="ready")
        from exo_cli.adapters import beads as beads_mod
        from exo_cli.ops import tasks

        src = tasks.open_repo_beads(call_env)
        given = set()
        for b in beads:
            with contextlib.suppress(ExoError):
                given.add(beads_mod.resolve_id(src, b))
        picked = tasks.pick_ready(call_env, ready, exclude_ids=given, source=src)
        if len(picked) < ready:
            warnings.append(f"Only {len(picked)} ready bead(s) to spawn (asked for {ready})")
        for x in picked:
            short = beads_mod.short_id(x.id, src.prefix)
            reqs.append(Request(kind="bead", key=short, bead=x.id, prompt=bead_prompt, agent=agent))
    if worker or prompt:
        if len(prompt) > 1 and len(prompt) < len(worker):
            raise UsageError(
                f"{len(worker)} workers but {len(prompt)} prompts",
                hint="Give one prompt for all workers, or one per worker in the same order.",
            )
        names: list[str | None] = list(worker)
        if len(prompt) > len(worker):
            names += [None] * (len(prompt) - len(worker))
        for i, n in enumerate(names):
            p = prompt[i] if len(prompt) > 1 else (prompt[0] if prompt else None)
            reqs.append(Request(kind="worker", key=n or "", name=n or None, prompt=p, agent=agent))
    for s in specs:
        if not isinstance(s, dict):
            raise InvalidInput("Each worker spec must be an object {name, prompt, agent?, bead?, annotation?}")
        unknown = set(s) - {"name", "prompt", "agent", "bead", "annotation"}
        if unknown:
            raise InvalidInput(f"Unknown worker spec field(s): {', '.join(sorted(unknown))}", field="specs")
        p = s.get("prompt") or None
        if p is not None:
            check_text(p, "prompt")
        kind = "bead" if s.get("bead") else "worker"
        name = s.get("name") or None
        reqs.append(Request(kind=kind, key=name or (s.get("bead") or ""), name=name, prompt=p,
                            bead=s.get("bead") or None, annotation=s.get("annotation") or None,
                            agent=s.get("agent") or agent))
    if not reqs:
        raise UsageError(
            "Nothing to spawn",
            hint="Give bead ids, --ready N, --worker NAME/--prompt TEXT, or --subtree --task T --branch NAME.",
        )
    # Auto-pick memorable names for unnamed workers.
    unnamed = [r for r in reqs if r.kind == "worker" and not r.name]
    if unnamed:
        taken = {a.id for a in call_env.store.agents()} | {r.name for r in reqs if r.name}
        root = wt.worktree_root(call_env)
        if root.is_dir():
            taken |= {p.name for p in root.iterdir()}
        for r, n in zip(unnamed, wt.pick_names(len(unnamed), {t for t in taken if t}), strict=True):
            r.name = n
            r.key = n
    return reqs


# --------------------------------------------------------------------------- the operation


def _adapt_agents(*, bead_ids: list[str], backend: str | None = None) -> dict[str, Any]:
    return {"beads": list(bead_ids), "agent": backend}


def _adapt_subtree(*, task: str, branch_name: str, parent_session_id: str | None = None) -> dict[str, Any]:
    return {"subtree": True, "task": task, "branch": branch_name, "parent_session_id": parent_session_id}


def _adapt_workers(*, specs: list[WorkerSpec]) -> dict[str, Any]:
    out = []
    for s in specs:
        d = asdict(s) if dataclasses.is_dataclass(s) else dict(s)  # type: ignore[arg-type]
        out.append({k: v for k, v in d.items() if v is not None})
    return {"specs": out}


SPAWN_HELP = {
    "beads": "Bead ids to work on, with or without the tracker's prefix (4hj or bd-4hj).",
    "worker": "Name of a leaf worker to spawn (repeatable); its branch is <parent branch>.<name>.",
    "prompt": "The task: one prompt for all workers, or one per --worker in order; extra instructions for beads.",
    "prompt_file": "Read the prompt from this file.",
    "edit": "Write the prompt in $EDITOR (CLI only).",
    "subtree": "Spawn a child team lead that can spawn its own children (needs --task and --branch).",
    "task": "The subtree's responsibility.",
    "branch": "The subtree's name and branch suffix: <parent branch>.<branch>.",
    "fork_session": "Start a Claude subtree from its parent's conversation (--resume ... --fork-session).",
    "parent_session_id": "The parent's Claude session id to fork from (default: the caller's recorded one).",
    "ready": "Spawn the N best ready beads (priority, then age), skipping ones a live agent owns.",
    "specs": "Worker specs as objects {name, prompt, agent?, bead?, annotation?}.",
    "agent": "Agent backend: claude, gemini, codex, custom or demo (default: agent.default in exo.toml).",
    "mux": "Where agents run: tmux, zellij or headless (default: mux.default in exo.toml).",
    "from_branch": "Base the new branches on this branch or ref (default: the parent's branch).",
    "no_worktree": "Run the agent in the repository itself instead of a new worktree.",
    "repo": "Spawn into the repository at this path (it keeps its own exo state).",
    "skip_permissions": "Let agents run tools without asking (default: agent.skip_permissions in exo.toml).",
    "after": "Start only when these agents are idle or done (their output can go in the prompt as {{A.output}}).",
    "demo_script": "Script file for the demo agent.",
}


@op(
    "spawn",
    cli="spawn",
    tools=[
        Tool(
            "spawn_agents",
            adapt=_adapt_agents,
            description=(
                "Create a git worktree and start an agent for each bead id, in parallel; returns "
                "{worktrees, tabs, failed} pairs plus error objects. Use it to dispatch ready beads from "
                "the tracker; a blocked or unknown bead fails alone while the others start."
            ),
            help={
                "bead_ids": "Bead ids, short (4hj) or full (bd-4hj).",
                "backend": "Agent CLI: claude, gemini, codex, custom or demo (default from exo.toml).",
            },
        ),
        Tool(
            "spawn_subtree",
            adapt=_adapt_subtree,
            description=(
                "Fork a child team lead on branch <your branch>.<branch_name> when decomposing work into "
                "sub-problems that may need further decomposition: the child gets the coordination tools and "
                "can spawn its own children. Prefer it when the task has 3+ distinct components or needs "
                "architectural decisions."
            ),
            help={
                "task": "The subtree's responsibility.",
                "branch_name": "Branch suffix: 'auth' becomes '<your branch>.auth'.",
            },
        ),
        Tool(
            "spawn_workers",
            adapt=_adapt_workers,
            description=(
                "Spawn leaf workers, each in its own worktree on branch <your branch>.<name>, when work is "
                "concrete enough to execute without further decomposition: give each a focused, bounded task "
                "with the exact files and commands. Workers cannot spawn; they file a PR against your branch."
            ),
            help={"specs": "One object per worker: name, prompt, and optionally agent, bead, annotation."},
        ),
    ],
    roles=("tl",),
    help=SPAWN_HELP,
)
def spawn(
    env: Env,
    *,
    beads: list[str] | None = None,
    worker: list[str] | None = None,
    prompt: list[str] | None = None,
    prompt_file: str | None = None,
    edit: bool = False,
    subtree: bool = False,
    task: str | None = None,
    branch: str | None = None,
    fork_session: bool | None = None,
    parent_session_id: str | None = None,
    ready: int | None = None,
    specs: list[dict[str, Any]] | None = None,
    agent: str | None = None,
    mux: str | None = None,
    from_branch: str | None = None,
    no_worktree: bool = False,
    repo: str | None = None,
    skip_permissions: bool | None = None,
    after: list[str] | None = None,
    demo_script: str | None = None,
) -> SpawnResult:
    """Start agents: one worktree, branch and agent per bead, worker or subtree.

    Tasks run in parallel; one failing never stops the others. The result keeps seed 000's
    pairs (worktrees, tabs, failed) and adds error objects, the recorded agents, workers
    spawned without a task, and warnings. A spawn interrupted at any step leaves a record that
    the same spawn again (or `exo doctor`) cleans up before starting over; spawning the same
    agent twice reports the live one as a StateError.
    """
    prompts = list(prompt or [])
    if prompt_file:
        if prompts:
            raise UsageError("Give --prompt or --prompt-file, not both")
        p = Path(os.path.expanduser(prompt_file))
        p = p if p.is_absolute() else env.cwd / p
        try:
            prompts = [p.read_text(encoding="utf-8")]
        except OSError as exc:
            raise NotFound(f"Cannot read prompt file {p}: {exc.strerror}", path=str(p)) from exc
        except ValueError as exc:  # a NUL in the path, or a file that is not UTF-8 text
            raise InvalidInput(f"Cannot read prompt file {p!r}: {exc}", field="prompt_file") from exc
    if edit and not prompts:
        raise UsageError("--edit needs an interactive terminal: write the prompt with --prompt or --prompt-file")
    target = _target_env(env, repo)
    backend = agent or str(target.config.get("agent.default"))
    if backend not in BACKENDS:
        raise InvalidInput(f"Invalid agent backend {backend!r}", hint=f"Use one of: {', '.join(BACKENDS)}.")
    kind = mux or str(target.config.get("mux.default"))
    if kind not in MUXES:
        raise InvalidInput(f"Invalid multiplexer {kind!r}", hint=f"Use one of: {', '.join(MUXES)}.")
    if demo_script and not _exists(Path(demo_script), "file"):
        raise NotFound(f"Demo script {demo_script} does not exist", path=demo_script)
    if demo_script:
        demo_script = str(Path(demo_script).absolute())
    warnings: list[str] = []
    if target is env:
        info = _caller_context(env, from_branch=from_branch, no_worktree=no_worktree)
    else:
        info = _caller_context(target, from_branch=from_branch, no_worktree=no_worktree)
        info["parent"] = ROOT
        warnings.append(f"Spawned into {target.repo.root}: its agents report to that repository's root")
    session = parent_session_id or info.pop("session_id")
    info.pop("session_id", None)
    skip = bool(target.config.get("agent.skip_permissions")) if skip_permissions is None else skip_permissions
    common = Common(
        mux=kind, no_worktree=no_worktree, skip_permissions=skip, demo_script=demo_script,
        fork_session=fork_session, session_id=session, after=list(after or []),
        origin={"caller": env.caller.agent_id, "repo": str(env.repo.root)}, **info,
    )  # fmt: skip
    reqs = _plan(env, target, beads=list(beads or []), worker=list(worker or []), prompt=prompts,
                 subtree=subtree, task=task, branch=branch, ready=ready, specs=list(specs or []),
                 agent=backend, warnings=warnings)
    seen: dict[str, int] = {}
    for r in reqs:
        seen[r.name or r.key] = seen.get(r.name or r.key, 0) + 1
    call = _Call(target, common)
    call.warnings.extend(warnings)
    if not skip and any(r.agent in ("claude", "gemini", "codex") for r in reqs):
        call.warn("Agents will ask before running tools; pass --skip-permissions to let them run unattended")
    return _execute(call, reqs, duplicates={k for k, n in seen.items() if n > 1 and k})


def _pending_waits(env: Env, after: list[str]) -> list[str]:
    """The agents of ``after`` that are not idle or done yet (NotFound for unknown ones)."""
    waiting = []
    for a in after:
        check_name(a, "agent")
        rec = env.store.agent(a)
        if rec is None:
            raise NotFound(f"No agent named {a!r} to wait for", hint="List agents with `exo agents`.", agent=a)
        if rec.status not in (IDLE, DONE):
            waiting.append(a)
    return waiting


def _record_pending(call: _Call, req: Request, waits: list[str]) -> Agent:
    env = call.env
    agent_id = check_name(req.name or req.key, "agent name")
    with spawn_lock(env, agent_id):
        if env.store.agent(agent_id) is not None:
            raise StateError(f"Agent {agent_id} already exists", hint="Pick another name.", agent=agent_id)
        now = time.time()
        rec = Agent(
            id=agent_id, name=agent_id, role="tl" if req.kind == "subtree" else "dev", parent=call.common.parent,
            status=STARTING, backend=req.agent, mux=call.common.mux, task=req.task or req.prompt,
            bead=req.bead, base_branch=call.common.parent_branch, repo=str(env.repo.root),
            status_reason=f"waiting for {', '.join(waits)}", created_at=now, updated_at=now, status_at=now,
            spec={"phase": PENDING, "request": asdict(req), "common": asdict(call.common), "after": waits},
        )  # fmt: skip
        env.store.insert_agent(rec)
        return rec


def _execute(call: _Call, reqs: list[Request], *, duplicates: set[str] = frozenset(),  # type: ignore[assignment]
             launching: bool = False) -> SpawnResult:
    env = call.env
    outcomes: list[Agent | ExoError | None] = [None] * len(reqs)
    try:
        if not call.common.after or launching:
            call.mux()  # a missing multiplexer fails the whole call, as seed 000 does
    except ExoError as exc:
        return SpawnResult([], [], [["*", exc.message]], [_error_obj("*", exc)], [], [], call.warnings)
    waits: list[str] = []
    if call.common.after and not launching:
        try:
            waits = _pending_waits(env, call.common.after)
        except ExoError as exc:
            return SpawnResult([], [], [["*", exc.message]], [_error_obj("*", exc)], [], [], call.warnings)
        if not waits:
            call.mux()

    starter = call.starter() if call.common.mux == "tmux" and not waits else None

    if starter is not None:
        starter.reserve(min(len(reqs), RUN_THREADS))  # the first wave, announced before any thread runs

    def one(i: int) -> None:
        req = reqs[i]
        if starter is not None:
            starter.enter()
        try:
            if (req.name or req.key) in duplicates:
                raise InvalidInput(f"Agent name {req.name or req.key} appears twice in this spawn", field="name")
            if waits:
                outcomes[i] = _record_pending(call, req, waits)
            else:
                outcomes[i] = _run_task(call, req, launching=launching)
        except ExoError as exc:
            outcomes[i] = exc
        except OSError as exc:
            outcomes[i] = StateError(f"{req.key}: {exc}", hint="See the message; nothing was left behind.")
        finally:
            if starter is not None:
                starter.leave()

    _run_all(one, len(reqs))
    worktrees: list[list[str]] = []
    tabs: list[list[str]] = []
    failed: list[list[str]] = []
    errors: list[dict[str, Any]] = []
    agents: list[SpawnedAgent] = []
    awaiting: list[str] = []
    for req, out in zip(reqs, outcomes, strict=True):
        key = req.key or req.name or "?"
        if isinstance(out, ExoError):
            failed.append([key, out.message])
            errors.append(_error_obj(key, out))
            continue
        assert out is not None
        agents.append(_view(out))
        if out.spec.get("phase") == PENDING:
            call.warn(f"{out.id} waits for {', '.join(out.spec.get('after') or [])}; it starts when they are idle or done")
            continue
        if out.spec.get("creates_worktree"):
            worktrees.append([key, out.worktree or ""])
        loc = out.location
        tabs.append([key, str(loc.get("pane") or loc.get("tab") or loc.get("pid") or "")])
        if req.kind == "worker" and not req.prompt:
            awaiting.append(out.id)
    if awaiting:
        call.warn("WORKERS NEED TASKS: " + ", ".join(awaiting) + " — send each its task now (exo send)")
    return SpawnResult(worktrees, tabs, failed, errors, agents, awaiting, call.warnings)


RUN_THREADS = 16  # spawn tasks running at once


def _run_all(fn: Any, count: int, *, max_threads: int = RUN_THREADS) -> None:
    """Run ``fn(0) .. fn(count - 1)`` on up to ``max_threads`` threads; re-raise the first unexpected error.

    Plain threads rather than concurrent.futures (whose import costs ~15 ms of CPU at every
    spawn); every task gets its own thread up to the cap, so all of them queue for the repo
    lock at once and the serialized ``git worktree add`` calls run back to back.
    """
    if count <= 1:
        for i in range(count):
            fn(i)
        return
    lock = threading.Lock()
    indexes = iter(range(count))
    errors: list[BaseException] = []

    def worker() -> None:
        while True:
            with lock:
                i = next(indexes, None)
            if i is None:
                return
            try:
                fn(i)
            except BaseException as exc:  # noqa: BLE001 - handed to the calling thread below
                errors.append(exc)

    threads = [threading.Thread(target=worker, name=f"exo-spawn-{k}") for k in range(min(count, max_threads))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def launch_pending(env: Env, agent_id: str, *, prompt: str | None = None) -> SpawnResult:
    """Start an agent recorded as waiting for ``after``; ``prompt`` replaces its recorded prompt.

    The contract for the messages helper: call it when every agent the record waits for
    (``spec["after"]``) is idle or done, with the prompt after ``{{A.output}}`` substitution.
    Only the first caller launches (a kv claim); others get a StateError in ``failed``.
    Returns the same result shape as ``spawn``. NotFound when there is no such record,
    StateError when it is not waiting.
    """
    rec = env.store.agent(agent_id)
    if rec is None:
        raise NotFound(f"No agent named {agent_id!r}", agent=agent_id)
    if rec.spec.get("phase") != PENDING:
        raise StateError(f"Agent {agent_id} is not waiting to start", agent=agent_id, status=rec.status)
    key = f"launch:{agent_id}:{rec.created_at}"
    with env.store.write() as c:
        cur = c.execute("INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT(key) DO NOTHING", (key, str(os.getpid())))
        claimed = cur.rowcount == 1
    if not claimed:
        raise StateError(f"Agent {agent_id} is already being launched", agent=agent_id)
    fields = {f.name for f in dataclasses.fields(Request)}
    req = Request(**{k: v for k, v in rec.spec["request"].items() if k in fields})
    if prompt is not None:
        check_text(prompt, "prompt")
        if req.kind == "subtree":
            req.task = prompt
        else:
            req.prompt = prompt
    cfields = {f.name for f in dataclasses.fields(Common)}
    common = Common(**{k: v for k, v in rec.spec["common"].items() if k in cfields})
    return _execute(_Call(env, common), [req], launching=True)


def finish_interrupted(env: Env, agent: Agent) -> bool:
    """For doctor: complete an interrupted spawn whose agent already runs; False when it does not."""
    fields = {f.name for f in dataclasses.fields(Request)}
    req = Request(**{k: v for k, v in (agent.spec.get("request") or {}).items() if k in fields})
    cfields = {f.name for f in dataclasses.fields(Common)}
    common = Common(**{k: v for k, v in (agent.spec.get("common") or {}).items() if k in cfields})
    return _resume_started(_Call(env, common), req, agent) is not None


def first_failure_exit(result: SpawnResult) -> int:
    """The CLI's exit code for a spawn result."""
    return result.exit_code

