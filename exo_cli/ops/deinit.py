"""``exo deinit``: take exo out of a repository, leaving it as it was before ``exo init``.

First a survey, which changes nothing: exo's agents, the worktrees and branches it made, its
archives and checkpoints, its pull request records, and what of that holds work. Work refuses
the removal, every piece listed, unless ``--force``: then live agents are stopped, the work of
each worktree and branch is archived as ``exo complete --force`` archives it, into
``<git common dir>/exo-archive/`` (outside exo's state, which goes), earlier archives move
there too (and the checkpoints' copies of ignored files), archive and checkpoint refs stay as
they are, and the result says where everything
is and how to restore it. Nothing overrides what is in the way: another process inside a
worktree, a branch of exo's checked out elsewhere, something in exo's worktree folder that no
record names (``exo doctor`` first), a live agent on another host. The checkpoints of an agent
that ended with nothing to lose (completed, or stopped with its work merged) hold no work: without
``--force`` they go with exo.

Then the steps, in an order that a kill at any point leaves repeatable (the state folder, which
holds the record of what ``exo init`` wrote, goes last): the agents' windows and what their
backends wrote outside exo's state (trust entries, project files), the worktrees and branches,
the tmux server and the runtime folder, the root wiring of ``exo init --agent``, exo's lines in
``info/exclude``, ``exo.toml`` (kept when committed or changed, unless ``--config``), the
``.exo/`` folder, this repository's rows of a PostgreSQL store, and the state folder.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from exo_cli.adapters import keep
from exo_cli.adapters.git import Git, remove_exclude
from exo_cli.adapters.rmtree import remove_tree
from exo_cli.errors import StateError
from exo_cli.ops import complete, footprint
from exo_cli.records import LIVE_STATUSES, ROOT, Agent, PullRequest, checkpoint_key
from exo_cli.registry import op

if TYPE_CHECKING:
    from exo_cli.env import Env

ARCHIVE_FOLDER = "exo-archive"  # under the git common dir: where --force keeps what it archives
CHECKPOINT_REFS = "refs/exo/checkpoints/"
EXO_EXCLUDE = "/.exo/"


# What to do about each kind of work exo holds, for the refusal's hint.
ADVICE = {
    "live_agents": "Stop the agents (exo kill, or exo complete when their work is merged).",
    "work": "Commit the work, file and merge it (exo pr file, exo pr merge), then exo complete.",
    "archives": f"Restore what you need from the archives (each RESTORE.txt, or git branch NAME REF) and delete "
                f"them (git update-ref -d REF for refs under {keep.ARCHIVE_REFS}).",
    "checkpoints": f"Delete the checkpoints you no longer need (git update-ref -d REF under {CHECKPOINT_REFS}).",
    "open_prs": "Merge the open pull requests (exo pr merge N) or close them on their forge.",
}


class Tree(NamedTuple):
    """A worktree and branch exo made for an agent, and what removing them would lose or disturb."""

    agent: Agent
    inventory: keep.Inventory | None  # None: the worktree is gone
    losses: dict[str, list[Any]]
    block: dict[str, list[Any]]
    branch_sha: str | None  # the branch's commit when surveyed (deleted only while it still points there)


class Survey(NamedTuple):
    live: list[Agent]  # live agents on this host
    elsewhere: list[Agent]  # live agents on other hosts
    local: list[Agent]  # every record of this host, history too
    trees: list[Tree]
    strays: list[str]  # what is in exo's worktree folder that no record names
    archives: list[str]
    checkpoints: list[str]  # checkpoint refs that hold work: of a live agent, one with work, or no agent of here
    prs: list[PullRequest]
    spent: dict[str, str]  # checkpoint ref -> commit, of agents whose work is safe (gone with exo)


@dataclass(frozen=True)
class DeinitResult:
    repo: str
    dry_run: bool
    removed: list[str]  # what exo took out (with dry_run: what it would take out)
    kept: list[str]  # what stays, and why
    holds: dict[str, list[str]]  # the work exo holds here, by kind (with force: what was archived or stopped)
    blocked: dict[str, list[str]]  # what is in the way, by kind (refuses even with force)
    archived: dict[str, str] = field(default_factory=dict)  # ref -> commit, made by force
    archive_folder: str | None = None  # where force kept the files it archived (outside exo's state)
    restore: list[str] = field(default_factory=list)  # commands that restore what force archived
    warnings: list[str] = field(default_factory=list)
    force: bool = field(default=False, repr=False)  # the call's --force (not in the JSON)

    @property
    def exit_code(self) -> int:
        """5 when a dry run found that the real run would refuse (what is listed holds work or is in the way)."""
        return 5 if self.dry_run and (self.blocked or (self.holds and not self.force)) else 0


@op(
    "deinit",
    cli="deinit",
    roles=("human",),
    destructive=True,
    idempotent=True,
    help={
        "force": "Remove exo even where it holds work: stop live agents and archive their work first "
                 "(refs under refs/exo/archive/, files under .git/exo-archive/).",
        "dry_run": "Only list what would be removed, and what holds work.",
        "config": "Remove exo.toml too, even when it is committed or changed since exo init wrote it.",
    },
)
def deinit(env: Env, *, force: bool = False, dry_run: bool = False, config: bool = False) -> DeinitResult:
    """Take exo out of this repository, leaving it as it was before exo init.

    Removes exo's state folder (`.git/exo/`, or this repository's rows of a PostgreSQL store),
    the `.exo/` folder, its line in `.git/info/exclude`, the settings `exo init --agent` wrote
    (a file nobody changed since goes back exactly as it was), the trust entries and settings
    it wrote for agents, its worktrees and branches with nothing in them, its tmux server and
    its runtime folder. `exo.toml` goes only when exo wrote it and it is neither committed nor
    changed since, or with {--config}. Refuses, listing each, while agents run or worktrees,
    branches, archives, checkpoints or open pull requests hold work; {--force} stops the agents
    and archives the work first, and says where it is and how to restore it. Never removes
    what another process is using.
    """
    repo = env.repo
    has_state = env.has_state()
    s = _survey(env) if has_state else Survey([], [], [], [], [], [], [], [], {})
    holds, blocked = _holds(s), _blocked(s)
    common: dict[str, Any] = dict(repo=str(repo.root), holds=holds, blocked=blocked)
    if dry_run:
        removed, kept, _ = _steps(env, s, config=config, apply=False)
        return DeinitResult(dry_run=True, removed=removed, kept=kept, force=force, **common)
    if blocked:
        raise StateError(f"exo cannot leave this repository yet: {_listed(blocked)}",
                         hint="Stop those processes or move those folders (`exo doctor` names what it finds), then "
                              "run exo deinit again; nothing was changed.", **common)
    if holds and not force:
        raise StateError(f"exo holds work in this repository: {_listed(holds)}",
                         hint=" ".join(ADVICE[k] for k in holds) + " Or run `exo deinit --force`, which stops the "
                              "agents and keeps all of it (it says where); nothing was changed.", **common)
    archived: dict[str, str] = {}
    restore: list[str] = []
    folder: str | None = None
    if force and holds:
        s, archived, restore, folder = _force(env, s)
    removed, kept, warnings = _steps(env, s, config=config, apply=True)
    if force and holds:
        kept += _kept_by_force(env, s, folder)
        warnings += [f"PR #{p.number} ({p.head} -> {p.base}) is forgotten" + (f"; it stays open at {p.url}" if p.url
                                                                               else "") for p in s.prs]
    return DeinitResult(dry_run=False, removed=removed, kept=kept, archived=archived, archive_folder=folder,
                        restore=restore, warnings=warnings, **common)


# --------------------------------------------------------------------------- the survey


def _survey(env: Env, *, settle: float = 0.0) -> Survey:
    """What exo has here and what of it holds work. It only looks: an agent whose pane or process is
    gone counts as dead (``exo agents`` would record it so, and start or type to others: not here)."""
    from exo_cli.ops import panes

    records = [a for a in env.store.agents() if a.id != ROOT]
    mine = [a for a in records if not a.retired and env.runs_here(a) and a.status in LIVE_STATUSES]
    seen = panes.states(env, mine)  # one listing call per multiplexer
    started = {a.id for a in mine if panes.location(a) is not None}  # the others have no process yet (--after)
    gone = {i for i, st in seen.items() if i in started and (st is None or not st.alive)}
    local = [a for a in records if env.runs_here(a)]
    live = [a for a in local if not a.retired and a.status in LIVE_STATUSES and a.id not in gone]
    elsewhere = [a for a in records if not a.retired and not env.runs_here(a) and a.status in LIVE_STATUSES]
    trees = _trees(env, sorted(local, key=lambda a: a.retired), settle=settle)
    git = Git(env.repo.root)
    archives = [ref for ref, _ in git.refs_under(keep.ARCHIVE_REFS)]
    kept_files = env.state_path / "archive"
    if kept_files.is_dir():
        archives += [str(p) for p in sorted(kept_files.iterdir())]
    # A checkpoint holds work as long as its agent could still need it: live, or with work in its checkout.
    # Those of an agent that ended with nothing to lose (`complete` checked it, or this survey) go with exo.
    unsafe = {a.id for a in live} | {t.agent.id for t in trees if t.losses}
    safe = {checkpoint_key(a) for a in local if a.id not in unsafe}
    checkpoints, spent = [], {}
    for ref, sha in git.refs_under(CHECKPOINT_REFS):
        if ref[len(CHECKPOINT_REFS):].split("/", 1)[0] in safe:
            spent[ref] = sha
        else:
            checkpoints.append(ref)
    prs = list(env.store.prs(state="open"))
    return Survey(live, elsewhere, local, trees, _strays(env, trees), archives, checkpoints, prs, spent)


def _trees(env: Env, agents: list[Agent], *, settle: float) -> list[Tree]:
    """The worktrees and branches exo made for these agents that are still there (each once: the newest record)."""
    git = Git(env.repo.root)
    seen: set[str] = set()
    out: list[Tree] = []
    for a in agents:
        wt = a.worktree if complete.made_worktree(a) and a.worktree and os.path.isdir(a.worktree) else None
        sha = git.rev(f"refs/heads/{a.branch}") if a.branch and complete.made_branch(a) else None
        keys = {k for k in (os.path.realpath(wt) if wt else None, f"branch:{a.branch}" if sha else None) if k}
        if not keys or keys & seen:
            continue
        seen |= keys
        inv = complete.survey(env, a) if wt else None
        out.append(Tree(a, inv, complete.assess(env, a, inv), complete.blockers(env, a, settle=settle), sha))
    return out


def _strays(env: Env, trees: list[Tree]) -> list[str]:
    """This repository's worktrees in exo's worktree folder that no record names; and, in the main checkout's
    own ``.exo/`` (which goes whole), anything else in that folder but empty folders."""
    root = env.worktree_root
    ours = {os.path.realpath(t.agent.worktree) for t in trees if t.inventory is not None and t.agent.worktree}
    real_root = os.path.realpath(root)
    out = [w.path for w in Git(env.repo.root).worktrees()[1:]
           if os.path.realpath(w.path).startswith(real_root + os.sep) and os.path.realpath(w.path) not in ours]
    if real_root.startswith(os.path.realpath(env.repo.root / ".exo") + os.sep):
        with contextlib.suppress(OSError):
            for p in sorted(root.iterdir()):
                if os.path.realpath(p) in ours or str(p) in out:
                    continue
                if p.is_dir() and not p.is_symlink() and not any(p.iterdir()):
                    continue
                out.append(str(p))
    return out


def _holds(s: Survey) -> dict[str, list[str]]:
    """The work exo holds here, by kind: what refuses a deinit without --force."""
    out: dict[str, list[str]] = {}
    if s.live:
        out["live_agents"] = [f"{a.id} ({a.status})" for a in s.live]
    work = [f"{t.agent.name}: {_words(t.losses)}" for t in s.trees if t.losses]
    if work:
        out["work"] = work
    if s.archives:
        out["archives"] = s.archives
    if s.checkpoints:
        out["checkpoints"] = s.checkpoints
    if s.prs:
        out["open_prs"] = [f"#{p.number} {p.head} -> {p.base}" for p in s.prs]
    return out


def _blocked(s: Survey) -> dict[str, list[str]]:
    """What is in the way whatever the flags: someone else's processes, branches checked out elsewhere, strays."""
    out: dict[str, list[str]] = {}
    for t in s.trees:
        for kind, items in t.block.items():
            shown = [i["command"] or str(i["pid"]) if isinstance(i, dict) else str(i) for i in items]
            out.setdefault(kind, []).append(f"{t.agent.name}: {', '.join(shown)}")
    if s.strays:
        out["unrecorded"] = s.strays
    if s.elsewhere:
        out["other_hosts"] = [f"{a.id} on {a.host}" for a in s.elsewhere]
    return out


