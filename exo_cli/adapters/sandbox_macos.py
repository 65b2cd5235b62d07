"""macOS, experimental: the same ``sandbox.Plan`` as a ``sandbox-exec`` profile (Seatbelt's SBPL).

Built to the documented interface of ``sandbox-exec(1)`` and the SBPL rules Apple's own profiles
use (``/System/Library/Sandbox/Profiles``); it cannot run here (Linux), so it is checked as text
only, and ``exo spawn`` does not use it. What it says, from a plan:

- ``(deny default)``, then processes, signals inside the sandbox, sysctl reads and Mach lookups
  allowed (the CLIs need them); every file readable but the hidden folders and files, with what
  is shown again under them (the last matching SBPL rule wins, so deeper paths come later);
- writes only to the plan's writable folders, its private temporary folders and ``/dev`` ttys;
- Unix sockets: connecting is refused everywhere but the agent's own socket folder (Seatbelt
  checks the socket's path, so nothing needs hiding for that); the network otherwise as the plan's
  ``Network``: ``host`` allows it, ``none`` and ``bridge`` refuse it (the bridge's socket folder
  is allowed like the agent's own).

The environment is the plan's, as on Linux (``sandbox.build``'s allow-list).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from exo_cli.adapters.sandbox import Plan

SANDBOX_EXEC = "/usr/bin/sandbox-exec"
PRIVATE_TEMP = ("/private/tmp", "/private/var/folders")


def quote(path: str) -> str:
    """A path as an SBPL string literal (``"`` and ``\\`` escaped; control characters refused)."""
    if any(ord(c) < 32 or c == "\x7f" for c in path):
        from exo_cli.errors import InvalidInput

        raise InvalidInput(f"a sandbox path holds a control character: {path!r}", field="path")
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def profile(plan: Plan) -> str:
    """The SBPL profile of ``plan``."""
    lines = [
        "(version 1)",
        "(deny default)",
        "(allow process-fork)",
        "(allow process-exec)",
        "(allow signal (target same-sandbox))",
        "(allow sysctl-read)",
        "(allow mach-lookup)",
        "(allow ipc-posix-shm)",
        "(allow file-read*)",
    ]
    # outermost first, a deeper path after the folder that holds it: the last matching rule wins
    reads = [(p, "deny") for p in (*plan.hidden, *plan.hidden_files)]
    reads += [(p, "allow") for p in (*plan.readable, *plan.sockets, *plan.writable, *(d for _, d in plan.files))]
    for path, verdict in sorted(reads, key=lambda r: (_depth(r[0]), r[1] == "allow")):
        lines.append(f"({verdict} file-read* {_match(path)})")
    writable = [*plan.writable, *PRIVATE_TEMP]
    lines.append("(allow file-write* " + " ".join(f"(subpath {quote(p)})" for p in writable) + ")")
    lines.append('(allow file-write-data (literal "/dev/null") (literal "/dev/tty") (regex #"^/dev/ttys[0-9]+$"))')
    lines.append("(deny network-outbound (remote unix-socket))")
    sockets = [*plan.sockets, *(src for src, _ in plan.network.binds)]
    if sockets:
        lines.append("(allow network-outbound " + " ".join(f"(remote unix-socket (subpath {quote(p)}))"
                                                            for p in sockets) + ")")
    if plan.network.kind == "host":
        lines.append("(allow network-outbound (remote ip))")
        lines.append("(allow network-inbound (local ip \"localhost:*\"))")
        lines.append("(allow system-socket)")
    return "\n".join(lines) + "\n"


def argv(plan: Plan) -> list[str]:
    """``sandbox-exec -p PROFILE CMD...``: ``plan.argv`` under its profile (run it in ``plan.cwd``).

    The plan is checked as on Linux first (``sandbox.build``: a writable HOME, a relative path...).
    """
    from exo_cli.adapters.sandbox import build

    build(plan)
    return [SANDBOX_EXEC, "-p", profile(plan), *plan.network.prelude, *plan.argv]


def _match(path: str) -> str:
    """A folder as a ``subpath`` (itself and everything in it), anything else as a ``literal``."""
    return f"(subpath {quote(path)})" if os.path.isdir(path) or path.endswith("/") else f"(literal {quote(path)})"


def _depth(path: str) -> int:
    norm = os.path.normpath(path)
    return 0 if norm == "/" else norm.count("/")
