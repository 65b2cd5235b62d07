"""Shared by the ``exo ui`` tests and bench/ui.py: a team with hostile texts, a client that speaks HTTP.

The team is real: worktrees and branches, a headless agent whose log holds hostile text, a PR
filed by an agent through the operation, notes sent by agents. Nothing here is a mock.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pr_helpers import commit, env_for, make_agent
from test_messages_helpers import make_agent as record_agent

from exo_cli import registry

# Everything an agent can write, made to be executed or interpreted if the page ever treated it as markup.
HOSTILE = "<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\"><b>bold</b> \u202eevil\u202c \x1b[31mred\x07"
HOSTILE_FILE = "<b>x</b>.txt"


def team(repo: Path) -> dict[str, Any]:
    """w1 (headless, its log hostile, a PR filed to the root), w3 (a hostile name and task), and their texts."""
    w1 = make_agent(repo, "w1", start=[sys.executable, "-c", f"import sys,time; print({HOSTILE!r}); "
                                                             "sys.stdout.flush(); time.sleep(600)"])
    commit(w1.worktree or "", HOSTILE_FILE, f"{HOSTILE}\nsecond line\n", msg="w1: hostile file")
    pr = registry.invoke("pr_file", env_for(w1.worktree or "", "w1"), title=f"PR {HOSTILE}", body=HOSTILE)
    record_agent(repo, "w3", name=f"w3 {HOSTILE}", task=f"task {HOSTILE}", status="working")
    return {"w1": w1, "pr": pr}


def ask(repo: Path, agent: str, text: str, out: dict[str, Any]) -> threading.Thread:
    """``agent`` asks the root ``text`` from a thread of its own (the operation blocks until answered)."""

    def run() -> None:
        out["answer"] = registry.invoke("question", env_for(repo, agent), message=text, timeout=120)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


class Client:
    """Raw HTTP to the server (any Host, Origin or cookie, as an attacker would send them)."""

    def __init__(self, base: str) -> None:
        parts = urlsplit(base)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.cookie = ""

    def request(self, method: str, path: str, *, headers: dict[str, str] | None = None,
                body: Any = None) -> tuple[int, dict[str, str], str]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        sent = {"Host": f"127.0.0.1:{self.port}", **({"Cookie": self.cookie} if self.cookie else {}), **(headers or {})}
        data = json.dumps(body).encode() if body is not None else None
        conn.putrequest(method, path, skip_host=True)
        for k, v in sent.items():
            conn.putheader(k, v)
        if data is not None:
            conn.putheader("Content-Type", "application/json")
            conn.putheader("Content-Length", str(len(data)))
        conn.endheaders(data)
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, text

    def sign_in(self, token: str) -> str:
        """Exchange the one-time token; keep the cookie; return the page's header token."""
        status, headers, _ = self.request("GET", f"/?token={token}")
        assert status == 303 and headers["location"] == "/", (status, headers)
        self.cookie = headers["set-cookie"].split(";", 1)[0]
        _, _, page = self.request("GET", "/")
        start = page.index('name="exo-token" content="') + len('name="exo-token" content="')
        return page[start:page.index('"', start)]
