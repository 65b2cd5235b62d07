"""A minimal bubblewrap sandbox around a command with a network plan, for the network tests.

The real sandbox builder (``exo_cli/adapters/sandbox.py``, issue 31) consumes the same ``NetworkPlan``
the same way: ``--unshare-net``, a read-only bind per ``plan.binds``, ``--setenv`` per ``plan.env`` and
``plan.prelude`` before the command. This one follows platform-facts-3's recipe: root read-only,
private /tmp and /run, capabilities dropped, its own pid namespace.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from exo_cli.adapters.netproxy import NetworkPlan


def bwrap_missing() -> str | None:
    """Why bubblewrap cannot run a sandbox here (None when it can)."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed"
    r = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--unshare-net", "--", "true"], capture_output=True, text=True,
                       timeout=60)
    return None if r.returncode == 0 else f"bwrap cannot make a network namespace here: {r.stderr.strip()}"


def bwrap_argv(plan: NetworkPlan, argv: Sequence[str], *, env: Mapping[str, str], writable: Sequence[Path] = (),
               readable: Sequence[Path] = (), cwd: Path | None = None) -> list[str]:
    """``bwrap ... -- <plan.prelude> argv`` with exactly ``env`` plus the plan's variables."""
    out = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/run",
           "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--cap-drop", "ALL",
           "--die-with-parent", "--clearenv"]
    for path in readable:
        out += ["--ro-bind", str(path), str(path)]
    for path in writable:
        out += ["--bind", str(path), str(path)]
    for src, dst in plan.binds:
        out += ["--ro-bind", src, dst]
    for key, value in {**env, **plan.env}.items():
        out += ["--setenv", key, value]
    if cwd is not None:
        out += ["--chdir", str(cwd)]
    return [*out, "--", *plan.prelude, *argv]
