"""Branches between hosts: through the shared git remote (``forge.remote``, usually ``origin``).

An agent whose parent works on another host was made from the parent's branch as fetched
(``base_ref``); its PR pushes its branch, the parent's merge fetches it and pushes the base
back, and ``complete`` fetches the base first and deletes the pushed branch after.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from exo_cli.adapters.git import Finished, Git
from exo_cli.errors import InvalidInput, StateError
from exo_cli.validate import check_branch, visible

if TYPE_CHECKING:
    from exo_cli.env import Env
    from exo_cli.records import Agent


def _why(got: Finished) -> str:
    """The last line git printed about a failure, safe for a terminal."""
    return visible((got.stderr.strip().splitlines() or ["failed"])[-1])


def _remote(env: Env) -> str:
    """The shared remote (``forge.remote``, usually ``origin``)."""
    return str(env.config.get("forge.remote"))


def share_branch(env: Env, branch: str, host: str) -> None:
    """Push the parent's ``branch`` for an agent spawned on ``host`` (it fetches it from there)."""
    remote = _remote(env)
    git = Git(env.repo.root)
    if not git.ref_exists(f"refs/heads/{branch}"):
        raise InvalidInput(f"--from {branch!r} with --host must name a branch: it reaches the other host through "
                           f"{remote}", field="from_branch")
    got = git.push_as_is(remote, branch)
    if not got.ok:
        raise StateError(f"Cannot push {branch} to {remote} for host {host}: " + _why(got),
                         hint=f"Bring {branch} up to date with {remote}/{branch} (git pull), then spawn again.",
                         branch=branch)

def fetch_base(env: Env, agent: Agent) -> str | None:
    """Fetch the agent's parent branch from the shared remote into its ``base_ref``; a warning when it cannot."""
    ref, base = agent.spec.get("base_ref"), agent.base_branch
    if not isinstance(ref, str) or not base or not ref.startswith("refs/remotes/"):
        return None
    remote = ref[len("refs/remotes/"):].split("/", 1)[0]
    got = Git(env.repo.root).fetch(remote, f"+refs/heads/{base}:{ref}")
    if got.ok:
        return None
    return f"Cannot fetch {base} from {remote}: " + _why(got)


def push_head(env: Env, head: str) -> None:
    """Push an agent's branch to the shared remote (its own branch: forced over its last push, it may have
    been rebased since)."""
    remote = _remote(env)
    got = Git(env.repo.root).push_as_is(remote, head, force=True)
    if not got.ok:
        raise StateError(f"Cannot push {head} to {remote}: " + _why(got),
                         hint=f"Your parent works on another host and merges from {remote}: check that this clone "
                         "can push there.", branch=head)


def fetch_head(env: Env, head: str) -> str:
    """Fetch a PR's branch pushed by an agent of another host; the ref it is now under here."""
    remote = _remote(env)
    ref = f"refs/remotes/{remote}/{head}"
    got = Git(env.repo.root).fetch(remote, f"+refs/heads/{head}:{ref}")
    if not got.ok:
        raise StateError(f"Cannot fetch {head} from {remote}: " + _why(got),
                         hint="Its author works on another host and pushes it when it files the PR: ask it to "
                         "file again.", branch=head)
    return ref


def push_base(env: Env, base: str) -> list[str]:
    """Push a base branch after a merge so other hosts see it; warnings when the remote refuses."""
    remote = _remote(env)
    got = Git(env.repo.root).push_as_is(remote, base)
    if got.ok:
        return []
    return [f"{base} was merged here but not pushed to {remote}: {_why(got)}; agents on other hosts see the "
            f"merge once {base} is pushed"]


def unpush(env: Env, agent: Agent, sha: str) -> list[str]:
    """Delete the agent's branch from the shared remote after ``complete`` deleted it here (at ``sha``).

    Only the copy this clone pushed, and only while the remote still has exactly that commit
    (a lease), and only when that copy is in the base or in what was just deleted here (checked
    and kept or merged): a copy with anything else stays, with a warning.
    """
    branch, remote = str(agent.branch), _remote(env)
    git = Git(env.repo.root)
    pushed = git.rev(f"refs/remotes/{remote}/{branch}")
    if not pushed:
        return []
    base = agent.spec.get("base_ref")
    safe = git.is_ancestor(pushed, sha) or (isinstance(base, str) and git.merged_by_content(pushed, base))
    if not safe:
        return [f"branch {branch} is still on {remote}: its commit there ({pushed[:12]}) is neither in "
                f"{agent.base_branch} nor in the branch checked here"]
    got = git.push_as_is(remote, branch, delete_at=pushed)
    if got.ok:
        return []
    return [f"branch {branch} is still on {remote}: " + _why(got)]


def fetch_parent(env: Env, via: Mapping[str, Any]) -> dict[str, Any]:
    """Fetch the parent's branch (and the start branch) from the shared remote: what a spawn here starts from."""
    branch, start = str(via.get("base_branch") or ""), str(via.get("start") or via.get("base_branch") or "")
    for b in dict.fromkeys([start, branch]):
        check_branch(b, "parent branch")
    remote = _remote(env)
    git = Git(env.repo.root)
    for b in dict.fromkeys([start, branch]):
        got = git.fetch(remote, f"+refs/heads/{b}:refs/remotes/{remote}/{b}")
        if not got.ok:
            raise StateError(f"Cannot fetch {b} from {remote}: " + _why(got),
                             hint=f"Check that this clone's {remote} is the shared remote.", branch=b)
    return {"base_branch": branch, "base_ref": f"refs/remotes/{remote}/{start}", "from_host": via.get("from_host")}
