"""The refusal record of sandboxed agents' network proxy: ``<state>/net/<key>.log`` and ``.refused``.

The log holds one JSON line per refused connection (time, agent, host, port, reason), cut to
``.log.1`` past ``LOG_MAX``; ``.refused`` holds the count, so ``exo agents`` reads one small file
per agent (stdlib only: it is on the path of every ``exo agents``). The files are named by
``stem``: the socket key of this life of the agent.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

LOG_MAX = 1 << 20  # bytes of refusal log kept before it is cut


def folder(state_dir: Path) -> Path:
    """Where the proxy records refusals (hidden from every sandbox with the rest of the state folder)."""
    return state_dir / "net"


def stem(key: str) -> str:
    """The file name of one agent's life: its socket key (a later agent of the same name starts at 0; the
    record of a finished one, kept as history under another id, still finds its own)."""
    return key


def refused_count(log_dir: Path, agent: str) -> int:
    """How many connections of ``agent`` its proxy refused (0 when none was)."""
    try:
        with open(os.path.join(log_dir, f"{agent}.refused"), encoding="ascii") as f:
            return max(0, int(f.read().strip() or 0))
    except (OSError, ValueError):
        return 0


def refusals(log_dir: Path, agent: str, *, last: int = 20) -> list[dict[str, object]]:
    """The last ``last`` refusals logged for ``agent`` (oldest first)."""
    import json

    try:
        lines = (log_dir / f"{agent}.log").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    out: list[dict[str, object]] = []
    for line in lines[-last:]:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def record(log_dir: Path, agent: str, count: int, line: str) -> None:
    """Append ``line`` to ``agent``'s log (cut when too long) and write ``count`` (the caller serializes)."""
    from exo_cli.adapters.files import atomic_write

    log = log_dir / f"{agent}.log"
    try:
        if log.stat().st_size > LOG_MAX:
            os.replace(log, log.with_name(log.name + ".1"))
    except OSError:
        pass
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line.encode("utf-8", "replace"))
        finally:
            os.close(fd)
        atomic_write(log_dir / f"{agent}.refused", f"{count}\n", mode=0o600, fsync=False)
    except OSError:
        pass
