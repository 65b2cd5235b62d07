"""``exo doctor``: reconcile exo's records with git, the multiplexer and process liveness; repair.

A list of checks (``CHECKS``), run in order. Each looks for one kind of problem and yields a
``Finding`` carrying its own repair (None when exo must not repair it: the human decides);
the operation repairs each finding as it comes (unless ``dry_run``), so a later check sees
what an earlier repair left. Only what exo itself created, and can repair safely, is
repaired, and nothing that holds work or runs is ever removed or killed:

- agents with no record (the state database was lost or moved aside) get their record
  rebuilt: live windows on exo's own tmux session and live headless agents always, and, when
  there are no records at all, the worktrees in exo's folder named the way exo names them;
- interrupted spawns are finished or cleaned up through spawn's recovery steps; zombies are
  marked dead;
- windows on exo's tmux session with no record are closed only when their process has
  exited; a live one is left alone;
- a worktree in exo's folder with no record is removed (``git worktree remove``, never
  forced) only when exo recorded creating it, no process works in it and removing it would
  lose nothing (``adapters.keep.survey``: files, ignored files, nested repositories,
  operations in progress, commits only its HEAD reaches); its branch is kept;
- an empty folder there is removed only when exo recorded creating it (the ledger
  ``Worktrees.create`` writes); stale git metadata is pruned;
- the team broker is started again when live agents with a socket lost it, and the socket files
  nobody answers on (a broker killed with ``kill -9``, agents that are gone) are removed.
"""

from __future__ import annotations

import os
import re
import shutil
import string
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from exo_cli.adapters import clones, keep
from exo_cli.adapters.sandboxprocs import runs_sandboxed
from exo_cli.adapters.worktree import created_folders, made_by_exo
from exo_cli.errors import ExoError, StateError
from exo_cli.ops import doctorclones
from exo_cli.ops.lifecycle import reaped_worktrees, remember_reaped
from exo_cli.records import AGENT_CLIS, DEAD, DONE, LIVE_STATUSES, ROOT, WORKING, Agent
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.adapters.mux import PaneState
    from exo_cli.env import Env
    from exo_cli.ops.broker import BrokerStatus
    from exo_cli.ops.sandbox import SandboxStatus


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
    broker: BrokerStatus | None = None  # the team broker after the repairs (None outside a repository's state)
    sandbox: SandboxStatus | None = None  # whether bubblewrap works here (agents can be sandboxed)

    @property
    def exit_code(self) -> int:
        """5 (a state error) when problems remain unrepaired, else 0."""
        return 5 if self.remaining else 0


class Finding(NamedTuple):
    """One problem a check found, and the repair that fixes it (None: left for the human)."""

    kind: str
    subject: str
    detail: str
    action: str
    repair: Callable[[], bool] | None = None


