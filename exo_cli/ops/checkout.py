"""An agent's checkout as exo reads it: a linked worktree directly, an agent's own clone as hostile.

Every operation that reads an agent's work tree, index or branch goes through here:

- ``reading(env, agent)`` yields the git client that reads the checkout: ``Git(worktree)`` for a
  worktree; for a clone (``layout = "clone"``), ``clones.Reader``'s client over exo's own git
  folder (``<state>/clones/<id>/``), so nothing of the clone's configuration runs. One reader
  per clone at a time (a lock in that folder).
- ``sync(env, agent)`` takes a clone's work back before anything reads its branch: its branches
  and git state are fetched into ``refs/exo/clones/<id>/``, and the repository's branch moves
  to the clone's only by fast-forward (``Synced.refused`` says why not). A worktree's branch is
  the repository's already: nothing to do.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, NamedTuple

from exo_cli.adapters import clones
from exo_cli.adapters.files import locked
from exo_cli.adapters.git import Git
from exo_cli.adapters.rmtree import remove_tree

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from pathlib import Path

    from exo_cli.adapters.keep import Clone
    from exo_cli.env import Env
    from exo_cli.records import Agent


class Synced(NamedTuple):
    """What ``sync`` did: the fetched state (None for a worktree) and what happened to the branch."""

    fetched: clones.Fetched | None
    outcome: str  # "worktree" | "same" | "moved" | "created" | "behind" | "refused" | "no-branch"
    refused: str = ""  # why the repository's branch was not moved (the agent should rebase)


def is_clone(agent: Agent) -> bool:
    """Whether ``agent`` works in its own clone."""
    return agent.spec.get("layout") == "clone"


def folder(env: Env, agent: Agent) -> Path:
    """exo's private folder for reading ``agent``'s clone."""
    return env.state_dir / "clones" / agent.id


def objects(env: Env, agent: Agent) -> Path:
    """exo's copy of ``agent``'s clone's own objects (made by every read: ``clones.Reader``)."""
    return folder(env, agent) / "git" / "objects"


def keep_objects(env: Env, agent: Agent, commits: Iterable[str]) -> None:
    """Make the repository hold every object of ``commits`` (written while reading ``agent``'s clone) that only the
    clone has, before anything keeps them (``Git.take_objects``); a worktree's are the repository's already."""
    if is_clone(agent):
        for commit in dict.fromkeys(commits):
            Git(env.repo.root).take_objects(commit, str(objects(env, agent)))


def _lock_of(env: Env, agent: Agent) -> Path:
    return env.state_dir / "clones" / f"{agent.id}.lock"  # never with_suffix: ids have dots (main.w1)


def _reader(env: Env, agent: Agent) -> clones.Reader:
    return clones.Reader(Git(env.repo.root), env.repo.common_dir, str(agent.worktree or ""), folder(env, agent))


@contextlib.contextmanager
def _held(env: Env, agent: Agent) -> Iterator[clones.Reader]:
    reader = _reader(env, agent)
    folder(env, agent).parent.mkdir(parents=True, exist_ok=True)
    with locked(_lock_of(env, agent)):
        yield reader


@contextlib.contextmanager
def reading(env: Env, agent: Agent, *, fetch: bool = False) -> Iterator[tuple[Git, Synced]]:
    """(the git that reads ``agent``'s checkout, what ``sync`` did when ``fetch``) for the duration of the block."""
    if not is_clone(agent):
        yield Git(str(agent.worktree)), Synced(None, "worktree")
        return
    with _held(env, agent) as reader:
        synced = _sync(env, agent, reader) if fetch else Synced(None, "same")
        if not fetch:
            reader.refresh()
        yield reader.git(), synced


def sync(env: Env, agent: Agent) -> Synced:
    """Fetch a clone's work into the repository and fast-forward its branch there (a worktree: nothing to do)."""
    if not is_clone(agent):
        return Synced(None, "worktree")
    with _held(env, agent) as reader:
        return _sync(env, agent, reader)


def _sync(env: Env, agent: Agent, reader: clones.Reader) -> Synced:
    fetched = clones.fetch(reader, agent.id)
    if not agent.branch:
        return Synced(fetched, "no-branch")
    tip = fetched.branches.get(agent.branch)
    moved = clones.advance(reader.repo, agent.branch, tip)
    return Synced(fetched, moved.outcome, moved.reason)


def forget(env: Env, agent: Agent) -> None:
    """Drop exo's reading folder of ``agent``'s clone (its refs go with the clone: ``Worktrees.remove_clone``)."""
    if is_clone(agent):
        with contextlib.suppress(OSError):
            remove_tree(folder(env, agent))
        with contextlib.suppress(OSError):
            _lock_of(env, agent).unlink()


def clone_state(env: Env, agent: Agent, synced: Synced, git: Git) -> Clone:
    """What ``keep.survey`` needs of a clone (``keep.Clone``), from a ``reading(fetch=True)``."""
    from exo_cli.adapters.keep import Clone

    fetched = synced.fetched
    state = dict(fetched.state) if fetched else {}
    if fetched:
        state.update({f"branch {name}": oid for name, oid in fetched.branches.items()})
    in_progress = clones.operations_in_progress(str(agent.worktree or ""))
    return Clone(git=git, state=state, in_progress=in_progress, refs=clones.clone_refs(agent.id))


def sync_owners(env: Env, branches: list[str]) -> list[str]:
    """Sync the clone of every agent whose branch is one of ``branches`` (before exo reads those branches in the
    repository: a PR's head, the base it merges into); warnings for the clones whose branch could not move."""
    from exo_cli.errors import ExoError

    warnings: list[str] = []
    if not env.has_state():
        return warnings
    for agent in env.store.agents():
        if is_clone(agent) and agent.branch in branches and agent.worktree and not agent.retired:
            try:
                done = sync(env, agent)
            except ExoError as exc:
                warnings.append(f"{agent.id}'s clone was not read: {exc.message}")
                continue
            if done.outcome == "refused":
                warnings.append(f"{agent.id}'s clone has {agent.branch} apart from the repository's "
                                f"({done.refused}); the repository's branch is used as it is")
    return warnings


def sync_own(env: Env, agent: Agent | None) -> None:
    """Sync the calling agent's own clone before an operation reads its branch; StateError when its branch there
    has moved apart from the clone's (the agent rebases first: exo never forces a branch)."""
    if agent is None or not is_clone(agent):
        return
    done = sync(env, agent)
    if done.outcome == "refused":
        from exo_cli.errors import StateError

        raise StateError(f"Your branch {agent.branch} in the repository and in your clone have moved apart: "
                         f"{done.refused}", agent=agent.id, branch=agent.branch, reason="diverged",
                         hint=f"In your clone: git fetch origin && git rebase origin/{agent.branch}; then again.")