def _words(losses: dict[str, list[Any]]) -> str:
    return "; ".join(f"{k.replace('_', ' ')}: {', '.join(map(str, v[:5]))}{' ...' if len(v) > 5 else ''}"
                     for k, v in losses.items())


def _listed(kinds: dict[str, list[str]]) -> str:
    return "; ".join(f"{k.replace('_', ' ')}: {', '.join(v[:5])}{f' and {len(v) - 5} more' if len(v) > 5 else ''}"
                     for k, v in kinds.items())


# --------------------------------------------------------------------------- --force


def _force(env: Env, s: Survey) -> tuple[Survey, dict[str, str], list[str], str | None]:
    """Stop the live agents, look again, and archive every piece of work outside exo's state."""
    from exo_cli.ops import agentctl

    for a in s.live:
        agentctl.stop_agent(env, a, reason="stopped by exo deinit --force", status="dead")
    if s.live:
        s = _survey(env, settle=3.0)  # they may have written something on their way out
        blocked = _blocked(s)
        if blocked or s.live:
            raise StateError(f"exo stopped its agents but cannot leave yet: {_listed(blocked or _holds(s))}",
                             hint="Stop those processes, then run exo deinit --force again; nothing else changed.",
                             blocked=blocked)
    root = env.repo.common_dir / ARCHIVE_FOLDER
    refs: dict[str, str] = {}
    restore: list[str] = []
    folders: list[str] = []
    for t in s.trees:
        if t.losses:
            kept = complete.archive(env, t.agent, t.inventory, root=root, command="exo deinit --force")
            refs.update(kept.refs)
            restore += kept.restore
            if kept.folder:
                folders.append(kept.folder)
    folders += _move_archives(env.state_path / "archive", root)
    # the checkpoints' copies of ignored files (their refs stay): under root/checkpoints/<key>/blobs/
    folders += _move_archives(env.state_path / "checkpoints", root / "checkpoints")
    _fault(True, "deinit.archived", env)
    s = s._replace(checkpoints=s.checkpoints + list(s.spent), spent={})  # --force keeps every checkpoint
    return s, refs, restore, str(root) if folders else None


