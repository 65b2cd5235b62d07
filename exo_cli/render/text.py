"""Human output: rich tables on a colour terminal, plain aligned text when piped or NO_COLOR.

``Out`` is the one writer of every human view (command results, errors, warnings, the demo's
board): each piece of text it is given, whoever wrote it, goes through ``safe`` first, so an
agent's note, output, title or name can never act on the terminal (every C0/C1 control
character but newline and tab made visible: ``ESC`` shows as ``^[``), and rich never reads it
as markup or emoji codes (a PR title ``[demo-cfg]`` prints as it is). ``--json`` never comes
here: it keeps the exact text.

rich costs ~80 ms to import, so it is imported only when stdout is a colour TTY.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from exo_cli.records import to_jsonable


def safe(value: Any) -> str:
    """``value`` as text a terminal shows and never obeys (see ``validate.visible``)."""
    from exo_cli.validate import visible  # here: `--json` never needs it

    return visible(value if isinstance(value, str) else str(value))


def fancy(stream: TextIO) -> bool:
    """Whether to use rich: a TTY, colour allowed, not a dumb terminal."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Out:
    """A small writer with tables, headings and key/value blocks; everything it prints is ``safe``."""

    def __init__(self, stream: TextIO, rich_ok: bool) -> None:
        self._stream = stream
        self.rich_ok = rich_ok
        self._console: Any = None

    @classmethod
    def for_stdout(cls) -> Out:
        return cls(sys.stdout, fancy(sys.stdout))

    @classmethod
    def for_stderr(cls) -> Out:
        return cls(sys.stderr, fancy(sys.stderr))

    def console(self) -> Any:
        """The rich console of this writer: no markup, no highlighting, no emoji codes.

        For live views (the demo's board): give it only ``cell`` texts.
        """
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self._stream, markup=False, highlight=False, emoji=False)
        return self._console

    def line(self, text: Any = "") -> None:
        shown = safe(text)
        if self.rich_ok:
            self.console().print(cell(shown, safe_already=True))
        else:
            self._stream.write(shown + "\n")

    def text(self, text: str) -> None:
        """Write ``text`` as it is, lines and all (a pane's tail), made ``safe``."""
        if self.rich_ok:
            self.console().print(cell(text), end="")
        else:
            self._stream.write(safe(text))

    def heading(self, text: Any) -> None:
        if self.rich_ok:
            self.console().print(cell(text, style="bold"))
        else:
            self._stream.write(safe(text) + "\n")

    def kv(self, pairs: Sequence[tuple[str, Any]]) -> None:
        width = max((len(k) for k, _ in pairs), default=0)
        for key, value in pairs:
            shown = "-" if value is None or value == "" else str(value)
            self.line(f"{key.ljust(width)}  {shown}")

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]], *, empty: str = "(none)") -> None:
        if not rows:
            self.line(empty)
            return
        cells = [[("-" if c is None or c == "" else safe(c)) for c in row] for row in rows]
        if self.rich_ok:
            from rich.table import Table

            table = Table(box=None, pad_edge=False, header_style="bold")
            for h in headers:
                table.add_column(safe(h), overflow="fold")
            for row in cells:
                table.add_row(*(cell(c, safe_already=True) for c in row))
            self.console().print(table)
            return
        widths = [len(h) for h in headers]
        for row in cells:
            for i, c in enumerate(row):
                widths[i] = max(widths[i], len(c))
        fmt = "  ".join("{:<" + str(w) + "}" for w in widths)
        self._stream.write(fmt.format(*headers).rstrip() + "\n")
        for row in cells:
            self._stream.write(fmt.format(*row).rstrip() + "\n")

    def flush(self) -> None:
        self._stream.flush()


def cell(text: Any, *, style: str = "", safe_already: bool = False) -> Any:
    """A rich ``Text`` of ``text`` made ``safe``: plain characters, never markup (rich imported here)."""
    from rich.text import Text

    return Text(text if safe_already else safe(text), style=style)


def generic(out: Out, result: Any) -> None:
    """Fallback view: the result's fields as key/value lines."""
    data = to_jsonable(result)  # a dataclass or a record (NamedTuple) as its fields
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
