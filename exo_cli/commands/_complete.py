"""Dynamic shell completion: Click completers, and the fast path a TAB takes.

The shell runs ``exo`` with ``_EXO_COMPLETE=<shell>_complete`` and the words typed so far in
``COMP_WORDS``/``COMP_CWORD``. Click would import the command's module (and the operations
behind it) just to learn which argument is being completed; ``fast_complete`` answers the
common cases from the table below instead, so completing an agent name costs little more
than importing Click. Anything the table does not cover (option names, a word after an
option, subcommand names of a group) goes to Click, whose arguments carry the same
completers (``completer``): both paths give the same answers (tests/test_completion.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import click

from exo_cli.ops import completion as kinds

if TYPE_CHECKING:
    from click.shell_completion import ShellComplete


class Spec(NamedTuple):
    """How a command's words complete."""

    args: tuple[str | None, ...]  # the kind of each positional argument, in order (None: free text)
    repeat: bool = False  # the last positional argument takes any number of values
    options: Mapping[str, str] = {}  # noqa: RUF012 - option -> the kind of its value; never mutated


SPECS: dict[str, Spec] = {
    "attach": Spec((kinds.AGENT,)),
    "read": Spec((kinds.AGENT,), repeat=True),
    "kill": Spec((kinds.LIVE_AGENT,)),
    "output": Spec((kinds.AGENT,)),
    "cost": Spec((kinds.AGENT,)),
    "budget": Spec((kinds.AGENT, None)),
    "diff": Spec((kinds.AGENT,)),
    "checkpoints": Spec((kinds.AGENT,)),
    "checkpoint": Spec((kinds.AGENT,)),
    "undo": Spec((kinds.AGENT,)),
    "conflicts": Spec((kinds.AGENT,)),
    "status": Spec((kinds.AGENT,)),
    "answer": Spec((kinds.ASKING_AGENT, None)),
    "send": Spec((kinds.LIVE_AGENTS, None)),
    "wait": Spec((kinds.AGENT,), repeat=True),
    "complete": Spec((kinds.AGENT_OR_BEAD,)),
    "spawn": Spec((kinds.READY_BEAD,), repeat=True, options={"--after": kinds.AGENT, "--host": kinds.HOST}),
    "hosts": Spec((kinds.HOST,), repeat=True),
    "pr merge": Spec((kinds.OPEN_PR,)),
    "pr show": Spec((kinds.PR,)),
    "beads show": Spec((kinds.BEAD,)),
    "config": Spec((kinds.CONFIG_KEY,), repeat=True),
}
GROUPS = ("beads", "broker", "pr", "store")  # commands whose first word is a subcommand

# Click's fish script splits each answer ("plain,VALUE<TAB>HELP") at every comma, which cuts a
# description at its first comma and a value that holds one (`exo send a,b`): this one splits at
# the first comma only. Otherwise it is Click's, word for word.
FISH_SOURCE = """\
function %(complete_func)s;
    set -l response (env %(complete_var)s=fish_complete COMP_WORDS=(commandline -cp) COMP_CWORD=(commandline -t) %(prog_name)s);

    for completion in $response;
        set -l metadata (string split --max 1 "," -- $completion);

        if test $metadata[1] = "dir";
            __fish_complete_directories $metadata[2];
        else if test $metadata[1] = "file";
            __fish_complete_path $metadata[2];
        else if test $metadata[1] = "plain";
            echo $metadata[2];
        end;
    end;
end;

complete --no-files --command %(prog_name)s --arguments "(%(complete_func)s)";
"""


def completion_class(shell: str) -> type[ShellComplete] | None:
    """Click's completion class for ``shell``; for fish, exo's (registered, so that Click's own
    ``_EXO_COMPLETE=fish_source`` prints the same script)."""
    from click.shell_completion import FishComplete, add_completion_class, get_completion_class

    if not getattr(get_completion_class("fish"), "exo", False):

        class ExoFishComplete(FishComplete):
            exo = True
            source_template = FISH_SOURCE

        add_completion_class(ExoFishComplete)
    return get_completion_class(shell)


def _directory(ctx: click.Context | None) -> str | None:
    """The ``-C DIRECTORY`` given before the command, if any."""
    root = ctx.find_root() if ctx is not None else None
    value = root.params.get("directory") if root is not None else None
    return value if isinstance(value, str) else None


def completer(kind: str) -> Any:
    """A Click ``shell_complete`` callback offering the values of ``kind``."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        found = kinds.candidates(kind, incomplete, cwd=_directory(ctx), environ=os.environ)
        return [CompletionItem(value, help=text) for value, text in found]

    complete.kind = kind  # type: ignore[attr-defined]  # read by the tests that compare both paths
    return complete


def _command_names(incomplete: str) -> list[tuple[str, str]]:
    """The commands, with the short help Click would show (without importing them)."""
    from exo_cli.commands import COMMANDS

    return [(name, click.Command(name, help=e.summary).get_short_help_str()) for name, e in sorted(COMMANDS.items())
            if not e.hidden and name.startswith(incomplete)]


def answer(args: list[str], incomplete: str) -> tuple[str | None, list[tuple[str, str]]] | None:
    """What a TAB after ``exo ARGS`` offers: (the directory of ``-C``, the candidates), or None
    when Click must decide (an option, a word after an option, a group's subcommand)."""
    if incomplete.startswith("-"):
        return None
    cwd = None
    i = 0
    while i < len(args) and args[i].startswith("-"):  # global options: only -C DIRECTORY has a value
        if args[i] != "-C" or i + 1 >= len(args):
            return None
        cwd = args[i + 1]
        i += 2
    words = args[i:]
    if not words:
        return cwd, _command_names(incomplete)
    path = words[0]
    if path in GROUPS:
        if len(words) < 2:
            return None
        path = f"{words[0]} {words[1]}"
    spec = SPECS.get(path)
    if spec is None:
        return None
    words = words[len(path.split()):]
    if words and words[-1] in spec.options:
        return cwd, kinds.candidates(spec.options[words[-1]], incomplete, cwd=cwd, environ=os.environ)
    if any(w.startswith("-") for w in words):
        return None
    n = len(words)
    kind = spec.args[n] if n < len(spec.args) else spec.args[-1] if spec.repeat else None
    return cwd, (kinds.candidates(kind, incomplete, cwd=cwd, environ=os.environ) if kind else [])


def fast_complete(cli: click.Command, environ: Mapping[str, str]) -> bool:
    """Answer the shell's completion request without loading the commands; False: let Click do it."""
    from click.shell_completion import CompletionItem

    shell, _, instruction = environ.get("_EXO_COMPLETE", "").partition("_")
    cls = completion_class(shell)
    if instruction != "complete" or cls is None:
        return False
    comp = cls(cli, {}, "exo", "_EXO_COMPLETE")
    try:
        args, incomplete = comp.get_completion_args()
    except (KeyError, ValueError, IndexError):
        return False
    found = answer(args, incomplete)
    if found is None:
        return False
    lines = [comp.format_completion(CompletionItem(value, help=text)) for value, text in found[1]]
    if lines:
        click.echo("\n".join(lines))
    return True
