"""``NamedTuple`` for the modules on the hooks' hot path, without importing ``typing`` at run time.

Importing ``typing`` costs a hook about a seventh of Python's whole start (``bench/hooks.py``),
and these modules need nothing else from it at run time: with ``from __future__ import
annotations`` every annotation stays a string, and type-only imports sit under
``TYPE_CHECKING = False`` / ``if TYPE_CHECKING:`` (a name type checkers treat as true). So
they write ``from exo_cli.lite import NamedTuple`` and a checker sees ``typing.NamedTuple``
(the branch below), while Python runs this small equivalent of ``typing.NamedTuple``'s class
form: the same ``collections.namedtuple`` with the fields, defaults, docstring, methods and
properties of the class body. Only the class form is supported (no generics, no call form).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NamedTuple as NamedTuple
else:
    import collections

    # As typing: names the class body may not redefine, and names not copied from it.
    _PROHIBITED = frozenset({"__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults",
                             "_make", "_replace", "_asdict", "_source"})
    _SPECIAL = frozenset({"__module__", "__name__", "__annotations__", "__qualname__"})

    class _Maker(type):
        def __new__(mcs, typename, bases, ns):
            if bases != (_Base,):
                raise TypeError("exo_cli.lite.NamedTuple: inherit from NamedTuple alone")
            fields = list(ns.get("__annotations__", {}))
            defaults = []
            for name in fields:
                if name in ns:
                    defaults.append(ns[name])
                elif defaults:
                    raise TypeError(f"Non-default namedtuple field {name} cannot follow default field(s)")
            cls = collections.namedtuple(typename, fields, defaults=defaults, module=ns["__module__"])
            cls.__annotations__ = dict(ns.get("__annotations__", {}))
            cls.__qualname__ = ns.get("__qualname__", typename)
            for key, value in ns.items():
                if key in _PROHIBITED:
                    raise AttributeError("Cannot overwrite NamedTuple attribute " + key)
                if key not in _SPECIAL and key not in cls._fields:
                    setattr(cls, key, value)
            return cls

    _Base = type.__new__(_Maker, "NamedTuple", (), {})

    def NamedTuple(*args, **kwargs):  # noqa: N802 - typing's name
        raise TypeError("exo_cli.lite.NamedTuple supports the class form only")

    NamedTuple.__mro_entries__ = lambda bases: (_Base,)