def _kept_by_force(env: Env, s: Survey, folder: str | None) -> list[str]:
    """What --force left in place on purpose: refs of archives and checkpoints, and the archive folder."""
    git = Git(env.repo.root)
    out = []
    archives = git.refs_under(keep.ARCHIVE_REFS)
    if archives:
        out.append(f"{len(archives)} archive ref(s) under {keep.ARCHIVE_REFS} (list them with git for-each-ref "
                   f"{keep.ARCHIVE_REFS}; delete one with git update-ref -d REF once you no longer need it)")
    if s.checkpoints:
        out.append(f"{len(s.checkpoints)} checkpoint ref(s) under {CHECKPOINT_REFS} (git for-each-ref {CHECKPOINT_REFS})")
    if folder:
        out.append(f"archived files in {folder} (each folder's RESTORE.txt says how to restore them)")
    return out


def _move_archives(source: Path, root: Path) -> list[str]:
    """Move the folders earlier ``exo complete --force`` runs kept in exo's state to ``root`` (their
    RESTORE.txt follows them); the new places."""
    if not source.is_dir():
        return []
    from exo_cli.adapters.files import atomic_write, ensure_private_dir

    ensure_private_dir(root, parents=True)
    moved = []
    for old in sorted(source.iterdir()):
        new = root / old.name
        n = 1
        while new.exists():
            n += 1
            new = root / f"{old.name}.{n}"
        os.replace(old, new)
        note = new / "RESTORE.txt"
        with contextlib.suppress(OSError):
            atomic_write(note, note.read_text(encoding="utf-8").replace(str(old), str(new)))
        moved.append(str(new))
    return moved


