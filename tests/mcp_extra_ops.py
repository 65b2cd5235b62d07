"""Operations that exist only in tests: a TL-only tool, a blocking tool, a noisy tool.

``register()`` adds them to the registry (``unregister()`` removes them). Run
``python -c "import mcp_extra_ops; mcp_extra_ops.main()" mcp ...`` (tests/ on PYTHONPATH)
to serve them from a real ``exo mcp`` process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from exo_cli import cancel, registry

NAMES = ("test_tl_only", "test_block", "test_noisy")
started = threading.Event()
observed = threading.Event()


def tl_only(env: Any, *, word: str = "hi") -> dict[str, Any]:
    """Echo a word back; only a TL may do this.

    The test stand-in for spawn, merge, answer and kill. A dev server must not list it
    and must refuse it when it is reached anyway.
    """
    return {"word": word, "caller": env.caller.agent_id}


def block(env: Any, *, seconds: float = 30.0) -> dict[str, Any]:
    """Wait up to some seconds, like `wait` and `question` do.

    Polls exo_cli.cancel between short sleeps and returns early when the client cancels.
    It writes the file named by EXO_TEST_MARK when it sees the cancellation.
    """
    started.set()
    begun = env.environ.get("EXO_TEST_STARTED")
    if begun:  # tells a test in another process that the call is running
        Path(begun).write_text("started")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cancel.cancelled():
            observed.set()
            mark = env.environ.get("EXO_TEST_MARK")
            if mark:
                Path(mark).write_text("cancelled")
            return {"cancelled": True}
        time.sleep(0.01)
    return {"cancelled": False}


def noisy(env: Any) -> dict[str, Any]:
    """Print to stdout, from Python and from a child process, then answer.

    A tool must never corrupt the protocol: exo mcp keeps stdout for JSON-RPC only.
    """
    print("noise from print()")
    sys.stdout.flush()
    os.write(1, b"noise from fd 1\n")
    subprocess.run(["echo", "noise from a child process"], check=True)
    return {"ok": True}


def register() -> None:
    registry.op("test_tl_only", tools=["test_tl_only"], roles=("tl",), read_only=True,
                help={"word": "The word to echo."})(tl_only)
    registry.op("test_block", tools=["test_block"], roles=("tl", "dev"), read_only=True, blocking=True,
                help={"seconds": "How long to wait at most."})(block)
    registry.op("test_noisy", tools=["test_noisy"], roles=("tl", "dev"), read_only=True, help={})(noisy)


def unregister() -> None:
    for name in NAMES:
        registry.OPS.pop(name, None)


def main() -> None:
    """Run exo's CLI (``sys.argv[1:]``) with the test operations registered."""
    registry.load_all()
    register()
    from exo_cli.main import main as exo_main

    exo_main()
