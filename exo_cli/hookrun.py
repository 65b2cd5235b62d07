"""``exo hook EVENT [PAYLOAD] --cli CLI [--json]`` without Click: the hooks' hot path.

Agent CLIs run a hook after every tool call and every turn of every agent, so this module
imports only the stdlib and the light exo modules (the hook operation and what it needs),
never Click. ``run`` parses the few forms the agent CLIs use; anything else (``--help``,
an unknown or repeated option, a missing argument) returns None and ``main`` hands the
argv to the Click command line, which answers exactly as before. ``answer`` is the one
implementation of a hook's output and fail-open rule, shared with the Click command
(``commands/hook.py``).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from exo_cli.env import Env


def parse(argv: list[str]) -> tuple[str, str | None, str, bool] | None:
    """``(event, payload, cli, as_json)`` from the arguments after ``hook``; None: let Click parse them."""
    positional: list[str] = []
    cli: str | None = None
    as_json = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            positional += argv[i:]
            break
        if arg == "--json" and not as_json:
            as_json = True
        elif arg == "--cli" and cli is None and i < len(argv) and not argv[i].startswith("-"):
            cli = argv[i]
            i += 1
        elif arg.startswith("--cli=") and cli is None:
            cli = arg[6:]
        elif arg.startswith("-") and arg != "-":
            return None  # --help, -h, an unknown or repeated option: Click's own answer
        else:
            positional.append(arg)
    if not 1 <= len(positional) <= 2:
        return None  # a missing or extra argument: Click's usage error
    return positional[0], (positional[1] if len(positional) == 2 else None), cli or "claude", as_json


def _stdin() -> str:
    try:
        if sys.stdin is None or sys.stdin.isatty():
            return ""
        return sys.stdin.read()
    except (OSError, ValueError):
        return ""


def _warn(text: str) -> None:
    """One line on stderr, made safe (a warning may quote what an agent wrote); loaded only when needed."""
    from exo_cli.render import warn

    warn(text)


def answer(env: Env, event: str, cli: str, payload: str | None, as_json: bool) -> None:
    """Run the hook and print its answer; fail open: any error is one warning line on stderr."""
    from exo_cli.ops import hooks
    from exo_cli.registry import invoke

    output = hooks.neutral(event, cli)
    result = None
    try:
        if payload is None:
            payload = _stdin()
        result = invoke("hook", env, event=event, cli=cli, payload=payload)
        output = result.output
        if result.warning:
            _warn(f"exo hook {event}: warning: {result.warning}")
    except Exception as exc:  # fail open: never brick the agent
        _ignored(event, exc)
    if result is not None:
        from exo_cli.records import to_jsonable

        agent_side(list(result.actions))
        _print(output, to_jsonable(result), as_json)
    else:
        _print(output, None, as_json)


def relayed(event: str, cli: str, payload: str | None, as_json: bool) -> None:
    """The hook of an agent with a socket: its broker runs it (``relay.hook``); fail open as ``answer`` does.

    Nothing here opens exo's state: a broker that cannot be reached (nor started) gives the
    neutral answer and one warning line, exactly as a broken state does on the direct path.
    """
    from exo_cli import relay

    try:
        if payload is None:
            payload = _stdin()
        result = relay.hook(event, cli, payload, as_json)
        agent_side(result.get("actions"))
        output = result.get("output")
        if result.get("warning"):
            _warn(f"exo hook {event}: warning: {result['warning']}")
        _print(output, result, as_json)
    except Exception as exc:  # fail open: never brick the agent
        from exo_cli.ops.hooks import neutral

        _ignored(event, exc)
        _print(neutral(event, cli), None, as_json)


def agent_side(actions: object) -> None:
    """What a hook's answer asks of the agent's own side: an agent's clone rebased onto its moved parent branch
    (``rebase-here:<commit>``), in this process (the agent's), never in the broker; fails open."""
    if not isinstance(actions, list):
        return
    for action in actions:
        if isinstance(action, str) and action.startswith("rebase-here:"):
            from exo_cli.ops.rebase import rebase_here

            try:
                rebase_here(os.getcwd(), action.split(":", 1)[1])
            except Exception as exc:  # noqa: BLE001 - fail open: the next stop tells the agent
                _warn(f"exo hook: warning: the rebase in your clone did not run: {exc}")


def _ignored(event: str, exc: BaseException) -> None:
    msg = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
    _warn(f"exo hook {event}: warning: {' '.join(str(msg).split())} (exo ignored this hook)")


def _print(output: object, result: object, as_json: bool) -> None:
    import json

    if as_json:
        sys.stdout.write(json.dumps(result if result is not None else {"output": output}) + "\n")
    elif output is not None:
        sys.stdout.write(json.dumps(output, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def run(argv: list[str]) -> int | None:
    """Answer ``exo hook ...`` (the arguments after ``hook``); None when Click must handle them."""
    parsed = parse(argv)
    if parsed is None:
        return None
    event, payload, cli, as_json = parsed
    try:
        os.getcwd()
    except OSError:
        return None  # no working folder: the command line reports it as it always did
    try:
        if os.environ.get("EXO_SOCKET"):  # an agent with a socket: its broker answers (env.SOCKET_VAR)
            relayed(event, cli, payload, as_json)
        else:
            from exo_cli.env import Env

            answer(Env(), event, cli, payload, as_json)
    except BrokenPipeError:  # as the command line does: the reader went away
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except (EOFError, KeyboardInterrupt):  # as the command line (Click) answers them
        sys.stderr.write("\nAborted.\n")
        return 130
    return 0
