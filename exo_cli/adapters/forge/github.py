"""The GitHub forge: ``git push`` plus the ``gh`` CLI with the user's own authentication.

Every ``gh`` call passes ``--repo HOST/OWNER/REPO`` taken from the ``forge.remote`` remote's
configured URL, so ``gh`` never guesses the repository; the runner is injectable so the
poller and tests can stand in for the real binary.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from exo_cli.adapters.forge.base import (
    BaseSync,
    Filed,
    Forge,
    GhRunner,
    MergeOutcome,
    RemoteState,
    github_slug,
)
from exo_cli.errors import EnvironmentError_, ExternalFailure, StateError, external

if TYPE_CHECKING:
    import subprocess

    from exo_cli.adapters.git import Git
    from exo_cli.records import PullRequest

VIEW_FIELDS = "number,url,state,isDraft,reviewDecision,latestReviews,statusCheckRollup,mergedAt,mergeCommit"
_FAILED = {"FAILURE", "TIMED_OUT", "CANCELLED", "ACTION_REQUIRED", "STARTUP_FAILURE", "ERROR", "STALE"}
_PENDING = {"PENDING", "EXPECTED", "QUEUED", "IN_PROGRESS", "WAITING", "REQUESTED"}


def run_gh(argv: Sequence[str], cwd: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the real ``gh`` (never prompting) and return the finished process."""
    from exo_cli.adapters.proc import run

    env = dict(environ)
    env.setdefault("GH_PROMPT_DISABLED", "1")
    env.setdefault("GH_NO_UPDATE_NOTIFIER", "1")
    env.setdefault("NO_COLOR", "1")
    return run(["gh", *argv], what=f"gh {' '.join(argv[:2])}", cwd=cwd, env=env, check=False)


def checks_state(rollup: Any) -> str | None:
    """Summarize ``statusCheckRollup`` (check runs and status contexts): pending, failure, success."""
    if not rollup:
        return None
    states = []
    for item in rollup:
        status = (item.get("status") or "").upper()
        conclusion = (item.get("conclusion") or item.get("state") or "").upper()
        if status and status != "COMPLETED":
            states.append("pending")
        elif conclusion in _FAILED:
            states.append("failure")
        elif conclusion in _PENDING or not conclusion:
            states.append("pending")
        else:
            states.append("success")
    if "failure" in states:
        return "failure"
    if "pending" in states:
        return "pending"
    return "success"


def parse_view(data: dict[str, Any]) -> RemoteState:
    """A ``gh pr view --json`` object as a RemoteState."""
    state = (data.get("state") or "OPEN").lower()
    review = (data.get("reviewDecision") or "").lower() or None
    merge = data.get("mergeCommit") or {}
    return RemoteState(
        state=state if state in ("open", "merged", "closed") else "open",
        review=review,
        checks=checks_state(data.get("statusCheckRollup")),
        reviews=len(data.get("latestReviews") or []),
        merge_commit=merge.get("oid") if isinstance(merge, dict) else None,
        merged_at=data.get("mergedAt"),
        draft=bool(data.get("isDraft")),
        url=data.get("url"),
        raw=data,
    )


# What git push prints when the remote has commits the branch lacks, refuses the credentials, or
# cannot be reached (first match wins: an SSH key refused also says "Could not read from remote").
_REJECTED = ("[rejected]", "non-fast-forward", "fetch first", "updates were rejected")
_REFUSED = ("authentication failed", "permission denied", "could not read username", "returned error: 401",
            "returned error: 403", "invalid username or password")
# A push refused for the branch itself, whatever the commits: no entry of a batch could land alone either
# (GitHub's protected branch GH006: required reviews or checks, restricted pushers; no right to push at all).
_BRANCH_REFUSALS = ("gh006", "protected branch", "not allowed to push", "not authorized to push", "permission to push",
                    *_REFUSED)