# --------------------------------------------------------------------------- the steps


def _steps(env: Env, s: Survey, *, config: bool, apply: bool) -> tuple[list[str], list[str], list[str]]:
    """Take exo out, one step after the other (with ``apply`` False, only say what each would do)."""
    removed: list[str] = []
    kept: list[str] = []
    warnings: list[str] = []
    state = env.state_path
    record = footprint.load(state)
    git = Git(env.repo.root)
    removed += _agents_out(env, s, apply=apply, warnings=warnings)
    _fault(apply, "deinit.agents", env)
    removed += _trees_out(env, s, apply=apply, warnings=warnings)
    _fault(apply, "deinit.trees", env)
    if s.spent:
        removed.append(f"{len(s.spent)} checkpoint ref(s) of agents that ended with nothing to lose")
        for ref, sha in s.spent.items() if apply else ():
            git.delete_ref(ref, sha)  # only while it still points there
    if apply:  # git leaves the emptied folders of loose refs (checkpoints', clones': a run killed after them too)
        _rmdir_empty(env.repo.common_dir / "refs" / "exo")
    if state.is_dir():
        removed += _running_out(env, apply=apply, warnings=warnings)
    _fault(apply, "deinit.stopped", env)
    from exo_cli.ops import rootwire

    common = env.repo.common_dir
    exclude = _exclude_lines(common)
    removed += rootwire.unwire(env.repo.root, record, exclude, apply=apply, kept=kept,
                               committed=lambda rel: _committed(git, rel))
    _fault(apply, "deinit.unwired", env)
    lines = [EXO_EXCLUDE, *(x for x in record.get("exclude") or [] if x in rootwire.EXCLUDED)]
    for line in dict.fromkeys(lines):
        if line in exclude:
            removed.append(f"{common / 'info' / 'exclude'}: the line {line}")
            if apply:
                remove_exclude(common, line)
    gone, why = _exo_toml(env, record, config=config, apply=apply)
    if why:
        (removed if gone else kept).append(why)
    removed += _folder_out(env, apply=apply, kept=kept)
    from exo_cli.trust import pins_path

    pins = pins_path(env.environ, env.repo.root)
    if pins.is_file():
        removed.append(f"{pins}: the values trusted with exo trust")
        if apply:
            pins.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                pins.parent.rmdir()  # the folder goes with the last repository's pins
    removed += _clone_homes_out(env, apply=apply)
    _fault(apply, "deinit.files", env)
    if state.is_dir() or env.store_url:
        removed += _state_out(env, apply=apply, kept=kept)
    return removed, kept, warnings


