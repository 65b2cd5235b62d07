"""JSON rendering: stdlib only, identical to the MCP tool's structured content."""

from __future__ import annotations

import json
from typing import Any

from exo_cli.records import to_jsonable


def dump_json(result: Any) -> str:
    return json.dumps(to_jsonable(result), indent=2, ensure_ascii=False)
