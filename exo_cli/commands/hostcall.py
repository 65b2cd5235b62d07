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
    import contextlib
    import json
    import threading

    from exo_cli.errors import INTERNAL_EXIT
    from exo_cli.ops.hostcall import answer
    from exo_cli.render import json_line

    raw = sys.stdin.readline()
    gone = threading.Event()
    with contextlib.suppress(ValueError):
        req = json.loads(raw)
        if isinstance(req, dict) and req.get("hold") is True:  # the caller holds stdin open until it has the answer

            def watch() -> None:
                with contextlib.suppress(OSError, ValueError):
                    while sys.stdin.read(4096):
                        pass
                gone.set()  # its end: the connection was cut, or the caller is gone

            threading.Thread(target=watch, daemon=True).start()
    try:
        out, code = answer(raw, cwd=os.getcwd(), environ=os.environ, gone=gone)
    except Exception as exc:  # noqa: BLE001 - the caller gets an answer whatever happened here
        out = {"ok": False, "error": {"code": -32603, "name": "ExoError", "message": f"exo failed here: {exc!r}",
                                      "hint": None, "data": {}}}
        code = INTERNAL_EXIT
    try:
        json_line(out)
    except (BrokenPipeError, ValueError):  # nobody listens any more (the caller went away)
        os._exit(code)
    sys.exit(code)
