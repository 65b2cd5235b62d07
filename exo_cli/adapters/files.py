"""Short private folders for sockets and locks (stdlib only: used on the hooks' hot path)."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from exo_cli.errors import EnvironmentError_


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` with mode 0700 (or check an existing one is ours and private)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise EnvironmentError_(
            f"Runtime folder {path} is not a folder owned by this user",
            hint="Remove it or set XDG_RUNTIME_DIR to a private folder.",
            path=str(path),
        )
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def runtime_dir_for(key: str, environ: Mapping[str, str] | None = None) -> Path:
    """Return (and create, mode 0700) the runtime folder for ``key`` (a repo's state dir).

    ``$XDG_RUNTIME_DIR/exo-<hash>`` when that folder is usable, else ``/tmp/exo-<uid>-<hash>``;
    short enough for unix socket paths (about 104 bytes at most).
    """
    import hashlib

    environ = os.environ if environ is None else environ
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    xdg = environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg) and os.path.isdir(xdg) and os.access(xdg, os.W_OK | os.X_OK):
        base = Path(xdg) / f"exo-{digest}"
    else:
        base = Path("/tmp") / f"exo-{os.getuid()}-{digest}"
    return ensure_private_dir(base)


def atomic_write(path: Path, data: bytes | str, *, mode: int | None = None, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically: a unique temporary file in the same folder, then rename.

    The folder is created. ``mode`` sets the file's permissions; without it an existing file
    keeps its mode and a new one gets 0644. Readers never see a half-written file, and two
    writers never share a temporary file.
    """
    import contextlib
    import tempfile

    if isinstance(data, str):
        data = data.encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".exo-tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:  # make the rename itself durable
        with contextlib.suppress(OSError):
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
