"""Agents' own clones: ``git clone --shared`` made for an agent, read by exo as hostile.

A sandboxable agent works in its own clone of the repository (``[worktree] layout = "clone"``,
``spawn --layout clone``): ``git clone --shared`` (the clone's ``objects/info/alternates``
names the repository's object store; never a plain local clone, whose hard-linked packs an
agent could rewrite), whose ``.git`` is the only git state the agent writes.

Everything in the clone is the agent's, so exo treats it as hostile:

- exo never runs git with the clone's ``.git`` as its git folder (its config could run
  ``core.fsmonitor``, hooks, filters, textconv, a credential helper or an ssh command, or
  ``include.path`` any of those). ``Reader`` builds a **private git folder** exo owns
  (``config`` written by exo, an object folder of its own holding the clone's own objects as
  links checked once there (``clonestore.mirror``: git never reads the clone's store, whose
  alternates or links the agent could rewrite after any check) with the repository's store as
  its alternate, copies of the clone's HEAD, branches, index and ``info/exclude``), and every
  read runs ``git`` with ``GIT_DIR`` there, ``GIT_WORK_TREE`` the clone, no system or global
  config and every other ``GIT_*`` variable of exo's own environment dropped. With exo's
  config no filter or textconv driver exists, and submodules are never entered (git would
  run ``git status`` inside them with their own config).
- The clone's refs are read as files (never following a symbolic link out of ``.git``, never
  a symbolic ref outside ``refs/heads/``), checked as object names, and written into the
  private folder; ``fetch`` then takes the clone's branches into the repository from that
  folder (``git fetch <private folder>``: the upload-pack on the other side runs with exo's
  config), under ``refs/exo/clones/<id>/heads/``. Those refs, with ``refs/exo/clones/<id>/base``,
  keep every commit a clone reaches alive through ``git gc --prune=now`` in the repository.
- ``advance`` moves the repository's ``refs/heads/<branch>`` to the fetched tip only by
  fast-forward (a compare-and-swap ``update-ref``), never forced.

``make_shared_clone`` is the one way exo makes a ``--shared`` clone (the merge queue's
throw-away clones can use it too).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from exo_cli import fault
from exo_cli.adapters import gitdir
from exo_cli.adapters.clonestore import MAX_PACKED_REFS, check_store, mirror, read_inside, read_inside_stamped
from exo_cli.adapters.files import atomic_write, ensure_private_dir
from exo_cli.adapters.git import Git
from exo_cli.adapters.rmtree import remove_tree
from exo_cli.errors import StateError, external

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


CLONE_REFS = "refs/exo/clones/"
IDENTITY = {"GIT_AUTHOR_NAME": "exo", "GIT_AUTHOR_EMAIL": "exo@localhost",
            "GIT_COMMITTER_NAME": "exo", "GIT_COMMITTER_EMAIL": "exo@localhost"}
MAX_INDEX = 512 << 20  # bytes: a bigger index is not copied (git rebuilds one from HEAD)
_OID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_SHA = re.compile(r"\b(?:[0-9a-f]{64}|[0-9a-f]{40})\b")
_BAD_REF = re.compile(r"(^|/)\.|\.\.|[\x00-\x20\x7f~^:?*\[\\]|@\{|\.lock(/|$)|//|/$|\.$")
# What exo's private git folder says: no program of anyone's runs, submodules are never entered.
_CONFIG = """[core]
\trepositoryformatversion = {version}
\tbare = true
\tfsmonitor = false
\tuntrackedCache = false
\tsplitIndex = false
\tsymlinks = true
\tquotePath = true
[diff]
\tignoreSubmodules = all
\texternal =
[status]
\tsubmoduleSummary = false
[submodule]
\trecurse = false
[uploadpack]
\tallowAnySHA1InWant = false
{extensions}"""


def clone_refs(agent_id: str) -> str:
    """The namespace in the repository that keeps what the clone of agent ``agent_id`` reaches."""
    return f"{CLONE_REFS}{agent_id}/"


def make_shared_clone(source: Path, path: Path, *, branch: str, start: str) -> None:
    """``git clone --shared --no-checkout source path``, then branch ``branch`` at ``start`` checked out.

    Never a plain local clone (its pack files would be hard links into ``source``). The clone
    is exo's until the agent starts, so the checkout runs in it with exo's options (hooks off).
    An existing ``path`` is a StateError (git refuses a non-empty one).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = Git(path.parent).run(["clone", "--quiet", "--shared", "--no-checkout", "--", str(source), str(path)],
                                check=False)
    if not proc.ok:
        if "already exists" in proc.stderr:
            raise StateError(f"Clone {path} already exists", hint="exo never reuses a folder; pick another name.",
                             path=str(path))
        raise external("git clone --shared", proc)
    Git(path).run(["checkout", "--quiet", "--no-track", "-b", branch, start])


