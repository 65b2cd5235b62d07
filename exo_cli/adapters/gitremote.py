"""The git client's remote commands: push (with the LFS objects git's hooks would have pushed), fetch, ls-remote.

``Git`` (``adapters/git.py``) inherits these methods. exo runs every git command with hooks
off (``gitrun``), and Git LFS uploads a branch's large files from its ``pre-push`` hook: so
before exo pushes a branch of a repository that has LFS objects (``<git folder>/lfs/objects``,
or ``lfs.storage`` configured) it runs ``git lfs push <remote> refs/heads/<branch>`` itself,
exactly what that hook does, and a failure there fails the push as the hook's would.
"""

from __future__ import annotations

import os
from pathlib import Path

from exo_cli.adapters.gitdir import common_dir
from exo_cli.errors import EnvironmentError_

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from exo_cli.adapters.gitrun import Finished


class Remotes:
    """push, fetch and ls-remote for ``Git``."""

    path: str
    environ: Mapping[str, str] | None

    if TYPE_CHECKING:
        def run(self, args: Sequence[str], *, check: bool = True, input: str | bytes | None = None,
                env: Mapping[str, str] | None = None, timeout: float | None = None) -> Finished: ...

        def config_get(self, key: str) -> str | None: ...

    def uses_lfs(self) -> bool:
        """Whether this repository keeps Git LFS objects (which a push must upload first)."""
        environ = os.environ if self.environ is None else self.environ
        common = common_dir(self.path, environ)
        if common is None:
            found = self.run(["rev-parse", "--path-format=absolute", "--git-common-dir"], check=False).stdout.strip()
            common = Path(found) if found else None
        if common is not None and (common / "lfs" / "objects").is_dir():
            return True
        return self.config_get("lfs.storage") is not None

    def lfs_push(self, remote: str, branch: str, *, timeout: float = 300) -> Finished | None:
        """Upload the LFS objects ``branch`` needs to ``remote`` (None when the repository has none)."""
        if not self.uses_lfs():
            return None
        from exo_cli.adapters.proc import which

        environ = os.environ if self.environ is None else self.environ
        if which("git-lfs", environ.get("PATH")) is None:
            raise EnvironmentError_(
                "This repository has Git LFS objects, but git-lfs is not installed: pushing would leave the remote "
                "without them", hint="Install git-lfs (for example `apt-get install git-lfs`), then try again.")
        return self.run(["lfs", "push", remote, f"refs/heads/{branch}"], check=False, timeout=timeout)

    def push(self, remote: str, branch: str, *, timeout: float = 300) -> Finished:
        """Push ``branch`` (its LFS objects first) to the same name on ``remote`` and make that its upstream."""
        lfs = self.lfs_push(remote, branch, timeout=timeout)
        if lfs is not None and not lfs.ok:
            return lfs
        return self.run(["push", "-u", remote, f"refs/heads/{branch}:refs/heads/{branch}"], check=False,
                        timeout=timeout)

    def push_as_is(self, remote: str, branch: str, *, force: bool = False, delete_at: str | None = None,
                   timeout: float = 300) -> Finished:
        """Push ``branch`` (its LFS objects first) to the same name on ``remote`` (``force``: over what this clone
        last pushed or fetched of it only), its upstream untouched; with ``delete_at``, delete it there while
        it points at that commit."""
        if not delete_at:
            lfs = self.lfs_push(remote, branch, timeout=timeout)
            if lfs is not None and not lfs.ok:
                return lfs
        spec = f":refs/heads/{branch}" if delete_at else f"refs/heads/{branch}:refs/heads/{branch}"
        lease = [f"--force-with-lease=refs/heads/{branch}{':' + delete_at if delete_at else ''}"] * (force or bool(delete_at))
        return self.run(["push", "--quiet", *lease, remote, spec], check=False, timeout=timeout)

    def push_commit(self, remote: str, commit: str, branch: str, *, timeout: float = 300) -> Finished:
        """Push ``commit`` to ``branch`` on ``remote`` as a fast-forward only (never forced): git refuses it when
        the remote's ``branch`` has commits ``commit`` lacks."""
        return self.run(["push", "--quiet", remote, f"{commit}:refs/heads/{branch}"], check=False, timeout=timeout)

    def remote_has_branch(self, remote: str, branch: str) -> bool | None:
        """Whether ``remote`` has ``branch`` (``ls-remote``); None when the remote cannot be asked."""
        proc = self.run(["ls-remote", "--exit-code", "--heads", remote, f"refs/heads/{branch}"], check=False)
        return bool(proc.stdout.strip()) if proc.ok else (False if proc.returncode == 2 else None)

    def fetch(self, remote: str, refspec: str, *, timeout: float = 300) -> Finished:
        """Fetch ``refspec`` from ``remote`` (no tags)."""
        return self.run(["fetch", "--no-tags", remote, refspec], check=False, timeout=timeout)