def _clone_homes_out(env: Env, *, apply: bool) -> list[str]:
    """This repository's lines in the user's list of agents' clones (the file goes with its last line)."""
    from exo_cli.adapters.clones import HOMES, forget_homes
    from exo_cli.config_paths import user_config_dir

    folder = user_config_dir(env.environ)
    count = forget_homes(folder, env.repo.root, apply=apply)
    return [f"{folder / HOMES}: the {count} clone(s) of this repository"] if count else []


def _rmdir_empty(top: Path) -> None:
    """Remove the empty folders under ``top`` and ``top`` itself when it is left empty (never a file)."""
    if not top.is_dir() or top.is_symlink():
        return
    for folder, _, _ in sorted(os.walk(top), key=lambda w: -len(w[0])):
        with contextlib.suppress(OSError):
            os.rmdir(folder)  # refused while anything is in it


def _fault(apply: bool, name: str, env: Env) -> None:
    if apply:
        from exo_cli import fault

        fault.point(name, env.environ)


def _agents_out(env: Env, s: Survey, *, apply: bool, warnings: list[str]) -> list[str]:
    """Close the agents' windows and undo what their backends wrote outside exo's state."""
    from exo_cli.adapters.agents import cleanup
    from exo_cli.ops import agentctl, panes

    out = []
    shown = panes.states(env, [a for a in s.local if not a.retired])  # one listing call: which windows are left
    for a in s.local:
        if shown.get(a.id) is not None:
            out.append(f"{a.id}: its window")
            if apply:
                agentctl.close_windows(env, a)
        if a.undo:
            out.append(f"{a.id}: what exo wrote for its agent CLI (trust entries, settings)")
            if apply:
                try:
                    cleanup(list(a.undo))
                    env.store.update_agent(a.id, undo=[])
                except Exception as exc:  # one record's failure leaves the others to run
                    warnings.append(f"{a.id}: undo failed: {exc}")
    return out