def is_clone(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder (not a link) whose ``.git`` is a folder (not a link, not a ``.git`` file)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode) and stat.S_ISDIR(os.lstat(os.path.join(path, ".git")).st_mode)
    except OSError:
        return False


# --------------------------------------------------------------------------- reading the clone's files


def write_inside(root: str | os.PathLike[str], rel: str, data: bytes, *, mode: int = 0o644) -> bool:
    """Replace regular file ``root/rel`` with ``data`` unless it holds exactly that; True when written.

    Every folder on the way is opened without following a link (missing ones are made), and
    the file is written under a temporary name and renamed over ``rel`` in its folder: a link
    planted at ``rel`` is replaced, never written through. OSError when a folder on the way is
    a link or no folder.
    """
    parts = [p for p in rel.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise OSError(f"bad relative path {rel!r}")
    if read_inside(root, rel, limit=max(len(data), 1)) == data:
        return False
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)]
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fds[-1])
            fds.append(os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fds[-1]))
        tmp = f".{parts[-1]}.exo-{os.getpid()}-{os.urandom(4).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=fds[-1])
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        try:
            os.replace(tmp, parts[-1], src_dir_fd=fds[-1], dst_dir_fd=fds[-1])
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fds[-1])
            raise
        return True
    finally:
        for d in reversed(fds):
            os.close(d)


def unlink_in(path: Path) -> None:
    """Remove file ``path`` from its folder, opened without following a link (FileNotFoundError when gone)."""
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.unlink(path.name, dir_fd=fd)
    finally:
        os.close(fd)


def good_ref(name: str, prefix: str = "refs/heads/") -> bool:
    """Whether ``name`` is a ref under ``prefix`` exo takes from a clone (no tricks in its name)."""
    rest = name[len(prefix):]
    return name.startswith(prefix) and 0 < len(rest) < 1024 and not _BAD_REF.search(rest)


def _oid(data: bytes | str | None) -> str | None:
    text = data.decode("ascii", "replace") if isinstance(data, bytes) else (data or "")
    text = text.strip()
    return text if _OID.match(text) else None


class CloneRefs(NamedTuple):
    """What the clone's git files name, read as files: HEAD, branches, and what else holds commits."""

    head: str | None  # "refs/heads/x" (symbolic) or an object name; None when unreadable
    branches: dict[str, str]  # "refs/heads/x" -> object name
    state: dict[str, str]  # label -> object name: other refs (tags, stash and its entries, notes), a detached
    #                        HEAD, operations in progress (rebase, merge...): gone with the clone unless kept


