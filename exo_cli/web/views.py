"""What the page receives: operation results made JSON, and patches highlighted by Pygments.

A patch is highlighted on the server and sent as lines of ``[css class, text]`` runs; the page
builds one ``span`` per run with ``textContent``, so a diff line (or a file name) holding HTML or
script is shown as text. Control and bidi characters in any agent text are made visible here,
once for every page, as the terminal renderers do (``validate.visible``), and so are the bidi and
zero-width characters that would reorder or hide text (shown as ``<U+202E>``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from exo_cli.records import to_jsonable
from exo_cli.validate import visible as terminal_visible

PATCH_MAX = 400_000  # characters highlighted; beyond that, plain runs (Pygments is linear but not free)
# Characters that reorder or hide what follows them (Trojan Source): shown as <U+202E>, never obeyed.
BIDI = re.compile("[\u061c\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


def visible(value: Any) -> Any:
    """Every string in ``value`` with control and bidi characters made visible (newlines and tabs kept)."""
    if isinstance(value, str):
        text = terminal_visible(value)
        return BIDI.sub(lambda m: f"<U+{ord(m.group()):04X}>", text) if BIDI.search(text) else text
    if isinstance(value, dict):
        return {k: visible(v) for k, v in value.items()}
    if isinstance(value, list):
        return [visible(v) for v in value]
    return value


def to_json(result: Any) -> str:
    """An operation's result as the page's JSON (the same fields as ``--json``), agent text made visible."""
    return json.dumps(visible(to_jsonable(result)), ensure_ascii=False)


def patch_lines(patch: str | None) -> list[list[list[str]]]:
    """A unified diff as lines of ``[class, text]`` runs (Pygments' short token classes, ``.hl`` in CSS)."""
    if not patch:
        return []
    from pygments.lexers.diff import DiffLexer
    from pygments.token import STANDARD_TYPES

    text = visible(patch)
    lines: list[list[list[str]]] = [[]]
    if len(text) > PATCH_MAX:
        tokens: Any = [(None, text)]
    else:
        tokens = DiffLexer(stripnl=False, ensurenl=False).get_tokens(text)
    for ttype, value in tokens:
        css = ""
        while ttype is not None and ttype not in STANDARD_TYPES:
            ttype = ttype.parent
        if ttype is not None:
            css = STANDARD_TYPES[ttype]
        parts = value.split("\n")
        for i, part in enumerate(parts):
            if i:
                lines.append([])
            if part:
                lines[-1].append([css, part])
    if lines and not lines[-1]:
        lines.pop()
    return lines


def pygments_css() -> str:
    """The colours of the highlighted runs (served as ``/static/highlight.css``)."""
    from pygments.formatters.html import HtmlFormatter

    return str(HtmlFormatter(style="default").get_style_defs(".hl"))  # type: ignore[no-untyped-call]