class Checkup:
    """What the checks share: the context, the agent records and git's worktree list, read once."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.records: list[Agent] = []
        self.kept: list[str] = []  # worktrees left alone on purpose
        self.adopted: set[str] = set()  # windows and processes whose record was rebuilt (keys)
        self._worktrees: dict[str, Any] | None = None
        self.ledger = created_folders(env.state_dir)
        self.reload()

    def reload(self) -> None:
        """Read the agent records again (after repairs that forget or finish some)."""
        env = self.env
        self.records = [a for a in env.store.agents() if a.id != ROOT and not a.retired
                        and env.runs_here(a)] if env.has_state() else []  # another host's are its own

    def worktrees(self) -> dict[str, Any]:
        """``git worktree list``: path -> attributes."""
        if self._worktrees is None:

            self._worktrees = self.env.worktrees.listing()
        return self._worktrees

    def claimed(self) -> set[str]:
        """The real paths of the worktrees agent records name."""
        return {os.path.realpath(a.worktree) for a in self.records if a.worktree}

    def made_by_exo(self, path: str | os.PathLike[str]) -> bool:
        """Whether exo recorded creating folder ``path``."""
        return made_by_exo(path, self.ledger)

    def losses(self, path: str, *, copies: list[str] | None = None) -> list[str]:
        """Why removing worktree ``path`` would lose or disturb something (empty: safe to remove)."""
        from exo_cli.adapters.proc import processes_inside

        env = self.env
        patterns = env.config.get("cleanup.regenerable")
        owned = keep.exo_files(path, copies=copies or [], source_root=str(env.repo.root))
        inv = keep.survey(path, main=env.git, owned=owned,
                          regenerable=keep.DEFAULT_REGENERABLE if patterns is None else patterns)
        reasons = [f"{kind.replace('_', ' ')}: {len(items)}" for kind, items in inv.losses().items()]
        procs = processes_inside(path, exclude={os.getpid()})
        if procs:
            reasons.append(f"processes inside: {', '.join(str(p['pid']) for p in procs[:5])}")
        return reasons


# --------------------------------------------------------------------------- rebuilding lost records


def _template_re(template: str) -> re.Pattern[str]:
    """A regular expression matching what a naming template (``{name}``, ``{parent}``...) produces."""
    out, seen = "", set()
    for literal, field_name, _spec, _conv in string.Formatter().parse(template):
        out += re.escape(literal)
        if field_name:
            out += f"(?P={field_name})" if field_name in seen else f"(?P<{field_name}>.+?)"
            seen.add(field_name)
    return re.compile(out)


def _exo_named(env: Env, folder: str, branch: str | None) -> tuple[str, str | None] | None:
    """(agent name, parent branch) when ``folder`` and ``branch`` are named the way exo names them; else None."""
    from exo_cli.validate import check_name

    if not branch:
        return None
    cfg = env.config
    for dir_key, branch_key in (("worktree.child_dir", "worktree.child_branch"),
                                ("worktree.bead_dir", "worktree.bead_branch")):
        f = _template_re(str(cfg.get(dir_key))).fullmatch(folder)
        b = _template_re(str(cfg.get(branch_key))).fullmatch(branch)
        if not f or not b:
            continue
        shared = [k for k in f.groupdict() if k in b.groupdict() and k != "parent"]
        if any(f.group(k) != b.group(k) for k in shared):
            continue
        name = f.groupdict().get("name") or folder
        try:
            check_name(name, "agent name")
        except ExoError:
            return None
        return name, b.groupdict().get("parent")
    return None


def _backend_of(env: Env, st: PaneState) -> str:
    """Which agent CLI a live window or headless agent runs: from the command lines of its process group.

    A headless agent's runner leads the group with the agent as its child; between two turns
    of a CLI that runs one turn per process there is no child, and the runner's state names
    the program.
    """
    from exo_cli.adapters.proc import cmdline, group_members
    from exo_cli.ops import panes

    loc = st.location
    pids = [p for p in (st.pid, loc.pid) if p]
    if loc.pgid:
        pids += group_members(loc.pgid)
    texts = [cmdline(p) for p in dict.fromkeys(pids)]
    texts.append(str(panes.runner_state(env, loc).get("program") or ""))
    for cli in AGENT_CLIS:
        if any(re.search(rf"(^|[/ ]){cli}( |$)", text) for text in texts):
            return cli
    return "demo" if any("demo_agent" in text for text in texts) else "custom"


def _live_unrecorded(c: Checkup) -> list[Any]:
    """Live windows of exo's tmux session and live headless agents that no record (or spawn under way) owns."""
    from exo_cli.ops import agentctl
    from exo_cli.ops.spawn import recovery

    env = c.env
    known: set[str] = set()
    for a in c.records:
        for d in (a.location, a.spec.get("services_location") or {}):
            if d.get("mux"):
                known.add(str(d.get("pane") or d.get("pid")))
    ids = {a.id for a in c.records}
    found = []
    kinds = [("tmux", agentctl.mux_for(env, "tmux").list_states())] if shutil.which("tmux") else []
    headless = agentctl.mux_for(env, "headless")
    kinds.append(("headless", headless.list_states()))
    for _kind, states in kinds:
        for key, st in states.items():
            name = st.location.name or ""
            if not st.alive or key in known or name in ids or recovery.spawn_in_progress(env, name.removesuffix("-svc")):
                continue
            found.append(st)
    return found


