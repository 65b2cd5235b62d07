"""Generate completions/ (bash, zsh, fish) and man/ (exo.1 + one page per subcommand).

Run `python scripts/gen_docs.py` after changing a command; tests/test_docs.py fails when the
committed files are stale (`--check` does the same comparison here).

The files carry the names the shells look for, so the wheel installs them as they are
(pyproject.toml, `[tool.setuptools.data-files]`): `completions/bash/exo`,
`completions/zsh/_exo`, `completions/fish/exo.fish`. The man pages are click-man's, with the
whole one-line summary in NAME, the help's `\\b` blocks kept as written (the examples become an
EXAMPLES section), and EXIT STATUS, ENVIRONMENT, FILES and SEE ALSO sections.
"""

from __future__ import annotations

import argparse
import inspect
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MAN_DATE = "2026-11-22"  # fixed so the pages only change when the commands do

# shell -> the file name that shell's completion loader looks for, under completions/<shell>/
COMPLETION_FILES = {"bash": "exo", "zsh": "_exo", "fish": "exo.fish"}

EXIT_CODES = [
    ("0", "Success."),
    ("2", "Usage error: an unknown command or flag, a wrong type, a bad combination of flags."),
    ("3", "Not found: an agent, bead, pull request, branch or file that does not exist."),
    ("4", "Invalid input: a value exo's own validation rejects (an unsafe name, a bad configuration value)."),
    ("5", "State conflict: a blocked bead, an existing worktree, a dirty tree, a merge conflict, work that "
          "would be lost, a role that may not do this."),
    ("6", "An external program (git, gh, tmux, Zellij, an agent CLI) failed; its stderr is in the error's data."),
    ("7", "Environment: not in a git repository, tmux or an agent CLI missing, no beads tracker."),
    ("70", "An internal error (a bug in exo); rerun with EXO_DEBUG=1 for a traceback."),
    ("130", "Interrupted (Ctrl-C)."),
]

# Commands whose exit status follows rules of their own (docs/errors.md, "Commands with their own rules").
OWN_EXIT_RULES = {
    "spawn": "0 when every task spawned; otherwise the code of the first failed task's error, after the "
             "whole result is printed (the tasks that did spawn are running).",
    "doctor": "0 when everything is consistent or was repaired; 5 when problems remain (also after "
              "--dry-run when it found any).",
    "read": "5 when the --wait-for pattern was not seen before the timeout (the result is printed).",
    "question": "0 whatever the outcome (answered, timeout, parent-dead, cancelled): the result says which.",
    "wait": "0 whatever the outcome, a timeout included: the result says which.",
    "hook": "Always 0: hooks fail open, with a warning on stderr.",
    "complete": "5 when removing the worktree would lose work or disturb another process; nothing is removed.",
    "deinit": "5 when exo holds work here or something is in the way (nothing is changed); with --dry-run, 5 "
              "when the real run would refuse.",
    "completion": "7 with --install when the shell's startup file or the man pages cannot be written (the line "
                  "to add is printed).",
}

ENVIRONMENT_OTHER = [
    ("EXO_STATE_DIR", "The state folder (default: <git common dir>/exo)."),
    ("EXO_CONFIG_DIR", "The folder of the user configuration file (default: $XDG_CONFIG_HOME/exo or ~/.config/exo)."),
    ("EXO_AGENT", "Set by exo in every agent's environment: its name. Accepted as the caller's identity only "
                  "when it names a recorded agent."),
    ("EXO_SOCKET", "Set by exo in every agent's environment: the agent's own socket to the team broker. A "
                   "process that carries it sends its calls, hooks and MCP session there."),
    ("EXO_DEBUG", "1: print a traceback on an internal error; debug logs from exo mcp."),
    ("EXO_PROCESS_READER", "psutil: read processes through psutil even where /proc exists (for tests)."),
    ("EXO_HOST", "This machine's name among exo's hosts (default: the state folder's host-name, else the hostname)."),
    ("BEADS_DIR", "The beads tracker folder (default: the main checkout's .beads/)."),
    ("HANGAR_ROOT", "A hangar folder: worktrees go to $HANGAR_ROOT/worktrees."),
    ("XDG_RUNTIME_DIR", "The base of exo's short runtime folder (else /tmp)."),
    ("NO_COLOR", "Plain output, no colours (as does TERM=dumb)."),
]

FILES = [
    ("exo.toml", "Team configuration at the repository root (written by exo init)."),
    (".exo/config.toml", "Local configuration in the main checkout, hidden from git."),
    ("~/.config/exo/config.toml", "User configuration ($EXO_CONFIG_DIR/config.toml when set)."),
    ("<git common dir>/exo/", "exo's state: state.db (SQLite), agents/ (each agent's private folder), logs/, "
                              "broker.log."),
    (".exo/worktrees/", "The agents' worktrees (or worktree.root, or <hangar>/worktrees)."),
    ("$XDG_RUNTIME_DIR/exo-<hash>/", "Doorbell sockets, launch FIFOs, headless records, the broker's control "
                                     "socket (broker/) and the agents' sockets (s/) (else /tmp/exo-<uid>-<hash>/)."),
]


# --------------------------------------------------------------------------- roff


def roff(text: str) -> str:
    """Text as roff: backslashes and minus signs escaped, a leading dot or quote made literal."""
    out = []
    for line in text.split("\n"):
        line = line.replace("\\", "\\e").replace("-", "\\-")
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line)
    return "\n".join(out)


def _blocks(help_text: str) -> list[str]:
    return [b for b in re.split(r"\n\s*\n", inspect.cleandoc(help_text)) if b.strip()]


