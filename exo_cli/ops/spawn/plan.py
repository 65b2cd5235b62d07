"""Planning a spawn: the call's arguments become one ``Request`` per task and one ``Common``.

Nothing is created here. ``read_prompts``, ``target_env``, ``choose_backend``/``choose_mux``
and ``common_for`` check the call's own arguments; ``plan`` turns beads, ``--ready N``,
workers and their prompts, worker specs or one subtree into requests (a short row of named
steps, one per kind of task) and picks memorable names for unnamed workers. ``Request`` and
``Common`` are JSON-native: they are stored in the agent's spec, and ``request_from_spec``/
``common_from_spec`` read them back for a retry, a deferred start or ``exo doctor``.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from exo_cli.adapters import worktree as wt
from exo_cli.errors import ExoError, InvalidInput, NotFound, UsageError
from exo_cli.records import BACKENDS, MUXES, ROOT
from exo_cli.registry import Choice
from exo_cli.validate import check_agent_name, check_text

if TYPE_CHECKING:
    from collections.abc import Callable

    from exo_cli.adapters.beads import BeadsSource
    from exo_cli.env import Env
    from exo_cli.records import Agent


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
    layout: str = "worktree"  # "worktree" or "clone" (records.LAYOUTS)
    sandbox: bool = False  # the agents run in bubblewrap (sandboxing.decide), each in its own clone
    skip_permissions: bool = False
    demo_script: str | None = None
    fork_session: bool | None = None
    session_id: str | None = None
    after: list[str] = field(default_factory=list)
    origin: dict[str, Any] = field(default_factory=dict)
    budget: dict[str, Any] = field(default_factory=dict)  # each agent's budget: usd and/or tokens (ops/budget.py)


@dataclass
class WorkerSpec:
    """One worker of `spawn_workers`: name and prompt, optional agent, bead, annotation."""

    name: str
    prompt: str
    agent: Annotated[str, Choice(BACKENDS)] | None = None
    bead: str | None = None
    annotation: str | None = None


# The backends whose CLI can start a child from its parent's conversation (claude --fork-session).
FORKING = ("claude",)


def request_from_spec(spec: dict[str, Any]) -> Request:
    """The Request an agent's spec recorded (unknown keys of older records ignored)."""
    known = {f.name for f in fields(Request)}
    return Request(**{k: v for k, v in (spec.get("request") or {}).items() if k in known})


def common_from_spec(spec: dict[str, Any]) -> Common:
    """The Common an agent's spec recorded (unknown keys of older records ignored)."""
    known = {f.name for f in fields(Common)}
    return Common(**{k: v for k, v in (spec.get("common") or {}).items() if k in known})


# --------------------------------------------------------------------------- the call's own arguments


def read_prompts(env: Env, prompt: list[str], prompt_file: str | None, *, edit: bool) -> list[str]:
    """The prompts given inline, or the one in ``prompt_file``; UsageError for --edit without a prompt."""
    prompts = list(prompt)
    if prompt_file:
        if prompts:
            raise UsageError("Give --prompt or --prompt-file, not both")
        from exo_cli.adapters.files import read_named_text

        prompts = [read_named_text(prompt_file, env.cwd, field="prompt_file", what="prompt file")]
    if edit and not prompts:
        raise UsageError("--edit needs an interactive terminal: write the prompt with --prompt or --prompt-file")
    return prompts


def exists(path: Path, kind: str) -> bool:
    """Whether ``path`` is a directory (``kind`` "dir") or a file; False for names the OS refuses."""
    try:
        return path.is_dir() if kind == "dir" else path.is_file()
    except (OSError, ValueError):  # too long, NUL byte, ...
        return False


def target_env(env: Env, repo: str | None) -> Env:
    """The context of the repository the agents go into: the caller's, or the one ``--repo`` names.

    Another repository keeps its own state (the caller's ``EXO_STATE_DIR`` does not follow) and
    its new agents report to its root, on whose behalf the spawn acts there. ``--repo`` naming
    the caller's own repository is the caller's context: children stay the caller's children.
    """
    if not repo:
        return env
    from exo_cli.env import HUMAN, STATE_DIR_VAR
    from exo_cli.env import Env as EnvCls

    if "\0" in repo:  # os.path.expanduser and the file system refuse it with a ValueError
        raise InvalidInput(f"Invalid repository path {repo!r}: it contains a NUL character", field="repo")
    path = Path(os.path.expanduser(repo))
    if not path.is_absolute():
        path = env.cwd / path
    if not exists(path, "dir"):
        raise NotFound(f"Repository {path} does not exist", hint="Pass the path of a git repository to --repo.")
    environ = {k: v for k, v in env.environ.items() if k != STATE_DIR_VAR}
    target = EnvCls(cwd=path, environ=environ, overrides=env.overrides, caller=HUMAN)
    common = os.path.realpath(target.repo.common_dir)  # EnvironmentError_ when it is not a repository
    try:
        same = common == os.path.realpath(env.repo.common_dir)
    except ExoError:  # the caller is outside any repository
        same = False
    return env if same else target