def _worktree_of(c: Checkup, cwd: str | None) -> tuple[str, dict[str, str]] | None:
    """The registered worktree ``cwd`` is in (the deepest one), or None."""
    if not cwd:
        return None
    real = os.path.realpath(cwd)
    best = None
    for path, attrs in _checkouts(c).items():
        top = os.path.realpath(path)
        if (real == top or real.startswith(top.rstrip("/") + "/")) and (best is None or len(top) > len(best[0])):
            best = (top, path, attrs)
    return (best[1], best[2]) if best else None


def _checkouts(c: Checkup) -> dict[str, Any]:
    """Every worktree (``git worktree list``) and every agent's clone no record names (``layout: clone``)."""
    return {**c.worktrees(), **doctorclones.clone_checkouts(c.env, c.claimed())}


def lost_records(c: Checkup) -> Iterator[Finding]:
    """Agents running in exo's sessions (and, with no records at all, exo's worktrees) with no record: rebuild it.

    The record gets what can be known: the name (the window's, or exo's folder naming), the
    worktree and branch (``git worktree list``), the parent (exo's branch naming), the live
    location; a live agent is ``idle`` when its pane or log has been quiet for
    ``agent.idle_quiet_seconds`` and ``working`` otherwise (``agentctl.rest_by_output``; the
    watcher goes on judging it by its output until its hooks report), and a worktree with no
    live agent is ``dead``, so ``exo send``, ``exo wait``, ``exo complete`` or ``exo
    kill``/``reap`` can take it from there. What cannot be known (its task, messages, PRs,
    session) stays empty.
    """
    from exo_cli.adapters.proc import cwd_of, proc_start_time
    from exo_cli.ops import agentctl
    from exo_cli.validate import check_name

    env = c.env
    now = time.time()
    rebuilt: dict[str, Agent] = {}
    keys: dict[str, str] = {}
    seen: dict[str, PaneState] = {}  # what the multiplexer shows of each live one
    root_real = os.path.realpath(env.worktree_root)
    for st in _live_unrecorded(c):
        name = st.location.name or ""
        if name.endswith("-svc"):
            continue  # a services window: left alone, never killed (orphan_windows reports it)
        try:
            check_name(name, "agent name")
        except ExoError:
            continue
        if name in rebuilt or name == ROOT:
            continue
        found = _worktree_of(c, cwd_of(st.pid or 0) if st.pid else None)
        if found is None:
            continue
        path, attrs = found
        branch = (attrs.get("branch") or "").removeprefix("refs/heads/") or None
        main = os.path.realpath(path) == os.path.realpath(env.repo.root)
        loc = st.location.to_dict()
        if st.pid and "start_time" not in loc:
            start = proc_start_time(st.pid)
            if start is not None:
                loc["start_time"] = start
        created = not main and c.made_by_exo(path)
        spec = {"phase": "spawned", "rebuilt": True, "worktree_created": created, "branch_created": created,
                "layout": attrs.get("layout", "worktree"), **({"sandboxed": True} if runs_sandboxed(st.pid) else {})}
        from exo_cli.ops import broker

        key = broker.key_of_process(env, st.pid) if st.pid else None
        if key:  # its relays keep their socket: the broker opens it again for the rebuilt record
            spec[broker.KEY_FIELD] = key
        agent = Agent(id=name, name=name, role="dev", parent=ROOT, status=WORKING, backend=_backend_of(env, st),
                      mux=st.location.mux, worktree=str(path), branch=branch, repo=str(env.repo.root), location=loc,
                      status_reason=agentctl.REBUILT, created_at=now, updated_at=now, status_at=now, spec=spec)
        quiet = now - st.activity if isinstance(st.activity, int | float) else None
        status, why = agentctl.rest_by_output(env, agent, st, quiet)  # its hooks say more from its next turn on
        rebuilt[name] = agent._replace(status=status, status_reason=f"{agentctl.REBUILT}; {why}")
        keys[name] = st.location.key
        seen[name] = st
    if not c.records and not (env.has_state() and env.store.events(limit=1)):
        # no record and no history: the state was lost (not emptied by reap); exo's worktrees are its agents'
        taken = {os.path.realpath(a.worktree or "") for a in rebuilt.values()}
        for path, attrs in _checkouts(c).items():
            real = os.path.realpath(path)
            if not real.startswith(root_real + os.sep) or real in taken or "prunable" in attrs:
                continue
            branch = (attrs.get("branch") or "").removeprefix("refs/heads/") or None
            named = _exo_named(env, os.path.basename(real), branch)
            if named is None or named[0] in rebuilt or named[0] == ROOT:
                continue
            created = c.made_by_exo(path)
            rebuilt[named[0]] = Agent(
                id=named[0], name=named[0], role="dev", parent=ROOT, status=DEAD, backend="custom", mux="headless",
                worktree=str(path), branch=branch, repo=str(env.repo.root),
                status_reason=f"{agentctl.REBUILT}; no live agent", created_at=now, updated_at=now,
                status_at=now, spec={"phase": "spawned", "rebuilt": True, "worktree_created": created,
                                     "branch_created": created, "layout": attrs.get("layout", "worktree")})
    by_branch = {a.branch: a for a in [*c.records, *rebuilt.values()] if a.branch}
    for name, a in list(rebuilt.items()):
        stem = a.branch.rsplit(".", 1)[0] if a.branch and "." in a.branch else None
        parent = by_branch.get(stem) if stem else None
        has_children = any(b.branch and a.branch and b.branch.startswith(a.branch + ".") for b in by_branch.values())
        base = stem if stem and env.git.ref_exists(f"refs/heads/{stem}") else None
        rebuilt[name] = a._replace(parent=parent.id if parent is not None and parent.id != a.id else ROOT,
                                   role="tl" if has_children else "dev", base_branch=base)
    for name, a in rebuilt.items():
        if name in keys:
            c.adopted.add(keys[name])
        what = "a live agent" if a.status != DEAD else "a worktree named the way exo names them"
        yield Finding("lost-record", name, f"{what} ({a.worktree}) with no record", "rebuild its record",
                      partial(_insert, env, a, seen.get(name)))
    c.reload()