def split_help(help_text: str) -> tuple[str, str, str]:
    """(summary, the description in roff, the examples in roff) of a command's help."""
    blocks = _blocks(help_text)
    summary = " ".join(blocks[0].split()) if blocks else ""
    desc: list[str] = []
    examples = ""
    for block in blocks[1:]:
        lines = block.split("\n")
        verbatim = lines[0].strip() == "\b"
        if verbatim:
            lines = lines[1:]
        if verbatim and lines and lines[0].strip().rstrip(":") == "Examples":
            examples = ".nf\n.RS 4\n" + roff(inspect.cleandoc("\n".join(lines[1:]))) + "\n.RE\n.fi"
        elif verbatim:
            desc.append(".nf\n" + roff("\n".join(lines)) + "\n.fi")
        else:
            desc.append(roff(" ".join(block.split())))
    return summary, "\n.PP\n".join(desc), examples


def _definitions(rows: list[tuple[str, str]]) -> str:
    return "\n".join(f".TP\n\\fB{roff(term)}\\fP\n{roff(text)}" for term, text in rows)


def exit_status(command: str) -> str:
    own = OWN_EXIT_RULES.get(command.split(" ", 1)[1]) if " " in command else None
    head = f"{roff(own)}\n.PP\nOtherwise, as every exo command:\n" if own else ""
    return head + _definitions(EXIT_CODES)


def environment() -> str:
    from exo_cli.config import EnvVars

    overrides = [(var, f"Overrides the configuration key {key}.") for var, key in EnvVars.CONFIG.items()]
    return _definitions(ENVIRONMENT_OTHER[:2] + overrides + ENVIRONMENT_OTHER[2:])


def _page_ref(page: str) -> str:
    return f"\\fB{roff(page)}\\fP(1)"


def see_also(command: str, subpages: list[str]) -> str:
    parts = command.split()
    pages = (["exo"] if len(parts) > 1 else []) + (["exo-" + parts[1]] if len(parts) > 2 else []) + subpages
    refs = [_page_ref(p) for p in pages] + ([] if len(parts) > 1 else [_page_ref("git"), _page_ref("tmux")])
    return ",\n".join(refs) + "\n.PP\n" + roff(
        "The docs/ folder of exo's repository explains the concepts, every command, the configuration, "
        "errors and exit codes, and where exo keeps its state.")


def man_page(ctx: Any) -> str:
    import click
    from click_man.man import ManPage

    command = ctx.command
    name = ctx.command_path
    summary, description, examples = split_help(command.help or "")
    subs = {n: c for n, c in sorted(getattr(command, "commands", {}).items()) if not c.hidden}
    subpages = [f"{name.replace(' ', '-')}-{n}" for n in subs]

    page = ManPage(name)
    page.version = _version()
    page.date = MAN_DATE
    page.short_help = roff(summary)  # whole: click-man would cut it at 45 characters
    page.synopsis = " ".join(command.collect_usage_pieces(ctx))
    page.description = roff(summary) + ("\n.PP\n" + description if description else "")
    page.options = [
        (opts, roff(text)) for opts, text in
        (p.get_help_record(ctx) for p in command.params if isinstance(p, click.Option) and not p.hidden)
        if opts
    ]
    sections = []
    if subs:
        sections.append(("COMMANDS", "\n".join(
            f".TP\n\\fB{roff(n)}\\fP\n{roff(_summary(c))} See {_page_ref(page_name)}."
            for (n, c), page_name in zip(subs.items(), subpages, strict=True))))
    sections += [("EXIT STATUS", exit_status(name)), ("ENVIRONMENT", environment()), ("FILES", _definitions(FILES))]
    if examples:
        sections.append(("EXAMPLES", examples))
    sections.append(("SEE ALSO", see_also(name, subpages)))
    return str(page) + "".join(f".SH {title}\n{body}\n" for title, body in sections)


def _summary(command: Any) -> str:
    blocks = _blocks(command.help or "")
    return " ".join(blocks[0].split()) if blocks else ""


def _version() -> str:
    from exo_cli import __version__

    return __version__


def write_man_pages(cli: Any, target: Path) -> None:
    import click

    def walk(cmd: Any, name: str, parent: Any) -> None:
        ctx = click.Context(cmd, info_name=name, parent=parent)
        (target / f"{ctx.command_path.replace(' ', '-')}.1").write_text(man_page(ctx), encoding="utf-8")
        for sub_name, sub in sorted(getattr(cmd, "commands", {}).items()):
            if not sub.hidden:
                walk(sub, sub_name, ctx)

    walk(cli, "exo", None)


# --------------------------------------------------------------------------- generation


def load_all_commands() -> None:
    """Commands load lazily; the man pages and completion need them all present."""
    import click

    from exo_cli.cli import cli
    from exo_cli.commands import COMMANDS

    ctx = click.Context(cli)
    for name in COMMANDS:
        cli.get_command(ctx, name)


def generate(target: Path) -> None:
    from exo_cli.cli import cli
    from exo_cli.commands.completion import SHELLS, completion_source

    load_all_commands()
    for shell in SHELLS:
        folder = target / "completions" / shell
        folder.mkdir(parents=True, exist_ok=True)
        (folder / COMPLETION_FILES[shell]).write_text(completion_source(shell), encoding="utf-8")
    man = target / "man"
    man.mkdir(parents=True, exist_ok=True)
    write_man_pages(cli, man)


def snapshot(base: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for sub in ("completions", "man"):
        for f in sorted((base / sub).rglob("*")):
            if f.is_file():
                out[str(f.relative_to(base))] = f.read_bytes()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