def _trees_out(env: Env, s: Survey, *, apply: bool, warnings: list[str]) -> list[str]:
    """Remove each worktree exo made (forced only once archived) and delete its branch (compare-and-delete)."""
    out = []
    for t in s.trees:
        a = t.agent
        if t.inventory is not None and a.worktree:
            out.append(f"worktree {a.worktree}")
            if apply:
                ok, why = complete.remove_checkout(env, a, force=bool(t.inventory.losses()))
                if not ok:
                    raise StateError(f"git refused to remove the worktree {a.worktree}: {why}",
                                     hint="Look at it, remove it yourself, then run exo deinit again.",
                                     worktree=a.worktree)
        if t.branch_sha and a.branch:
            out.append(f"branch {a.branch}")
            if apply and not env.worktrees.delete_branch_if_at(a.branch, t.branch_sha):
                warnings.append(f"branch {a.branch} was not deleted: it moved since exo looked at it")
    if apply and s.trees:
        env.worktrees.prune()
    return out


def _running_out(env: Env, *, apply: bool, warnings: list[str]) -> list[str]:
    """Stop exo's tmux server and the team broker, and remove the runtime folder."""
    from exo_cli.adapters.files import release_runtime_dir
    from exo_cli.adapters.mux.tmux import Tmux
    from exo_cli.ops import panes

    out = []
    mux = panes.mux_for(env, "tmux")
    if isinstance(mux, Tmux) and os.path.exists(mux.socket_path()):
        out.append(f"exo's tmux server (tmux -S {mux.socket_path()})")
        if apply:
            mux.kill_server()
    from exo_cli import __version__
    from exo_cli.adapters import broker as brokers
    from exo_cli.ops.broker import paths

    running = brokers.read_pid(paths(env))
    if running:  # the team broker (its agents are gone: deinit refuses while any holds work or runs)
        out.append(f"exo's broker (pid {running.get('pid')})")
        if apply:
            brokers.stop(paths(env), __version__)
    runtime = env.runtime_dir
    if runtime.exists():
        out.append(f"the runtime folder {runtime}")
        if apply and not release_runtime_dir(runtime):
            warnings.append(f"{runtime} is kept: a process still waits on it (an exo wait or question?)")
    return out


