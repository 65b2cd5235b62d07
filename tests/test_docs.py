"""Generated completions and man pages are fresh; `exo completion` prints the same scripts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Exo

ROOT = Path(__file__).resolve().parent.parent


def test_generated_files_are_fresh() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(("shell", "file"), [("bash", "exo.bash"), ("zsh", "exo.zsh"), ("fish", "exo.fish")])
def test_completion_command_matches_file(repo: Path, shell: str, file: str) -> None:
    r = Exo(repo)("completion", shell)
    assert r.exit_code == 0
    assert r.stdout == (ROOT / "completions" / file).read_text()


def test_bash_completion_completes_commands(repo: Path) -> None:
    env = {"COMP_WORDS": "exo sta", "COMP_CWORD": "1", "_EXO_COMPLETE": "bash_complete"}
    proc = subprocess.run([sys.executable, "-m", "exo_cli"], cwd=repo, capture_output=True, text=True,
                          env={**__import__("os").environ, **env, "PYTHONPATH": str(ROOT)})
    assert "plain,status" in proc.stdout.splitlines()


def test_man_pages_exist_for_every_visible_command() -> None:
    from exo_cli.commands import COMMANDS

    for name, entry in COMMANDS.items():
        if not entry.hidden:
            assert (ROOT / "man" / f"exo-{name}.1").exists(), name
