"""JSON rendering: stdlib only, identical to the MCP tool's structured content."""

from __future__ import annotations

import json
import re
from typing import Any

from exo_cli.records import to_jsonable

# json escapes C0 controls itself; DEL, the C1 controls and lone surrogates (bytes that were not
# UTF-8) are escaped here too, so the text stays exact once parsed and nothing raw reaches a terminal.
_RAW = re.compile("[\\x7f-\\x9f\\ud800-\\udfff]")


def _escape(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


def dump_json(result: Any) -> str:
    """``result`` as indented JSON: every control character and lone surrogate escaped, the rest as is."""
    return _RAW.sub(_escape, json.dumps(to_jsonable(result), indent=2, ensure_ascii=False))
