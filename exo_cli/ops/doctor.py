"""``exo doctor``: reconcile exo's records with git, the multiplexer and process liveness; repair.

A list of checks (``CHECKS``), run in order. Each looks for one kind of problem and yields a
``Finding`` carrying its own repair (None when exo must not repair it: the human decides);
the operation repairs each finding as it comes (unless ``dry_run``), so a later check sees
what an earlier repair left. Only what exo itself created, and can repair safely, is
repaired: interrupted spawns are finished or cleaned up through spawn's recovery steps,
zombies are marked dead, orphan windows on exo's own tmux server are closed, clean orphan
worktrees under exo's worktree root are removed (never forced), stale git metadata is pruned.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from exo_cli.adapters.git import Git
from exo_cli.errors import ExoError, StateError
from exo_cli.ops.lifecycle import reaped_worktrees, remember_reaped
from exo_cli.records import DEAD, LIVE_STATUSES, ROOT, Agent
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.env import Env


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
        self._worktrees: dict[str, Any] | None = None
        self.reload()

    def reload(self) -> None:
        """Read the agent records again (after repairs that forget or finish some)."""
        env = self.env
        self.records = [a for a in env.store.agents() if a.id != ROOT] if env.has_state() else []

    def worktrees(self) -> dict[str, Any]:
        """``git worktree list``: path -> attributes."""
        if self._worktrees is None:

            self._worktrees = self.env.worktrees.listing()
        return self._worktrees

    def claimed(self) -> set[str]:
        """The real paths of the worktrees agent records name."""
        return {os.path.realpath(a.worktree) for a in self.records if a.worktree}


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
                env.store.update_agent(a.id, status=DEAD, status_reason=reason)
                env.store.event("dead", a.id, {"reason": reason, "by": "doctor"})
                return True

            yield Finding("zombie", a.id, f"recorded {a.status} but its {reason}", "mark it dead", mark_dead)


def missing_worktrees(c: Checkup) -> Iterator[Finding]:
    """Live agents whose worktree vanished: reported (killing them is the human's call)."""
    for a in c.records:
        if a.status in LIVE_STATUSES and a.spec.get("worktree_created") and a.worktree and not os.path.isdir(a.worktree):
            yield Finding("worktree-missing", a.id, f"its worktree {a.worktree} does not exist",
                          "kill it (exo kill) and reap")


def orphan_windows(c: Checkup) -> Iterator[Finding]:
    """Windows on exo's own tmux server that no record (and no spawn under way) owns: close them."""
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
        if pane in known or name in in_progress or recovery.spawn_in_progress(env, name.removesuffix("-svc")):
            continue

        def close(loc: Location = st.location) -> bool:
            tmux.close(loc, force=True)
            return True

        yield Finding("orphan-window", f"{name} ({pane})", "a window on exo's tmux server with no agent record",
                      "close it", close)


def orphan_worktrees(c: Checkup) -> Iterator[Finding]:
    """Worktrees under exo's worktree root with no record: removed when clean, never forced.

    A reaped agent's worktree is removed when clean and kept (in ``kept``) when it holds
    unfinished work; any other dirty one is reported and left alone.
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
        dirty = Git(path).status_porcelain()
        if real in reaped:
            if dirty:
                c.kept.append(path)  # a reaped agent's unfinished work, left for the human on purpose
                continue
            yield Finding("reaped-worktree", path, f"clean worktree of reaped agent {reaped[real].get('agent')}",
                          "git worktree remove (its branch is kept)",
                          partial(_remove_worktree, env, path, forget_reaped=real))
        elif dirty:
            yield Finding("orphan-worktree", path, f"no agent record; {len(dirty)} uncommitted or untracked file(s)",
                          "left alone: commit or remove it yourself (git worktree remove)")
        else:
            yield Finding("orphan-worktree", path, "no agent record; clean", "git worktree remove",
                          partial(_remove_worktree, env, path))


def _remove_worktree(env: Env, path: str, *, forget_reaped: str | None = None) -> bool:
    """``git worktree remove`` (never forced); StateError with git's reason when it refuses."""

    ok, why = env.worktrees.remove(path)
    if not ok:
        raise StateError(why)
    if forget_reaped is not None:
        remember_reaped(env, forget_reaped, None)
    return True


def stray_folders(c: Checkup) -> Iterator[Finding]:
    """Folders in exo's worktree root that are neither worktrees nor claimed: empty ones are removed."""

    root = c.env.worktree_root
    if not root.is_dir():
        return
    registered = {os.path.realpath(p) for p in c.worktrees()}
    claimed = c.claimed()
    for child in sorted(root.iterdir()):
        real = os.path.realpath(child)
        if real in registered or real in claimed:
            continue
        if child.is_dir() and not any(child.iterdir()):
            yield Finding("stray-folder", str(child), "an empty folder in exo's worktree root", "remove it",
                          partial(_remove_folder, child))
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


CHECKS: tuple[Callable[[Checkup], Iterator[Finding]], ...] = (
    interrupted_spawns,
    zombies,
    missing_worktrees,
    orphan_windows,
    orphan_worktrees,
    stray_folders,
    stale_metadata,
)


# --------------------------------------------------------------------------- the operation


@op("doctor", cli="doctor", roles=("human",), help={"dry_run": "Report problems without repairing anything."})
def doctor(env: Env, *, dry_run: bool = False) -> DoctorResult:
    """Reconcile exo's records with git, the multiplexer and process liveness; repair.

    Finds interrupted spawns (cleaned up), zombies (records whose pane or process is gone:
    marked dead), orphan windows on exo's own tmux server (closed), orphan worktrees under
    exo's worktree folder with no record (removed with `git worktree remove` when clean, never
    forced; dirty ones are reported and left), live agents whose worktree vanished (reported),
    and stale git worktree metadata (pruned). Exit 0 when consistent or repaired, 5 otherwise.
    """
    env.repo  # noqa: B018 - EnvironmentError_ outside a repository
    checkup = Checkup(env)
    problems = [_settle(finding, dry_run=dry_run) for check in CHECKS for finding in check(checkup)]
    repaired = sum(1 for p in problems if p.repaired)
    return DoctorResult(problems=problems, repaired=repaired, remaining=len(problems) - repaired,
                        consistent=not problems, dry_run=dry_run, kept=checkup.kept)


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