def _walk(root: str, rel: str, depth: int = 0) -> list[str]:
    """Regular files under ``root/rel`` (relative names), walked without following links; 16 folders deep."""
    if depth > 16:
        return []
    try:
        fd = os.open(os.path.join(root, rel), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return []
    try:
        names = os.listdir(fd)
    finally:
        os.close(fd)
    out: list[str] = []
    for name in sorted(names)[:10000]:
        sub = f"{rel}/{name}"
        try:
            mode = os.lstat(os.path.join(root, sub)).st_mode
        except OSError:
            continue
        if stat.S_ISDIR(mode):
            out += _walk(root, sub, depth + 1)
        elif stat.S_ISREG(mode):
            out.append(sub)
    return out


def read_refs(clone: str | os.PathLike[str]) -> CloneRefs:
    """The clone's HEAD, branches and other commit holders, read from ``.git`` as files (never followed out)."""
    branches: dict[str, str] = {}
    state: dict[str, str] = {}
    if not is_clone(clone):
        return CloneRefs(None, branches, state)
    git_dir = os.path.join(clone, ".git")
    refs: dict[str, str] = {}
    packed = read_inside(git_dir, "packed-refs", limit=MAX_PACKED_REFS) or b""
    for line in packed.decode("utf-8", "replace").splitlines():
        oid, _, ref = line.partition(" ")
        if _OID.match(oid) and good_ref(ref, "refs/"):
            refs[ref] = oid
    for ref in _walk(git_dir, "refs"):
        loose = _oid(read_inside(git_dir, ref, limit=256)) if good_ref(ref, "refs/") else None
        if loose:
            refs[ref] = loose
    for ref, oid in refs.items():
        if ref.startswith("refs/heads/"):
            branches[ref] = oid
        elif not ref.startswith("refs/remotes/"):  # the repository's branches as fetched: the repository has them
            state[ref] = oid
    log = (read_inside(git_dir, "logs/refs/stash", limit=16 << 20) or b"").decode("utf-8", "replace")
    for n, line in enumerate(reversed(log.splitlines())):
        entry = _oid(line.split(" ")[1] if line.count(" ") >= 1 else "")
        if entry:
            state[f"stash@{{{n}}}"] = entry
    raw = (read_inside(git_dir, "HEAD", limit=4096) or b"").decode("utf-8", "replace").strip()
    head: str | None = None
    if raw.startswith("ref:"):
        target = raw[4:].strip()
        head = target if good_ref(target) else None
    else:
        head = _oid(raw)
        if head:
            state["HEAD"] = head
    busy = any(os.path.lexists(os.path.join(git_dir, n)) for n in (*gitdir.STATE_DIRS, *gitdir.HEAD_FILES[2:]))
    files = [n for n in gitdir.HEAD_FILES[1:] if n != "ORIG_HEAD" or busy]
    for d in gitdir.STATE_DIRS:
        files += _walk(git_dir, d)
    for name in files:
        text = (read_inside(git_dir, name, limit=1 << 20) or b"").decode("ascii", "replace")
        for i, sha in enumerate(dict.fromkeys(_SHA.findall(text))):
            state[name if i == 0 else f"{name}#{i + 1}"] = sha
    return CloneRefs(head, branches, state)


# --------------------------------------------------------------------------- the reader


class Reader:
    """Read agent clone ``clone`` through exo's private git folder ``folder`` (see the module)."""

    def __init__(self, repo: Git, common_dir: Path, clone: str, folder: Path) -> None:
        self.repo = repo
        self.common_dir = common_dir
        self.clone = clone
        self.folder = folder
        self.gitdir = folder / "git"
        self.state: dict[str, str] = {}  # "refs/state/<n>" -> label, after ``refresh``

    def refresh(self) -> CloneRefs:
        """Make (or bring up to date) the private folder from the clone's files; StateError when it is no clone."""
        if not is_clone(self.clone):
            raise StateError(f"{self.clone} is not an agent's clone (any more): its .git is not a folder",
                             worktree=self.clone, reason="no-checkout",
                             hint="Check it by hand: exo reads a clone only through its own git folder.")
        check_store(self.clone, self.expected_alternates())  # plainly hostile or broken: said so
        refs = read_refs(self.clone)
        g = self.gitdir
        ensure_private_dir(self.folder, parents=True)
        ensure_private_dir(g)
        for sub in ("objects", "objects/info", "refs", "info"):
            ensure_private_dir(g / sub)
        fmt = self.repo.run(["rev-parse", "--show-object-format"], check=False).stdout.strip() or "sha1"
        ext = "" if fmt == "sha1" else f"[extensions]\n\tobjectformat = {fmt}\n"
        atomic_write(g / "config", _CONFIG.format(version=0 if fmt == "sha1" else 1, extensions=ext),
                     mode=0o600, fsync=False)
        atomic_write(g / "objects" / "info" / "alternates", str(self.common_dir / "objects") + "\n", mode=0o600,
                     fsync=False)
        mirror(self.clone, g / "objects")  # the clone's own objects, in exo's folder: git never reads its store
        fault.point("clone.mirrored")
        with contextlib.suppress(OSError):
            remove_tree(g / "refs")
        ensure_private_dir(g / "refs")
        head = refs.head or "refs/heads/exo-unknown-head"
        atomic_write(g / "HEAD", f"ref: {head}\n" if head.startswith("refs/") else head + "\n", mode=0o600,
                     fsync=False)
        exclude = read_inside(os.path.join(self.clone, ".git"), "info/exclude") or b""
        atomic_write(g / "info" / "exclude", exclude + b"\n/.exo/\n", mode=0o600, fsync=False)  # exo's, always
        self._write_refs(refs.branches, {})
        commits = self.git().commits_among(refs.state.values())
        labels = {label: oid for label, oid in refs.state.items() if oid in commits}
        self.state = {f"refs/state/{n}": label for n, label in enumerate(labels, 1)}
        self._write_refs(refs.branches, {ref: labels[label] for ref, label in self.state.items()})
        stamped = read_inside_stamped(os.path.join(self.clone, ".git"), "index", limit=MAX_INDEX)
        index = stamped[0] if stamped is not None and stamped[0].startswith(b"DIRC") else None
        if stamped is not None and index is not None:
            atomic_write(g / "index", index, mode=0o600, fsync=False)
            os.utime(g / "index", ns=(stamped[1], stamped[1]))  # git's racy-clean check compares with it
            if not self.git().run(["ls-files", "--", ":(exclude)*"], check=False).ok:
                index = None  # git cannot read it here (a split index's shared part is the clone's): from HEAD
        if index is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(g / "index")
            if refs.head:
                self.git().run(["read-tree", "HEAD"], check=False)  # no index: one from HEAD (stat data rebuilt)
        return refs._replace(state=labels)

    def expected_alternates(self) -> set[str]:
        """The names under which ``git clone --shared`` wrote the repository's object store into the clone."""
        objects = self.common_dir / "objects"
        return {os.path.normpath(p) for p in (str(objects), os.path.realpath(objects),
                                              os.path.join(str(self.repo.path), ".git", "objects"))}

    def _write_refs(self, branches: dict[str, str], state: dict[str, str]) -> None:
        rows = sorted({**branches, **state}.items())
        atomic_write(self.gitdir / "packed-refs", "# pack-refs with: sorted \n" + "".join(
            f"{oid} {ref}\n" for ref, oid in rows), mode=0o600, fsync=False)

    def environ(self) -> dict[str, str]:
        """The environment of every git call that reads the clone: exo's git folder, nothing of anyone's config.

        Objects git writes (a stash-shaped commit of the uncommitted work, say) go to the
        repository's store; the clone's store is read as an alternate.
        """
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(GIT_DIR=str(self.gitdir), GIT_WORK_TREE=os.path.realpath(self.clone),
                   GIT_INDEX_FILE=str(self.gitdir / "index"), GIT_OBJECT_DIRECTORY=str(self.common_dir / "objects"),
                   GIT_ALTERNATE_OBJECT_DIRECTORIES=str(self.gitdir / "objects"), GIT_CONFIG_NOSYSTEM="1",
                   GIT_CONFIG_GLOBAL=os.devnull, GIT_ATTR_NOSYSTEM="1", GIT_NO_REPLACE_OBJECTS="1",
                   GIT_NO_LAZY_FETCH="1", GIT_PROTOCOL_FROM_USER="0")
        for key, default in IDENTITY.items():  # no config of anyone's: who writes exo's commits, said here
            env[key] = os.environ.get(key) or default
        return env

    def git(self) -> Git:
        """A git client that reads the clone's work tree and index through exo's folder (call ``refresh`` first)."""
        return Git(os.path.realpath(self.clone), environ=self.environ())


# --------------------------------------------------------------------------- taking the work back


class Fetched(NamedTuple):
    """What ``fetch`` took back into the repository, kept under the agent's refs."""

    head: str | None  # the commit HEAD names (None: unborn or unreadable)
    branches: dict[str, str]  # "x" (branch name) -> object name
    state: dict[str, str]  # label ("refs/tags/v1", "stash@{0}", "rebase-merge/onto"...) -> commit


def fetch(reader: Reader, agent_id: str) -> Fetched:
    """Take the clone's branches into ``refs/exo/clones/<id>/heads/`` and every other commit its git state holds
    into ``.../state/<n>``: the repository then has every object, and ``gc`` keeps them.

    The source of the fetch is exo's private folder, so the upload-pack git runs reads exo's
    config. A ref the clone dropped is dropped here too (``--prune``); the base ref stays.
    """
    refs = reader.refresh()
    ns = clone_refs(agent_id)
    proc = reader.repo.run(["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules",
                            "--prune", "--no-auto-gc", "--no-auto-maintenance", str(reader.gitdir),
                            f"+refs/heads/*:{ns}heads/*", f"+refs/state/*:{ns}state/*"], check=False, timeout=600)
    if not proc.ok:
        raise external("git fetch (from an agent's clone)", proc)
    head = refs.branches.get(refs.head or "") if (refs.head or "").startswith("refs/") else refs.head
    return Fetched(head, {r[len("refs/heads/"):]: o for r, o in refs.branches.items()}, refs.state)


class Advanced(NamedTuple):
    """What ``advance`` did to the repository's branch: ``moved``, ``same``, ``created``, ``behind`` (the
    repository's is ahead: left as it is) or ``refused`` (they moved apart)."""

    outcome: str
    old: str | None
    new: str | None
    reason: str = ""


def advance(repo: Git, branch: str, new: str | None) -> Advanced:
    """Move ``refs/heads/<branch>`` to ``new`` only by fast-forward (compare-and-swap); never forced."""
    ref = f"refs/heads/{branch}"
    old = repo.rev(ref)
    if new is None or old == new:
        return Advanced("same", old, old)
    if old is None:
        proc = repo.run(["update-ref", "-m", "exo: clone branch", ref, new, ""], check=False)
        return Advanced("created", None, new) if proc.ok else Advanced("refused", None, new, proc.stderr.strip())
    if not repo.is_ancestor(old, new):
        if repo.is_ancestor(new, old):  # merged into in the repository: the clone catches up at its stop
            return Advanced("behind", old, new, f"{branch} in the repository is ahead of the clone's")
        return Advanced("refused", old, new, f"{branch} in the repository has commits the clone's {branch} "
                                              "does not (it was merged into or moved): rebase on it first")
    where = repo.worktree_of(branch)
    if where:
        return Advanced("refused", old, new, f"{branch} is checked out in {where}")
    proc = repo.run(["update-ref", "-m", "exo: clone branch (fast-forward)", ref, new, old], check=False)
    if not proc.ok:
        return Advanced("refused", old, new, proc.stderr.strip() or "the branch moved meanwhile")
    return Advanced("moved", old, new)


def drop_refs(repo: Git, agent_id: str) -> int:
    """Delete ``refs/exo/clones/<id>/`` (the clone is gone); how many refs."""
    ns = clone_refs(agent_id)
    found = repo.run(["for-each-ref", "--format=%(refname) %(objectname)", ns], check=False).stdout.splitlines()
    lines = [f"delete {ref} {oid}\n" for ref, _, oid in (x.partition(" ") for x in found) if ref.startswith(ns)]
    if lines:
        repo.run(["update-ref", "--stdin"], input="".join(lines), check=False)
    return len(lines)


def remove_clone(path: str | os.PathLike[str]) -> None:
    """Delete a clone's folder (never following a link out of it; folders the agent made read-only too)."""
    remove_tree(path)


def operations_in_progress(clone: str | os.PathLike[str]) -> list[str]:
    """The operations in progress in the clone (as ``gitdir.operations``, its files never followed out of it)."""
    if not is_clone(clone):
        return []
    g = os.path.join(clone, ".git")

    def there(name: str) -> bool:
        return os.path.lexists(os.path.join(g, name))

    out: list[str] = []
    if there("rebase-merge"):
        out.append("rebase")
    elif there("rebase-apply"):
        out.append("am" if there("rebase-apply/applying") else "rebase")
    if there("MERGE_HEAD"):
        out.append("merge")
    todo = (read_inside(g, "sequencer/todo") or b"").decode("utf-8", "replace")
    if there("CHERRY_PICK_HEAD") or todo.startswith(("pick", "p ")):
        out.append("cherry-pick")
    if there("REVERT_HEAD") or todo.startswith(("revert", "r ")):
        out.append("revert")
    if there("sequencer") and not {"cherry-pick", "revert"} & set(out):
        out.append("cherry-pick")
    if there("BISECT_LOG"):
        out.append("bisect")
    return out


# --------------------------------------------------------------------------- where a clone's team is

HOMES = "clones.jsonl"  # in the user's exo folder: every live clone exo made, and the repository it belongs to


def record_home(folder: Path, clone: Path, repo_root: Path) -> None:
    """Note that ``clone`` (its real path and inode) is an agent's clone of ``repo_root``.

    The file holds the clones that still exist: lines of clones gone (or replaced: another inode)
    are dropped as this one is added, so it never grows past the clones on disk. Rewritten
    whole under a lock on the file itself (readers see the old file or the new one, never half).
    """
    import json

    st = os.stat(clone)
    line = json.dumps({"clone": os.path.realpath(clone), "dev": st.st_dev, "ino": st.st_ino,
                       "repo": os.path.realpath(repo_root)})
    _rewrite_homes(folder, _still_there, add=line)


def forget_homes(folder: Path, repo_root: Path, *, apply: bool = True) -> int:
    """Drop every line of ``repo_root``'s clones (``exo deinit``), and the file once no line is left; how many
    there were (``apply`` False: only count them)."""
    real = os.path.realpath(repo_root)
    return _rewrite_homes(folder, lambda rec: rec.get("repo") != real, create=False, apply=apply)


def _still_there(rec: dict[str, Any]) -> bool:
    try:
        st = os.lstat(str(rec["clone"]))
    except (OSError, KeyError, TypeError, ValueError):
        return False
    return (rec.get("dev"), rec.get("ino")) == (st.st_dev, st.st_ino)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _rewrite_homes(folder: Path, keep: Callable[[dict[str, Any]], bool], *, add: str | None = None,
                   create: bool = True, apply: bool = True) -> int:
    """Rewrite ``folder/HOMES`` with the lines ``keep`` keeps (and ``add``), under a lock on the file; lines dropped.

    No line left: the file goes (exo's folder holds nothing of a repository it left).
    """
    import json

    from exo_cli.adapters.files import locked

    path = folder / HOMES
    while True:
        if create:
            folder.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        with locked(path, own_inode=True) as lock:
            if not lock.held:
                if create:
                    continue  # removed between its creation and the lock: make it again
                return 0
            text = _read_all(lock.fd).decode("utf-8", "replace") if lock.fd is not None else ""
            kept: list[str] = []
            dropped = 0
            for raw in text.splitlines():
                try:
                    rec = json.loads(raw)
                    ok = isinstance(rec, dict) and keep(rec)
                except ValueError:
                    ok = False
                if ok:
                    kept.append(raw)
                else:
                    dropped += 1
            if add is not None:
                kept.append(add)
            if not apply:
                return dropped
            if not kept:
                path.unlink(missing_ok=True)
            elif dropped or add is not None:
                atomic_write(path, "".join(x + "\n" for x in kept), mode=0o600, fsync=False)
            return dropped


def home_of(folder: Path, toplevel: Path) -> Path | None:
    """The repository an agent's clone at ``toplevel`` belongs to, as exo recorded it when it made it (never as
    anything in the clone says); None when ``toplevel`` is no clone exo made."""
    import json

    try:
        st = os.lstat(toplevel)
        text = (folder / HOMES).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    real = os.path.realpath(toplevel)
    for line in reversed(text.splitlines()):
        with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
            rec = json.loads(line)
            if rec["clone"] == real and (rec["dev"], rec["ino"]) == (st.st_dev, st.st_ino):
                return Path(str(rec["repo"]))
    return None


def team_home(top: str | os.PathLike[str], environ: Mapping[str, str]) -> Path | None:
    """The repository the agent's clone at ``top`` (``gitdir.shared_clone_top``) belongs to, as exo recorded it in
    the user's exo folder (``home_of``); None when it is no clone exo made."""
    from exo_cli.config_paths import user_config_dir

    return home_of(user_config_dir(environ), Path(top))
