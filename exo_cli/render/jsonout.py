"""JSON rendering: stdlib only, identical to the MCP tool's structured content.

``dump_json(result)`` is exactly ``json.dumps(to_jsonable(result), indent=2,
ensure_ascii=False)``, written as one pass: with an indent the stdlib encodes in Python
through nested generators, and building the intermediate dicts first doubles that; for
``exo agents --json`` with 500 agents the two took a fifth of the command.
``tests/test_render.py`` checks the equality on generated values.
"""

from __future__ import annotations

import re
from json.encoder import INFINITY
from json.encoder import encode_basestring as _basestring  # the C version when there is one

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_float_repr = float.__repr__
_int_repr = int.__repr__
_fields_of: dict[type, tuple[str, ...]] = {}  # dataclass -> its repr fields (to_jsonable's choice)


def _float(o: float) -> str:
    if o != o:
        return "NaN"
    if o == INFINITY:
        return "Infinity"
    if o == -INFINITY:
        return "-Infinity"
    return _float_repr(o)


def _dataclass_fields(cls: type) -> tuple[str, ...]:
    names = _fields_of.get(cls)
    if names is None:
        import dataclasses

        names = _fields_of[cls] = tuple(f.name for f in dataclasses.fields(cls) if f.repr)
    return names


# json escapes C0 controls itself; DEL, the C1 controls and lone surrogates (bytes that were not
# UTF-8) are escaped here too, so the text stays exact once parsed and nothing raw reaches a terminal.
_RAW = re.compile("[\\x7f-\\x9f\\ud800-\\udfff]")


def _escape(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


def _pairs(o: dict[Any, Any]) -> Any:
    """An object's (key text, value) pairs as ``to_jsonable`` makes them: keys as ``str(k)``, and when two
    keys give the same text (``"True"`` and ``True``) the later value in the first one's place, once."""
    if all(type(k) is str for k in o):
        return o.items()
    return {str(k): v for k, v in o.items()}.items()


def escape_raw(text: str) -> str:
    """JSON text with DEL, the C1 controls and lone surrogates escaped (json escapes the C0 ones)."""
    return _RAW.sub(_escape, text) if _RAW.search(text) else text


def _string(text: str) -> str:
    """``text`` as a JSON string: json's own escapes, then DEL, C1 controls and lone surrogates."""
    return escape_raw(_basestring(text))


def dump_json(result: Any) -> str:
    """``json.dumps(to_jsonable(result), indent=2, ensure_ascii=False)`` with DEL, the C1 controls and lone
    surrogates escaped too (see ``_string``), faster."""
    out: list[str] = []
    append = out.append
    indents = ["\n"]

    def items(pairs: Any, level: int) -> None:
        """A non-empty object from (key text, value) pairs."""
        level += 1
        while len(indents) <= level:
            indents.append("\n" + "  " * len(indents))
        sep = "," + indents[level]
        append("{" + indents[level])
        first = True
        for key, value in pairs:
            if first:
                first = False
            else:
                append(sep)
            append(_string(key) + ": ")
            enc(value, level)
        append(indents[level - 1] + "}")

    def enc(o: Any, level: int) -> None:
        if isinstance(o, str):
            append(_string(o))
        elif o is None:
            append("null")
        elif o is True:
            append("true")
        elif o is False:
            append("false")
        elif isinstance(o, int):
            append(_int_repr(o))
        elif isinstance(o, float):
            append(_float(o))
        elif isinstance(o, dict):
            if o:
                items(_pairs(o), level)
            else:
                append("{}")
        elif hasattr(type(o), "__dataclass_fields__") and not isinstance(o, type):
            names = _dataclass_fields(type(o))
            if names:
                items(((n, getattr(o, n)) for n in names), level)
            else:
                append("{}")
        elif isinstance(o, tuple) and (keys := getattr(o, "_fields", None)) is not None:  # a record (NamedTuple)
            if o:
                items(zip(keys, o, strict=True), level)
            else:
                append("{}")
        elif isinstance(o, list | tuple):
            if not o:
                append("[]")
                return
            level += 1
            while len(indents) <= level:
                indents.append("\n" + "  " * len(indents))
            sep = "," + indents[level]
            append("[" + indents[level])
            first = True
            for v in o:
                if first:
                    first = False
                else:
                    append(sep)
                enc(v, level)
            append(indents[level - 1] + "]")
        else:
            raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")

    enc(result, 0)
    return "".join(out)

