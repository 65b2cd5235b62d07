"""The agents' lifecycle after spawn: kill, reap, attach, read, doctor.

``kill`` stops processes only (worktrees, branches and records stay; status ``dead``);
``reap`` forgets dead agents and closes their windows (never touching a worktree); ``attach``
gives the command that shows an agent; ``read`` returns the tail of an agent's pane or log,
optionally only what is new since the reader's last read, or waiting for a pattern;
``doctor`` reconciles exo's records with ``git worktree list``, the tmux server and process
liveness, and repairs what exo itself created and can repair safely.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exo_cli.errors import ExoError, InvalidInput, NotFound, StateError
from exo_cli.records import DEAD, DONE, LIVE_STATUSES, ROOT, Agent
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.env import Env


def _get(env: Env, agent_id: str) -> Agent:
    if agent_id == ROOT:
        raise StateError("The root cannot be killed: it is the human (or the lead) at the top of the tree",
                         hint="Kill its children one by one, or all of them with `exo kill <child>`.")
    rec = env.store.agent(agent_id) if env.has_state() else None
    if rec is None:
        raise NotFound(f"No agent named {agent_id!r}", hint="List agents with `exo agents`.", agent=agent_id)
    return rec


def descendants(agents: list[Agent], agent_id: str) -> list[Agent]:
    """``agent_id``'s descendants, deepest first."""
    children: dict[str, list[Agent]] = {}
    for a in agents:
        if a.parent:
            children.setdefault(a.parent, []).append(a)
    out: list[Agent] = []

    def walk(aid: str, seen: set[str]) -> None:
        for c in children.get(aid, []):
            if c.id in seen:
                continue
            seen.add(c.id)
            walk(c.id, seen)
            out.append(c)

    walk(agent_id, {agent_id})
    return out


def _in_subtree(agents: list[Agent], ancestor: str, agent_id: str) -> bool:
    by_id = {a.id: a for a in agents}
    cur = by_id.get(agent_id)
    hops = 0
    while cur is not None and hops < 1000:
        if cur.parent == ancestor:
            return True
        cur = by_id.get(cur.parent or "")
        hops += 1
    return False


# --------------------------------------------------------------------------- kill


@dataclass(frozen=True)
class KillResult:
    killed: list[str]
    already_dead: list[str]
    worktrees_kept: list[list[str]]


@op(
    "kill",
    cli="kill",
    tools=["kill"],
    roles=("tl",),
    destructive=True,
    idempotent=True,
    help={"agent": "The agent to stop, with all its descendants."},
)
def kill(env: Env, *, agent: str) -> KillResult:
    """Kill an agent and all its descendants; their worktrees are kept.

    Each process group gets SIGTERM, then SIGKILL after a grace period; panes stay readable
    (remain-on-exit) until `exo reap`. Records stay, with status dead; branches and worktrees
    are never touched. The root cannot be killed, and a team lead may only kill its own subtree.
    """
    from exo_cli.adapters.mux import Location
    from exo_cli.ops import agentctl

    target = _get(env, agent)
    everyone = [a for a in env.store.agents() if a.id != ROOT]
    caller = env.caller
    if not caller.is_human and caller.agent_id != target.id and not _in_subtree(everyone, caller.agent_id, target.id):
        raise StateError(f"{target.id} is not in your subtree", hint="You may only kill agents you (or your children) spawned.",
                         agent=target.id, caller=caller.agent_id)
    killed: list[str] = []
    dead: list[str] = []
    kept: list[list[str]] = []
    for a in [*descendants(everyone, target.id), target]:
        a = env.store.agent(a.id) or a
        svc = a.spec.get("services_location") or {}
        if svc.get("mux"):
            with contextlib.suppress(ExoError, OSError):
                loc = Location.from_dict(svc)
                agentctl.mux_for(env, loc.mux).kill(loc, grace=2.0)
        if a.status == DONE:
            dead.append(a.id)
            continue
        was_alive = agentctl.stop_agent(env, a, reason="killed")
        (killed if was_alive or a.status in LIVE_STATUSES else dead).append(a.id)
        if a.worktree and a.spec.get("worktree_created"):
            kept.append([a.id, a.worktree])
    if target.parent:
        env.store.post("event", target.id, target.parent, f"[KILLED {target.id}] and {len(killed) - 1 if target.id in killed else len(killed)} descendant(s)",
                       data={"event": "killed", "agent": target.id, "killed": killed})
    return KillResult(killed=killed, already_dead=dead, worktrees_kept=kept)