def _insert(env: Env, agent: Agent, st: PaneState | None) -> bool:
    from exo_cli.ops import agentctl

    if env.store.agent(agent.id) is not None:
        return False
    env.store.insert_agent(agent)
    if st is not None:
        agentctl.seed_quiet(env, agent, st)
    env.store.event("rebuilt", agent.id, {"by": "doctor", "worktree": agent.worktree, "location": agent.location,
                                          "status": agent.status})
    return True


# --------------------------------------------------------------------------- the checks


def interrupted_spawns(c: Checkup) -> Iterator[Finding]:
    """Records of spawns that stopped midway: finish them if their agent runs, else clean them up."""
    from exo_cli.ops.spawn import recovery

    env = c.env
    for a in list(c.records):
        if recovery.is_stale(env, a):
            yield Finding("interrupted-spawn", a.id, f"spawn stopped at phase {a.spec.get('phase')}",
                          "finish it if its agent runs, else clean up what it created and forget the record",
                          partial(recovery.repair_interrupted, env, a))
    c.reload()


def zombies(c: Checkup) -> Iterator[Finding]:
    """Live records whose pane or process is gone: mark them dead."""
    from exo_cli.ops import agentctl
    from exo_cli.ops.spawn import recovery

    env = c.env
    active = [a for a in c.records if a.spec.get("phase") not in ("pending",)
              and not recovery.spawn_in_progress(env, a.id)]
    live = [a for a in active if a.status in LIVE_STATUSES and agentctl.location(a) is not None]
    observed = agentctl.states(env, live) if live else {}
    for a in live:
        st = observed.get(a.id)
        if st is None or not st.alive:
            reason = "pane gone" if st is None else f"process exited ({st.dead_status})"

            def mark_dead(a: Agent = a, reason: str = reason) -> bool:
                if not env.store.update_agent(a.id, if_status=a.status, status=DEAD, status_reason=reason):
                    return False  # a hook or a watcher recorded something else meanwhile
                agentctl.died(env, a, reason, by="doctor")  # as a watcher would: parent, dependents, the human told
                return True

            yield Finding("zombie", a.id, f"recorded {a.status} but its {reason}", "mark it dead", mark_dead)


