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


# Options that change how a command shows its result, never the operation's call: they have no
# operation parameter and no tool argument (the parity tests skip them).
VIEW_OPTIONS = ("as_json", "watch")


def watch_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--watch``: keep showing the result, updated whenever something changes."""
    return click.option("--watch", "watch", is_flag=True,
                        help="Keep showing the board, one line per agent, updated whenever something changes "
                             "(Ctrl-C stops).")(fn)


class ExoOption(click.Option):
    """An option whose help reads as exo's help does: bounds in words (the help string says them when
    they matter), never Click's ``[x>=1]``; a number's value shown as ``N`` or ``SECONDS``, never
    ``INTEGER RANGE``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.metavar is None and isinstance(self.type, click.IntRange):
            self.metavar = "N"
        elif self.metavar is None and isinstance(self.type, click.FloatRange):
            self.metavar = "SECONDS"

    def get_help_extra(self, ctx: click.Context) -> Any:
        extra = super().get_help_extra(ctx)
        extra.pop("range", None)
        return extra


def op_option(op_name: str, param: str, *decls: str, **kwargs: Any) -> Callable[..., Any]:
    """A click option whose help is the registry's help for ``op_name``'s ``param`` (flags rendered as flags)."""
    return click.option(*decls, param, help=get(op_name).cli_text(get(op_name).help[param]), cls=ExoOption, **kwargs)


def op_help(op_name: str) -> str:
    """The command help: the operation's docstring (flags rendered as flags)."""
    op = get(op_name)
    return op.cli_text(op.doc)


class Seconds(click.FloatRange):
    """A ``--timeout`` in seconds: a number at least 0 (the tool schema's minimum), checked by the
    one timeout rule (``validate.check_timeout``), so NaN, infinity and negative values are the same
    InvalidInput (exit 4) on the command line as over MCP."""

    name = "seconds"

    def __init__(self) -> None:
        super().__init__(min=0)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from exo_cli.validate import check_timeout

        number = click.FLOAT.convert(value, param, ctx)
        return check_timeout(number)
