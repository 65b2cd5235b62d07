"""JSON schemas of the tools, derived from the operations' types, and the check of a call's arguments.

``input_schema`` turns a tool's arguments (``registry.Op.tool_args``) into its input schema:
precise JSON types, ``enum`` for ``Choice``, ``minimum``/``maximum`` for ``Range``, typed
array items, closed objects (``additionalProperties: false``). An optional argument is left
out to get its default, so its schema is its type alone (``null`` is not admitted). ``output_schema`` turns a
result class (dataclasses and records, as ``records.to_jsonable`` serializes them) into
the schema of the tool's structured result. ``check_arguments`` enforces exactly the
input schema (a value the schema admits is accepted, anything else is a ``UsageError``,
-32602, naming the arguments), so the schema a model reads is the rule it is held to.

Pure Python, no MCP SDK: the server, the docs and the tests use it alike.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from exo_cli.errors import UsageError
from exo_cli.registry import Arg, Choice, Range

if typing.TYPE_CHECKING:
    from exo_cli.registry import Op

JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def _hints(cls: type) -> dict[str, Any]:
    # records.py names Any only for type checkers (it stays cheap on the hooks' path): supply it here
    return typing.get_type_hints(cls, localns={"Any": Any}, include_extras=True)


def type_schema(tp: Any, *, output: bool = False) -> dict[str, Any]:
    """The JSON schema of the Python type ``tp`` (inputs: closed objects; outputs: every field)."""
    origin = typing.get_origin(tp)
    if tp is Any or tp is object:
        return {}
    if origin is typing.Annotated:
        base, *meta = typing.get_args(tp)
        schema = type_schema(base, output=output)
        for m in meta:
            if isinstance(m, Choice):
                schema = {**schema, "enum": list(m.values)}
            elif isinstance(m, Range):
                if m.min is not None:
                    schema["minimum"] = m.min
                if m.max is not None:
                    schema["maximum"] = m.max
        return schema
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if not output and type(None) in args:  # an input left out is its default: null is never needed
            rest = [a for a in args if a is not type(None)]
            return type_schema(rest[0] if len(rest) == 1 else typing.Union[tuple(rest)], output=output)  # noqa: UP007
        parts = [type_schema(a, output=output) for a in args]
        simple = [p["type"] for p in parts if set(p) == {"type"} and isinstance(p["type"], str)]
        if output and len(simple) == len(parts):
            return {"type": simple}
        return {"anyOf": parts}
    if origin is typing.Literal:
        values = list(typing.get_args(tp))
        kinds = {JSON_TYPES[type(v)] for v in values}
        return {"type": kinds.pop(), "enum": values} if len(kinds) == 1 else {"enum": values}
    if tp in JSON_TYPES:
        return {"type": JSON_TYPES[tp]}
    if origin in (list, tuple, Sequence) or tp in (list, tuple):
        args = typing.get_args(tp)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            raise TypeError(f"no JSON schema for the fixed tuple {tp!r}")
        return {"type": "array", "items": type_schema(args[0], output=output)} if args else {"type": "array"}
    if origin in (dict, Mapping) or tp is dict:
        args = typing.get_args(tp)
        if not args or args[1] in (Any, object):
            return {"type": "object"}
        return {"type": "object", "additionalProperties": type_schema(args[1], output=output)}
    if typing.is_typeddict(tp):  # an object with named keys (a typed dict)
        hints = _hints(tp)
        props = {k: type_schema(h, output=output) for k, h in hints.items()}
        schema = {"type": "object", "properties": props, "required": [k for k in hints if k in tp.__required_keys__]}
        return schema if output else {**schema, "additionalProperties": False}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        shown = [f for f in dataclasses.fields(tp) if f.repr]
        props = {f.name: type_schema(hints[f.name], output=output) for f in shown}
        if output:
            return {"type": "object", "properties": props, "required": [f.name for f in shown]}
        required = [f.name for f in shown
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    if isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields"):  # a record (NamedTuple)
        hints = _hints(tp)
        props = {f: type_schema(hints[f], output=output) for f in tp._fields}
        return {"type": "object", "properties": props, "required": list(tp._fields)}
    raise TypeError(f"no JSON schema for {tp!r}")


def input_schema(args: Sequence[Arg]) -> dict[str, Any]:
    """A tool's input schema: one property per argument, with its help as description."""
    props: dict[str, Any] = {}
    for a in args:
        prop = {**type_schema(a.annotation), "description": a.help}
        if not a.required and a.default is not None:
            prop["default"] = a.default
        props[a.name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": props}
    required = [a.name for a in args if a.required]
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


def output_schema(result_type: Any) -> dict[str, Any]:
    """The schema of a tool's structured result (an object: MCP requires one at the root)."""
    schema = type_schema(result_type, output=True)
    if schema.get("type") != "object" and "anyOf" not in schema:
        raise TypeError(f"a tool's result must be an object, not {result_type!r}")
    if "anyOf" in schema:
        return {"type": "object", **schema}
    return schema


# --------------------------------------------------------------------------- checking arguments


_KINDS = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"), (dict, "object"))


def _kind(value: Any) -> str:
    """The JSON kind of a value (a bool is no integer)."""
    if value is None:
        return "null"
    return next((name for cls, name in _KINDS if isinstance(value, cls)), type(value).__name__)


def _shown(value: Any) -> str:
    import json

    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is(kind: str, value: Any) -> bool:
    actual = _kind(value)
    if kind == "number":
        return actual in ("integer", "number")
    if kind == "integer":
        return actual == "integer" or (actual == "number" and float(value).is_integer())
    return actual == kind


def check(schema: Mapping[str, Any], value: Any, path: str = "") -> tuple[Any, list[tuple[str, str]]]:
    """``value`` checked against ``schema`` (the subset ``type_schema`` writes): (value, errors).

    The value comes back normalized: an integral number where ``integer`` is expected
    becomes an int (JSON Schema counts 3.0 as an integer). Errors are (path, message) pairs.
    """
    if "anyOf" in schema:
        for option in schema["anyOf"]:
            got, errs = check(option, value, path)
            if not errs:
                return got, []
        options = "/".join(str(o.get("type", "value")) for o in schema["anyOf"])
        return value, [(path, f"expected {options}, got {_kind(value)} {_shown(value)}")]
    kind = schema.get("type")
    if kind is not None:
        kinds = [kind] if isinstance(kind, str) else list(kind)
        match = next((k for k in kinds if _is(k, value)), None)
        if match is None:
            return value, [(path, f"expected {' or '.join(kinds)}, got {_kind(value)} {_shown(value)}")]
        if match == "integer" and isinstance(value, float):
            value = int(value)
    if "enum" in schema and value not in schema["enum"]:
        return value, [(path, f"expected one of {', '.join(map(str, schema['enum']))}, got {_shown(value)}")]
    errors = []
    if _kind(value) in ("integer", "number"):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append((path, f"must be at least {schema['minimum']}, got {_shown(value)}"))
        if "maximum" in schema and value > schema["maximum"]:
            errors.append((path, f"must be at most {schema['maximum']}, got {_shown(value)}"))
    elif isinstance(value, list) and "items" in schema:
        out = []
        for i, item in enumerate(value):
            got, errs = check(schema["items"], item, f"{path}[{i}]")
            out.append(got)
            errors += errs
        value = out
    elif isinstance(value, dict):
        value, errs = _check_object(schema, value, path)
        errors += errs
    return value, errors


def _check_object(schema: Mapping[str, Any], value: dict[str, Any], path: str) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    errors: list[tuple[str, str]] = []
    out: dict[str, Any] = {}
    for key, item in value.items():
        where = f"{path}.{key}" if path else key
        if key in props:
            out[key], errs = check(props[key], item, where)
        elif extra is False:
            out[key], errs = item, [(where, "unknown field")]
        elif isinstance(extra, Mapping):
            out[key], errs = check(extra, item, where)
        else:
            out[key], errs = item, []
        errors += errs
    for key in schema.get("required", ()):
        if key not in value:
            errors.append((f"{path}.{key}" if path else key, "missing (required)"))
    return out, errors


def check_arguments(tool: str, schema: Mapping[str, Any], arguments: Any) -> dict[str, Any]:
    """The arguments of a call of ``tool``, checked against its input schema; UsageError (-32602) otherwise.

    Unknown argument names are an error of their own, listing them and the ones the tool takes.
    Nothing has happened yet when this raises.
    """
    if not isinstance(arguments, dict):
        raise UsageError(f"Invalid arguments for {tool}: expected an object, got {_kind(arguments)}", tool=tool)
    props = schema.get("properties", {})
    unknown = sorted(k for k in arguments if k not in props)
    if unknown:
        raise UsageError(
            f"Unknown argument(s) for {tool}: {', '.join(unknown)}",
            hint=f"{tool} takes: {', '.join(props) or 'no arguments'}.",
            tool=tool, unknown=unknown, allowed=list(props),
        )  # fmt: skip
    value, errors = check(schema, arguments)
    if errors:
        text = "; ".join(f"{where}: {msg}" for where, msg in errors)
        raise UsageError(
            f"Invalid argument(s) for {tool}: {text}",
            hint="See the tool's input schema for each argument's type.",
            tool=tool, errors=[{"argument": where, "message": msg} for where, msg in errors],
        )  # fmt: skip
    return typing.cast(dict[str, Any], value)



def check_call(operation: Op, args: Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments (from a wire: another host, the broker) checked against the operation's parameters.

    Checked as a tool call's are (``check_arguments``): an unknown name or a wrong type is a UsageError
    naming it. A None for a parameter whose default is None counts as not given.
    """
    schema, none_defaults = _call_schema(operation)
    given = {k: v for k, v in args.items() if not (v is None and k in none_defaults)}
    return check_arguments(operation.name, schema, given)


_CALL_SCHEMAS: dict[Any, tuple[dict[str, Any], frozenset[str]]] = {}


def _call_schema(operation: Op) -> tuple[dict[str, Any], frozenset[str]]:
    """The input schema of all of ``operation``'s parameters, and those defaulting to None (made once per function)."""
    found = _CALL_SCHEMAS.get(operation.func)
    if found is None:
        from exo_cli.registry import resolve

        params = operation.params()
        declared = [Arg(p.name, resolve(operation.func, p.annotation), p.default, "", p.name) for p in params]
        found = (input_schema(declared), frozenset(p.name for p in params if p.default is None))
        _CALL_SCHEMAS[operation.func] = found
    return found