def missing_worktrees(c: Checkup) -> Iterator[Finding]:
    """Live agents whose worktree vanished: reported (killing them is the human's call)."""
    for a in c.records:
        if a.status in LIVE_STATUSES and a.spec.get("worktree_created") and a.worktree and not os.path.isdir(a.worktree):
            yield Finding("worktree-missing", a.id, f"its worktree {a.worktree} does not exist",
                          "kill it (exo kill) and reap")


def finished_windows(c: Checkup) -> Iterator[Finding]:
    """Done agents whose process ended but whose window (or headless record) is still open: close it."""
    from exo_cli.ops import agentctl

    env = c.env
    done = [a for a in c.records if a.status == DONE and agentctl.location(a) is not None]
    observed = agentctl.states(env, done) if done else {}
    for a in done:
        st = observed.get(a.id)
        if st is not None and not st.alive:
            yield Finding("finished-window", a.id, "done and its process ended, but its window is still open",
                          "close it", partial(_close_windows, env, a))


def _close_windows(env: Env, agent: Agent) -> bool:
    from exo_cli.ops import agentctl

    agentctl.close_windows(env, agent)
    return True


def orphan_windows(c: Checkup) -> Iterator[Finding]:
    """Windows on exo's own tmux session that no record owns: closed when their process exited, else left alone."""
    if not shutil.which("tmux"):
        return
    from exo_cli.adapters.mux import Location
    from exo_cli.ops import agentctl
    from exo_cli.ops.spawn import recovery

    env = c.env
    tmux = agentctl.mux_for(env, "tmux")
    known = set()
    for a in c.records:
        for d in (a.location, a.spec.get("services_location") or {}):
            if d.get("mux") == "tmux" and d.get("pane"):
                known.add(d["pane"])
    in_progress = {a.id for a in c.records if a.spec.get("phase") not in ("spawned", "pending")}
    for pane, st in tmux.list_states().items():
        name = st.location.name or ""
        if pane in known or pane in c.adopted or name in in_progress \
                or recovery.spawn_in_progress(env, name.removesuffix("-svc")):
            continue
        if st.alive:
            yield Finding("orphan-window", f"{name} ({pane})",
                          "a live window on exo's tmux server with no agent record",
                          "left alone: it runs (look at it, then stop it yourself if it is not needed)")
            continue

        def close(loc: Location = st.location) -> bool:
            tmux.close(loc)  # its process exited: nothing is killed
            return True

        yield Finding("orphan-window", f"{name} ({pane})", "a window on exo's tmux server whose process exited, "
                      "with no agent record", "close it", close)