def own_backend(env: Env) -> str | None:
    """The calling agent's own backend (the CLI whose conversation a fork starts from); None for the human."""
    record = env.caller_agent()
    return record.backend if record is not None else None


def choose_backend(target: Env, agent: str | None) -> str:
    """The agent backend: the one given, else ``agent.default``; InvalidInput for an unknown one."""
    backend = agent or str(target.config.get("agent.default"))
    if backend not in BACKENDS:
        raise InvalidInput(f"Invalid agent backend {backend!r}", hint=f"Use one of: {', '.join(BACKENDS)}.")
    return backend


def choose_mux(target: Env, mux: str | None) -> str:
    """The multiplexer: the one given, else ``mux.default``; InvalidInput for an unknown one."""
    kind = mux or str(target.config.get("mux.default"))
    if kind not in MUXES:
        raise InvalidInput(f"Invalid multiplexer {kind!r}", hint=f"Use one of: {', '.join(MUXES)}.")
    return kind


def demo_script_path(demo_script: str | None) -> str | None:
    """The demo script as an absolute path; NotFound when the file does not exist."""
    if demo_script and not exists(Path(demo_script), "file"):
        raise NotFound(f"Demo script {demo_script} does not exist", path=demo_script)
    return str(Path(demo_script).absolute()) if demo_script else None


def caller_context(env: Env, *, from_branch: str | None, no_worktree: bool) -> dict[str, Any]:
    """parent id, parent branch, base ref, the parent's folder and Claude session id."""
    from exo_cli.adapters.git import Git

    caller = env.caller
    record = env.caller_agent() if not caller.is_human else None
    via = env.via_host
    if via is not None:  # asked by another host's exo: the parent's branch as fetched from the shared remote
        return {"parent": caller.agent_id, "parent_branch": via["base_branch"], "base": via["base_ref"],
                "parent_cwd": None, "session_id": None}
    if record is not None and record.worktree:
        parent_cwd = record.worktree
        if record.spec.get("layout") == "clone":
            from exo_cli.ops import checkout

            checkout.sync(env, record)  # its children start from its branch as the clone has it
        branch = record.branch or checkout_branch(record)
    else:
        parent_cwd = str(env.repo.toplevel)
        branch = Git(env.repo.toplevel).current_branch()
    base = from_branch or None
    if from_branch:
        from exo_cli.validate import check_branch

        check_branch(from_branch, "base branch")
        if env.git.ref_exists(f"refs/heads/{from_branch}"):
            branch = from_branch  # the tree follows the chosen base: children of from_branch
        elif env.git.rev(from_branch) is None:
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


def checkout_branch(record: Agent) -> str | None:
    """The branch an agent's worktree has checked out (never asked of a clone: the record says)."""
    from exo_cli.adapters.git import Git

    if record.spec.get("layout") == "clone" or not record.worktree:
        return None
    return Git(record.worktree).current_branch()


def choose_layout(env: Env, layout: str | None, *, no_worktree: bool) -> str:
    """The agents' layout: ``layout``, else ``worktree.layout``; a clone with ``--no-worktree`` is a UsageError."""
    if layout == "clone" and no_worktree:
        raise UsageError("--layout and --no-worktree exclude each other: an agent without a worktree works in the "
                         "repository itself", hint="Drop one of them.")
    return str(layout or env.config.get("worktree.layout") or "worktree")


def tree_depth(env: Env, agent_id: str) -> int:
    """How many levels below the human at the root ``agent_id`` is (the root: 0; its children: 1)."""
    depth, seen = 0, set()
    current: str | None = agent_id
    while current and current != ROOT and current not in seen:
        seen.add(current)
        depth += 1
        record = env.store.agent(current)
        current = record.parent if record is not None else None
    return depth


def check_depth(env: Env, parent: str) -> None:
    """InvalidInput when a child of ``parent`` would be deeper than ``limits.max_depth`` (0: no limit)."""
    limit = int(env.config.get("limits.max_depth") or 0)
    if not limit or parent == ROOT:
        return
    depth = tree_depth(env, parent) + 1
    if depth > limit:
        raise InvalidInput(
            f"A child of {parent} would be {depth} levels below the root; limits.max_depth is {limit}",
            hint="Spawn it from a higher level (your parent's tree), or raise limits.max_depth in exo.toml; "
            "branch names of the tree grow with each level (at most 200 bytes).",
            field="depth", depth=depth, limit=limit)


