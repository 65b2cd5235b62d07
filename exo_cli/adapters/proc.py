"""Running external programs: argv lists only, never a shell."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from exo_cli.errors import EnvironmentError_, external


def which(name: str, path: str | None = None) -> str | None:
    return shutil.which(name, path=path)


def run(
    argv: Sequence[str],
    *,
    what: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    check: bool = True,
    timeout: float | None = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` and return the finished process; raise ExternalFailure on failure."""
    try:
        proc = subprocess.run(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise EnvironmentError_(
            f"{argv[0]} is not installed or not on PATH", hint=f"Install {argv[0]}.", binary=argv[0]
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise external(
            what or argv[0],
            subprocess.CompletedProcess(list(argv), -1, exc.stdout or "", f"timed out after {timeout}s"),
        ) from exc
    if check and proc.returncode != 0:
        raise external(what or " ".join(argv[:2]), proc)
    return proc