def orphan_worktrees(c: Checkup) -> Iterator[Finding]:
    """Worktrees under exo's worktree root with no record: removed only when safe, never forced.

    Safe means: exo recorded creating it (a reaped agent's, or in exo's ledger), no process
    works in it, and removing it would lose nothing (``Checkup.losses``). A reaped agent's
    worktree that is not safe is kept (in ``kept``); any other is reported and left alone.
    """

    env = c.env
    real_root = os.path.realpath(env.worktree_root)
    claimed = c.claimed()
    reaped = reaped_worktrees(env) if env.has_state() else {}
    for path, attrs in c.worktrees().items():
        real = os.path.realpath(path)
        if not real.startswith(real_root + os.sep) or real in claimed:
            continue
        if "prunable" in attrs or not os.path.isdir(path):
            continue  # stale metadata: pruned by its own check
        if real in reaped:
            if c.losses(path, copies=list(reaped[real].get("created_files") or [])):
                c.kept.append(path)  # a reaped agent's unfinished work, left for the human on purpose
                continue
            yield Finding("reaped-worktree", path, f"clean worktree of reaped agent {reaped[real].get('agent')}",
                          "git worktree remove (its branch is kept)",
                          partial(_remove_worktree, env, path, forget_reaped=real))
        elif not c.made_by_exo(path):
            yield Finding("orphan-worktree", path, "no agent record, and exo did not record creating it",
                          "left alone: remove it yourself if you do not need it (git worktree remove)")
        elif reasons := c.losses(path):
            yield Finding("orphan-worktree", path, f"no agent record; {'; '.join(reasons)}",
                          "left alone: keep or commit its work, then remove it yourself (git worktree remove)")
        else:
            yield Finding("orphan-worktree", path, "no agent record; exo created it; nothing in it would be lost",
                          "git worktree remove", partial(_remove_worktree, env, path))


def _remove_worktree(env: Env, path: str, *, forget_reaped: str | None = None) -> bool:
    """``git worktree remove`` (never forced); StateError with git's reason when it refuses."""

    ok, why = env.worktrees.remove(path)
    if not ok:
        raise StateError(why)
    if forget_reaped is not None:
        remember_reaped(env, forget_reaped, None)
    return True


def stray_folders(c: Checkup) -> Iterator[Finding]:
    """Folders in exo's worktree root that are neither worktrees nor claimed: removed only when exo made them and they are empty."""

    root = c.env.worktree_root
    if not root.is_dir():
        return
    registered = {os.path.realpath(p) for p in c.worktrees()}
    claimed = c.claimed()
    for child in sorted(root.iterdir()):
        real = os.path.realpath(child)
        if real in registered or real in claimed or clones.is_clone(child):  # a clone: orphan_clones' business
            continue
        empty = child.is_dir() and not child.is_symlink() and not any(child.iterdir())
        if empty and c.made_by_exo(child):
            yield Finding("stray-folder", str(child), "an empty folder exo made in its worktree root", "remove it",
                          partial(_remove_folder, child))
        elif empty:
            yield Finding("stray-folder", str(child), "an empty folder exo did not record creating",
                          "left alone: not exo's")
        else:
            yield Finding("stray-folder", str(child), "not a git worktree and no agent record", "left alone: look at it")


def _remove_folder(path: Path) -> bool:
    path.rmdir()
    return True


def stale_metadata(c: Checkup) -> Iterator[Finding]:
    """git's records of worktrees whose folder is gone: ``git worktree prune``."""
    env = c.env
    proc = env.git.worktree_prune(dry_run=True)
    stale = [line for line in proc.stdout.splitlines() + proc.stderr.splitlines() if line.strip()]
    if stale:

        def prune() -> bool:
            env.worktrees.prune()
            return True

        yield Finding("stale-metadata", "git worktree", "; ".join(stale[:5]), "git worktree prune", prune)


def orphan_clones(c: Checkup) -> Iterator[Finding]:
    """Agents' own clones no record names: removed when exo made them and nothing would be lost (``doctorclones``)."""
    return (Finding(*r) for r in doctorclones.orphan_clones(c.env, c.claimed(), c.made_by_exo, c.kept))


def stale_clone_refs(c: Checkup) -> Iterator[Finding]:
    """``refs/exo/clones/<id>/`` of clones that are gone: deleted (``doctorclones``)."""
    return (Finding(*r) for r in doctorclones.stale_clone_refs(c.env, c.claimed()))


def broker_files(c: Checkup) -> Iterator[Finding]:
    """The team broker: started again for live agents with a socket; its stale sockets and files removed."""
    from exo_cli.ops import broker

    for kind, subject, detail, action, repair in broker.leftovers(c.env, c.records):
        yield Finding(kind, subject, detail, action, repair)


