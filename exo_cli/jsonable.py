"""JSON-native values built back into exo's typed results (dataclasses, records, typed dicts, unions).

The one decoder of results that crossed a wire: another host's answers (``wire``, which checks
them against their schema first) and the team broker's answers to an agent's relay (``relay``:
the broker is this user's own exo, and the relay must not import the schema machinery). It
imports nothing of exo's, so the relay's path stays free of the registry.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any


def from_jsonable(tp: Any, value: Any) -> Any:
    """``value`` (JSON-native) as an object of the annotation ``tp`` (TypeError when it does not fit).

    ``decode`` checks the value against ``tp``'s schema first; this builds the objects (the
    result classes, records and typed dicts) and picks the member of a union that fits.
    """
    if tp is Any or tp is object:
        return value
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return from_jsonable(typing.get_args(tp)[0], value)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(tp):
            try:
                return from_jsonable(option, value)
            except (TypeError, ValueError, KeyError):
                continue
        raise TypeError(f"expected {tp}, got {type(value).__name__}")
    if tp is type(None):
        if value is not None:
            raise TypeError(f"expected null, got {type(value).__name__}")
        return None
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise ValueError(f"expected one of {typing.get_args(tp)}")
        return value
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple):
        if not isinstance(value, list):
            raise TypeError(f"expected a list for {tp}")
        args = typing.get_args(tp)
        if origin is tuple and len(args) >= 2 and args[1] is not Ellipsis:
            if len(value) != len(args):
                raise TypeError(f"expected {len(args)} items for {tp}")
            return tuple(from_jsonable(a, v) for a, v in zip(args, value, strict=True))
        items = [from_jsonable(args[0] if args else Any, v) for v in value]
        return tuple(items) if origin is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise TypeError(f"expected an object for {tp}")
        args = typing.get_args(tp)
        inner = args[1] if len(args) == 2 else Any
        return {k: from_jsonable(inner, v) for k, v in value.items()}
    if typing.is_typeddict(tp):
        if not isinstance(value, dict):
            raise TypeError(f"expected an object for {tp.__name__}")
        hints = typing.get_type_hints(tp, include_extras=True)
        missing = [k for k in tp.__required_keys__ if k not in value]
        if missing:
            raise TypeError(f"{tp.__name__} needs {', '.join(sorted(missing))}")
        return {k: from_jsonable(hints[k], value[k]) for k in hints if k in value}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build(tp, value, {f.name: f for f in dataclasses.fields(tp)})
    if isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields"):
        return _build(tp, value, None)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if tp in (str, int, float, bool):
        if not isinstance(value, tp) or (tp is not bool and isinstance(value, bool)):
            raise TypeError(f"expected {tp.__name__}, got {type(value).__name__}")
        return value
    raise TypeError(f"no decoder for {tp!r}")


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
