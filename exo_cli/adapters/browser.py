"""Open a URL that holds a secret in the user's browser without putting the secret on a command line.

Any process of the same user can read ``/proc/<pid>/cmdline``, agents included, so the browser
is given the path of a private file (0600 in a 0700 folder) whose only content is a redirect
to the URL; the file is removed as soon as its secret is used (``forget``) or at exit.
"""

from __future__ import annotations

import html
import os
import sys
from pathlib import Path

from exo_cli.adapters.files import atomic_write, ensure_private_dir


def redirect_file(folder: Path, url: str) -> Path:
    """Write the private redirect page to ``url`` in ``folder`` (made private); return its path."""
    ensure_private_dir(folder)
    path = folder / f"ui-{os.getpid()}.html"
    target = html.escape(url, quote=True)
    atomic_write(path, f'<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
                       f'<meta http-equiv="refresh" content="0;url={target}"><title>exo ui</title>\n',
                 mode=0o600, fsync=False)
    return path


def can_open(environ: dict[str, str]) -> bool:
    """A graphical browser can be started: macOS, or a display on Linux (never a terminal browser that
    would take over the terminal ``exo ui`` runs in)."""
    return sys.platform == "darwin" or bool(environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"))


def open_file(path: Path) -> bool:
    """Ask the system's browser to open ``path``; False when none would."""
    import webbrowser

    try:
        return webbrowser.open(path.as_uri(), new=2)
    except webbrowser.Error:
        return False


def forget(path: Path | None) -> None:
    if path is not None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