def _committed(git: Git, rel: str) -> str | None:
    """The text git has for ``rel`` (its index, as committed or staged), or None when git does not track it."""
    if not git.is_tracked(rel):
        return None
    data = git.blob("", rel)  # ":path": the index's version
    try:
        return data.decode("utf-8") if data is not None else None
    except UnicodeDecodeError:
        return None


def _exclude_lines(common: Path) -> list[str]:
    from exo_cli.adapters.files import read_regular_text

    return (read_regular_text(common / "info" / "exclude", limit=16 << 20, follow=False) or "").splitlines()


def _exo_toml(env: Env, record: dict[str, Any], *, config: bool, apply: bool) -> tuple[bool, str | None]:
    """Whether exo.toml goes, and why (None: there is none)."""
    path = env.repo.root / "exo.toml"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False, None
    except (OSError, UnicodeDecodeError):
        text = None
    tracked = Git(env.repo.root).is_tracked("exo.toml")
    if not config:
        if tracked:
            return False, f"{path}: committed, so kept (--config removes it)"
        from exo_cli.ops.init import EXO_TOML

        ours = text is not None and footprint.digest(text) == record.get("exo_toml", footprint.digest(EXO_TOML))
        if not ours:
            return False, f"{path}: not as exo init wrote it, so kept (--config removes it)"
    if apply:
        path.unlink(missing_ok=True)
    return True, f"{path}" + (" (committed: git shows it deleted)" if tracked else "")


def _folder_out(env: Env, *, apply: bool, kept: list[str]) -> list[str]:
    """The main checkout's ``.exo/`` folder (local configuration, worktree folder, logs), unless git tracks some of it."""
    folder = env.repo.root / ".exo"
    if not folder.is_dir() or folder.is_symlink():
        return []
    if Git(env.repo.root).is_tracked(".exo"):
        kept.append(f"{folder}: git tracks files in it, so it is kept")
        return []
    if apply:
        remove_tree(folder)
    return [f"{folder}"]


def _state_out(env: Env, *, apply: bool, kept: list[str]) -> list[str]:
    """This repository's rows of a PostgreSQL store, then the state folder (last: it holds the record)."""
    out = []
    state = env.state_path
    if env.store_url:
        if env.joined:
            kept.append("the team's rows in the PostgreSQL store: this clone joined a team another host began")
        elif env.store.exists():
            out.append("this repository's rows in the PostgreSQL store")
            if apply:
                env.store.forget()
                _fault(True, "deinit.rows", env)
    if state.is_dir():
        out.append(f"exo's state {state}")
        if apply:
            with contextlib.suppress(Exception):
                env.store.close()
            _remove_state(state, env.repo.common_dir, kept)
    return out


def _remove_state(state: Path, common: Path, kept: list[str]) -> None:
    """Remove the state folder: whole when it is ``<git common dir>/exo``; a folder ``EXO_STATE_DIR`` names
    elsewhere loses only what exo keeps in a state folder, and stays when anything else is in it."""
    if os.path.realpath(state) == os.path.realpath(common / "exo"):
        remove_tree(state)
        return
    from exo_cli.adapters.store import DB_FILE, POINTER_FILE
    from exo_cli.adapters.worktree import CREATED_LEDGER
    from exo_cli.env import HOST_NAME_FILE

    files = {DB_FILE, f"{DB_FILE}-wal", f"{DB_FILE}-shm", POINTER_FILE, CREATED_LEDGER, HOST_NAME_FILE, footprint.FILE}
    for entry in state.iterdir():
        if entry.name in files and not entry.is_dir():
            entry.unlink()
        elif entry.name in ("agents", "logs", "locks", "archive", "demo") and entry.is_dir() and not entry.is_symlink():
            remove_tree(entry)
    try:
        state.rmdir()
    except OSError:
        kept.append(f"{state}: it holds files exo did not make (EXO_STATE_DIR names it), so the folder is kept")


__all__ = ["DeinitResult", "deinit"]
