"""The one git client: every git command exo runs, as a named method of ``Git`` (argv only, no shell).

``Git(path)`` stands for one repository folder (the main checkout, a linked worktree, or a
bare repository) and is built from plain values; nothing here knows about exo's ``Env``.
Each method runs one git command (two at most) through the one runner, ``Git.run``, which
spawns ``git -C <path> ...`` with ``os.posix_spawn`` (``gitrun.run_git``): the hooks and
``exo status`` run git on every call, and importing ``subprocess`` costs more than the git call
itself. Every call runs with git's hooks off, a deadline that ends every process it started, and
no lock file of its own left behind (see ``gitrun``); push, fetch and ls-remote are in
``gitremote``, whose push uploads Git LFS objects first.

No git library is used (GitPython was measured slower on every path exo has; see
docs/architecture.md, "Why exo runs the git binary").

``add_exclude`` and ``remove_exclude`` (from ``gitdir``, re-exported) edit ``info/exclude`` (a file, no git process). ``git``, ``current_branch`` and
``ref_exists`` remain for callers not yet converted to the client; each is one line over it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from exo_cli.adapters.gitdir import add_exclude, remove_exclude  # files beside git: info/exclude
from exo_cli.adapters.gitformats import (
    MergeTree,
    RepoInfo,
    Snapshot,
    Worktree,
    parse_changes,
    parse_status,
    parse_worktrees,
)
from exo_cli.adapters.gitremote import Remotes
from exo_cli.adapters.gitrun import NO_EDITOR, Finished, run_git
from exo_cli.errors import EnvironmentError_, StateError, external


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line]


# --------------------------------------------------------------------------- the client


class Git(Remotes):
    """git in one folder: ``Git(path)``; ``environ`` replaces ``os.environ`` for the processes."""

    def __init__(self, path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None,
                 timeout: float = 120) -> None:
        self.path = os.fspath(path)
        self.environ = environ
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"Git({self.path!r})"

    def at(self, path: str | os.PathLike[str]) -> Git:
        """The same client for another folder (a worktree of the same repository, say)."""
        return Git(path, environ=self.environ, timeout=self.timeout)

    # -- the runner ------------------------------------------------------------------------------
    def _exec(self, args: Sequence[str], *, input: str | bytes | None = None, env: Mapping[str, str] | None = None,
              timeout: float | None = None) -> tuple[list[str], int, bytes, bytes]:
        data = input.encode() if isinstance(input, str) else input
        return run_git(self.path, args, self.environ, input=data, env=env,
                       timeout=self.timeout if timeout is None else timeout)

    def run(self, args: Sequence[str], *, check: bool = True, input: str | bytes | None = None,
            env: Mapping[str, str] | None = None, timeout: float | None = None) -> Finished:
        """Run ``git args`` here; raise ExternalFailure when it fails and ``check``."""
        argv, code, out, err = self._exec(args, input=input, env=env, timeout=timeout)
        proc = Finished(argv, code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
        if check and code != 0:
            raise external(f"git {args[0]}", proc)
        return proc

    def out(self, args: Sequence[str]) -> str:
        """The stripped stdout of ``git args`` (ExternalFailure when it fails)."""
        return self.run(args).stdout.strip()

    def _maybe(self, args: Sequence[str]) -> str | None:
        proc = self.run(args, check=False)
        return (proc.stdout.strip() or None) if proc.ok else None

    # -- discovery -------------------------------------------------------------------------------
    def discover(self) -> RepoInfo:
        """Find the repository around this folder with one git call; EnvironmentError outside one."""
        proc = self.run(["rev-parse", "--path-format=absolute", "--show-toplevel", "--git-common-dir",
                         "--git-dir"], check=False)
        if proc.returncode != 0:
            raise EnvironmentError_(
                f"Not in a git repository: {self.path}",
                hint="Run exo inside a git repository (or pass -C PATH).",
                cwd=self.path,
            )
        lines = proc.stdout.splitlines()
        if len(lines) < 3:
            raise EnvironmentError_(f"Not in a git work tree: {self.path}",
                                    hint="exo needs a repository with a work tree.")
        top, common, gdir = (Path(x) for x in lines[:3])
        root = common.parent if common.name == ".git" else Path(self.at(top).main_worktree() or top)
        return RepoInfo(toplevel=top, common_dir=common, git_dir=gdir, root=root)

    def toplevel(self) -> str | None:
        """The top of the work tree this folder is in, or None (not in one)."""
        return self._maybe(["rev-parse", "--show-toplevel"])

    def current_branch(self) -> str | None:
        """The branch checked out here; None on a detached HEAD."""
        return self.run(["symbolic-ref", "--quiet", "--short", "HEAD"], check=False).stdout.strip() or None

    def rev(self, ref: str) -> str | None:
        """The commit ``ref`` names, or None."""
        return self.run(["rev-parse", "--verify", "--quiet", ref + "^{commit}"], check=False).stdout.strip() or None

    def ref_exists(self, ref: str) -> bool:
        """Whether ``ref`` names a commit."""
        return self.rev(ref) is not None

    def resolve(self, name: str) -> str | None:
        """The object ``name`` names, unpeeled (``rev-parse --verify``), or None."""
        return self.run(["rev-parse", "--verify", "--quiet", name], check=False).stdout.strip() or None

    def tree(self, rev: str) -> str | None:
        """The tree of commit ``rev``, or None."""
        return self._maybe(["rev-parse", f"{rev}^{{tree}}"])

    def upstream(self, branch: str) -> str | None:
        """The upstream of ``branch`` (``origin/x``), or None without one."""
        return self._maybe(["rev-parse", "--abbrev-ref", f"{branch}@{{upstream}}"])

    def refs_under(self, prefix: str) -> list[tuple[str, str]]:
        """(ref, commit) of every ref under ``prefix`` (``refs/exo/archive/``)."""
        out = self.run(["for-each-ref", "--format=%(refname) %(objectname)", prefix]).stdout
        return [(ref, sha) for ref, _, sha in (line.partition(" ") for line in _lines(out))]

    def branches(self) -> list[str]:
        """Every local branch name."""
        return _lines(self.run(["for-each-ref", "--format=%(refname:short)", "refs/heads/"]).stdout)

    # -- config and identity ---------------------------------------------------------------------
    def config_get(self, key: str) -> str | None:
        """The value of ``key`` as written in git config (None when unset)."""
        return self.run(["config", "--get", key], check=False).stdout.strip() or None

    def config_set(self, key: str, value: str) -> None:
        """Set ``key`` in this repository's config."""
        self.run(["config", key, value])

    def config_matching(self, pattern: str) -> list[tuple[str, str]]:
        """(key, value) of every config entry whose key matches the regular expression, lowest level first."""
        out = []
        for line in self.run(["config", "--get-regexp", pattern], check=False).stdout.splitlines():
            key, _, value = line.partition(" ")
            out.append((key, value))
        return out

    def remote_url(self, remote: str) -> str | None:
        """The configured URL of ``remote`` (before any insteadOf rewriting)."""
        return self.config_get(f"remote.{remote}.url")

    def has_identity(self) -> bool:
        """Whether git knows a committer name and e-mail here."""
        return self.run(["var", "GIT_COMMITTER_IDENT"], check=False).ok

    # -- status ------------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """Branch, head, upstream, ahead/behind and changed files: one ``git status`` call."""
        return parse_status(self.run(["status", "--porcelain=v2", "--branch", "--untracked-files=all"]).stdout)

    def status_porcelain(self) -> list[str]:
        """``git status --porcelain`` lines (modified, staged and untracked files)."""
        return _lines(self.run(["status", "--porcelain=v1", "--untracked-files=all"]).stdout)

    def tracked_changes(self, *, check: bool = True) -> list[str]:
        """Modified or staged tracked files (untracked files excluded), as porcelain lines."""
        return _lines(self.run(["status", "--porcelain=v1", "--untracked-files=no"], check=check).stdout)

    def untracked(self) -> list[str]:
        """Untracked files that are not ignored (any name, newlines included)."""
        return [p for p in self.run(["ls-files", "--others", "--exclude-standard", "-z"]).stdout.split("\0") if p]

    def changes(self) -> list[tuple[str, str]]:
        """(XY, path) of every modified, staged and untracked entry (``status --porcelain -z``, any name).

        A rename's path reads ``old -> new``; a nested repository shows as one untracked
        entry ending in ``/`` (git does not look inside it).
        """
        return parse_changes(self.run(["status", "--porcelain=v1", "-z", "--untracked-files=all"]).stdout)

    def ignored(self) -> list[str]:
        """Ignored files here; a folder that is ignored as a whole is one entry ending in ``/``."""
        proc = self.run(["ls-files", "--others", "--ignored", "--exclude-standard", "--directory", "-z"])
        return [p for p in proc.stdout.split("\0") if p]

    def gitlinks(self) -> list[str]:
        """Paths of the submodules (gitlinks) in this checkout's index."""
        out = []
        for entry in self.run(["ls-files", "--stage", "-z"]).stdout.split("\0"):
            meta, _, path = entry.partition("\t")
            if meta.startswith("160000 ") and path:
                out.append(path)
        return out

    def tracked(self) -> set[str]:
        """Every path in this checkout's index."""
        return {p for p in self.run(["ls-files", "-z"]).stdout.split("\0") if p}

    def in_the_way(self, onto: str) -> list[str]:
        """Untracked or ignored files here that rebasing HEAD onto ``onto`` would overwrite or delete.

        git refuses to overwrite an untracked file, but overwrites an *ignored* one without a
        word (a ``.env`` the parent branch now tracks, say). The paths at risk are those the
        rebase writes: every path ``onto`` and HEAD differ in, and every path a commit being
        replayed touches. A path the index does not track that exists here (or a file where
        the rebase needs a folder) is in the way.
        """
        paths = set(self.run(["diff", "--name-only", "--no-renames", "-z", "HEAD", onto]).stdout.split("\0"))
        paths |= set(self.run(["log", "--name-only", "--no-renames", "-z", "--format=", f"{onto}..HEAD"]).stdout
                     .replace("\n", "\0").split("\0"))
        paths.discard("")
        if not paths:
            return []
        tracked = self.tracked()
        found: set[str] = set()
        for rel in paths:
            if rel in tracked:
                continue
            full = os.path.join(self.path, rel)
            if os.path.lexists(full):
                found.add(rel)
                continue
            parts = rel.split("/")
            for n in range(1, len(parts)):
                parent = "/".join(parts[:n])
                here = os.path.join(self.path, parent)
                if os.path.lexists(here) and (os.path.islink(here) or not os.path.isdir(here)) \
                        and parent not in tracked:
                    found.add(parent)
                    break
        return sorted(found)

    def conflicted_files(self) -> list[str]:
        """Files with unresolved conflicts (during a merge or rebase)."""
        return self.run(["diff", "--name-only", "--diff-filter=U"], check=False).stdout.split()

    def is_tracked(self, relpath: str) -> bool:
        """Whether ``relpath`` is in this worktree's index."""
        proc = self.run(["ls-files", "--full-name", "--error-unmatch", "--", relpath], check=False)
        return proc.ok and bool(proc.stdout.strip())

    def skip_worktree(self, relpath: str, on: bool = True, *, check: bool = True) -> None:
        """Set (or clear) the skip-worktree bit of ``relpath`` in this worktree's index."""
        flag = "--skip-worktree" if on else "--no-skip-worktree"
        self.run(["update-index", flag, "--", relpath], check=check)

    # -- history -------------------------------------------------------------------------------------
    def ahead_behind(self, ref: str, base: str) -> tuple[int, int] | None:
        """Commits ``ref`` has that ``base`` lacks, and the reverse; None when a ref is missing."""
        proc = self.run(["rev-list", "--left-right", "--count", f"{ref}...{base}"], check=False)
        if proc.returncode != 0:
            return None
        left, right = proc.stdout.split()
        return int(left), int(right)

    def count(self, revs: str) -> int:
        """How many commits ``revs`` (``a..b``) lists; 0 when a ref is missing."""
        proc = self.run(["rev-list", "--count", revs], check=False)
        return int(proc.stdout.strip() or 0) if proc.ok else 0

    def has_commits_not_in(self, rev: str, other: str) -> bool:
        """Whether ``rev`` has a commit that ``other`` lacks (``other`` is behind it)."""
        return bool(self.run(["rev-list", "-1", rev, "--not", other], check=False).stdout.strip())

    def log(self, revs: str, fmt: str, *, reverse: bool = False, check: bool = False) -> list[str]:
        """One formatted line per commit of ``revs`` (oldest first with ``reverse``); empty when a ref is missing."""
        proc = self.run(["log", *(["--reverse"] if reverse else []), f"--format={fmt}", revs], check=check)
        return _lines(proc.stdout) if proc.ok else []

    def subject(self, rev: str) -> str:
        """The subject line of commit ``rev``."""
        return self.out(["log", "-1", "--format=%s", rev])

    def is_ancestor(self, ancestor: str, rev: str) -> bool:
        """Whether ``ancestor`` is reachable from ``rev`` (``merge-base --is-ancestor``)."""
        return self.run(["merge-base", "--is-ancestor", ancestor, rev], check=False).ok

    def _merge_tree(self, base: str, head: str) -> Finished:
        return self.run(["merge-tree", "--write-tree", "--name-only", "--no-messages", base, head], check=False)

    def merge_tree(self, base: str, head: str) -> MergeTree:
        """Merge ``head`` into ``base`` without touching any checkout (git 2.38+): the tree or the conflicts."""
        proc = self._merge_tree(base, head)
        lines = proc.stdout.splitlines()
        if proc.returncode == 1:
            return MergeTree(None, [ln for ln in lines[1:] if ln])
        if proc.returncode != 0 or not lines:
            raise external("git merge-tree", proc, hint="exo needs git 2.38 or newer to merge.")
        return MergeTree(lines[0].strip(), [])

    def cherry(self, upstream: str, head: str) -> list[str]:
        """``git cherry``: "+ sha" / "- sha" per commit of ``head`` (- : its patch is in ``upstream``)."""
        proc = self.run(["cherry", upstream, head], check=False)
        return _lines(proc.stdout) if proc.ok else []

    def merged_by_content(self, rev: str, base: str) -> bool:
        """Whether every change of ``rev`` is already in ``base``: ancestry, merged tree, or patch-ids.

        A squash-merged branch counts as merged: merging it into ``base`` changes nothing, or
        each of its commits has an equivalent patch in ``base``.
        """
        if not self.has_commits_not_in(rev, base):
            return True
        proc = self._merge_tree(base, rev)
        if proc.ok and proc.stdout.split()[:1] == [self.tree(base) or ""]:
            return True
        cherry = self.cherry(base, rev)
        return bool(cherry) and all(ln.startswith("-") for ln in cherry)

    def commits_among(self, names: Iterable[str]) -> set[str]:
        """Which of the object ``names`` are commits that exist here."""
        wanted = [n for n in dict.fromkeys(names) if n]
        if not wanted:
            return set()
        proc = self.run(["cat-file", "--batch-check=%(objectname) %(objecttype)"], input="\n".join(wanted) + "\n",
                        check=False)
        return {ln.split()[0] for ln in proc.stdout.splitlines() if ln.endswith(" commit")}

    def ref_tips(self, *, but: str | None = None) -> list[str]:
        """The object every ref points at (branches, tags, remotes, exo's archives, notes, the stash...), but the
        refs under ``but`` (a prefix such as ``refs/exo/clones/w1/``)."""
        if but is None:
            return _lines(self.run(["for-each-ref", "--format=%(objectname)"]).stdout)
        rows = _lines(self.run(["for-each-ref", "--format=%(objectname) %(refname)"]).stdout)
        return [oid for oid, _, ref in (r.partition(" ") for r in rows) if not ref.startswith(but)]

    def unreachable_from_refs(self, tips: Iterable[str], *, but: str | None = None) -> list[str]:
        """Commits reachable from ``tips`` that no ref reaches (newest first): what would be lost with them.
        Refs under ``but`` do not count (they go with what is being removed)."""
        tips = [t for t in dict.fromkeys(tips) if t]
        if not tips:
            return []
        lines = tips + [f"^{sha}" for sha in dict.fromkeys(self.ref_tips(but=but))]
        proc = self.run(["rev-list", "--stdin"], input="\n".join(lines) + "\n")
        return _lines(proc.stdout)

    def describe(self, shas: Sequence[str]) -> list[str]:
        """"sha subject" of each commit of ``shas``, in that order."""
        if not shas:
            return []
        proc = self.run(["log", "--no-walk=unsorted", "--format=%h %s", "--stdin"], input="\n".join(shas) + "\n",
                        check=False)
        return _lines(proc.stdout) if proc.ok else list(shas)

    def bundle_all(self, path: str | os.PathLike[str]) -> Finished:
        """Write every ref of this repository and their history to the bundle file ``path``."""
        return self.run(["bundle", "create", os.fspath(path), "--all"], check=False, timeout=3600)

    def blob(self, rev: str, path: str) -> bytes | None:
        """The exact bytes of ``rev:path``, or None when it has no such file."""
        _, code, out, _ = self._exec(["cat-file", "blob", f"{rev}:{path}"])
        return out if code == 0 else None

    # -- writing objects and refs ----------------------------------------------------------------------
    def take_objects(self, commit: str, source: str) -> int:
        """Copy into this repository's own store every object ``commit`` has and its parents do not that the store
        lacks, read from object folder ``source`` (exo's copy of an agent's clone's); how many. git writes no
        object it finds in an alternate, so a commit exo wrote while reading a clone (a checkpoint, an archived
        stash of staged files) can name objects only the clone has, lost with it. ``unpack-objects`` checks each."""
        total, before = 0, None
        while True:  # a missing tree hides what it holds: again, until nothing is missing
            listed = self.run(["rev-list", "--objects", "--missing=print", commit, "--not", f"{commit}^@", "--"])
            missing = [line[1:] for line in listed.stdout.splitlines() if line.startswith("?")]
            if not missing:
                return total
            if missing == before:  # copied, yet still missing: their bytes are not what their names say
                raise StateError(f"{len(missing)} object(s) of {commit} could not be copied from {source} (they "
                                 "are damaged there)", commit=commit, objects=missing[:20], reason="damaged-objects")
            before = missing
            args, code, pack, err = self._exec(["pack-objects", "--stdout", "-q"], input="\n".join(missing) + "\n",
                                               env={"GIT_ALTERNATE_OBJECT_DIRECTORIES": source})
            proc = self.run(["unpack-objects", "-q"], input=pack, check=False) if code == 0 else None
            if proc is None or not proc.ok:
                raise external("git pack-objects | unpack-objects (objects of an agent's clone)", proc or Finished(
                    args, code, "", err.decode("utf-8", "replace")))
            total += len(missing)
        return total

    def commit_tree(self, tree: str, parents: Iterable[str], message: str) -> str:
        """Write a commit of ``tree`` with ``parents`` (no ref moves); its sha."""
        args = ["commit-tree", tree]
        for p in parents:
            args += ["-p", p]
        return self.run([*args, "-F", "-"], input=message).stdout.strip()

    def stash_create(self, message: str) -> str | None:
        """A stash commit of the tracked changes (index and work tree), or None when clean; nothing moves."""
        return self.out(["stash", "create", message]) or None

    def tree_of_files(self, paths: Sequence[str]) -> str:
        """A tree holding exactly ``paths`` as they are on disk here (a private index; the real one untouched)."""
        import tempfile

        fd, index = tempfile.mkstemp(prefix="exo-index-")
        os.close(fd)
        os.unlink(index)
        try:
            env = {"GIT_INDEX_FILE": index}
            self.run(["update-index", "--add", "-z", "--stdin"], input="".join(p + "\0" for p in paths), env=env)
            return self.run(["write-tree"], env=env).stdout.strip()
        finally:
            try:
                os.unlink(index)
            except OSError:
                pass

    def wip_commit(self, message: str, *, label: str) -> str | None:
        """A stash-shaped commit of this worktree's uncommitted work, untracked files included; None when clean.

        Parents: HEAD, the index, and (when there are untracked files) a commit of the
        untracked files alone, exactly like ``git stash -u`` (``label`` names the parts as
        ``git stash`` does); so ``git stash apply --index <sha>`` restores it. Writes objects
        only: the worktree, index and stash list are untouched. When git cannot stash (see
        ``save_work``) the commit is a snapshot instead.
        """
        saved = self.save_work(message, label=label)
        return saved[0] if saved else None

    def save_work(self, message: str, *, label: str) -> tuple[str, str] | None:
        """(commit, "stash" or "snapshot") of the uncommitted work here, untracked files included; None when clean.

        "stash": the stash-shaped commit of ``wip_commit``. "snapshot": ``snapshot_commit``,
        when git cannot stash this checkout (a merge or rebase stopped on conflicts, or no
        commit yet). Nested repositories are left out (they are not files of this repository).
        """
        head = self.rev("HEAD")
        untracked = [p for p in self.untracked() if not p.endswith("/")]
        proc = self.run(["stash", "create", label], check=False) if head else None
        if head is None or proc is None or proc.returncode != 0:
            if not self.tracked_changes(check=False) and not untracked:
                return None
            return self.snapshot_commit(message, head=head, untracked=untracked), "snapshot"
        stash = proc.stdout.strip() or None
        if not stash and not untracked:
            return None
        if stash:
            index = self.out(["rev-parse", f"{stash}^2"])
            work_tree = self.out(["rev-parse", f"{stash}^{{tree}}"])
        else:
            work_tree = self.out(["rev-parse", "HEAD^{tree}"])
            index = self.commit_tree(work_tree, [head], f"index on {label}\n")
        parents = [head, index]
        if untracked:
            parents.append(self.commit_tree(self.tree_of_files(untracked), [], f"untracked files on {label}\n"))
        return self.commit_tree(work_tree, parents, message + "\n"), "stash"

    def snapshot_commit(self, message: str, *, head: str | None, untracked: Sequence[str]) -> str:
        """A commit of every tracked and untracked file as it is on disk (parent: ``head``).

        For a checkout ``git stash`` cannot save (a merge or rebase stopped on conflicts):
        the files are kept byte for byte, conflict markers included; the index's conflict
        stages are not. ``git restore --source=<sha> --worktree -- .`` puts them back.
        """
        present = [p for p in self.run(["ls-files", "-z"]).stdout.split("\0")
                   if p and os.path.lexists(os.path.join(self.path, p))]
        tree = self.tree_of_files(sorted(set(present) | set(untracked)))
        return self.commit_tree(tree, [head] if head else [], message + "\n")

    def keep_ref(self, name: str, sha: str, *, reason: str) -> str:
        """Point ref ``name`` at ``sha``, or ``name.N`` when ``name`` holds something else (never overwritten)."""
        candidate, n = name, 1
        while True:
            have = self.resolve(candidate)
            if not have or have == sha:
                break
            n += 1
            candidate = f"{name}.{n}"
        self.update_ref(candidate, sha, reason=reason)
        return candidate

    def update_ref(self, ref: str, new: str, old: str | None = None, *, reason: str) -> None:
        """Point ``ref`` at ``new`` (only while it is at ``old``, when given)."""
        self.run(["update-ref", "-m", reason, ref, new, *([old] if old else [])])

    def delete_ref(self, ref: str, old: str) -> Finished:
        """Delete ``ref`` only while it still points at ``old`` (a compare-and-delete)."""
        return self.run(["update-ref", "-d", ref, old], check=False)

    # -- worktrees ---------------------------------------------------------------------------------------
    def worktrees(self) -> list[Worktree]:
        """Every worktree of the repository, the main one first (``worktree list --porcelain -z``)."""
        proc = self.run(["worktree", "list", "--porcelain", "-z"], check=False)
        if proc.returncode == 129:  # git older than 2.36 has no -z: lines, paths unquoted
            return parse_worktrees(self.run(["worktree", "list", "--porcelain"]).stdout, nul=False)
        if not proc.ok:
            raise external("git worktree list", proc)
        return parse_worktrees(proc.stdout)

    def main_worktree(self) -> str | None:
        """The main worktree's path (a bare repository's own folder)."""
        found = self.worktrees()
        return found[0].path if found else None

    def worktree_of(self, branch: str) -> str | None:
        """The worktree that has ``branch`` checked out (not a prunable one), or None."""
        for w in self.worktrees():
            if w.branch == f"refs/heads/{branch}" and w.prunable is None:
                return w.path
        return None

    def worktree_add(self, path: str | os.PathLike[str], *, branch: str, start: str) -> Finished:
        """Add worktree ``path`` on new branch ``branch`` at ``start``, without checking files out."""
        return self.run(["worktree", "add", "--quiet", "--no-checkout", "--no-track", "-b", branch,
                         os.fspath(path), start], check=False)

    def worktree_remove(self, path: str | os.PathLike[str], *, force: bool = False) -> Finished:
        """``git worktree remove`` (git refuses a dirty or locked one without ``force``)."""
        return self.run(["worktree", "remove", *(["--force"] if force else []), os.fspath(path)], check=False)

    def worktree_prune(self, *, dry_run: bool = False) -> Finished:
        """Drop the metadata of worktrees whose folder is gone; ``dry_run`` only lists them (verbose)."""
        return self.run(["worktree", "prune", *(["--dry-run", "--verbose"] if dry_run else [])], check=False)

    def reset_hard(self, rev: str = "HEAD") -> None:
        """Make the index and files match ``rev`` (``reset --hard``)."""
        self.run(["reset", "-q", "--hard", rev])

    # -- merging and rebasing --------------------------------------------------------------------------------
    def merge_ff_only(self, rev: str) -> Finished:
        """Fast-forward the checked-out branch to ``rev``; git refuses to overwrite untracked or ignored files."""
        return self.run(["merge", "--ff-only", "--no-overwrite-ignore", "--no-stat", "-q", rev], check=False)

    def rebase(self, onto: str) -> Finished:
        """Rebase the checked-out branch onto ``onto`` (never autostashing, never opening an editor)."""
        return self.run(["rebase", "--no-autostash", onto], check=False, env=NO_EDITOR)

    def rebase_abort(self) -> None:
        """Abort a rebase in progress (the branch and files go back to where they were)."""
        self.run(["rebase", "--abort"], check=False)

    # -- committing -------------------------------------------------------------------------------------------
    def init(self, branch: str) -> None:
        """Create a repository here with ``branch`` as its first branch."""
        self.run(["init", "-q", "-b", branch])

    def add(self, paths: Sequence[str] = (), *, check: bool = True) -> Finished:
        """Stage ``paths`` (all changes, untracked files included, when none are given)."""
        return self.run(["add", *(["--", *paths] if paths else ["-A"])], check=check)

    def commit(self, message: str, *, check: bool = True) -> Finished:
        """Commit the staged changes with ``message``."""
        return self.run(["commit", "-q", "-m", message], check=check)

    def path_state(self, relpath: str) -> str:
        """``clean`` (tracked, unchanged), ``changed``, ``untracked`` (or ignored) or ``none`` (no work tree)."""
        proc = self.run(["status", "--porcelain", "--ignored=matching", "-uall", "--", relpath], check=False)
        text = proc.stdout.strip()
        return "none" if not proc.ok else "untracked" if text[:2] in ("??", "!!") else "changed" if text else "clean"

    def commit_only(self, relpaths: Sequence[str], message: str, *, config: Sequence[str] = ()) -> Finished:
        """Commit exactly these files as on disk (``commit --only``, no hooks); other staged changes stay staged."""
        return self.run([*config, "commit", "--only", "--no-verify", "-q", "-m", message, "--", *relpaths],
                        check=False, env=NO_EDITOR)

    def restore_from_head(self, relpaths: Sequence[str]) -> Finished:
        """Put these files back as HEAD has them, in the index and on disk."""
        return self.run(["checkout", "-q", "HEAD", "--", *relpaths], check=False)

    # -- safe updates of a checked-out branch ------------------------------------------------------------------
    def fast_forward(self, branch: str, old: str, new: str, *, reason: str, what: str) -> str | None:
        """Move ``branch`` from ``old`` to ``new`` (a descendant), updating its checkout if it has one.

        With a checkout: refuse (StateError, nothing touched) when it has modified or staged
        tracked files, or when the update would overwrite an untracked or ignored file; git
        checks everything before it writes anything. Without one: a compare-and-swap of the
        ref. Returns the worktree that was updated, or None.
        """
        wt = self.worktree_of(branch)
        if wt is None:
            self.update_ref(f"refs/heads/{branch}", new, old, reason=reason)
            return None
        there = self.at(wt)
        dirty = there.tracked_changes()
        if dirty:
            raise StateError(
                f"Cannot {what}: the worktree of {branch} ({wt}) has modified or staged files",
                hint=f"Commit or stash them in {wt}, then try again.",
                worktree=wt, files=dirty, reason="dirty",
            )
        head = there.rev("HEAD")
        if head != old:
            raise StateError(
                f"Cannot {what}: {branch} moved while merging (now {head and head[:12]})",
                hint="Try again.", worktree=wt, reason="moved",
            )
        proc = there.merge_ff_only(new)
        if proc.returncode != 0:
            text = proc.stderr + proc.stdout
            files = [ln.strip() for ln in text.splitlines() if ln.startswith(("\t", "    "))]
            if "would be overwritten" in text:
                raise StateError(
                    f"Cannot {what}: it would overwrite untracked files in {wt}",
                    hint=f"Move these files out of {wt} (or commit them), then try again: {', '.join(files)}",
                    worktree=wt, files=files, reason="untracked-overwrite",
                )
            raise StateError(f"Cannot {what}: git refused to update {wt}: {text.strip().splitlines()[-1:]}",
                             worktree=wt, stderr=text[-2000:], reason="git-refused")
        return wt


__all__ = ["NO_EDITOR", "Finished", "Git", "MergeTree", "RepoInfo", "Snapshot", "Worktree", "add_exclude",
           "remove_exclude",
           "parse_status", "parse_worktrees"]