def untrusted_config(c: Checkup) -> Iterator[Finding]:
    """Values of the repository's exo.toml exo refuses until `exo trust` pins them (left for the human)."""
    from exo_cli.ops.trust import problems

    yield from (Finding(*problem) for problem in problems(c.env))


def merge_queues(c: Checkup) -> Iterator[Finding]:
    """The merge queues: clones a dead runner left removed, and a runner started for a queue nobody advances."""
    from exo_cli.ops.queuerun import leftovers

    for kind, subject, detail, action, repair in leftovers(c.env):
        yield Finding(kind, subject, detail, action, repair)


CHECKS: tuple[Callable[[Checkup], Iterator[Finding]], ...] = (
    untrusted_config,
    lost_records,
    interrupted_spawns,
    zombies,
    missing_worktrees,
    finished_windows,
    orphan_windows,
    orphan_worktrees,
    orphan_clones,
    stray_folders,
    stale_metadata,
    stale_clone_refs,
    broker_files,
    merge_queues,
)


# --------------------------------------------------------------------------- the operation


@op("doctor", cli="doctor", roles=("human",), help={"dry_run": "Report problems without repairing anything.",
                                                    "hosts": "Also check every configured host over ssh."})
def doctor(env: Env, *, dry_run: bool = False, hosts: bool = False) -> DoctorResult:
    """Reconcile exo's records with git, the multiplexer and process liveness; repair.

    Rebuilds the records of agents it finds without one (live windows on exo's tmux session,
    live headless agents, and, when nothing is recorded, exo's worktrees), cleans up
    interrupted spawns, marks zombies dead, closes windows whose process exited (a live one
    is never killed), removes a worktree or empty folder in exo's worktree folder only when
    exo recorded creating it and nothing in it would be lost (never forced), reports live
    agents whose worktree vanished, and prunes stale git worktree metadata. With {--hosts}, each
    `[hosts.NAME]` is checked too: ssh works, its clone has the same origin and store, its exo
    speaks the same protocol (agents of other hosts are only ever checked by exo there). Exit 0
    when consistent or repaired, 5 otherwise.
    """
    from exo_cli.adapters.files import state_lock

    env.repo  # noqa: B018 - EnvironmentError_ outside a repository
    with state_lock(env.state_dir, "doctor"):  # one doctor at a time: two would rebuild the same record
        checkup = Checkup(env)
        problems = [_settle(finding, dry_run=dry_run) for check in CHECKS for finding in check(checkup)]
    if hosts:
        from exo_cli.ops.hosts import hosts as list_hosts

        for h in list_hosts(env).hosts:
            if h.error or not h.reachable:
                problems.append(Problem("host", h.name, h.error or "unreachable",
                                        f"fix [hosts.{h.name}] or that host (see `exo hosts`)", False))
    if not dry_run:
        from exo_cli.ops.lifecycle import release_runtime

        release_runtime(env)  # nothing of the team left running or on screen: its tmux server stops too
    repaired = sum(1 for p in problems if p.repaired)
    from exo_cli.ops.broker import broker_status
    from exo_cli.ops.sandbox import sandbox_status

    return DoctorResult(problems=problems, repaired=repaired, remaining=len(problems) - repaired,
                        consistent=not problems, dry_run=dry_run, kept=checkup.kept,
                        broker=broker_status(env) if env.has_state() else None, sandbox=sandbox_status(env))


def _settle(finding: Finding, *, dry_run: bool) -> Problem:
    """Repair ``finding`` (unless ``dry_run`` or it has no repair) and report how that went."""
    kind, subject, detail, action, repair = finding
    repaired = False
    if repair is not None and not dry_run:
        try:
            repaired = bool(repair())
        except (ExoError, OSError) as exc:
            detail = f"{detail}; repair failed: {exc}"
        if not repaired:
            action = f"{action} (failed)"
    return Problem(kind, subject, detail, action, repaired)
