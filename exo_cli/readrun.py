"""``exo status`` and ``exo agents`` (``exo ls``) without Click: the team's most frequent reads.

People, scripts and team leads run them all the time (a team lead that is a language model
waits on every one), so, like the hooks (``hookrun``), they skip importing Click, which costs
about as much as the rest of the command. ``parse`` takes only the plain forms: ``status
[AGENT] [--json]`` and ``agents|ls [--all] [--json]``, options in any order, each at most
once. Anything else (``--help``, ``--watch``, ``--``, an unknown, repeated or misspelt option, an
extra argument, a shell asking for completions) returns None, and ``main`` hands the argv to
the Click command line, which answers exactly as before. Both call the same operation
through ``registry.invoke``, print through the same renderers and report errors through the
same handler (``render.guarded``), so their output and exit status are the same.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

OPERATIONS = {"status": "status", "agents": "agents", "ls": "agents"}  # command -> operation
FLAGS = {"status": ("--json",), "agents": ("--json", "--all")}  # the options each operation's plain form takes


def parse(command: str, argv: list[str]) -> tuple[str, dict[str, Any], bool] | None:
    """``(operation, its arguments, as_json)`` for ``exo COMMAND ARGV...``; None: let Click parse it."""
    operation = OPERATIONS.get(command)
    if operation is None:
        return None
    flags: set[str] = set()
    positional: list[str] = []
    for arg in argv:
        if arg in FLAGS[operation] and arg not in flags:
            flags.add(arg)
        elif arg.startswith("-"):
            return None  # --help, --watch, --, an unknown or repeated option: Click's own answer
        else:
            positional.append(arg)
    if operation == "status":
        if len(positional) > 1:
            return None  # Click's usage error
        return operation, {"agent": positional[0] if positional else None}, "--json" in flags
    if positional:
        return None
    return operation, {"show_all": "--all" in flags}, "--json" in flags


def run(command: str, argv: list[str]) -> int | None:
    """Answer ``exo COMMAND ARGV...`` and return its exit status; None when Click must handle it."""
    parsed = parse(command, argv)
    if parsed is None or "_EXO_COMPLETE" in os.environ:
        return None
    try:
        os.getcwd()
    except OSError:
        return None  # no working folder: the command line reports it as it always did
    operation, kwargs, as_json = parsed
    from exo_cli.render import guarded

    return guarded(lambda: _answer(operation, kwargs, as_json), as_json=as_json)


def _answer(operation: str, kwargs: dict[str, Any], as_json: bool) -> int:
    import exo_cli.ops.status  # noqa: F401 - declares the status and agents operations
    from exo_cli.env import Env
    from exo_cli.registry import invoke
    from exo_cli.render import emit
    from exo_cli.render.status import render_agents, render_status

    try:
        result = invoke(operation, Env(), **kwargs)
        emit(result, as_json=as_json, human=render_status if operation == "status" else render_agents)
    except (EOFError, KeyboardInterrupt):  # as the command line (Click) answers them
        sys.stderr.write("\nAborted.\n")
        return 130
    return 0
