"""Where a repository's tmux server listens: one socket for every exo process of the repository.

``tmux -L <name>`` puts the socket in ``$TMUX_TMPDIR/tmux-<uid>/``, so two exo processes whose
``TMUX_TMPDIR`` differ (an agent CLI that drops it from its MCP servers' or hooks' environment, a
second terminal) would reach two servers and split the team. The first process that starts the
server pins its socket's path in the repository's runtime folder (``tmux-socket``); every exo
process then talks to that path (``tmux -S``). Until a server was started, the path is where
``tmux -L`` would put it, so a server started by an earlier exo is found as before.
"""

from __future__ import annotations

import os
from pathlib import Path

PIN = "tmux-socket"  # the file in the runtime folder that names the server's socket


def default(name: str) -> str:
    """Where ``tmux -L <name>`` puts the socket for this process's ``TMUX_TMPDIR``."""
    base = os.environ.get("TMUX_TMPDIR") or "/tmp"
    return os.path.join(base, f"tmux-{os.getuid()}", name)


def pinned(runtime_dir: Path, name: str) -> str | None:
    """The pinned socket path, or None when none is pinned or the pin names no socket of exo's.

    Only an absolute path ending in ``tmux-<uid>/<name>`` counts: a pin rewritten to point at
    another server (the user's own tmux) is ignored.
    """
    try:
        with open(runtime_dir / PIN, encoding="utf-8") as fh:
            text = fh.read(4097)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    path = text.strip()
    ok = (len(text) <= 4096 and os.path.isabs(path) and "\0" not in path and "\n" not in path
          and os.path.basename(path) == name and os.path.basename(os.path.dirname(path)) == f"tmux-{os.getuid()}")
    return path if ok else None


def pin(runtime_dir: Path, name: str) -> str:
    """The socket to start the server on: the pinned one, else this process's default, pinned now.

    The socket's folder is made private (as tmux makes it for ``-L``; ``-S`` makes none).
    """
    from exo_cli.adapters.files import ensure_private_dir

    path = pinned(runtime_dir, name)
    if path is None:
        ensure_private_dir(runtime_dir, parents=True)
        tmp = runtime_dir / f"{PIN}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, (default(name) + "\n").encode())
        finally:
            os.close(fd)
        try:
            os.link(tmp, runtime_dir / PIN)  # the first process's pin stays: a racing one reads it
        except FileExistsError:
            if pinned(runtime_dir, name) is None:  # a pin that names no socket of exo's: ours replaces it
                os.replace(tmp, runtime_dir / PIN)
        finally:
            tmp.unlink(missing_ok=True)
        path = pinned(runtime_dir, name) or default(name)
    ensure_private_dir(Path(os.path.dirname(path)), parents=True)
    return path