_UNREACHABLE = ("could not resolve host", "failed to connect", "connection refused", "connection timed out",
                "timed out after", "network is unreachable", "no route to host", "temporary failure in name resolution",
                "name or service not known", "could not read from remote repository", "connection reset",
                "ssh: connect to host")


def push_failure(remote: str, branch: str, proc: Any) -> ExternalFailure:
    """The error of a failed ``git push``, with a hint that fits why it failed."""
    text = f"{proc.stderr or ''}\n{proc.stdout or ''}".lower()
    if any(s in text for s in _REJECTED):
        return external("git push", proc, hint=f"{remote} has commits that {branch} lacks: fetch and rebase onto "
                        f"{remote}/{branch}, then file again.", reason="rejected")
    if any(s in text for s in _REFUSED):
        return external("git push", proc, hint=f"{remote} refused your credentials: check `gh auth status` (or "
                        "your SSH key), then file again.", reason="refused")
    if any(s in text for s in _UNREACHABLE):
        err = external("git push", proc, hint="Check your network connection and the remote's address "
                       "(`git remote -v`), then file again; nothing was pushed or filed.", reason="unreachable")
        err.message = f"The remote {remote!r} is unreachable: {err.message.removeprefix('git push failed: ')}"
        err.args = (err.message,)
        return err
    return external("git push", proc, hint="Nothing was filed; fix what git reports, then file again.")


