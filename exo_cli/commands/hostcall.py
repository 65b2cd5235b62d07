"""``exo host-call``: answer one request of another host's exo (hidden; ssh runs it, never a person).

The request is one JSON line on stdin (see ``ops.hosts``); the answer is one JSON line on
stdout and the exit status is exo's own for the outcome.
"""

from __future__ import annotations

import os
import sys

import click


@click.command("host-call", hidden=True, help="Answer one request of another host's exo (one JSON line on stdin)."
               "\n\nexo on another host runs it over ssh; its answer is one JSON line on stdout."
               "\n\n\b\nExamples:\n  exo host-call < request.json")
def host_call() -> None:
    from exo_cli.errors import INTERNAL_EXIT
    from exo_cli.ops.hostcall import answer
    from exo_cli.render import json_line

    raw = sys.stdin.readline()
    try:
        out, code = answer(raw, cwd=os.getcwd(), environ=os.environ)
    except Exception as exc:  # noqa: BLE001 - the caller gets an answer whatever happened here
        out = {"ok": False, "error": {"code": -32603, "name": "ExoError", "message": f"exo failed here: {exc!r}",
                                      "hint": None, "data": {}}}
        code = INTERNAL_EXIT
    json_line(out)
    sys.exit(code)