# --------------------------------------------------------------------------- reap


@dataclass(frozen=True)
class ReapResult:
    reaped: list[str]
    closed: list[str]
    kept: list[str]


def _close(env: Env, loc_dict: dict[str, Any]) -> bool:
    from exo_cli.adapters.mux import Location
    from exo_cli.ops import agentctl

    if not loc_dict or not loc_dict.get("mux"):
        return False
    loc = Location.from_dict(loc_dict)
    try:
        mux = agentctl.mux_for(env, loc.mux)
        mux.close(loc, force=True)  # type: ignore[call-arg]
        return True
    except (ExoError, OSError):
        return False


REAPED_KEY = "reaped-worktrees"


def reaped_worktrees(env: Env) -> dict[str, Any]:
    """Worktrees of reaped agents, left for the human: realpath -> {agent, branch, at}."""
    with contextlib.suppress(ValueError, TypeError):
        data = json.loads(env.store.kv_get(REAPED_KEY) or "{}")
        if isinstance(data, dict):
            return data
    return {}


def remember_reaped(env: Env, path: str, info: dict[str, Any] | None) -> None:
    """Add (or with ``info`` None, drop) a reaped agent's worktree in the kv list doctor consults."""
    from exo_cli.adapters import worktree as wt

    with wt.repo_lock(env.state_dir, "slots"):
        data = reaped_worktrees(env)
        key = os.path.realpath(path)
        if info is None:
            data.pop(key, None)
        else:
            data[key] = info
        env.store.kv_set(REAPED_KEY, json.dumps(data))


@op("reap", cli="reap", roles=("human",), destructive=True, idempotent=True, help={})
def reap(env: Env) -> ReapResult:
    """Forget dead agents and close their windows; worktrees are never touched.

    Liveness is checked first (one batched multiplexer call), so an agent whose pane or
    process is gone counts as dead. Files exo wrote outside its state for the agent (trust
    entries, a project settings file it replaced) are restored. Completed (done) agents are
    kept: `exo complete` owns them.
    """
    from exo_cli.adapters import agents as backends
    from exo_cli.ops import agentctl

    if not env.has_state():
        return ReapResult([], [], [])
    agents = agentctl.refresh(env, [a for a in env.store.agents() if a.id != ROOT])
    reaped: list[str] = []
    closed: list[str] = []
    kept: list[str] = []
    for a in agents:
        if a.status != DEAD:
            continue
        from exo_cli.ops.spawn.recovery import is_stale

        if is_stale(env, a):
            kept.append(a.id)  # an interrupted spawn: `exo doctor` cleans it
            continue
        if _close(env, a.location):
            closed.append(a.id)
        _close(env, a.spec.get("services_location") or {})
        if a.undo:
            with contextlib.suppress(Exception):
                backends.cleanup(list(a.undo))
        agent_dir = a.spec.get("agent_dir")
        if agent_dir and Path(agent_dir).parent == env.state_dir / "agents":
            shutil.rmtree(agent_dir, ignore_errors=True)
        if a.worktree and a.spec.get("worktree_created"):
            remember_reaped(env, a.worktree, {"agent": a.id, "branch": a.branch, "at": time.time()})
        env.store.delete_agent(a.id)
        env.store.event("reaped", a.id, {"worktree": a.worktree})
        reaped.append(a.id)
    return ReapResult(reaped=reaped, closed=closed, kept=kept)


# --------------------------------------------------------------------------- attach


