"""Options shared by commands; help texts come from the operation registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from exo_cli.registry import get


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta["exo.json"] = True
    return value


def json_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--json``: print exactly the operation's result (or the error object)."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        is_eager=True,
        expose_value=True,
        callback=_set_json,
        help="Print the result (or the error) as JSON.",
    )(fn)


def op_option(op_name: str, param: str, *decls: str, **kwargs: Any) -> Callable[..., Any]:
    """A click option whose help is the registry's help for ``op_name``'s ``param``."""
    return click.option(*decls, param, help=get(op_name).help[param], **kwargs)


def op_help(op_name: str) -> str:
    """The command help: the operation's docstring."""
    return get(op_name).doc
