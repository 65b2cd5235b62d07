"""An agent's side of the broker: its own exo calls and hooks go through its socket (no store, no SDK).

spawn gives each agent ``EXO_SOCKET``, the path of its own socket to the team broker. A process
that carries it never opens exo's state: ``registry.invoke`` sends the call here (``call``),
``exo hook`` sends the hook (``hook``), ``exo mcp`` pipes the MCP session (``relay_mcp``). The
broker decides who the caller is from the socket, never from what the request says.

- A file argument (``--prompt-file``) is read here, with the agent's own rights, and its text
  sent instead (``Op.reads``): the broker never opens a file an agent merely names.
- When the broker does not answer, the relay starts it (an unsandboxed agent can: its runtime
  folder is its user's) and waits for it, then sends the same request again under the same
  key, so a blocking ``wait`` resumes without a duplicate. A hook that still cannot reach it
  fails open exactly as before (``hookrun``); any other call is an EnvironmentError (exit 7)
  with a hint, and never falls back to acting as the human.
"""

from __future__ import annotations

import os
import time

from exo_cli.errors import EnvironmentError_, ExoError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from exo_cli.env import Env
    from exo_cli.registry import Op

SOCKET_VAR = "EXO_SOCKET"  # env.SOCKET_VAR (kept here: the hooks' path does not import env)
PROOF_VAR = "EXO_AGENT_PROOF"
RECONNECT = 60.0  # seconds a call keeps trying to reach its broker (a restarting broker on a loaded machine)
HOOK_RECONNECT = 20.0  # a hook gives up sooner: it fails open


def _unreachable(path: str, why: str) -> EnvironmentError_:
    return EnvironmentError_(
        f"exo's broker does not answer on this agent's socket ({path}): {why}",
        hint="It restarts by itself on the next exo command of the human (exo status, exo agents) or "
        "`exo doctor`; then run this again. Nothing was done.", socket=path)


def restart(environ: Mapping[str, str], cwd: str | None) -> tuple[bool, str | None]:
    """Start the broker of the agent's repository; (whether one runs now, why it cannot run).

    Outside a sandbox the agent's user can start it. ``(False, None)``: it could not even try (the
    runtime folder is out of reach): the caller waits for someone else to start it.
    """
    from pathlib import Path

    from exo_cli import __version__
    from exo_cli.adapters import broker as adapter
    from exo_cli.selfcmd import exo_command

    sock = environ.get(SOCKET_VAR) or ""
    state = environ.get("EXO_STATE_DIR") or ""
    if not sock or not state:
        return False, f"{'EXO_STATE_DIR' if sock else SOCKET_VAR} is not set"
    state_path = Path(state)
    where = str(state_path.parent.parent) if state_path.parent.name == ".git" else (cwd or "/")
    paths = adapter.Paths(adapter.runtime_of(sock))
    try:
        paths.make()
    except (ExoError, OSError):
        return False, None
    try:
        adapter.ensure(paths, argv=[*exo_command(), "-C", where, "broker", "serve"],
                       environ=adapter.broker_environ(environ, state), version=__version__, timeout=30.0)
    except ExoError as exc:
        return False, exc.message
    return True, None


