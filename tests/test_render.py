"""``render.jsonout.dump_json`` prints ``json.dumps(to_jsonable(x), indent=2, ensure_ascii=False)``, with DEL, C1 and lone surrogates escaped."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exo_cli.records import to_jsonable
from exo_cli.render.jsonout import dump_json


class Rec(NamedTuple):
    a: Any
    b: Any = None


@dataclass(frozen=True)
class Res:
    x: Any
    hidden: Any = field(default=None, repr=False)
    y: list[Any] = field(default_factory=list)


@dataclass
class Empty:
    pass


def reference(value: Any) -> str:
    """The stdlib's dump, then DEL, the C1 controls and lone surrogates escaped as exo's JSON escapes them
    (outside strings none of these can occur, so escaping the whole text is the same)."""
    text = json.dumps(to_jsonable(value), indent=2, ensure_ascii=False)
    return re.sub("[\x7f-\x9f\ud800-\udfff]", lambda m: f"\\u{ord(m.group()):04x}", text)


scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
           | st.text() | st.sampled_from(["", "é", "\u2028", "\x00\x1f", '"\\', "😀"]))
keys = st.text() | st.integers() | st.booleans() | st.none() | st.floats(allow_nan=False)


def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return (st.lists(children, max_size=4) | st.lists(children, max_size=3).map(tuple)
            | st.dictionaries(keys, children, max_size=4)
            | st.builds(Rec, children, children) | st.builds(Res, children, children, st.lists(children, max_size=2)))


values = st.recursive(scalars, extend, max_leaves=25)


@settings(max_examples=400, deadline=None)
@given(values)
def test_dump_json_is_the_stdlib_dump_of_to_jsonable(value: Any) -> None:
    assert dump_json(value) == reference(value)


@pytest.mark.parametrize("value", [
    {}, [], (), Empty(), Rec(a={}), {"k": [1.5, math.inf, -math.inf, math.nan, -0.0, 10**30]},
    {1: "a", 2.5: "b", False: "c", None: "d"}, {"True": None, True: None}, [[[]], [{}], ({"a": ()},)], "plain", 3, None,
])
def test_dump_json_edge_cases(value: Any) -> None:
    assert dump_json(value) == reference(value)


def test_dump_json_refuses_what_json_refuses() -> None:
    for bad in ({1, 2}, b"bytes", object()):
        with pytest.raises(TypeError):
            reference(bad)
        with pytest.raises(TypeError):
            dump_json({"x": [bad]})
