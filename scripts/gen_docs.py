"""Generate completions/ (bash, zsh, fish) and man/ (exo.1 + one page per subcommand).

Run `python scripts/gen_docs.py` after changing a command; tests/test_docs.py fails when the
committed files are stale (`--check` does the same comparison here).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MAN_DATE = "2026-11-22"  # fixed so the pages only change when the commands do


def load_all_commands() -> None:
    """Commands load lazily; click-man and completion need them all present."""
    import click

    from exo_cli.cli import cli
    from exo_cli.commands import COMMANDS

    ctx = click.Context(cli)
    for name in COMMANDS:
        cli.get_command(ctx, name)


def generate(target: Path) -> None:
    from click_man.core import write_man_pages

    from exo_cli import __version__
    from exo_cli.cli import cli
    from exo_cli.commands.completion import SHELLS, completion_source

    load_all_commands()
    comp = target / "completions"
    comp.mkdir(parents=True, exist_ok=True)
    names = {"bash": "exo.bash", "zsh": "exo.zsh", "fish": "exo.fish"}
    for shell in SHELLS:
        (comp / names[shell]).write_text(completion_source(shell), encoding="utf-8")
    man = target / "man"
    man.mkdir(parents=True, exist_ok=True)
    hidden = {n for n, c in cli.commands.items() if c.hidden}
    visible = {n: c for n, c in cli.commands.items() if n not in hidden}
    saved = dict(cli.commands)
    cli.commands.clear()
    cli.commands.update(visible)
    try:
        write_man_pages("exo", cli, version=__version__, target_dir=str(man), date=MAN_DATE)
    finally:
        cli.commands.clear()
        cli.commands.update(saved)


def snapshot(base: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for sub in ("completions", "man"):
        for f in sorted((base / sub).glob("*")):
            out[f"{sub}/{f.name}"] = f.read_bytes()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail when the committed files are stale")
    args = parser.parse_args()
    if not args.check:
        for sub in ("completions", "man"):
            shutil.rmtree(ROOT / sub, ignore_errors=True)
        generate(ROOT)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh, committed = snapshot(Path(tmp)), snapshot(ROOT)
    if fresh != committed:
        stale = sorted(k for k in fresh.keys() | committed.keys() if fresh.get(k) != committed.get(k))
        print("stale generated files: " + ", ".join(stale) + "\nrun: python scripts/gen_docs.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
