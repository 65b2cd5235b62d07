"""Whether agents can be sandboxed here: what ``exo doctor`` and ``exo init`` report about bubblewrap."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exo_cli.env import Env

INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"


@dataclass(frozen=True)
class SandboxStatus:
    """``available``: bubblewrap runs a sandbox here; ``detail``: its version, or why it does not."""

    available: bool
    detail: str


def sandbox_status(env: Env) -> SandboxStatus:
    """Run the smallest sandbox exo makes (``bwrap`` from the caller's PATH) and say whether it worked."""
    from exo_cli.adapters.sandbox import probe

    ok, detail = probe(path=env.environ.get("PATH", ""))
    return SandboxStatus(available=ok, detail=detail)


def unavailable_warning(status: SandboxStatus) -> str | None:
    """The warning ``exo init`` gives when agents cannot be sandboxed here, or None."""
    if status.available:
        return None
    return f"{status.detail}: agents cannot run in a sandbox on this machine ({INSTALL_HINT})"
