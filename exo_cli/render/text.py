"""Human output: rich tables on a colour terminal, plain aligned text when piped or NO_COLOR.

rich costs ~80 ms to import, so it is imported only when stdout is a colour TTY.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from exo_cli.records import to_jsonable


def fancy(stream: TextIO) -> bool:
    """Whether to use rich: a TTY, colour allowed, not a dumb terminal."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Out:
    """A small writer with tables, headings and key/value blocks."""

    def __init__(self, stream: TextIO, rich_ok: bool) -> None:
        self.stream = stream
        self.rich_ok = rich_ok
        self._console: Any = None

    @classmethod
    def for_stdout(cls) -> Out:
        return cls(sys.stdout, fancy(sys.stdout))

    def _rich(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.stream, markup=False, highlight=False)
        return self._console

    def line(self, text: str = "") -> None:
        if self.rich_ok:
            self._rich().print(text)
        else:
            self.stream.write(text + "\n")

    def heading(self, text: str) -> None:
        if self.rich_ok:
            from rich.text import Text

            self._rich().print(Text(text, style="bold"))
        else:
            self.stream.write(text + "\n")

    def kv(self, pairs: Sequence[tuple[str, Any]]) -> None:
        width = max((len(k) for k, _ in pairs), default=0)
        for key, value in pairs:
            shown = "-" if value is None or value == "" else str(value)
            self.line(f"{key.ljust(width)}  {shown}")

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]], *, empty: str = "(none)") -> None:
        if not rows:
            self.line(empty)
            return
        cells = [[("-" if c is None or c == "" else str(c)) for c in row] for row in rows]
        if self.rich_ok:
            from rich.table import Table

            table = Table(box=None, pad_edge=False, header_style="bold")
            for h in headers:
                table.add_column(h, overflow="fold")
            for row in cells:
                table.add_row(*row)
            self._rich().print(table)
            return
        widths = [len(h) for h in headers]
        for row in cells:
            for i, c in enumerate(row):
                widths[i] = max(widths[i], len(c))
        fmt = "  ".join("{:<" + str(w) + "}" for w in widths)
        self.stream.write(fmt.format(*headers).rstrip() + "\n")
        for row in cells:
            self.stream.write(fmt.format(*row).rstrip() + "\n")

    def flush(self) -> None:
        self.stream.flush()


def generic(out: Out, result: Any) -> None:
    """Fallback view: the result's fields as key/value lines."""
    data = to_jsonable(result) if dataclasses.is_dataclass(result) else result
    if isinstance(data, dict):
        out.kv([(k, v if not isinstance(v, dict | list) else _short(v)) for k, v in data.items()])
    else:
        out.line(str(data))


def _short(value: Any) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 200 else text[:197] + "..."


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d"
