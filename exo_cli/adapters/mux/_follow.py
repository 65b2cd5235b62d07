"""Follow a headless agent's log for ``exo attach``, as ``tail -n 200 -F`` does, but safe to look at.

An agent's output is whatever its CLI printed: escape sequences that would retitle the human's
terminal, set its clipboard (OSC 52) or clear the screen. Every byte is shown through
``validate.visible`` (ESC as ``^[``, C1 controls, lone bytes that are not UTF-8 as U+FFFD), so
nothing an agent wrote acts on the terminal. Follows the file by name: a truncated or replaced
log is read again from its start. Runs until interrupted (Ctrl-C).

    python -m exo_cli.adapters.mux._follow LOG [LINES]
"""

from __future__ import annotations

import codecs
import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

from exo_cli.validate import visible

POLL = 0.25  # seconds between looks at a quiet log


def _tail(data: bytes, lines: int) -> bytes:
    """The last ``lines`` lines of ``data``."""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:]) if lines > 0 else b""


def follow(path: str, lines: int = 200, *, out: TextIO | None = None,
           stop: Callable[[], bool] | None = None) -> None:
    """Print the last ``lines`` lines of ``path``, then what is appended, made visible; until ``stop()``."""
    stream = out if out is not None else sys.stdout
    should_stop = stop or (lambda: False)
    decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
    fh = None
    ident: tuple[int, int] | None = None
    pos = 0
    first = True
    while not should_stop():
        if fh is None:
            try:
                fh = open(path, "rb")  # noqa: SIM115 - kept open while it is the same file
            except FileNotFoundError:
                time.sleep(POLL)
                continue
            st = os.fstat(fh.fileno())
            ident, pos = (st.st_dev, st.st_ino), 0
            if first:
                data = fh.read()
                pos = len(data)
                data = _tail(data, lines)
                first = False
            else:
                data = fh.read()
                pos += len(data)
        else:
            data = fh.read()
            pos += len(data)
        if data:
            stream.write(visible(decoder.decode(data)))
            stream.flush()
            continue
        now: os.stat_result | None
        try:
            now = os.stat(path)
        except FileNotFoundError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != ident or now.st_size < pos:
            fh.close()  # replaced, removed or truncated: read it again from its start
            fh = None
            continue
        time.sleep(POLL)


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: python -m exo_cli.adapters.mux._follow LOG [LINES]\n")
        return 2
    try:
        follow(argv[0], int(argv[1]) if len(argv) > 1 else 200)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
