"""Checkpoints of an agent's checkout: commits under ``refs/exo/checkpoints/<key>/<n>``, and putting them back.

A checkpoint is a commit of every tracked and untracked, not ignored file of the checkout as
it is on disk, built without touching the checkout's index, HEAD, stash or files:

- a **shadow index** per agent in exo's state (``<folder>/index``), seeded once from the
  agent's own index (a copy: its stat data says which files are unchanged, so only what
  changed is read and hashed); ``git ls-files -m -d -o`` lists what changed since the last
  checkpoint, ``git update-index --add --remove`` takes it in, ``git write-tree`` writes the tree;
- every git call that reads the checkout runs in a **private git folder** (``<folder>/gitdir``:
  the repository's objects and ``info/exclude``, nothing else of its configuration) whose
  ``info/attributes`` turns off every conversion: no filter, hook, fsmonitor or textconv of the
  repository's runs, and the bytes kept (and written back) are the bytes on disk;
- ``git commit-tree`` with the checkout's HEAD as first parent (and its branch's tip when HEAD
  is elsewhere), so the commits HEAD was on stay reachable whatever the agent does to its
  branch; ``git update-ref`` creates the ref (never moves one). The commit's message is a
  subject line and the checkpoint's metadata as JSON.

Nested repositories, submodules' contents, special files and files over the size limit are
not kept, and listed. Ignored files that are work are copied by ``ckptfiles`` (never into a
git object). A checkpoint identical to the last (same tree, parents and ignored files) is not
taken again. ``restore`` writes a checkpoint's files back (``git checkout-index`` in the
private folder) and deletes what it lacks.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from exo_cli import fault
from exo_cli.adapters import ckptfiles, clones, clonestore, gitdir, keep
from exo_cli.adapters.ckptrefs import ARCHIVED, REFS, Listed, list_refs
from exo_cli.adapters.files import atomic_write, ensure_private_dir, locked, read_regular_text
from exo_cli.adapters.git import Git
from exo_cli.errors import ExoError, StateError

IDENTITY = clones.IDENTITY  # who writes exo's own commits
# The private folder's attributes, above every .gitattributes: no conversion, no filter program.
RAW = "* -text -filter -ident -working-tree-encoding\n"
NO_SPLIT = ["-c", "core.splitIndex=false"]
# The attributes that make git change a file's bytes when it adds it.
CONVERTING = ("text", "eol", "filter", "ident", "working-tree-encoding")
GITLINK = "160000"


class Policy(NamedTuple):
    """What a checkpoint keeps: ``complete``'s rules for ignored files, and the size limits."""

    regenerable: tuple[str, ...]
    owned: frozenset[str]
    max_file: int  # bytes: a bigger file is not kept
    max_total: int  # bytes of changed files one checkpoint takes in at most (and of ignored files it copies)


class Taken(NamedTuple):
    """A checkpoint: its number, ref, commit and metadata; ``created`` False when nothing changed since it."""

    n: int
    ref: str
    commit: str
    tree: str
    created: bool
    meta: dict[str, Any]


# --------------------------------------------------------------------------- the private git folder