@dataclass(frozen=True)
class AttachResult:
    agent: str
    argv: list[str]
    location: dict[str, Any]


@op("attach", cli="attach", roles=("human",), read_only=True, idempotent=True,
    help={"agent": "The agent whose pane (or log, when headless) to show."})
def attach(env: Env, *, agent: str) -> AttachResult:
    """Switch the terminal to an agent's pane (or follow its log when headless)."""
    from exo_cli.ops import agentctl

    rec = _get(env, agent)
    loc = agentctl.location(rec)
    if loc is None:
        raise StateError(f"Agent {rec.id} has not started yet ({rec.status_reason or rec.status})", agent=rec.id)
    argv = agentctl.mux_for(env, loc.mux).attach_argv(loc)
    return AttachResult(agent=rec.id, argv=argv, location=loc.to_dict())


# --------------------------------------------------------------------------- read


@dataclass(frozen=True)
class ReadResult:
    agent: str
    status: str
    text: str
    lines: int
    since_last: bool
    pattern: str | None
    matched: bool | None


_CURSOR = "read-cursor:{reader}:{agent}"
_CURSOR_LINES = 5
_SINCE_CAPTURE = 5000


def _after_cursor(lines: list[str], tail: list[str]) -> list[str]:
    """The lines after the last occurrence of ``tail`` (all of them when it is not found)."""
    if not tail:
        return lines
    n = len(tail)
    for end in range(len(lines), n - 1, -1):
        if lines[end - n:end] == tail:
            return lines[end:]
    return lines


@op(
    "read",
    cli="read",
    tools=["read_from_agent"],
    roles=("tl",),
    read_only=True,
    blocking=True,
    help={
        "agent": "The agent to read.",
        "lines": "How many lines of the tail to return.",
        "since_last": "Only what is new since your last read of this agent.",
        "wait_for": "Wait until this regular expression appears (in what would be returned).",
        "timeout": "Seconds to wait for the pattern.",
    },
)
def read(env: Env, *, agent: str, lines: int = 50, since_last: bool = False, wait_for: str | None = None,
         timeout: float = 30.0) -> ReadResult:
    """Read the tail of an agent's pane, or its log when headless.

    With since_last, only the lines that appeared since the caller's previous read of that
    agent (a cursor per reader). With wait_for, poll the screen until the regular expression
    matches or the timeout passes (matched false); a client's cancellation stops the wait.
    """
    from exo_cli import cancel
    from exo_cli.ops import agentctl

    if lines < 1:
        raise InvalidInput(f"Invalid lines {lines!r}: expected at least 1", field="lines")
    if timeout < 0:
        raise InvalidInput(f"Invalid timeout {timeout!r}", field="timeout")
    pattern = None
    if wait_for is not None:
        try:
            pattern = re.compile(wait_for, re.MULTILINE)
        except re.error as exc:
            raise InvalidInput(f"Invalid pattern {wait_for!r}: {exc}", field="wait_for") from exc
    rec = _get(env, agent)
    loc = agentctl.location(rec)
    if loc is None:
        raise StateError(f"Agent {rec.id} has not started yet ({rec.status_reason or rec.status})", agent=rec.id)
    mux = agentctl.mux_for(env, loc.mux)
    key = _CURSOR.format(reader=env.caller.agent_id, agent=rec.id)
    tail: list[str] = []
    if since_last:
        with contextlib.suppress(ValueError, TypeError):
            tail = list(json.loads(env.store.kv_get(key) or "[]"))

    def grab() -> tuple[list[str], list[str]]:
        text = mux.capture(loc, _SINCE_CAPTURE if since_last else lines)
        rows = text.rstrip("\n").split("\n") if text.strip() else []
        shown = _after_cursor(rows, tail) if since_last else rows
        return rows, shown[-lines:] if not since_last else shown

    rows, shown = grab()
    matched: bool | None = None
    if pattern is not None:
        deadline = time.monotonic() + timeout
        while not pattern.search("\n".join(shown)):
            if time.monotonic() >= deadline or cancel.cancelled():
                break
            time.sleep(0.2)
            rows, shown = grab()
        matched = bool(pattern.search("\n".join(shown)))
    if since_last:
        env.store.kv_set(key, json.dumps(rows[-_CURSOR_LINES:]))
    current = env.store.agent(rec.id) or rec
    return ReadResult(agent=rec.id, status=current.status, text="\n".join(shown) + ("\n" if shown else ""),
                      lines=len(shown), since_last=since_last, pattern=wait_for, matched=matched)