def hello(environ: Mapping[str, str], kind: str, fields: Mapping[str, Any], *, wait: float = RECONNECT,
          resend: bool = True) -> tuple[Any, dict[str, Any]]:
    """Say hello on the agent's socket: (the connected socket, the broker's answer), reconnecting as needed.

    A broker that is not running is started (``restart``); once one runs, a socket that still
    does not answer is not served any more (the agent has ended): EnvironmentError_ at once. A
    broker that cannot be started is waited for until ``wait`` passes. A connection lost before
    the answer (a broker killed mid-request) is said again when ``resend``, under the same key.
    """
    from exo_cli import __version__
    from exo_cli.adapters import broker as adapter

    path = environ.get(SOCKET_VAR) or ""
    proof = environ.get(PROOF_VAR) or None
    deadline = time.monotonic() + wait
    served_by: float | None = None  # a broker runs: by then our socket must answer
    tried = False  # a start was tried since the broker last answered
    delay = 0.05
    while True:
        try:
            return adapter.hello(path, kind, __version__, timeout=None, proof=proof, **fields)
        except adapter.Unreachable as exc:
            why = exc.message
            if served_by is not None and time.monotonic() > served_by:
                raise _unreachable(path, "the broker runs but no longer serves this agent's socket (has the agent "
                                   "ended?)") from None
            if not tried:
                tried = True
                runs, failed = restart(environ, fields.get("cwd"))
                if runs:
                    served_by = time.monotonic() + 3.0
                    continue
                if failed is not None:
                    raise _unreachable(path, f"it could not be started: {failed}") from None
        except adapter.Lost as exc:  # the connection broke before the answer (a broker killed mid-request)
            if not resend:
                raise
            why = exc.message
            tried, served_by = False, None
        if time.monotonic() > deadline:
            raise _unreachable(path, why)
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def request(environ: Mapping[str, str], kind: str, fields: Mapping[str, Any], *, wait: float = RECONNECT,
            resend: bool = True) -> dict[str, Any]:
    """Send one ``call`` or ``hook`` to the agent's broker and return its answer frame (see ``hello``).

    The broker's refusal or the operation's failure is raised as the ExoError it sent.
    """
    sock, answer = hello(environ, kind, fields, wait=wait, resend=resend)
    sock.close()
    return answer


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:
        return None


def call(env: Env, operation: Op, kwargs: Mapping[str, Any]) -> Any:
    """Run ``operation`` through the agent's broker; its result as this exo's own result class."""
    import uuid

    from exo_cli.jsonable import from_jsonable
    from exo_cli.records import to_jsonable

    args = _inline_files(env, operation, dict(kwargs))
    fields = {"op": operation.name, "args": to_jsonable(args), "cwd": str(env.cwd), "cwd_given": env.cwd_given,
              "environ": dict(env.environ), "key": uuid.uuid4().hex}
    answer = request(env.environ, "call", fields)
    try:
        return from_jsonable(operation.result_type(), answer.get("result"))
    except (TypeError, ValueError, KeyError) as exc:
        raise EnvironmentError_(f"exo's broker answered in a form this exo does not read ({type(exc).__name__})",
                                hint="The broker runs another exo version: `exo broker stop` lets it restart with "
                                "this one.") from exc


def _inline_files(env: Env, operation: Op, args: dict[str, Any]) -> dict[str, Any]:
    """Each file argument the operation reads (``Op.reads``) replaced by the file's text, read here."""
    from exo_cli.adapters.files import read_named_text

    for param, target in operation.reads.items():
        name = args.get(param)
        if not isinstance(name, str) or not name or args.get(target):
            continue  # nothing to read, or both given: the operation says which is wrong
        text = read_named_text(name, env.cwd, field=param, what=param.replace("_", " "))
        existing = args.get(target)
        args[target] = [text] if existing is None or isinstance(existing, list) else text
        args[param] = None
    return args


def whoami(environ: Mapping[str, str]) -> tuple[str, str]:
    """(agent id, role) of this agent as its broker knows it (from the socket it reached)."""
    answer = request(environ, "call", {"op": "", "environ": {}})
    return str(answer.get("agent") or ""), str(answer.get("role") or "dev")


def hook(event: str, cli: str, payload: str, as_json: bool) -> dict[str, Any]:
    """Send one hook to the broker; its HookResult as JSON (raises what the broker or the wire raised)."""
    fields = {"event": event, "cli": cli, "payload": payload, "cwd": _cwd(), "environ": dict(os.environ)}
    answer = request(os.environ, "hook", fields, wait=HOOK_RECONNECT)
    result = answer.get("result")
    return result if isinstance(result, dict) else {}
