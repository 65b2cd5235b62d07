"""Telling the human something needs them: the configured notify command, notify-send, the tmux status line.

Every channel is fire-and-forget: the program is started detached (its own session, stdin
fed from a pipe, output discarded) and never waited for, so a slow or broken notifier can
never hold up a hook or an operation. A program that is missing is skipped silently.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence

PIPE_MAX = 60000  # what a pipe holds without a reader (Linux: 64 KiB): the payload is written at once


def start_detached(argv: Sequence[str], *, stdin: bytes = b"", environ: Mapping[str, str] | None = None) -> bool:
    """Start ``argv`` in its own session with ``stdin`` (at most PIPE_MAX bytes) on its standard input.

    The payload is written before returning (it fits in the pipe, so this never blocks), so a
    hook that exits right after loses nothing; a daemon thread reaps the child in a process
    that lives on. True when it started.
    """
    import subprocess
    import threading

    if len(stdin) > PIPE_MAX:
        raise ValueError("notification payload too large")
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=dict(environ) if environ is not None else None,
                                start_new_session=True, close_fds=True)
    except OSError:
        return False
    assert proc.stdin is not None
    with contextlib.suppress(OSError):  # a notifier that exits without reading: EPIPE, nothing lost for us
        proc.stdin.write(stdin)
    with contextlib.suppress(OSError):
        proc.stdin.close()

    def reap() -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=300)

    threading.Thread(target=reap, daemon=True).start()
    return True


def desktop(title: str, body: str, environ: Mapping[str, str]) -> bool:
    """A desktop notification through ``notify-send`` when it is installed."""
    from exo_cli.adapters.proc import which

    binary = which("notify-send", environ.get("PATH"))
    if binary is None:
        return False
    return start_detached([binary, "--app-name=exo", title, body], environ=environ)


def tmux_message(text: str, environ: Mapping[str, str]) -> bool:
    """Show ``text`` on the status line of the tmux client the caller is inside (``$TMUX``)."""
    from exo_cli.adapters.proc import which

    if not environ.get("TMUX"):
        return False
    binary = which("tmux", environ.get("PATH"))
    if binary is None:
        return False
    from exo_cli.adapters.mux.tmux import literal

    return start_detached([binary, "display-message", "-d", "5000", literal(text)], environ=environ)


def bell(stream_fd: int = 1) -> None:
    """Ring the terminal bell."""
    with contextlib.suppress(OSError):
        os.write(stream_fd, b"\a")
