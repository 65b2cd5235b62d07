"""Telling the human something needs them: the configured notify command, notify-send, the tmux status line.

Every channel is fire-and-forget: the program is started as nobody's child (a session of its
own, reparented before it runs: ``procrun.start_orphan``; stdin fed from a pipe, output
discarded) and never waited for, so a slow or broken notifier can never hold up a hook or an
operation, and exo's identity by ancestry never takes it for the agent that raised the event. A
program that is missing is skipped silently. ``remember``/``recall`` keep the human's session
variables for it (``ops/attention.py`` chooses them).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

HUMAN_FILE = "human-env.json"  # in the state folder: the human's session variables (see ``remember``)


def start_detached(argv: Sequence[str], *, stdin: bytes = b"", environ: Mapping[str, str] | None = None,
                   cwd: str | None = None) -> bool:
    """Start ``argv`` with exactly ``environ`` in ``cwd`` as nobody's child (``procrun.start_orphan``), ``stdin`` on
    its standard input (at most ``procrun.PIPE_MAX`` bytes); never waited for. True when it started."""
    from exo_cli.adapters.proc import which
    from exo_cli.adapters.procrun import start_orphan

    environ = dict(os.environ if environ is None else environ)
    binary = argv[0] if os.sep in argv[0] else which(argv[0], environ.get("PATH") or os.defpath)
    if binary is None or not os.access(binary, os.X_OK):
        return False
    return start_orphan([os.path.abspath(binary), *argv[1:]], environ, cwd=cwd or environ.get("HOME") or "/",
                        stdin=stdin) is not None


def remember(state_dir: Path, variables: Mapping[str, str]) -> None:
    """Keep the human's session variables (an allow-list: no secret among them) for the notifier, mode 0600."""
    from exo_cli.adapters.files import atomic_write

    path = state_dir / HUMAN_FILE
    data = json.dumps(dict(sorted(variables.items())), ensure_ascii=False)
    try:
        if path.read_text(encoding="utf-8") == data:
            return
    except (OSError, UnicodeDecodeError):
        pass
    with contextlib.suppress(OSError):
        atomic_write(path, data, mode=0o600, fsync=False)


def recall(state_dir: Path) -> dict[str, str] | None:
    """The human's session variables ``remember`` kept, or None."""
    import stat

    try:  # never through a link, never a fifo or a device, never more than a small file's worth
        fd = os.open(state_dir / HUMAN_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            raw = os.read(fd, 1 << 16) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        finally:
            os.close(fd)
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str) and "\0" not in k + v}


def account() -> dict[str, str]:
    """HOME, USER, LOGNAME and SHELL from the user database (not from any process's environment)."""
    import pwd

    try:
        entry = pwd.getpwuid(os.getuid())
    except KeyError:
        return {}
    return {"HOME": entry.pw_dir, "USER": entry.pw_name, "LOGNAME": entry.pw_name, "SHELL": entry.pw_shell}


def desktop(title: str, body: str, environ: Mapping[str, str], *, cwd: str | None = None) -> bool:
    """A desktop notification through ``notify-send`` when it is installed."""
    from exo_cli.adapters.proc import which

    binary = which("notify-send", environ.get("PATH"))
    if binary is None:
        return False
    return start_detached([binary, "--app-name=exo", title, body], environ=environ, cwd=cwd)


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
