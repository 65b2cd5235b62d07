"""``exo diff AGENT``: an agent's branch against its base, three-dot (what its PR would merge).

``branch_diff`` is the one place a diff is taken; ``exo pr show N --diff`` and the board's
diff key use it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from exo_cli.adapters.git import Git
from exo_cli.errors import InvalidInput, NotFound, StateError
from exo_cli.ops import remote as _remote  # noqa: F401 - routes on_host operations to their agent's host
from exo_cli.registry import Range, op

if TYPE_CHECKING:
    from exo_cli.env import Env

PATCH_LIMIT = 2_000_000  # bytes of patch text returned at most (the rest is cut at a line end)


@dataclass(frozen=True)
class DiffFile:
    path: str
    status: str  # git's letter: A added, M modified, D deleted, T type changed
    added: int | None  # None for a binary file
    deleted: int | None


@dataclass(frozen=True)
class DiffResult:
    """What ``exo diff`` shows: the files changed, their line counts, and the patch unless asked not to."""

    agent: str | None
    head: str
    base: str
    merge_base: str | None
    files: list[DiffFile]
    added: int
    deleted: int
    patch: str | None  # None with --stat or --name-only
    truncated: bool


def branch_diff(git: Git, *, head: str, base: str, revs: list[str], agent: str | None = None,
                patch: bool = True) -> DiffResult:
    """The diff of ``revs`` (``base...head``, or two commits) as a DiffResult."""
    from exo_cli.adapters import gitdiff

    files = [DiffFile(path=p, status=s, added=a, deleted=d) for p, s, a, d in gitdiff.diff_files(git, revs)]
    text, cut = gitdiff.diff_patch(git, revs, limit=PATCH_LIMIT) if patch else (None, False)
    return DiffResult(agent=agent, head=head, base=base, merge_base=gitdiff.merge_base(git, base, head),
                      files=files, added=sum(f.added or 0 for f in files), deleted=sum(f.deleted or 0 for f in files),
                      patch=text, truncated=cut)


@op(
    "diff",
    cli="diff",
    tools=["diff_agent"],
    roles=("tl", "dev"),
    read_only=True,
    idempotent=True,
    on_host="agent",
    help={
        "agent": "The agent whose branch to compare with its base branch.",
        "stat": "Only the files changed with their added and deleted line counts (no patch).",
        "name_only": "Only the names of the files changed (no patch).",
        "checkpoint": "Show what this checkpoint of the agent's checkout changed since the one before it (its ID in "
        "`exo checkpoints`), instead of the branch.",
    },
)
def diff(env: Env, *, agent: str, stat: bool = False, name_only: bool = False,
         checkpoint: Annotated[int, Range(1)] | None = None) -> DiffResult:
    """Show an agent's branch against its base branch: what its pull request would merge.

    A three-dot diff (`git diff BASE...BRANCH`: the changes since the branch left its base,
    whatever moved on the base since). The base is the agent's recorded parent branch.
    With {--stat} or {--name_only}, only the files changed (with their line counts). With
    {--checkpoint}, what that checkpoint of the agent's checkout changed since the one before it.
    An agent with no branch, or whose branch is gone, is an error.
    """
    from exo_cli.ops.branches import base_branch, base_ref

    if stat and name_only:
        raise InvalidInput("Give --stat or --name-only, not both", field="name_only")
    if checkpoint is not None:
        return _checkpoint_diff(env, agent, checkpoint, patch=not (stat or name_only))
    rec = env.store.agent(agent) if env.has_state() else None
    if rec is None:
        raise NotFound(f"No agent named {agent!r}", hint="List agents with `exo agents`.", agent=agent)
    if not rec.branch:
        raise StateError(f"Agent {rec.id} has no branch of its own", agent=rec.id)
    from exo_cli.ops import checkout

    checkout.sync_owners(env, [rec.branch])  # an agent's clone: its branch as the clone has it
    base = base_branch(env, rec, rec.branch)
    ref = base_ref(rec, base)
    git = Git(env.repo.root)
    for name, full in ((rec.branch, f"refs/heads/{rec.branch}"), (base, ref)):
        if not git.ref_exists(full):
            raise StateError(f"Branch {name} does not exist", hint="`exo doctor` reconciles the records.",
                             agent=rec.id, branch=name)
    return branch_diff(git, head=rec.branch, base=base, agent=rec.id,
                       revs=[f"{ref}...refs/heads/{rec.branch}"], patch=not (stat or name_only))


def _checkpoint_diff(env: Env, agent: str, n: int, *, patch: bool) -> DiffResult:
    """Checkpoint ``n`` of ``agent`` against the checkpoint before it (or the commit it was taken on)."""
    from exo_cli.ops.checkpoints import check_access, find_agent, shadow_of

    rec = find_agent(env, agent)
    check_access(env, rec, "see the checkpoints of")
    history = shadow_of(env, rec).history()
    hit = next((c for c in history if c.n == n), None)
    if hit is None:
        raise NotFound(f"{rec.id} has no checkpoint {n}", hint=f"List them with `exo checkpoints {rec.id}`.",
                       agent=rec.id, checkpoint=n)
    git = Git(env.repo.root)
    older = [c for c in history if c.n < n]
    before = older[-1].commit if older else None
    label = f"checkpoint {older[-1].n}" if older else None
    if before is None and isinstance(hit.meta.get("head"), str) and git.rev(hit.meta["head"]):
        before, label = hit.meta["head"], f"commit {hit.meta['head'][:12]}"
    if before is None:  # the first checkpoint of a checkout with no commit: everything is new
        before = git.run(["hash-object", "-t", "tree", "-w", "--stdin"], input=b"").stdout.strip()
        label = "nothing"
    return branch_diff(git, head=f"checkpoint {n}", base=str(label), agent=rec.id, revs=[before, hit.commit],
                       patch=patch)