def common_for(env: Env, target: Env, *, mux: str, from_branch: str | None, no_worktree: bool, layout: str | None,
               skip_permissions: bool | None, demo_script: str | None, fork_session: bool | None,
               parent_session_id: str | None, after: list[str], warnings: list[str], backend: str = "",
               sandbox: bool | None = None, budget: dict[str, Any] | None = None) -> Common:
    """What the call's tasks share: the parent, its branch and base, the session, the options."""
    if target is env:
        info = caller_context(env, from_branch=from_branch, no_worktree=no_worktree)
    else:
        info = caller_context(target, from_branch=from_branch, no_worktree=no_worktree)
        info["parent"] = ROOT
        warnings.append(f"Spawned into {target.repo.root}: its agents report to that repository's root")
    check_depth(env if target is env else target, str(info["parent"]))
    session = parent_session_id or info.pop("session_id")
    info.pop("session_id", None)
    # every key a spawn may use that needs trust, checked before anything is made or run: one error names them all
    target.config.require_trusted("agent", "worktree", "services", "sandbox")
    skip = bool(target.config.get("agent.skip_permissions")) if skip_permissions is None else skip_permissions
    from exo_cli.ops.spawn.sandboxing import decide

    chosen = choose_layout(target, layout, no_worktree=no_worktree)
    caller = env.caller_agent() if not env.caller.is_human else None
    sandboxed = decide(target, flag=sandbox, layout=chosen, explicit_layout=layout is not None
                       or target.config.origin("worktree.layout") != "default", no_worktree=no_worktree,
                       skip_permissions=skip, backend=backend,
                       inherited=caller is not None and bool(caller.spec.get("sandboxed")), warnings=warnings)
    return Common(
        mux=mux, no_worktree=no_worktree, layout="clone" if sandboxed else chosen, sandbox=sandboxed,
        skip_permissions=skip, demo_script=demo_script,
        fork_session=fork_session, session_id=session, after=list(after),
        origin={"caller": env.caller.agent_id, "repo": str(env.repo.root)}, budget=dict(budget or {}), **info,
    )  # fmt: skip


# --------------------------------------------------------------------------- the tasks


def plan(env: Env, call_env: Env, *, beads: list[str], worker: list[str], prompt: list[str],
         subtree: bool, task: str | None, branch: str | None, ready: int | None,
         specs: list[dict[str, Any]], agent: str, warnings: list[str],
         tracker: Callable[[], BeadsSource] | None = None) -> list[Request]:
    """Turn the call's arguments into one Request per task (names picked for unnamed workers).

    ``tracker`` gives the call's beads source (one look at the tracker for the whole call).
    """
    if subtree:
        return [_subtree(prompt, task=task, branch=branch, agent=agent, others=bool(beads or worker or specs or ready))]
    if task or branch:
        raise UsageError("--task and --branch go with --subtree")
    for p in prompt:
        check_text(p, "prompt", kind="prompt")
    bead_prompt, prompt = _split_prompts(prompt, beads=bool(beads or ready), worker=worker)
    reqs = [Request(kind="bead", key=b, bead=b, prompt=bead_prompt, agent=agent) for b in beads]
    reqs += _ready_beads(call_env, ready, given=beads, prompt=bead_prompt, agent=agent, warnings=warnings,
                         tracker=tracker)
    reqs += _workers(worker, prompt, agent=agent)
    reqs += _from_specs(specs, agent=agent)
    if not reqs:
        raise UsageError(
            "Nothing to spawn",
            hint="Give bead ids, --ready N, --worker NAME/--prompt TEXT, or --subtree --task T --branch NAME.",
        )
    _name_workers(call_env, reqs)
    return reqs


def _subtree(prompt: list[str], *, task: str | None, branch: str | None, agent: str, others: bool) -> Request:
    """The one request of ``--subtree``; UsageError when combined with other tasks or missing its task."""
    if others:
        raise UsageError("--subtree spawns one subtree; do not combine it with beads or workers")
    text = task or (prompt[0] if len(prompt) == 1 else None)
    if not text or not branch:
        raise UsageError("--subtree needs --task TEXT and --branch NAME")
    if len(prompt) > 1:
        raise UsageError("--subtree takes one task")
    check_text(text, "task", kind="prompt")
    name = check_agent_name(branch, "branch name")  # the subtree's agent name too
    return Request(kind="subtree", key=name, name=name, task=text, agent=agent)


def _split_prompts(prompt: list[str], *, beads: bool, worker: list[str]) -> tuple[str | None, list[str]]:
    """(extra instructions for beads, the workers' prompts): with beads the one prompt goes to them."""
    if not beads:
        return None, prompt
    if worker or len(prompt) > 1:
        raise UsageError("Give beads, or workers with prompts, not both in one call")
    return (prompt[0] if prompt else None), []