class GitHubForge(Forge):
    """Pull requests on GitHub through ``gh``."""

    kind = "github"

    def __init__(self, git: Git, *, remote: str = "origin", runner: GhRunner | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        super().__init__(git)
        self.remote = remote
        self.runner: GhRunner = runner or run_gh
        self.environ = environ

    # -- helpers ---------------------------------------------------------------------------
    def slug(self) -> str:
        url = self.git.remote_url(self.remote)
        slug = github_slug(url or "")
        if not slug:
            raise EnvironmentError_(
                f"The remote {self.remote!r} is not a GitHub repository ({url or 'not set'})",
                hint="Set forge.remote to a GitHub remote, or forge.kind = \"local\" in exo.toml.",
                remote=self.remote, url=url,
            )
        return slug

    def gh(self, argv: Sequence[str], *, what: str) -> subprocess.CompletedProcess[str]:
        proc = self.runner(list(argv), self.git.path, dict(os.environ if self.environ is None else self.environ))
        if proc.returncode != 0:
            raise external(what, proc, hint="Check `gh auth status` and the repository's remote.")
        return proc

    def push(self, branch: str, worktree: str | None) -> None:
        git = self.git.at(worktree) if worktree else self.git
        proc = git.push(self.remote, branch)
        if proc.returncode != 0:
            raise push_failure(self.remote, branch, proc)

    # -- the interface ---------------------------------------------------------------------
    def file(self, *, head: str, base: str, title: str, body: str, draft: bool,
             existing: PullRequest | None, worktree: str | None) -> Filed:
        slug = self.slug()
        self.push(head, worktree)
        if existing is not None and existing.remote_number:
            self.gh(["pr", "edit", str(existing.remote_number), "--repo", slug, f"--title={title}",
                          f"--body={body}"], what="gh pr edit")
            return Filed(url=existing.url, remote_number=existing.remote_number, pushed=True)
        base_pushed = self.push_base(base)
        argv = ["pr", "create", "--repo", slug, f"--base={base}", f"--head={head}", f"--title={title}", f"--body={body}"]
        if draft:
            argv.append("--draft")
        out = self.gh(argv, what="gh pr create").stdout
        urls = re.findall(r"https?://\S+/pull/(\d+)", out)
        url = next((w for w in out.split() if re.search(r"/pull/\d+$", w)), None)
        return Filed(url=url, remote_number=int(urls[-1]) if urls else None, pushed=True, base_pushed=base_pushed)

    def push_base(self, base: str) -> bool:
        """Push ``base`` when the remote lacks it (a team lead's branch nobody pushed): GitHub needs it for a PR."""
        if self.git.remote_has_branch(self.remote, base) is not False:
            return False
        proc = self.git.push(self.remote, base)
        if proc.returncode != 0:
            raise external("git push", proc, hint=f"The base branch {base} is not on {self.remote}; push it, then file again.")
        return True

    def merge(self, pr: PullRequest, *, strategy: str, message: str, head_ref: str | None = None) -> MergeOutcome:
        if not pr.remote_number:
            raise StateError(f"PR #{pr.number} has no GitHub number", pr=pr.number)
        slug = self.slug()
        number = str(pr.remote_number)
        self.gh(["pr", "merge", number, "--repo", slug, "--squash" if strategy == "squash" else "--merge"],
                what="gh pr merge")
        state = self.view(pr)
        if state is not None and state.state != "merged":
            raise StateError(f"GitHub did not merge PR #{pr.number} (state {state.state})",
                             hint="Look at the PR on GitHub (required reviews or checks?).", pr=pr.number)
        sync = self.sync_base(pr.base, reason=f"exo: PR #{pr.number} merged on GitHub")
        merge = (state.merge_commit if state else None) or sync.head or ""
        return MergeOutcome(merge_commit=merge, base_worktree=sync.worktree, local_updated=sync.updated,
                            warnings=sync.warnings)

    def sync_base(self, base: str, *, reason: str) -> BaseSync:
        """Fetch ``base`` from the remote and fast-forward the local branch (and its checkout) to it.

        Never forced: a local base with commits the remote lacks, or a checkout with modified
        files, is left as it is (a warning says why). ExternalFailure when the fetch fails.
        """
        git = self.git
        tracking = f"refs/remotes/{self.remote}/{base}"
        proc = git.fetch(self.remote, f"+refs/heads/{base}:{tracking}")
        if proc.returncode != 0:
            raise external("git fetch", proc, hint=f"Run `git pull` in the worktree of {base}.")
        new = git.rev(tracking) or ""
        old = git.rev(f"refs/heads/{base}")
        warnings: list[str] = []
        wt = None
        updated = moved = False
        if old is None:
            warnings.append(f"no local branch {base}; nothing to update")
        elif old == new:
            updated = True
        elif not git.is_ancestor(old, new):
            moved = self._replay_tracker_commits(base, old, new, warnings)
            updated = moved
            wt = git.worktree_of(base) if moved else None
        else:
            try:
                wt = git.fast_forward(base, old, new, reason=reason, what=f"update the local {base}")
                updated = moved = True
            except StateError as exc:
                warnings.append(f"merged on GitHub, but the local {base} was not updated: {exc.message}")
        return BaseSync(base=base, updated=updated, moved=moved, head=new or None, worktree=wt, warnings=warnings)

    def _replay_tracker_commits(self, base: str, old: str, new: str, warnings: list[str]) -> bool:
        """Put exo's own tracker commits of the local ``base`` (beads kept in git, claims and closes
        committed by exo) on top of the fetched ``new``, in the checkout of ``base``: True when done.

        Only when every commit the remote lacks is one of those (subject ``beads: ...``, files under
        ``.beads/`` only) and that checkout is clean; a conflict is aborted (the branch and files
        stay exactly as they were). Anything else is left as it is, with a warning.
        """
        git = self.git
        lacks = f"local {base} has commits that {self.remote}/{base} lacks"
        subjects = git.log(f"{new}..{old}", "%s")
        files = _lines_of(git.run(["diff", "--name-only", f"{new}...{old}"], check=False).stdout)
        if not subjects or not all(s.startswith("beads: ") for s in subjects) or \
                not all(f.startswith(".beads/") for f in files):
            warnings.append(f"{lacks}; not updated")
            return False
        wt = git.worktree_of(base)
        if wt is None:
            warnings.append(f"{lacks} (exo's tracker commits) and no checkout to replay them in; not updated")
            return False
        from exo_cli.adapters.gitdir import git_dir_of, operations

        there = git.at(wt)
        git_dir = git_dir_of(wt)
        busy = operations(git_dir) if git_dir is not None else []
        if busy or there.tracked_changes(check=False):
            why = f"a {busy[0]} is in progress there" if busy else "it has modified files"
            warnings.append(f"{lacks} (exo's tracker commits) and {wt}: {why}; not updated")
            return False
        proc = there.rebase(new)
        if proc.returncode != 0:
            if "already a rebase" not in proc.stderr + proc.stdout:  # never abort a rebase someone else began
                there.rebase_abort()
            warnings.append(f"{lacks}: exo's tracker commits could not be replayed on {self.remote}/{base}; "
                            "not updated")
            return False
        return True

    # -- the merge queue (issue 34) -------------------------------------------------------------
    def land(self, base: str, commit: str) -> None:
        """Move ``base`` on the remote to ``commit`` by a fast-forward push from this repository (never forced).

        StateError ``reason="base-moved"`` when the remote's base has commits ``commit`` lacks (rebuild and
        test again), ``reason="push-refused"`` with git's own message when the remote refused it, and
        ``scope``: ``"branch"`` when the refusal is about the branch whatever it is given (a protected
        branch, no right to push), ``"commits"`` otherwise (a pre-receive hook or a rule that looks at
        the commits pushed); ExternalFailure when the remote cannot be reached.
        """
        proc = self.git.push_commit(self.remote, commit, base)
        if proc.returncode == 0:
            return
        said = f"{proc.stderr or ''}\n{proc.stdout or ''}".strip()
        text = said.lower()
        if any(s in text for s in _UNREACHABLE):
            raise push_failure(self.remote, base, proc)
        moved = any(s in text for s in ("non-fast-forward", "fetch first")) and "declined" not in text
        scope = "branch" if any(s in text for s in _BRANCH_REFUSALS) else "commits"
        raise StateError(f"{self.remote} refused the push of {commit[:12]} to {base}: {said}",
                         hint="It landed nowhere.", reason="base-moved" if moved else "push-refused",
                         base=base, commit=commit, git=said, scope=scope)

    def close_landed(self, pr: PullRequest, commit: str) -> None:
        """Close ``pr`` on GitHub with a comment naming ``commit``, the squash exo's merge queue landed it as
        (GitHub marks a PR merged only when its head is in the base); nothing when it is closed already."""
        if not pr.remote_number:
            return
        state = self.view(pr)
        if state is None or state.state != "open":
            return
        self.gh(["pr", "close", str(pr.remote_number), "--repo", self.slug(),
                 f"--comment=Landed by exo's merge queue as {commit} (squashed into {pr.base})."],
                what="gh pr close")

    def set_status(self, commit: str, state: str, description: str) -> None:
        """Show the merge queue's state of a PR as the commit status ``exo/merge-queue`` of ``commit``
        (``state``: pending, success, failure or error)."""
        host, owner, name = self.slug().split("/", 2)
        self.gh(["api", "--hostname", host, "--method", "POST", f"repos/{owner}/{name}/statuses/{commit}",
                 "-f", f"state={state}", "-f", "context=exo/merge-queue", "-f", f"description={description[:140]}"],
                what="gh api statuses")

    def view(self, pr: PullRequest) -> RemoteState | None:
        if not pr.remote_number:
            return None
        proc = self.gh(["pr", "view", str(pr.remote_number), "--repo", self.slug(), "--json", VIEW_FIELDS],
                       what="gh pr view")
        try:
            data = json.loads(proc.stdout)
        except ValueError as exc:
            raise ExternalFailure(f"gh pr view printed something that is not JSON: {proc.stdout[:200]!r}") from exc
        return parse_view(data)


def _lines_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]
