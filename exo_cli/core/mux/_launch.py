"""Start an agent with exactly the environment exo passes (run as a script, stdlib only).

Usage: ``python -I -S _launch.py FIFO``. The multiplexer runs this as the pane's
command; exo writes the start request into FIFO as NUL-separated fields (see
``decode``; no ``json`` import, which would double the start time). The launcher then replaces itself with ``argv`` (same pid) in ``cwd`` with
``env`` plus the variables named in ``keep`` that the multiplexer itself set for
the pane (TERM, TMUX, TMUX_PANE, ZELLIJ...). Secrets therefore never reach a
command line, a layout file or the long-running multiplexer server's environment.
"""

from __future__ import annotations

import os
import sys

MAGIC = "EXO1"


def decode(data: bytes) -> dict:
    """Decode ``MAGIC, cwd, pid_file, n, argv*n, m, (key, value)*m, k, keep*k`` (NUL-separated)."""
    try:
        return _decode(data)
    except (IndexError, ValueError) as exc:
        raise ValueError(f"bad exo start request: {exc}") from exc


def _decode(data: bytes) -> dict:
    fields = [f.decode("utf-8", "surrogateescape") for f in data.split(b"\0")]
    if fields[0] != MAGIC:
        raise ValueError("not an exo start request")
    pos = 3
    n = int(fields[pos])
    argv = fields[pos + 1 : pos + 1 + n]
    pos += 1 + n
    m = int(fields[pos])
    flat = fields[pos + 1 : pos + 1 + 2 * m]
    env = dict(zip(flat[0::2], flat[1::2], strict=True))
    pos += 1 + 2 * m
    k = int(fields[pos])
    keep = fields[pos + 1 : pos + 1 + k]
    if not argv or len(argv) != n or len(keep) != k:
        raise ValueError("truncated exo start request")
    return {"cwd": fields[1], "pid_file": fields[2], "argv": argv, "env": env, "keep": keep}


def main(args: list[str]) -> int:
    """Read the spec from the FIFO named in ``args`` and exec it."""
    if len(args) != 1:
        sys.stderr.write("usage: _launch.py FIFO\n")
        return 2
    fifo = args[0]
    try:
        with open(fifo, "rb") as fh:
            spec = decode(fh.read())
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"exo launcher: cannot read the start request: {exc}\n")
        return 126
    try:
        os.unlink(fifo)
    except OSError:
        pass
    argv = spec["argv"]
    env = dict(spec["env"])
    for name in spec.get("keep", []):
        if name in os.environ:
            env[name] = os.environ[name]
    try:
        os.setsid()
    except OSError:
        pass  # already a session leader (tmux, Zellij)
    try:
        os.chdir(spec["cwd"])
    except OSError as exc:
        sys.stderr.write(f"exo launcher: cannot enter {spec['cwd']}: {exc}\n")
        return 126
    pid_file = spec.get("pid_file")
    if pid_file:
        tmp = f"{pid_file}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{os.getpid()}\n")
        os.replace(tmp, pid_file)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        sys.stderr.write(f"exo launcher: cannot start {argv[0]}: {exc}\n")
        return 127
    return 0  # pragma: no cover - execvpe does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