class Shadow:
    """The checkpoints of one agent's checkout: the private git folder, shadow index and records in ``folder``."""

    def __init__(self, main: Git, worktree: str, folder: Path, key: str, *, clone: Path | None = None) -> None:
        self.main = main
        self.worktree = worktree
        # An agent's own clone: its git files are read as files, never through its config, and its objects
        # through exo's copy of its store (``clone``: ``clones.Reader``'s, never the clone's own store).
        self.clone = clone is not None
        self.clone_objects = clone
        self.folder = folder
        self.key = key
        self.gitdir = folder / "gitdir"
        self.index = folder / "index"
        self.refs = f"{REFS}{key}/"

    # -- set up ---------------------------------------------------------------------------------
    def lock(self) -> contextlib.AbstractContextManager[Any]:
        """One checkpoint (or restore) of this agent at a time."""
        ensure_private_dir(self.folder, parents=True)
        return locked(self.folder / "lock")

    def agent_git_dir(self) -> Path:
        """The checkout's own git folder: a linked worktree's folder of this repository that names this checkout
        back; StateError otherwise (the checkout is gone, or its ``.git`` file was pointed elsewhere: exo never
        takes another checkout's HEAD, index or branch for the agent's)."""
        if self.clone:
            if not clones.is_clone(self.worktree):
                raise StateError(f"{self.worktree} is not an agent's clone (any more)", worktree=self.worktree,
                                 reason="no-checkout")
            return Path(self.worktree) / ".git"
        found = gitdir.git_dir_of(self.worktree) if os.path.isdir(self.worktree) else None
        common = gitdir.common_dir(self.main.path, {})
        if found is None or not (found / "HEAD").is_file() or common is None:
            raise StateError(f"{self.worktree} is not a git checkout (any more)", worktree=self.worktree,
                             reason="no-checkout")
        back = _read(found / "gitdir")
        here = os.path.join(self.worktree, ".git")
        if (os.path.realpath(found.parent) != os.path.realpath(common / "worktrees")
                or not back or os.path.realpath(back) != os.path.realpath(here)):
            raise StateError(f"{self.worktree} is not a worktree of {self.main.path} (its .git names {found})",
                             worktree=self.worktree, reason="not-its-worktree",
                             hint="exo checkpoints only the worktrees it made for agents.")
        return found

    def _setup(self) -> dict[str, str]:
        """The private git folder (made once) and the environment of every call that reads the checkout."""
        objects = gitdir.common_dir(self.main.path, {})
        if objects is None:
            raise StateError(f"No git repository at {self.main.path}")
        if not (self.gitdir / "HEAD").is_file():
            fmt = self.main.run(["rev-parse", "--show-object-format"], check=False).stdout.strip() or "sha1"
            ensure_private_dir(self.gitdir, parents=True)
            for sub in ("refs", "info"):
                ensure_private_dir(self.gitdir / sub)
            config = "[core]\n\trepositoryformatversion = 1\n\tbare = false\n"
            if fmt != "sha1":
                config += f"[extensions]\n\tobjectformat = {fmt}\n"
            atomic_write(self.gitdir / "config", config, mode=0o600, fsync=False)
            atomic_write(self.gitdir / "info" / "attributes", RAW, mode=0o600, fsync=False)
            exclude = self.gitdir / "info" / "exclude"
            with contextlib.suppress(FileNotFoundError):
                exclude.unlink()
            os.symlink(objects / "info" / "exclude", exclude)  # the repository's own ignore rules
            atomic_write(self.gitdir / "HEAD", "ref: refs/heads/exo-checkpoint\n", mode=0o600, fsync=False)
        env = {"GIT_DIR": str(self.gitdir), "GIT_WORK_TREE": self.worktree, "GIT_INDEX_FILE": str(self.index),
               "GIT_OBJECT_DIRECTORY": str(objects / "objects"), "GIT_LITERAL_PATHSPECS": "1"}
        if self.clone_objects is not None:  # its own objects, as exo took them (its commits are fetched before)
            env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = str(self.clone_objects)
        return env

    def _agent_index(self, agent_git: Path) -> Path:
        """The agent's index, as a copy exo made without following a link (a clone's) or in place (a worktree's)."""
        if not self.clone:
            return agent_git / "index"
        copy = self.folder / "agent-index"
        found = clonestore.read_inside_stamped(agent_git, "index", limit=clones.MAX_INDEX)
        if found is None:
            with contextlib.suppress(FileNotFoundError):
                copy.unlink()
        else:
            atomic_write(copy, found[0], mode=0o600, fsync=False)
            os.utime(copy, ns=(found[1], found[1]))  # the index's own time: git's racy-clean check needs it
        return copy

    def _git(self) -> tuple[Git, dict[str, str]]:
        return self.main.at(self.worktree), self._setup()

    def _seed(self, agent_index: Path) -> list[str]:
        """The shadow index starts as a copy of the agent's (its stat data spares hashing unchanged files).

        Returns the paths whose entries cannot be trusted and must be read again: those git
        converts when it adds them (the agent's index holds the converted bytes, the checkpoint
        keeps the bytes on disk), and those marked assume-unchanged or skip-worktree (whose bits
        are cleared: a checkpoint looks at every file).
        """
        if self.index.exists() or not agent_index.is_file():
            return []
        tmp = self.index.with_name("index.seed")
        stamp = agent_index.stat().st_mtime_ns  # before the copy: a newer index read after it only means more checks
        shutil.copyfile(agent_index, tmp)
        os.chmod(tmp, 0o600)
        os.utime(tmp, ns=(stamp, stamp))  # a file changed in the index's own second is then looked at again
        os.replace(tmp, self.index)
        git, env = self._git()
        flagged = _z(git.run(["ls-files", "-z", "-v", "-t"], env=env, check=False).stdout)
        paths = [e[2:] for e in flagged]
        hidden = [e[2:] for e in flagged if e[:1].islower() or e[:1] == "S"]
        if hidden:
            git.run([*NO_SPLIT, "update-index", "-z", "--no-assume-unchanged", "--no-skip-worktree", "--stdin"],
                    input=_join(hidden), env=env, check=False)
        # the repository's own attributes and config (read only, nothing runs); never a clone's config
        here = self.main if self.clone else self.main.at(self.worktree)
        if (here.config_get("core.autocrlf") or "false").lower() in ("true", "input"):
            converted = set(paths)
        else:
            out = _z(here.run(["check-attr", "-z", "--stdin", *CONVERTING], input=_join(paths), check=False).stdout)
            converted = {path for path, value in zip(out[0::3], out[2::3], strict=False)
                         if value not in ("unspecified", "unset")}
        if converted:  # entries made anew: git hashes a file again only when its stat data differs from the entry's
            again = _join(sorted(converted))
            git.run([*NO_SPLIT, "update-index", "-z", "--force-remove", "--stdin"], input=again, env=env)
            git.run([*NO_SPLIT, "update-index", "-z", "--add", "--remove", "--replace", "--stdin"], input=again,
                    env=env, check=False)
        return sorted(converted | set(hidden))

    # -- taking one -------------------------------------------------------------------------------
    def capture(self, *, policy: Policy, meta: dict[str, Any], branch: str | None) -> Taken:
        """Take a checkpoint of the checkout now (or find the last one, when nothing changed). Hold ``lock``."""
        agent_git = self.agent_git_dir()
        git, env = self._git()
        last = self._last()
        head, parents = self._parents(agent_git, branch)
        agent_index = self._agent_index(agent_git)
        try:
            suspects = self._seed(agent_index)
            look = self._look(git, env, str(last.get("commit") or head or ""))
        except ExoError:  # a seed git cannot read here (a split index): start from an empty shadow
            with contextlib.suppress(FileNotFoundError):
                self.index.unlink()
            suspects, look = [], self._look(git, env, str(last.get("commit") or head or ""))
        changed, others = suspects + look[0], look[1]
        not_kept: list[tuple[str, str]] = []
        add, drop = self._sort(changed, policy, not_kept)
        recheck = bool(suspects) or any(p == ".gitignore" or p.endswith("/.gitignore") for p in changed)
        untrack = self._untracked_now(git, env, agent_index) if recheck else []
        ignored, nested = self._ignored([*others, *untrack], policy)
        drop += untrack
        not_kept += [(f"{n}/", "a nested repository") for n in nested]
        if add or drop or last.get("index") != _stat(self.index):
            self._update(git, env, add, drop, not_kept)
            fault.point("checkpoint.updated")
            tree = self._write_tree(git, env, not_kept)
        else:
            tree = str(last["tree"])  # the shadow is as the last checkpoint left it: so is its tree
        manifest, not_copied = ckptfiles.snapshot(
            self.worktree, ckptfiles.walk(self.worktree, ignored, skip=_skipper(policy, nested)),
            store=self.folder / "blobs", previous=last.get("files") or {}, max_file=policy.max_file,
            max_total=policy.max_total)
        not_kept += not_copied
        not_kept += [(f"{p}/", "a submodule") for p in self._gitlinks(git, env)]
        same = {"tree": tree, "parents": parents, "ignored": ckptfiles.digest(manifest),
                "not_kept": [{"path": p, "why": w} for p, w in sorted(set(not_kept))]}
        if all(last.get(k) == v for k, v in same.items()) and isinstance(last.get("n"), int) and last.get("commit"):
            self._remember({**last, "index": _stat(self.index)}, manifest)  # fresher stat data for the next look
            return Taken(int(last["n"]), str(last["ref"]), str(last["commit"]), tree, False, dict(last.get("meta") or {}))
        since = last.get("tree") or (self.main.tree(head) if head else None)
        files, added, deleted = self._stat(git, env, since, tree)
        body = {**meta, "v": 1, "key": self.key, "time": time.time(), "head": head, "branch": branch,
                "head_branch": gitdir.head_branch(agent_git), "files": files, "added": added, "deleted": deleted,
                "ignored": len(manifest), "not_kept": same["not_kept"], "prev": last.get("commit")}
        n, ref, commit = self._commit(tree, parents, body, int(last.get("n") or 0))
        ckptfiles.write_manifest(self.folder / "ignored" / f"{n}.json", manifest)
        self._remember({**same, "n": n, "ref": ref, "commit": commit, "meta": body, "index": _stat(self.index)},
                       manifest)
        return Taken(n, ref, commit, tree, True, body)

    def _look(self, git: Git, env: dict[str, str], since: str) -> tuple[list[str], list[str]]:
        """(paths changed since the shadow took them, ignored entries): one ``git status`` walk of the checkout.

        The private folder's HEAD is the last checkpoint (so git's comparison of the index with
        HEAD finds next to nothing); no optional lock: the shadow is written by ``_update`` only.
        """
        head_file = self.gitdir / "refs" / "heads" / "exo-checkpoint"
        if since and _read(head_file) != since:
            atomic_write(head_file, since + "\n", mode=0o600, fsync=False)
        elif not since:
            with contextlib.suppress(FileNotFoundError):
                head_file.unlink()
        out = _z(git.run(["status", "--porcelain=v2", "-z", "--untracked-files=all", "--ignored=matching",
                          "--no-renames"], env={**env, "GIT_OPTIONAL_LOCKS": "0"}).stdout)
        changed: list[str] = []
        ignored: list[str] = []
        for entry in out:
            kind = entry[:2]
            if kind == "? ":
                changed.append(entry[2:])
            elif kind == "! ":
                ignored.append(entry[2:])
            elif kind == "1 ":  # 1 XY sub mH mI mW hH hI path: Y is the file against the shadow
                fields = entry.split(" ", 8)
                if len(fields) == 9 and fields[1][1:] != ".":
                    changed.append(fields[8])
            elif kind == "u ":  # unmerged (a seed taken mid-merge): the file as it is
                fields = entry.split(" ", 10)
                if len(fields) == 11:
                    changed.append(fields[10])
        return changed, ignored

    def _untracked_now(self, git: Git, env: dict[str, str], agent_index: Path) -> list[str]:
        """Shadow entries that are ignored now and untracked in the agent's own index (a file the agent stopped
        tracking and ignores): they leave the shadow, and count as ignored files. Looked at when the ignore rules
        may have changed (a ``.gitignore`` changed, the first checkpoint)."""
        cached = _z(git.run(["ls-files", "-z", "-c", "-i", "--exclude-standard"], env=env, check=False).stdout)
        if not cached:
            return []
        theirs = set(_z(git.run(["ls-files", "-z", "--", *cached], env={**env, "GIT_INDEX_FILE": str(agent_index)},
                                check=False).stdout))
        return [p for p in cached if p not in theirs]

    def _sort(self, changed: list[str], policy: Policy, not_kept: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
        """(paths to take in, paths to drop from the shadow) of what ``ls-files`` found changed."""
        add: list[str] = []
        drop: list[str] = []
        taken = 0  # bytes of changed files taken in: at most ``max_total`` per checkpoint
        for rel in dict.fromkeys(changed):
            if rel.endswith("/"):
                not_kept.append((rel, "a nested repository"))
                continue
            try:
                if ckptfiles.in_the_way(self.worktree, rel, folder_ok=True) is not None:
                    raise FileNotFoundError(rel)  # a link or a file took the place of one of its folders
                st = os.lstat(os.path.join(self.worktree, rel))
            except OSError:
                drop.append(rel)  # gone
                continue
            if stat.S_ISREG(st.st_mode) and st.st_size > policy.max_file:
                not_kept.append((rel, f"over {policy.max_file >> 20} MiB"))
                drop.append(rel)
            elif stat.S_ISREG(st.st_mode) and taken + st.st_size > policy.max_total:
                not_kept.append((rel, f"past the {policy.max_total >> 20} MiB of changed files one checkpoint takes"))
                drop.append(rel)
            elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode):
                taken += st.st_size if stat.S_ISREG(st.st_mode) else 0
                add.append(rel)
            else:
                not_kept.append((rel, "not a regular file"))
                drop.append(rel)
        return add, drop

    def _ignored(self, entries: list[str], policy: Policy) -> tuple[list[str], list[str]]:
        """(ignored entries that are work, nested repositories among them): ``complete``'s rules."""
        inv = keep.Inventory(worktree=self.worktree, regenerable=policy.regenerable, owned=set(policy.owned))
        kept, nested = keep.ignored_work(inv, entries)
        return [e for e in kept if e.rstrip("/") not in nested], nested

    def _update(self, git: Git, env: dict[str, str], add: Sequence[str], drop: Sequence[str],
                not_kept: list[tuple[str, str]]) -> None:
        args = [*NO_SPLIT, "update-index", "-z"]
        if drop:
            git.run([*args, "--force-remove", "--stdin"], input=_join(drop), env=env)
        if not add:
            return
        taking = [*args, "--add", "--remove", "--replace", "--stdin"]  # a file where a folder was, and back
        proc = git.run(taking, input=_join(add), env=env, check=False)
        if proc.ok:
            return
        for rel in add:  # one path git refuses must not cost the others
            one = git.run(taking, input=_join([rel]), env=env, check=False)
            if not one.ok:
                git.run([*args, "--force-remove", "--stdin"], input=_join([rel]), env=env, check=False)
                not_kept.append((rel, (one.stderr.strip().splitlines() or ["git refused it"])[-1]))

    def _write_tree(self, git: Git, env: dict[str, str], not_kept: list[tuple[str, str]]) -> str:
        proc = git.run([*NO_SPLIT, "write-tree"], env=env, check=False)
        if proc.ok:
            return proc.stdout.strip()
        # a seed taken in the middle of a conflicted merge holds unmerged entries: take the files as they are
        unmerged = sorted({e.split("\t", 1)[1] for e in _z(git.run(["ls-files", "-z", "-u"], env=env).stdout)
                           if "\t" in e})
        if unmerged:
            self._update(git, env, unmerged, [], not_kept)
        return git.run([*NO_SPLIT, "write-tree"], env=env).stdout.strip()

    def _gitlinks(self, git: Git, env: dict[str, str]) -> list[str]:
        """Submodules (their contents are another repository's: not kept); looked up only when ``.gitmodules`` exists."""
        if not os.path.lexists(os.path.join(self.worktree, ".gitmodules")):
            return []
        out = []
        for entry in _z(git.run(["ls-files", "-z", "-s"], env=env).stdout):
            meta, _, path = entry.partition("\t")
            if meta.startswith(GITLINK + " "):
                out.append(path)
        return out

    def _parents(self, agent_git: Path, branch: str | None) -> tuple[str | None, list[str]]:
        """(HEAD's commit, the parents: HEAD, and the agent's branch tip when HEAD is not on it)."""
        if self.clone:  # read as files: HEAD and the branch as the clone has them
            refs = clones.read_refs(self.worktree)
            on = refs.head if (refs.head or "").startswith("refs/") else None
            head = refs.branches.get(on or "") if on else refs.head
            parents = [head] if head else []
            tip = refs.branches.get(f"refs/heads/{branch}") if branch and on != f"refs/heads/{branch}" else None
            return head, parents + ([tip] if tip and tip not in parents else [])
        here = self.main.at(self.worktree)
        env = {"GIT_DIR": str(agent_git)}
        head = gitdir.head_commit(agent_git) or here.run(["rev-parse", "--verify", "-q", "HEAD^{commit}"], env=env,
                                                         check=False).stdout.strip() or None
        parents = [head] if head else []
        if branch and gitdir.head_branch(agent_git) != branch:
            tip = here.run(["rev-parse", "--verify", "-q", f"refs/heads/{branch}^{{commit}}"], env=env,
                           check=False).stdout.strip()
            if tip and tip not in parents:
                parents.append(tip)
        return head, parents

    def _stat(self, git: Git, env: dict[str, str], since: str | None, tree: str) -> tuple[int, int, int]:
        """(files changed, lines added, lines deleted) from ``since`` (a tree) to ``tree``."""
        if not since:
            count = len(_z(git.run(["ls-tree", "-r", "-z", "--name-only", tree], env=env).stdout))
            return count, 0, 0
        out = _z(git.run(["diff-tree", "-r", "-z", "--numstat", "--no-renames", since, tree], env=env,
                         check=False).stdout)
        files = added = deleted = 0
        for entry in out:
            parts = entry.split("\t", 2)
            if len(parts) < 3:
                continue
            files += 1
            added += int(parts[0]) if parts[0].isdigit() else 0
            deleted += int(parts[1]) if parts[1].isdigit() else 0
        return files, added, deleted

    def _commit(self, tree: str, parents: Sequence[str], body: dict[str, Any], last_n: int) -> tuple[int, str, str]:
        """Write the commit and create its ref, the next free number after ``last_n``."""
        n = last_n + 1
        for _attempt in range(20):
            body["n"] = n
            reason = body.get("reason") or "turn"
            message = f"exo checkpoint {n} of {body.get('agent') or self.key} ({reason})\n\n" + json.dumps(body) + "\n"
            args = ["commit-tree", "--no-gpg-sign", tree]
            for p in parents:
                args += ["-p", p]
            commit = self.main.run([*args, "-F", "-"], input=message, env=IDENTITY).stdout.strip()
            fault.point("checkpoint.committed")
            ref = f"{self.refs}{n}"
            proc = self.main.run(["update-ref", "-m", f"exo checkpoint ({reason})", ref, commit, ""], check=False)
            if proc.ok:
                fault.point("checkpoint.ref")
                return n, ref, commit
            n = max([x.n for x in self.history()] + [n]) + 1  # another process took that number
        raise StateError(f"Could not create a checkpoint ref under {self.refs}", key=self.key)

    # -- records ----------------------------------------------------------------------------------
    def _last(self) -> dict[str, Any]:
        try:
            data = json.loads((self.folder / "last.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _remember(self, last: dict[str, Any], manifest: ckptfiles.Manifest) -> None:
        atomic_write(self.folder / "last.json", json.dumps({**last, "files": manifest}, separators=(",", ":")),
                     mode=0o600, fsync=False)

    def history(self) -> list[Listed]:
        """This agent's checkpoints (kept ones and those archived with ``complete --force``), oldest first."""
        return list_refs(self.main, [self.refs, f"{ARCHIVED}{self.key}/"])

    def manifest(self, n: int) -> ckptfiles.Manifest:
        return ckptfiles.read_manifest(self.folder / "ignored" / f"{n}.json")

    # -- putting one back -------------------------------------------------------------------------
    def restore(self, *, target: str, present: str | None, paths: Sequence[str] | None = None,
                protect: Callable[[str], bool] = lambda _p: False) -> tuple[list[str], list[str], list[str]]:
        """Make the checkout's kept files those of tree ``target``: (written, deleted, not restored with why).

        Only what differs from ``present`` (the tree of the checkpoint just taken of the
        present) is written or deleted; with ``paths``, only under those paths. Paths
        ``protect`` accepts (what the present's checkpoint could not keep) are never touched.
        """
        git, env = self._git()
        since = present or self._empty_tree(git, env)
        raw = _z(git.run(["diff-tree", "-r", "-z", "--raw", "--no-renames", since, target, "--", *(paths or [])],
                         env=env).stdout)
        written: list[str] = []
        deleted: list[str] = []
        skipped: list[str] = []
        to_write: list[str] = []
        entries = []
        for header, rel in zip(raw[0::2], raw[1::2], strict=False):
            fields = header.lstrip(":").split()
            if len(fields) >= 5:
                entries.append((fields[0], fields[1], fields[4], rel))
        # deletions first: a folder the checkpoint has a file in place of is emptied before that file is written
        for old_mode, new_mode, status, rel in sorted(entries, key=lambda e: e[2] != "D"):
            if protect(rel):
                skipped.append(f"{rel} (the present's copy could not be kept: left as it is)")
                continue
            if status == "D":
                if old_mode == GITLINK:
                    continue
                if ckptfiles.remove(self.worktree, rel):
                    deleted.append(rel)
                else:
                    skipped.append(f"{rel} (could not be deleted)")
                continue
            if new_mode == GITLINK:
                continue
            why = ckptfiles.in_the_way(self.worktree, rel)
            if why is not None:
                skipped.append(f"{rel} ({why})")
                continue
            to_write.append(rel)
        if to_write:
            index = self.folder / f"restore-index.{os.getpid()}"
            try:
                renv = {**env, "GIT_INDEX_FILE": str(index)}
                git.run(["read-tree", target], env=renv)
                git.run(["checkout-index", "-f", "-z", "--stdin"], input=_join(to_write), env=renv)
                written += to_write
            finally:
                with contextlib.suppress(FileNotFoundError):
                    index.unlink()
        return written, deleted, skipped

    def _empty_tree(self, git: Git, env: dict[str, str]) -> str:
        return git.run(["hash-object", "-t", "tree", "-w", "--stdin"], input=b"", env=env).stdout.strip()

    def tree_paths(self, tree: str, paths: Sequence[str]) -> list[str]:
        """The files of ``tree`` under ``paths``."""
        git, env = self._git()
        return _z(git.run(["ls-tree", "-r", "-z", "--name-only", tree, "--", *paths], env=env).stdout)


def _stat(path: Path) -> list[int]:
    """What says a file changed (written by someone, a capture killed midway): its size, time and inode."""
    try:
        st = os.stat(path)
    except OSError:
        return []
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _read(path: Path) -> str:
    """A small git-folder file (a worktree's, the agent's to write): never a FIFO, a device or a link."""
    return (read_regular_text(path, limit=4096, follow=False) or "").strip()


def _z(text: str) -> list[str]:
    return [p for p in text.split("\0") if p]


def _join(paths: Iterable[str]) -> str:
    return "".join(p + "\0" for p in paths)


def _skipper(policy: Policy, nested: Sequence[str]) -> Callable[[str], bool]:
    inv = keep.Inventory(worktree="", regenerable=policy.regenerable, owned=set(policy.owned), nested=list(nested))
    return inv.skip


__all__ = ["Policy", "Shadow", "Taken"]
