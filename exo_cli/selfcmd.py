"""How to run this very exo again from another process (hooks, MCP entries, agents)."""

from __future__ import annotations

import os
import sys


def exo_command() -> list[str]:
    """Return an absolute argv that runs this exo.

    The ``exo`` script installed beside the running interpreter when there is one (a
    venv or pipx install), otherwise ``[python, "-m", "exo_cli"]`` with this interpreter.
    Never a bare ``exo``: agent CLIs run hooks with their own PATH.
    """
    python = os.path.abspath(sys.executable)
    script = os.path.join(os.path.dirname(python), "exo")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        return [script]
    return [python, "-m", "exo_cli"]