# --------------------------------------------------------------------------- doctor


@dataclass(frozen=True)
class Problem:
    kind: str
    subject: str
    detail: str
    action: str
    repaired: bool


@dataclass(frozen=True)
class DoctorResult:
    problems: list[Problem]
    repaired: int
    remaining: int
    consistent: bool
    dry_run: bool
    kept: list[str]


@op("doctor", cli="doctor", roles=("human",), help={"dry_run": "Report problems without repairing anything."})
def doctor(env: Env, *, dry_run: bool = False) -> DoctorResult:
    """Reconcile exo's records with git, the multiplexer and process liveness; repair.

    Finds interrupted spawns (cleaned up), zombies (records whose pane or process is gone:
    marked dead), orphan windows on exo's own tmux server (closed), orphan worktrees under
    exo's worktree folder with no record (removed with `git worktree remove` when clean, never
    forced; dirty ones are reported and left), live agents whose worktree vanished (reported),
    and stale git worktree metadata (pruned). Exit 0 when consistent or repaired, 5 otherwise.
    """
    from exo_cli.adapters import worktree as wt
    from exo_cli.adapters.mux import Location
    from exo_cli.ops import agentctl
    from exo_cli.ops.spawn import recovery as spawn

    problems: list[Problem] = []

    def add(kind: str, subject: str, detail: str, action: str, fix: Any = None) -> None:
        repaired = False
        if fix is not None and not dry_run:
            try:
                repaired = bool(fix())
            except (ExoError, OSError) as exc:
                detail = f"{detail}; repair failed: {exc}"
        if fix is not None and not dry_run and not repaired:
            action = f"{action} (failed)"
        problems.append(Problem(kind, subject, detail, action, repaired))

    env.repo  # noqa: B018 - EnvironmentError_ outside a repository
    records = [a for a in env.store.agents() if a.id != ROOT] if env.has_state() else []
    # 1. Interrupted spawns.
    for a in list(records):
        if spawn.is_stale(env, a):
            def fix(a: Agent = a) -> bool:
                with spawn.spawn_lock(env, a.id, blocking=False) as got:
                    if not got:
                        return False
                    if spawn.finish_interrupted(env, a):
                        return True  # its agent already runs: finish the spawn rather than undo it
                    spawn.cleanup_partial(env, a)
                    env.store.delete_agent(a.id)
                    return True

            add("interrupted-spawn", a.id, f"spawn stopped at phase {a.spec.get('phase')}",
                "finish it if its agent runs, else clean up what it created and forget the record", fix)
    records = [a for a in env.store.agents() if a.id != ROOT] if env.has_state() else []
    active = [a for a in records if a.spec.get("phase") not in ("pending",) and not spawn.spawn_in_progress(env, a.id)]
    # 2. Zombies: live records whose pane or process is gone.
    live = [a for a in active if a.status in LIVE_STATUSES and agentctl.location(a) is not None]
    observed = agentctl.states(env, live) if live else {}
    for a in live:
        st = observed.get(a.id)
        if st is None or not st.alive:
            reason = "pane gone" if st is None else f"process exited ({st.dead_status})"

            def fix_z(a: Agent = a, reason: str = reason) -> bool:
                env.store.update_agent(a.id, status=DEAD, status_reason=reason)
                env.store.event("dead", a.id, {"reason": reason, "by": "doctor"})
                return True

            add("zombie", a.id, f"recorded {a.status} but its {reason}", "mark it dead", fix_z)
    # 3. Live agents whose worktree vanished.
    for a in records:
        if a.status in LIVE_STATUSES and a.spec.get("worktree_created") and a.worktree and not os.path.isdir(a.worktree):
            add("worktree-missing", a.id, f"its worktree {a.worktree} does not exist", "kill it (exo kill) and reap")
    # 4. Orphan windows on exo's own tmux server.
    if shutil.which("tmux"):
        tmux = agentctl.mux_for(env, "tmux")
        known = set()
        for a in records:
            for d in (a.location, a.spec.get("services_location") or {}):
                if d.get("mux") == "tmux" and d.get("pane"):
                    known.add(d["pane"])
        in_progress = {a.id for a in records if a.spec.get("phase") not in ("spawned", "pending")}
        for pane, st in tmux.list_states().items():
            name = st.location.name or ""
            if pane in known or name in in_progress or spawn.spawn_in_progress(env, name.removesuffix("-svc")):
                continue

            def fix_w(loc: Location = st.location) -> bool:
                tmux.close(loc, force=True)  # type: ignore[call-arg]
                return True

            add("orphan-window", f"{name} ({pane})", "a window on exo's tmux server with no agent record",
                "close it", fix_w)
    # 5. Orphan worktrees and stray folders under exo's worktree root.
    root = wt.worktree_root(env)
    claimed = {os.path.realpath(a.worktree) for a in records if a.worktree}
    registered = wt.list_worktrees(env)
    real_root = os.path.realpath(root)
    reaped = reaped_worktrees(env) if env.has_state() else {}
    kept: list[str] = []
    for path, attrs in registered.items():
        real = os.path.realpath(path)
        if not real.startswith(real_root + os.sep) or real in claimed:
            continue
        if "prunable" in attrs or not os.path.isdir(path):
            continue  # handled by prune below
        dirty = wt.dirty_files(path)
        if real in reaped:
            if dirty:
                kept.append(path)  # a reaped agent's unfinished work, left for the human on purpose
                continue

            def fix_r(path: str = path, real: str = real) -> bool:
                ok, why = wt.remove(env, path)
                if not ok:
                    raise StateError(why)
                remember_reaped(env, real, None)
                return True

            add("reaped-worktree", path, f"clean worktree of reaped agent {reaped[real].get('agent')}",
                "git worktree remove (its branch is kept)", fix_r)
            continue
        if dirty:
            add("orphan-worktree", path, f"no agent record; {len(dirty)} uncommitted or untracked file(s)",
                "left alone: commit or remove it yourself (git worktree remove)")
            continue

        def fix_o(path: str = path) -> bool:
            ok, why = wt.remove(env, path)
            if not ok:
                raise StateError(why)
            return True

        add("orphan-worktree", path, "no agent record; clean", "git worktree remove", fix_o)
    if root.is_dir():
        reg_real = {os.path.realpath(p) for p in registered}
        for child in sorted(root.iterdir()):
            real = os.path.realpath(child)
            if real in reg_real or real in claimed:
                continue
            if child.is_dir() and not any(child.iterdir()):
                add("stray-folder", str(child), "an empty folder in exo's worktree root", "remove it",
                    lambda child=child: child.rmdir() or True)
            else:
                add("stray-folder", str(child), "not a git worktree and no agent record", "left alone: look at it")
    # 6. Stale worktree metadata.
    from exo_cli.adapters import git as gitutil

    proc = gitutil.git(["worktree", "prune", "--dry-run", "--verbose"], cwd=env.repo.root, check=False)
    stale = [line for line in proc.stdout.splitlines() + proc.stderr.splitlines() if line.strip()]
    if stale:
        add("stale-metadata", "git worktree", "; ".join(stale[:5]), "git worktree prune",
            lambda: wt.prune(env) or True)
    repaired = sum(1 for p in problems if p.repaired)
    remaining = len(problems) - repaired
    return DoctorResult(problems=problems, repaired=repaired, remaining=remaining,
                        consistent=not problems, dry_run=dry_run, kept=kept)