def _ready_beads(call_env: Env, ready: int | None, *, given: list[str], prompt: str | None, agent: str,
                 warnings: list[str], tracker: Callable[[], BeadsSource] | None = None) -> list[Request]:
    """``--ready N``: the N best ready beads not already given, a warning when fewer are ready."""
    if not ready:
        return []
    if isinstance(ready, bool) or ready < 1:
        raise InvalidInput(f"Invalid --ready {ready!r}: expected a whole number of at least 1", field="ready")
    from exo_cli.adapters import beads as beads_mod
    from exo_cli.ops import tasks

    src = tracker() if tracker is not None else tasks.open_repo_beads(call_env)
    taken = set()
    for b in given:
        with contextlib.suppress(ExoError):
            taken.add(beads_mod.resolve_id(src, b))
    picked = tasks.pick_ready(call_env, ready, exclude_ids=taken, source=src)
    if len(picked) < ready:
        warnings.append(f"Only {len(picked)} ready bead(s) to spawn (asked for {ready})")
    return [Request(kind="bead", key=beads_mod.short_id(x.id, src.prefix), bead=x.id, prompt=prompt, agent=agent)
            for x in picked]


def _workers(worker: list[str], prompt: list[str], *, agent: str) -> list[Request]:
    """One request per ``--worker`` (or per extra prompt, unnamed): one prompt for all, or one each."""
    if not (worker or prompt):
        return []
    if len(prompt) > 1 and len(prompt) < len(worker):
        raise UsageError(
            f"{len(worker)} workers but {len(prompt)} prompts",
            hint="Give one prompt for all workers, or one per worker in the same order.",
        )
    names: list[str | None] = list(worker)
    if len(prompt) > len(worker):
        names += [None] * (len(prompt) - len(worker))
    reqs = []
    for i, n in enumerate(names):
        p = prompt[i] if len(prompt) > 1 else (prompt[0] if prompt else None)
        reqs.append(Request(kind="worker", key=n or "", name=n or None, prompt=p, agent=agent))
    return reqs


def _from_specs(specs: list[dict[str, Any]], *, agent: str) -> list[Request]:
    """One request per worker spec of ``spawn_workers`` (a spec with a bead works on that bead)."""
    reqs = []
    for s in specs:
        if not isinstance(s, dict):
            raise InvalidInput("Each worker spec must be an object {name, prompt, agent?, bead?, annotation?}")
        unknown = set(s) - {"name", "prompt", "agent", "bead", "annotation"}
        if unknown:
            raise InvalidInput(f"Unknown worker spec field(s): {', '.join(sorted(unknown))}", field="specs")
        p = s.get("prompt") or None
        if p is not None:
            check_text(p, "prompt", kind="prompt")
        if s.get("annotation"):
            check_text(s["annotation"], "annotation", kind="message")
        kind = "bead" if s.get("bead") else "worker"
        name = s.get("name") or None
        reqs.append(Request(kind=kind, key=name or (s.get("bead") or ""), name=name, prompt=p,
                            bead=s.get("bead") or None, annotation=s.get("annotation") or None,
                            agent=s.get("agent") or agent))
    return reqs


AUTO_NAME_KEY = "auto-name:{name}"  # a name picked for an unnamed worker, reserved for good


def _name_workers(call_env: Env, reqs: list[Request]) -> None:
    """Pick memorable names for unnamed workers, unlike any agent, request or worktree folder.

    Each name is reserved atomically in the store (``kv_claim``) before it is used, so spawns
    running at the same time never pick the same one; a reserved name is never picked again.
    """
    unnamed = [r for r in reqs if r.kind == "worker" and not r.name]
    if not unnamed:
        return
    taken = {a.id for a in call_env.store.agents()} | {r.name for r in reqs if r.name}
    root = call_env.worktree_root
    if root.is_dir():
        taken |= {p.name for p in root.iterdir()}
    taken = {t for t in taken if t}
    names: list[str] = []
    while len(names) < len(unnamed):
        for n in wt.pick_names(len(unnamed) - len(names), taken):
            taken.add(n)
            if call_env.store.kv_claim(AUTO_NAME_KEY.format(name=n), str(os.getpid())):
                names.append(n)
    for r, n in zip(unnamed, names, strict=True):
        r.name = n
        r.key = n


def duplicate_names(reqs: list[Request]) -> set[str]:
    """The agent names that appear more than once among ``reqs`` (each of those tasks fails alone)."""
    seen: dict[str, int] = {}
    for r in reqs:
        seen[r.name or r.key] = seen.get(r.name or r.key, 0) + 1
    return {k for k, n in seen.items() if n > 1 and k}
