"""Answers from another host's exo, decoded: checked against their shape before anything uses them.

exo on another host answers a request (``ops.remote``) with one JSON line on the standard output
of ``exo host-call``: ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {code, name,
message, hint, data}}``. Whatever comes back (another exo version, a broken install, a program
that is not exo at all, a hostile one) is read here and only here:

- ``envelope``: the answer line out of the raw output (bounded, any bytes), parsed strictly (no
  NaN or Infinity, numbers within 64 bits, nesting within the parser's limit) and its shape checked;
- ``result_of``: the result checked against the JSON schema of the result class the caller
  expects (``schema.type_schema``, the very schema the MCP tools publish: every field present
  with its JSON type), then built into that class (``from_jsonable``); or the error rebuilt
  (``error_from``) when the answer is a well-formed exo error.

Anything else is an ExternalFailure (exit 6) that names the host and says what did not fit:
never a crash of the caller.
"""

from __future__ import annotations

import json
from typing import Any

from exo_cli import errors
from exo_cli.jsonable import from_jsonable

# The data keys an exo error can never carry (the error's own arguments): an answer holding one is no exo's.
_RESERVED_DATA = frozenset({"self", "message", "hint"})
_ENVELOPE_KEYS = {True: {"ok", "result"}, False: {"ok", "error"}}


class Unreadable(ValueError):
    """An answer whose shape does not fit what was asked (the message says where)."""


def unreadable(host: str, why: str) -> errors.ExternalFailure:
    """The error of an answer from ``host`` that this exo cannot use."""
    from exo_cli.validate import visible

    shown = visible(why if len(why) <= 300 else why[:297] + "...")
    return errors.ExternalFailure(f"exo on host {host} answered in a form this exo does not read: {shown}",
                                  hint="Install the same exo version on every host (`exo hosts` shows each one's), "
                                  f"and check [hosts.{host}] exo.", host=host, reason="unreadable-answer")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:20]} is out of range")
    return value


def _int64(text: str) -> int:
    value = int(text)
    if not -(1 << 63) <= value < 1 << 63:
        raise ValueError(f"{text[:20]}... is out of range")
    return value


def envelope(stdout: bytes, *, host: str, returncode: int, stderr: str = "") -> dict[str, Any]:
    """The answer in ``stdout`` (the last line that starts with ``{``), with its shape checked.

    ExternalFailure naming the host when there is none, or when it is not exactly
    ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {...}}``.
    """
    from exo_cli.validate import visible

    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith(b"{")), None)
    if line is None:
        tail = (stderr.strip() or stdout.decode("utf-8", "replace").strip())[-400:]
        raise errors.ExternalFailure(f"exo on host {host} gave no answer (exit status {returncode})"
                                     + (f": {visible(tail)}" if tail else ""),
                                     hint=f"Check [hosts.{host}] exo and path; `exo doctor --hosts` checks each host.",
                                     host=host, returncode=returncode)
    try:
        answer = json.loads(line.decode("utf-8", "replace"), parse_constant=_no_constant, parse_float=_finite,
                            parse_int=_int64)
    except (ValueError, RecursionError) as exc:
        raise unreadable(host, f"not JSON ({type(exc).__name__})") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
        raise unreadable(host, "expected an object with ok true or false")
    extra = sorted(set(answer) - _ENVELOPE_KEYS[answer["ok"]])
    if extra or (not answer["ok"] and not isinstance(answer.get("error"), dict)) or (answer["ok"] and "result" not in answer):
        raise unreadable(host, "expected {ok, result} or {ok, error: {...}}"
                         + (f"; unexpected {', '.join(extra)[:100]}" if extra else ""))
    return answer


def result_of(answer: dict[str, Any], tp: Any, *, host: str) -> Any:
    """The result of a checked answer as an object of ``tp``, or the error it carries, rebuilt."""
    if not answer["ok"]:
        raise error_from(answer["error"], host=host)
    try:
        return decode(tp, answer["result"])
    except Unreadable as exc:
        raise unreadable(host, str(exc)) from None


def decode(tp: Any, value: Any) -> Any:
    """``value`` (JSON-native) checked against the schema of ``tp`` and built as ``tp``; Unreadable otherwise."""
    from exo_cli.schema import check, type_schema

    _, problems = check(type_schema(tp, output=True), value, "result")
    if problems:
        shown = "; ".join(f"{where}: {why}" for where, why in problems[:3])
        raise Unreadable(shown + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""))
    try:
        return from_jsonable(tp, value)
    except (TypeError, ValueError, KeyError) as exc:
        raise Unreadable(str(exc)) from None


def _cut(text: str, limit: int = 4000) -> str:
    """A text from another host, at most ``limit`` characters (an error says what, not everything)."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def error_from(data: Any, *, host: str) -> errors.ExoError:
    """The ExoError another host's exo answered with (``{code, name, message, hint, data}``), rebuilt.

    Only a well-formed error of one of exo's own classes comes back as itself (its class, exit
    code, message, hint and data, plus ``host``); anything else (an internal error there, an
    unknown class, a code that is not the class's, fields of the wrong type, data no exo error
    can carry) is an ExternalFailure naming the host.
    """
    from exo_cli.validate import visible

    if not isinstance(data, dict):
        return unreadable(host, "an error that is not an object")
    name, message, hint, extra = data.get("name"), data.get("message"), data.get("hint"), data.get("data", {})
    cls = errors.BY_NAME.get(name) if isinstance(name, str) else None
    if name == errors.ExoError.name and isinstance(message, str):  # a bug of exo there
        return errors.ExternalFailure(f"exo on host {host} failed: {visible(_cut(message))}",
                                      hint="That is a bug in exo on that host: run the same call there with "
                                      "EXO_DEBUG=1 for a traceback.", host=host, reason="remote-bug")
    problem = ("an error of no class exo knows" if cls is None else
               f"a {name} whose code is not {cls.rpc_code}" if data.get("code") != cls.rpc_code else
               "an error without a text message" if not isinstance(message, str) else
               "an error whose hint is not text" if hint is not None and not isinstance(hint, str) else
               "an error whose data is not an object" if not isinstance(extra, dict) else
               f"an error whose data carries {', '.join(sorted(_RESERVED_DATA & set(extra)))}"
               if _RESERVED_DATA & set(extra) else None)
    if problem is not None or cls is None or not isinstance(message, str):
        return unreadable(host, problem or "an unknown error")
    text = visible(_cut(message) or "failed")
    if f"host {host}" not in text:
        text += f" (on host {host})"
    err = cls(text, hint=visible(_cut(hint)) if isinstance(hint, str) else None)
    err.data = {**extra, "host": host}
    return err
