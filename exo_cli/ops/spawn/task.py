"""One task of a spawn: a bead, a worker or a subtree becomes a running agent.

``run_task`` is a short row of steps: name the agent, clear the name (an interrupted earlier
spawn of it is finished or cleaned up; a live or still recorded agent fails the task), check
that the bead is free, choose the branch and worktree, then record the agent as ``starting``
with its whole request once a slot under ``limits.max_agents`` is free, before anything is
created, so a killed spawn leaves a record that a retry or ``exo doctor`` can finish or clean.
``_build`` then creates the worktree and branch (git metadata serialized by the repo lock),
prepares it (copies, symlinks, post-create command, the bead's claim, ``.exo/context.md``
showing the claimed bead, services, the backend's files) and starts the agent with its first
prompt on its command line; the record is updated after each phase. Fault points (``exo_cli.fault``):
``spawn.recorded``, ``spawn.worktree``, ``spawn.prepared``, ``spawn.started``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Set as AbstractSet
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from exo_cli import fault
from exo_cli.adapters import worktree as wt
from exo_cli.adapters.files import ensure_private_dir
from exo_cli.env import PROOF_FIELD, PROOF_VAR, SOCKET_VAR, new_proof
from exo_cli.errors import ExoError, InvalidInput, StateError, UsageError
from exo_cli.ops.spawn.call import PENDING, Call, agent_env, finish, host_fields
from exo_cli.ops.spawn.context import context_text, first_prompt
from exo_cli.ops.spawn.recovery import cleanup_partial, resume_started, spawn_lock
from exo_cli.ops.spawn.result import SpawnResult, failed_call, run_tasks
from exo_cli.records import BACKENDS, DONE, LIVE_STATUSES, ROOT, STARTING, Agent
from exo_cli.validate import check_agent_name, slugify

if TYPE_CHECKING:
    from collections.abc import Mapping

    from exo_cli.adapters.agents import Backend, Launch
    from exo_cli.adapters.mux import Location, Mux
    from exo_cli.env import Env
    from exo_cli.ops.spawn.plan import Common, Request


def start_all(call: Call, reqs: list[Request], *, duplicates: AbstractSet[str] = frozenset(),
              launching: bool = False) -> SpawnResult:
    """Spawn every task of the call in parallel; one failing never stops the others."""
    try:
        call.mux()  # a missing multiplexer fails the whole call, not each task
    except ExoError as exc:
        return failed_call(call, exc)
    starter = call.starter() if call.common.mux == "tmux" else None
    _read_beads_ahead(call, reqs)
    return run_tasks(call, reqs, lambda req: run_task(call, req, launching=launching),
                     duplicates=duplicates, starter=starter)


def _read_beads_ahead(call: Call, reqs: list[Request]) -> None:
    """Read every bead of the call in one go (``bd``: one ``show`` and one ``ready``), before the tasks split up."""
    ids = [r.bead for r in reqs if r.kind == "bead" and r.bead]
    if ids:
        with contextlib.suppress(ExoError):  # each task reports its own bead's problem
            call.beads().prefetch(ids)


class _Bead(NamedTuple):
    """A bead request's bead: its ids, the agent's name, the branch slug and the title."""

    full: str
    short: str
    agent_id: str
    slug: str
    title: str


def run_task(call: Call, req: Request, *, launching: bool = False) -> Agent:
    """Spawn one task; raise ExoError (the task's failure) or return the recorded agent."""
    env = call.env
    if req.agent not in BACKENDS:
        raise InvalidInput(f"Invalid agent backend {req.agent!r}", hint=f"Use one of: {', '.join(BACKENDS)}.")
    bead = _resolve_bead(call, req) if req.kind == "bead" else None
    agent_id = bead.agent_id if bead is not None else check_agent_name(req.name)
    with spawn_lock(env, agent_id):
        resumed = _clear_name(call, req, agent_id, launching=launching)
        if resumed is not None:
            return resumed
        bead_task = _check_bead(call, bead, agent_id) if bead is not None else None
        path, branch = _place(call, req, agent_id, bead)
        call.check_backend(req.agent)
        mux = call.mux()
        agent = _slot(call, _record(call, req, agent_id, path=path, branch=branch, bead=bead))
        if call.common.mux == "tmux":
            call.starter().warm_up()
        return _build_or_clean_up(call, req, agent, mux=mux, bead_task=bead_task)


def _resolve_bead(call: Call, req: Request) -> _Bead:
    """The bead of a bead request and the agent's name; InvalidInput for a bad id, NotFound for none."""
    from exo_cli.adapters import beads

    src = call.beads()
    full = beads.resolve_id(src, req.bead)
    short = beads.short_id(full, src.prefix)
    bead = src.get(full)
    agent_id = check_agent_name(req.name or short)
    return _Bead(full, short, agent_id, slugify(bead.title or full), bead.title or full)


def _clear_name(call: Call, req: Request, agent_id: str, *, launching: bool) -> Agent | None:
    """Make way for ``agent_id`` (its spawn lock held); the agent when an interrupted spawn could be finished.

    A pending record being launched is replaced; an interrupted spawn is finished when its
    agent runs, else cleaned up; a spawned agent of that name fails the task (StateError).
    """
    env = call.env
    existing = env.store.agent(agent_id)
    if existing is None:
        return None
    phase = existing.spec.get("phase")
    if launching and phase == PENDING:
        env.store.delete_agent(agent_id)
        return None
    if phase not in ("spawned", PENDING) and not env.runs_here(existing):
        raise StateError(f"Agent {agent_id} is being spawned on host {existing.host} (or its spawn there stopped "
                         "midway)", hint=f"Spawn it again with --host {existing.host} (exo there finishes or cleans "
                         "up the earlier spawn), or pick another name.", agent=agent_id, host=existing.host)
    if phase not in ("spawned", PENDING):  # an interrupted spawn (its lock is ours now)
        resumed = resume_started(call, req, existing)
        if resumed is not None:
            return resumed
        cleanup_partial(env, existing)
        env.store.delete_agent(agent_id)
        call.warn(f"{agent_id}: cleaned up an interrupted earlier spawn and started again")
        return None
    if existing.status in LIVE_STATUSES:
        raise StateError(
            f"Agent {agent_id} already exists ({existing.status})",
            hint=f"It is already running: see `exo agents`, attach with `exo attach {agent_id}`.",
            agent=agent_id,
            status=existing.status,
        )
    if existing.status == DONE and not (existing.worktree and existing.spec.get("worktree_created")
                                        and os.path.isdir(existing.worktree)):
        from exo_cli.ops.history import retire

        retire(env, existing)  # completed: its name is free, its record stays as history
        return None
    if existing.status == DONE:
        hint = f"Remove its worktree with `exo complete {agent_id}`, clear it with `exo reap`, or pick another name."
    else:
        hint = "Clear finished agents with `exo reap` (their names are free again), or pick another name."
    raise StateError(
        f"An agent named {agent_id} is still recorded ({existing.status})",
        hint=hint,
        agent=agent_id,
        status=existing.status,
    )


def _live_owner(env: Env, bead_full: str, agent_id: str) -> Agent | None:
    for a in env.store.agents():
        if a.bead == bead_full and a.id != agent_id and a.status in LIVE_STATUSES:
            return a
    return None


def _check_bead(call: Call, bead: _Bead, agent_id: str) -> Any:
    """The bead's task; StateError when another live agent owns it or it cannot start (blocked, ...)."""
    from exo_cli.ops import tasks

    owner = _live_owner(call.env, bead.full, agent_id)
    if owner is not None:
        raise StateError(
            f"Bead {bead.full} is already being worked on by {owner.id} ({owner.status})",
            hint=f"See `exo agents`; kill {owner.id} first to hand the bead to a new agent.",
            bead_id=bead.full,
            agent=owner.id,
        )
    # The bead's own state ("Bead is blocked: <id>", ...); our own earlier claim is fine.
    return tasks.resolve_bead_task(call.env, bead.full, actor=agent_id, source=call.beads())


def _place(call: Call, req: Request, agent_id: str, bead: _Bead | None) -> tuple[Path, str | None]:
    """(worktree, branch) of the new agent, checked before anything is created: exo never reuses either."""
    env = call.env
    common = call.common
    parent_branch = common.parent_branch
    if common.no_worktree:
        return Path(common.parent_cwd or env.repo.toplevel), parent_branch
    if parent_branch is None:
        raise StateError(
            "The parent is not on a branch (detached HEAD)",
            hint="Check out a branch, or choose the base with --from BRANCH.",
        )
    if bead is not None:
        branch, folder = wt.bead_names_from(str(env.config.get("worktree.bead_branch")),
                                            str(env.config.get("worktree.bead_dir")),
                                            bead.short or agent_id, bead.slug or "task")
    else:
        branch, folder = wt.child_names_from(str(env.config.get("worktree.child_branch")),
                                             str(env.config.get("worktree.child_dir")), parent_branch, agent_id)
    path = env.worktree_root / folder
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
    return path, branch


def _no_base(base: str | None, parent_branch: str | None) -> StateError:
    """The error for a base that names no commit: a bad ``--from``/``worktree.base``, or a branch with no commit yet."""
    if base:
        return StateError(f"The base {base} does not name a commit",
                          hint="Pass an existing branch or commit with --from, or fix worktree.base in exo.toml.",
                          base=base)
    what = f"Branch {parent_branch}" if parent_branch else "This repository"
    return StateError(f"{what} has no commit yet, and an agent's worktree starts from a commit",
                      hint="Make a first commit (git commit --allow-empty -m 'Initial commit'), then spawn again; "
                           "or spawn with --no-worktree.", branch=parent_branch)


def _record(call: Call, req: Request, agent_id: str, *, path: Path, branch: str | None,
            bead: _Bead | None) -> Agent:
    """The agent's record, phase ``recorded``, with the whole request and the base commit (not stored yet)."""
    env = call.env
    common = call.common
    base_commit = None
    if not common.no_worktree:
        base_commit = call.commit(common.base or common.parent_branch or "HEAD")
        if base_commit is None:
            raise _no_base(common.base, common.parent_branch)
    agent_dir = env.state_dir / "agents" / agent_id
    now = time.time()
    spec: dict[str, Any] = {
        "request": asdict(req),
        "common": asdict(common),
        "phase": "recorded",
        "creates_worktree": not common.no_worktree,
        "layout": "none" if common.no_worktree else common.layout,
        "worktree_created": False,
        "branch_created": False,
        "base": common.base or common.parent_branch,
        "base_commit": base_commit,
        "created_files": [],
        "agent_dir": str(agent_dir),
        "after": list(common.after),
        "spawner_pid": os.getpid(),
        **host_fields(env),
        **({"budget": dict(common.budget)} if common.budget else {}),
    }
    return Agent(
        id=agent_id, name=agent_id, role="tl" if req.kind == "subtree" else "dev", parent=common.parent,
        status=STARTING, backend=req.agent, mux=common.mux, task=req.task or req.prompt or (bead.title if bead else None),
        bead=bead.full if bead else None, worktree=str(path), branch=branch, base_branch=common.parent_branch,
        repo=str(env.repo.root), status_reason="spawning", created_at=now, updated_at=now, status_at=now, spec=spec,
    )  # fmt: skip


def _slot(call: Call, agent: Agent) -> Agent:
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
                from exo_cli.ops import panes

                running = panes.alive_ids(env, live)
                live = [a for a in live if a.id in running]
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


def _build_or_clean_up(call: Call, req: Request, agent: Agent, *, mux: Mux, bead_task: Any) -> Agent:
    """Build a recorded agent; when a step fails, undo what it created and forget the record."""
    env = call.env
    spec = dict(agent.spec)
    try:
        fault.point("spawn.recorded", env.environ)
        return _build(call, req, agent, spec, mux=mux, bead_task=bead_task)
    except BaseException as exc:
        if isinstance(exc, ExoError | OSError):
            current = env.store.agent(agent.id) or agent
            with contextlib.suppress(ExoError, OSError):
                cleanup_partial(env, current)
                env.store.delete_agent(agent.id)
        raise


# --------------------------------------------------------------------------- building a recorded agent


def _build(call: Call, req: Request, agent: Agent, spec: dict[str, Any], *, mux: Mux, bead_task: Any) -> Agent:
    """Create, prepare and start one recorded agent (its record is updated after each phase)."""
    env = call.env
    worktree = not call.common.no_worktree
    path = Path(agent.worktree or "")
    if worktree:
        _make_worktree(env, agent, spec, path)
    call.exclude_exo()
    base_env = agent_env(env)
    if call.common.sandbox:  # its allow-list is recorded before the broker opens its sockets (the proxy's too)
        from exo_cli.ops import network

        spec[network.NET_FIELD] = network.policy(env, backend=req.agent, environ=base_env).entries()
        spec[network.PIN_FIELD] = network.pins(env)
    identity = _identity(call, agent, spec)
    if call.common.sandbox:  # its own HOME first: the backend's trust entries and Codex's folder go there
        from exo_cli.ops.spawn import sandboxing

        private, binds = sandboxing.make_home(env, backend=req.agent, path=path, agent_dir=Path(spec["agent_dir"]),
                                              environ=base_env)
        spec.update(sandboxed=True, sandbox_home=str(private), sandbox_binds=binds)
    if worktree:  # the post-create command is no agent: it never gets the proof
        _fill_worktree(call, agent, spec, path, {**base_env, **beside_agent(identity)})
    launch = _prepare_backend(call, req, agent, spec, path, base_env=base_env, identity=identity, bead_task=bead_task)
    fault.point("spawn.prepared", env.environ)
    if bead_task is not None:  # once the agent can start (a backend that fails leaves the bead ready), and
        bead_task = _claim_bead(call, agent.id, spec, bead_task)  # before the context file, which shows it claimed
    _write_context(call, req, agent, spec, path, bead_task)
    services = _write_services(env, spec, path)
    loc = _start(call, agent.id, spec, launch, services=bool(services) and _has_process_compose(base_env), path=path)
    if services:
        _start_services(call, agent.id, spec, path, mux=mux, launch=launch, base_env=base_env, loc=loc)
    return finish(env, req, agent._replace(location=loc.to_dict()), spec)


def _make_worktree(env: Env, agent: Agent, spec: dict[str, Any], path: Path) -> None:
    """Create the worktree (or the agent's own clone) and its branch at the recorded base commit; phase ``worktree``."""
    if spec.get("layout") == "clone":
        env.worktrees.create_clone(path=path, branch=agent.branch or "", base_commit=spec["base_commit"],
                                   agent_id=agent.id)
        from exo_cli.adapters.clones import record_home
        from exo_cli.config_paths import user_config_dir

        record_home(user_config_dir(env.environ), path, env.repo.root)  # exo inside it finds this team
    else:
        env.worktrees.create(path=path, branch=agent.branch or "", base_commit=spec["base_commit"])
    spec.update(phase="worktree", worktree_created=True, branch_created=True)
    env.store.update_agent(agent.id, spec=spec)
    fault.point("spawn.worktree", env.environ)


def _identity(call: Call, agent: Agent, spec: dict[str, Any]) -> dict[str, str]:
    """The variables that tell the agent (and its hooks) who and where it is, and its service ports.

    ``EXO_AGENT_PROOF`` is a fresh secret that proves the agent's ``EXO_AGENT`` when process
    ancestry cannot (a command it detached with ``setsid`` or ``nohup``): it goes only into
    the agent's own environment; the record keeps its SHA-256 (``spec["proof_sha256"]``).
    """
    env = call.env
    proof, digest = new_proof()
    spec[PROOF_FIELD] = digest
    identity = {
        "EXO_AGENT": agent.id,
        PROOF_VAR: proof,
        "EXO_PARENT": call.common.parent,
        "EXO_ROLE": agent.role,
        "EXO_STATE_DIR": str(env.state_dir),
        "BEADS_DIR": str(env.repo.root / ".beads"),
        **wt.port_env(spec.get("ports") or {}),
    }
    sock = _socket(call, agent, spec)
    if sock is not None:
        identity[SOCKET_VAR] = sock
    return identity


def _socket(call: Call, agent: Agent, spec: dict[str, Any]) -> str | None:
    """The agent's own socket to the team broker (``EXO_SOCKET``), opened before the agent starts.

    Its folder's name is recorded first (``spec["socket_key"]``: a restarted broker opens the same
    path again). When the broker cannot serve it (disabled, another exo version still serving
    agents, it cannot start) the agent works on the direct path with its proof, with a warning.
    """
    from exo_cli.ops import broker

    env = call.env
    if not broker.enabled(env):
        return None
    spec[broker.KEY_FIELD] = broker.new_key(agent.id)
    env.store.update_agent(agent.id, spec=spec)
    try:
        return broker.register(env, agent.id)
    except ExoError as exc:
        spec.pop(broker.KEY_FIELD, None)
        env.store.update_agent(agent.id, spec=spec)
        if call.common.sandbox:  # the state is hidden from its sandbox: without its socket it could not reach exo
            raise StateError(f"{exc.message}: a sandboxed agent reaches exo only through its broker",
                             hint="Spawn it with --no-sandbox meanwhile; `exo broker status` says what runs (another "
                             "exo's broker: once its agents are done, `exo broker stop`).") from exc
        call.warn(f"{agent.id}: works without exo's broker ({exc.message})" + (f" {exc.hint}" if exc.hint else ""))
        return None


def beside_agent(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the agent's proof and socket, for the processes exo starts beside the agent (the
    post-create command, the services on every multiplexer). They keep its markers (``EXO_AGENT``...), so exo
    refuses them as unproven: they are neither that agent nor the human."""
    return {k: v for k, v in environ.items() if k not in (PROOF_VAR, SOCKET_VAR)}


def _fill_worktree(call: Call, agent: Agent, spec: dict[str, Any], path: Path, environ: dict[str, str]) -> None:
    """Copy and link the configured files into the new worktree, then run the post-create command."""
    env = call.env
    created, warns = wt.copy_into(path, env.repo.root, copy=env.config.get("worktree.copy") or [],
                                  symlink=env.config.get("worktree.symlink") or [])
    spec["created_files"] = created
    for w in warns:
        call.warn(f"{agent.id}: {w}")
    if created:  # nothing copied: the record already says so
        env.store.update_agent(agent.id, spec=spec)
    argv = wt.post_create_command(env.config.get("worktree.post_create"))
    if argv is not None and spec.get("sandboxed"):  # it runs what the repository (or the agent) wrote: walled too
        from exo_cli.ops.spawn import sandboxing

        argv, environ = sandboxing.around(env, spec, path, list(argv), environ, tty=False)
    wt.run_post_create_argv(argv, path, environ)


def _write_context(call: Call, req: Request, agent: Agent, spec: dict[str, Any], path: Path, bead_task: Any) -> None:
    """Write the agent's context file (``.exo/context.md``, or a per-agent name without a worktree)."""
    common = call.common
    bead_text = bead_task.context(agent.branch or "", agent.base_branch) if bead_task is not None else None
    ctx_name = wt.CONTEXT_FILE if not common.no_worktree else f".exo/context.{agent.id}.md"
    wt.write_file(path / ctx_name, context_text(
        req, agent_id=agent.id, role=agent.role, branch=agent.branch, parent=common.parent,
        parent_branch=agent.base_branch, worktree=str(path), bead_text=bead_text,
    ))  # fmt: skip
    spec["context_file"] = str(path / ctx_name)


def _write_services(env: Env, spec: dict[str, Any], path: Path) -> dict[str, Any]:
    """Write ``.exo/process-compose.yaml`` when the project declares services; the services."""
    services = wt.check_services(env.config.get("services") or {})
    if services:
        doc = wt.process_compose(services, spec.get("ports") or {}, path)
        spec["process_compose"] = str(wt.write_process_compose(doc, path))
    return services


def _backend_for(env: Env, name: str, common: Common, agent_dir: Path) -> Backend:
    from exo_cli.adapters import agents as backends

    if name == "custom":
        return backends.get_backend("custom", command=env.config.get("agent.command") or None)
    if name == "demo":  # the agent reads its script from its own folder (a sandbox sees that, not the caller's /tmp)
        inline = env.config.get("demo.script")
        data: bytes | str | None = None
        suffix = ".json"
        if common.demo_script:
            from exo_cli.adapters.files import read_regular
            from exo_cli.errors import NotFound

            data, suffix = read_regular(common.demo_script), Path(common.demo_script).suffix or ".json"
            if data is None:
                raise NotFound(f"Demo script {common.demo_script} cannot be read (not a regular file of at most 1 MiB)",
                               path=common.demo_script)
        elif inline:
            import json

            data = json.dumps(inline)
        if data is None:
            return backends.get_backend("demo")
        from exo_cli.adapters.files import atomic_write

        ensure_private_dir(agent_dir, parents=True)
        path = agent_dir / f"demo-script{suffix if suffix == '.toml' else '.json'}"
        atomic_write(path, data, mode=0o600, fsync=False)
        return backends.get_backend("demo", script=str(path))
    return backends.get_backend(name)


def _fork_session(call: Call, req: Request, agent_id: str) -> tuple[str | None, bool]:
    """(session to resume, fork it): a Claude subtree starts from its parent's conversation when it can."""
    common = call.common
    if req.kind == "subtree" and req.agent == "claude" and common.fork_session is not False:
        resume = common.session_id
        if common.fork_session and resume is None:
            raise UsageError(
                "--fork-session needs the parent's Claude session id",
                hint="Pass --parent-session-id (spawn_subtree's parent_session_id).",
            )
        return resume, resume is not None
    if common.fork_session and req.kind == "subtree":
        call.warn(f"{agent_id}: --fork-session only works with the claude backend; started fresh")
    return None, False


def _prepare_backend(call: Call, req: Request, agent: Agent, spec: dict[str, Any], path: Path, *,
                     base_env: dict[str, str], identity: dict[str, str], bead_task: Any) -> Launch:
    """Let the backend write its files and build the command line; phase ``prepared`` with its undo records."""
    from exo_cli.adapters.agents import LaunchContext

    env = call.env
    common = call.common
    agent_dir = Path(spec["agent_dir"])
    ensure_private_dir(agent_dir, parents=True)
    backend = _backend_for(env, req.agent, common, agent_dir)
    resume, fork = _fork_session(call, req, agent.id)
    bead_full = bead_task.id if bead_task is not None else None
    title = bead_task.title if bead_task is not None else None
    prompt = first_prompt(req, agent.id, bead_full, title)
    extra = list((env.config.get("agent.args") or {}).get(req.agent, []) or [])
    home = Path(env.environ.get("HOME") or os.path.expanduser("~"))
    parent_config, confined = None, False
    if spec.get("sandboxed"):
        home = Path(spec["sandbox_home"])
        if fork:  # the transcript it forks is copied into its private HOME
            from exo_cli.ops.spawn.sandboxing import parent_transcripts

            parent_config, confined = parent_transcripts(env, str(common.parent or ""))
    lctx = LaunchContext(
        name=agent.id, role=agent.role, worktree=path, repo_root=env.repo.root, prompt=prompt,
        agent_dir=agent_dir, state_dir=env.state_dir, home=home, env=base_env,
        skip_permissions=common.skip_permissions, resume_session=resume, fork_session=fork,
        extra_args=extra, created_worktree=not common.no_worktree, branch=agent.branch,
        parent_cwd=Path(common.parent_cwd) if common.parent_cwd else None, headless=common.mux == "headless",
        parent_config=parent_config, parent_confined=confined,
    )  # fmt: skip
    launch = backend.prepare(lctx, identity)
    if spec.get("sandboxed"):
        from exo_cli.ops.spawn import sandboxing

        launch = sandboxing.wrap(env, backend=req.agent, path=path, agent_dir=agent_dir, launch=launch,
                                 tty=common.mux != "headless", binds=[tuple(b) for b in spec["sandbox_binds"]],
                                 net=sandboxing.network_for(env, spec), ports=spec.get("ports") or {})
    spec["phase"] = "prepared"
    spec["launch_files"] = list(launch.files)
    env.store.update_agent(agent.id, spec=spec, undo=list(launch.undo))
    return launch


def _claim_bead(call: Call, agent_id: str, spec: dict[str, Any], bead_task: Any) -> Any:
    """Claim the bead for the agent, keep the snapshot ``exo reconstitute`` diffs against; the task as claimed."""
    import dataclasses

    from exo_cli.ops import tasks

    source = call.beads()
    claimed = tasks.claim(call.env, bead_task.id, agent_id, source=source)
    for note in tasks.uncommitted_notes(source):
        call.warn(note)
    tasks.save_bead_snapshot(call.env, agent_id, claimed)
    spec["claimed"] = True
    return dataclasses.replace(bead_task, bead=claimed)


def _has_process_compose(base_env: dict[str, str]) -> bool:
    return shutil.which("process-compose", path=base_env.get("PATH")) is not None


def _start(call: Call, agent_id: str, spec: dict[str, Any], launch: Launch, *, services: bool = False,
           path: Path | None = None) -> Location:
    """Start the agent in its multiplexer (batched on tmux); phase ``started`` with its location.

    Headless agents get their message channel; in Zellij the worktree's services run in the
    agent's tab (``services``), with the compose file and its log by absolute path.
    """
    env = call.env
    logs = env.state_dir / "logs"
    logs.mkdir(mode=0o700, exist_ok=True)
    extra: dict[str, Any] = {}
    from exo_cli.ops import broker

    if call.common.mux == "headless":
        extra["channel"] = launch.channel
        if spec.get(broker.KEY_FIELD):  # the runner starts the team's broker again when it dies
            extra["channel"] = {**launch.channel, "keeper": broker.keeper(env)}
    elif spec.get("sandboxed") and spec.get(broker.KEY_FIELD):
        # the pane's launcher starts a keeper beside the agent, outside its sandbox, which starts the
        # broker again when it dies (a sandboxed relay cannot)
        extra["keeper"] = {**broker.keeper(env), "log": str(logs / f"{agent_id}.keeper.log")}
    if call.common.mux == "zellij" and services and path is not None:
        extra["services_argv"], extra["services_env"] = wt.services_argv(path), beside_agent(launch.env)
        if spec.get("sandboxed"):
            from exo_cli.ops.spawn import sandboxing

            extra["services_argv"], extra["services_env"] = sandboxing.around(
                env, spec, path, extra["services_argv"], extra["services_env"], tty=True)
        extra["services_log"] = str(path / wt.PC_LOG)
    loc: Location = call.starter().start(agent_id, list(launch.argv), cwd=launch.cwd, env=dict(launch.env),
                                         log_path=logs / f"{agent_id}.log", **extra)
    spec["phase"] = "started"
    env.store.update_agent(agent_id, spec=spec, location=loc.to_dict())
    fault.point("spawn.started", env.environ)
    return loc


def _start_services(call: Call, agent_id: str, spec: dict[str, Any], path: Path, *, mux: Mux, launch: Launch,
                    base_env: dict[str, str], loc: Location) -> None:
    """Start the worktree's services in a window of their own (Zellij: in the agent's tab); best effort.

    Their locations are recorded (``services_locations``) so that ``kill`` and ``complete`` stop them.
    """
    if not _has_process_compose(base_env):
        return
    if call.common.mux == "zellij":
        listed = getattr(mux, "service_locations", None)
        if callable(listed):
            spec["services_locations"] = [s.to_dict() for s in listed(loc)]
        return
    logs = call.env.state_dir / "logs"
    svc_name = f"{agent_id[:58]}-svc"
    argv, svc_env = wt.services_argv(path), beside_agent(launch.env)
    if spec.get("sandboxed"):
        from exo_cli.ops.spawn import sandboxing

        argv, svc_env = sandboxing.around(call.env, spec, path, argv, svc_env, tty=True)
    with contextlib.suppress(ExoError):
        sloc = mux.start(svc_name, argv, cwd=str(path), env=svc_env, log_path=logs / f"{svc_name}.log")
        spec["services_location"] = sloc.to_dict()
