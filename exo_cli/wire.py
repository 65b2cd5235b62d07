"""Results and errors as they cross a wire (another host's exo answers in JSON): back into objects.

``records.to_jsonable`` turns an operation's result (dataclasses, records, lists, dicts) into
JSON-native values; ``from_jsonable`` turns them back into the result's own classes, guided by
their annotations, so a command renders a result computed on another host exactly as one
computed here. ``error_from`` rebuilds the ExoError (same class, code, message and data).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from exo_cli import errors


def from_jsonable(tp: Any, value: Any) -> Any:
    """``value`` (JSON-native) as an object of the annotation ``tp``."""
    if value is None or tp is Any or tp is object:
        return value
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return from_jsonable(typing.get_args(tp)[0], value)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        for option in options:
            try:
                return from_jsonable(option, value)
            except (TypeError, ValueError, KeyError):
                continue
        return value
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple):
        if not isinstance(value, list):
            raise TypeError(f"expected a list for {tp}")
        args = typing.get_args(tp)
        item = args[0] if args else Any
        if origin is tuple and len(args) >= 2 and args[1] is not Ellipsis:
            return tuple(from_jsonable(a, v) for a, v in zip(args, value, strict=False))
        items = [from_jsonable(item, v) for v in value]
        return tuple(items) if origin is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise TypeError(f"expected an object for {tp}")
        args = typing.get_args(tp)
        inner = args[1] if len(args) == 2 else Any
        return {k: from_jsonable(inner, v) for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build(tp, value, {f.name: f for f in dataclasses.fields(tp)})
    if isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields"):
        return _build(tp, value, None)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(tp, type) and tp in (str, int, float, bool) and not isinstance(value, tp):
        raise TypeError(f"expected {tp.__name__}, got {type(value).__name__}")
    return value


def _build(cls: type, value: Any, fields: dict[str, Any] | None) -> Any:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object for {cls.__name__}")
    # records.py names Any only for type checkers (it stays cheap on the hooks' path): supply it here
    hints = typing.get_type_hints(cls, localns={"Any": Any}, include_extras=True)
    kwargs: dict[str, Any] = {}
    names = list(fields) if fields is not None else list(cls._fields)  # type: ignore[attr-defined]
    for name in names:
        if name in value:
            kwargs[name] = from_jsonable(hints.get(name, Any), value[name])
        elif fields is not None:
            f = fields[name]
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                if f.repr:
                    raise TypeError(f"{cls.__name__} needs {name}")
                kwargs[name] = None  # a field the other side never sends (repr=False): unknown here
        elif name not in getattr(cls, "_field_defaults", {}):
            raise TypeError(f"{cls.__name__} needs {name}")
    return cls(**kwargs)


def error_from(data: Any, *, host: str) -> errors.ExoError:
    """The ExoError another host's exo answered with (``{code, name, message, hint, data}``), rebuilt."""
    from exo_cli.validate import visible

    if not isinstance(data, dict):
        return errors.ExternalFailure(f"exo on host {host} failed without saying why", host=host)
    exc = errors.rebuild(data)
    exc.data.setdefault("host", host)
    message = visible(exc.message)
    if f"host {host}" not in message:
        message += f" (on host {host})"
    exc.message = message
    exc.args = (message,)
    exc.hint = visible(exc.hint) if exc.hint is not None else None
    return exc
