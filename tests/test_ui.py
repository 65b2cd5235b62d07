"""``exo ui`` over raw HTTP: the one-time token, the cookie, Host/Origin/header-token refusals, the
actions through the registry, live snapshots from the doorbell (SQLite and PostgreSQL), the
private redirect file, a clean Ctrl-C with streams open, and the lazy imports.

The server is the real one (uvicorn on 127.0.0.1, port 0) in a thread, or ``exo ui`` as a real
process; the browser tests are in test_ui_browser.py.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pr_helpers import env_for
from ui_helpers import HOSTILE, Client, ask, team

from conftest import stop_repo_agents, wait_for
from exo_cli.web import auth as rules
from exo_cli.web import views
from exo_cli.web.server import Running, start

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def served(repo: Path) -> Iterator[tuple[Path, Running]]:
    env_for(repo).store.agents()
    running = start(env_for(repo), fallback=3600, pane_every=0.2)
    yield repo, running
    running.stop()
    stop_repo_agents(repo, tmux=False)


def test_the_token_works_once_and_a_foreign_host_or_missing_origin_is_refused(served: tuple[Path, Running]) -> None:
    repo, running = served
    c = Client(running.base)
    assert c.request("GET", "/")[0] == 403  # no cookie
    assert c.request("GET", "/?token=wrong")[0] == 403
    assert c.request("GET", "/api/board")[0] == 403
    status, headers, _ = c.request("GET", "/", headers={"Host": "evil.example:80"})
    assert status == 421  # DNS rebinding: a foreign name for 127.0.0.1
    assert c.request("GET", "/", headers={"Host": f"127.0.0.1.evil.example:{c.port}"})[0] == 421
    header = c.sign_in(running.auth.token)
    status, headers, _ = c.request("GET", "/")
    assert status == 200
    assert "script-src 'self'" in headers["content-security-policy"] and "unsafe-inline" not in headers[
        "content-security-policy"]
    assert headers["referrer-policy"] == "no-referrer"
    assert c.request("GET", f"/?token={running.auth.token}")[0] == 403  # used: worth nothing now
    assert "HttpOnly" in headers.get("set-cookie", "HttpOnly")
    origin = f"http://127.0.0.1:{c.port}"
    msg = {"to": ["w9"], "message": "hello"}
    assert c.request("POST", "/api/act/send", headers={rules.HEADER: header}, body=msg)[0] == 403  # no Origin
    assert c.request("POST", "/api/act/send", headers={rules.HEADER: header, "Origin": "http://evil.example"},
                     body=msg)[0] == 403
    assert c.request("POST", "/api/act/send", headers={"Origin": origin}, body=msg)[0] == 403  # no header token
    assert c.request("POST", "/api/act/send", headers={"Origin": origin, rules.HEADER: "x" + header},
                     body=msg)[0] == 403
    other = Client(running.base)  # another browser, with the page's header token but no cookie
    assert other.request("POST", "/api/act/send", headers={"Origin": origin, rules.HEADER: header}, body=msg)[0] == 403
    # Signed in and from the page: the operation answers, with its own refusal (no agent w9: NotFound, 404)
    status, _, text = c.request("POST", "/api/act/send", headers={"Origin": origin, rules.HEADER: header}, body=msg)
    assert status == 404 and json.loads(text)["error"]["name"] == "NotFound"
    for bad in ({"to": "w9", "message": "x"}, {"to": ["w9"]}, {"to": ["w9"], "message": "x", "extra": 1}, [1],
                {"to": [1], "message": "x"}, {"to": ["w9"], "message": True}):
        status, _, text = c.request("POST", "/api/act/send", headers={"Origin": origin, rules.HEADER: header},
                                    body=bad)
        assert status == 400 and json.loads(text)["error"]["name"] == "InvalidInput", (bad, text)
    status, _, text = c.request("POST", "/api/act/rm-rf", headers={"Origin": origin, rules.HEADER: header}, body={})
    assert status == 400 and "Unknown action" in text


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"], indirect=True)
def test_actions_are_the_operations_and_snapshots_follow_the_doorbell(served: tuple[Path, Running],
                                                                     store_kind: str) -> None:
    """An agent's question reaches an open event stream (the fallback is an hour: only the doorbell, SQLite's
    sockets or PostgreSQL's LISTEN/NOTIFY, can bring it); the answer from the page wakes the agent."""
    repo, running = served
    c = Client(running.base)
    header = c.sign_in(running.auth.token)
    made = team(repo)
    conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=60)
    conn.request("GET", "/api/events?agent=w1", headers={"Cookie": c.cookie, "Host": f"127.0.0.1:{c.port}"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("content-type", "").startswith("text/event-stream")

    def next_event(kind: str, pred=lambda d: True):  # type: ignore[no-untyped-def]
        event = ""
        while True:
            line = resp.readline().decode()
            assert line, "the stream ended"
            if line.startswith("event: "):
                event = line[7:].strip()
            elif line.startswith("data: ") and event == kind:
                data = json.loads(line[6:])
                if pred(data):
                    return data

    next_event("board", lambda d: {r["agent"]["id"] for r in d["rows"]} == {"w1", "w3"})
    out: dict[str, object] = {}
    t = ask(repo, "w1", f"Which port? {HOSTILE}", out)
    snap = next_event("board", lambda d: any(i["pending"] for i in d["inbox"]))  # pushed by the doorbell
    question = next(i for i in snap["inbox"] if i["pending"])
    assert "<script>" in question["body"] and "\x1b" not in question["body"] and "^[" in question["body"]
    assert "\u202e" not in question["body"] and "<U+202E>" in question["body"]
    assert snap["rows"][0]["agent"]["id"] == "w1" and snap["rows"][0]["needs"]  # needs you first
    pane = next_event("pane", lambda d: d["text"])  # the open agent page gets its pane (the headless log)
    assert pane["agent"] == "w1" and "<script>" in pane["text"]
    origin = f"http://127.0.0.1:{c.port}"
    status, _, text = c.request("POST", "/api/act/answer", headers={"Origin": origin, rules.HEADER: header},
                                body={"agent": "w1", "message": "8080"})
    assert status == 200, text
    t.join(60)
    assert getattr(out["answer"], "answer", None) == "8080"
    # the reads: a diff highlighted into runs (text, never markup), the PR with its diff
    status, _, text = c.request("GET", "/api/diff/w1")
    d = json.loads(text)
    assert status == 200 and d["files"][0]["path"] == "<b>x</b>.txt"
    assert any(["gi", "+<script>window.__pwned=1</script>"] == run or "<script>" in run[1]
               for line in d["lines"] for run in line)
    status, _, text = c.request("GET", f"/api/pr/{made['pr'].pr.number}")
    assert status == 200 and json.loads(text)["diff"]["lines"]
    status, _, text = c.request("POST", "/api/act/merge", headers={"Origin": origin, rules.HEADER: header},
                                body={"number": made["pr"].pr.number})
    assert status == 200 and json.loads(text)["merge_commit"], text
    conn.close()


def test_patch_lines_and_visible_keep_text_as_text() -> None:
    lines = views.patch_lines("diff --git a/x b/x\n+<b>\u202e\x1b[0m</b>\n-old\n")
    flat = ["".join(t for _, t in line) for line in lines]
    assert flat == ["diff --git a/x b/x", "+<b><U+202E>^[[0m</b>", "-old"]
    assert lines[1][0][0] == "gi" and lines[2][0][0] == "gd"
    assert views.visible({"a": ["\u2066x\u2069", "ok\tz"]}) == {"a": ["<U+2066>x<U+2069>", "ok\tz"]}


@pytest.mark.parametrize("host,ok", [("127.0.0.1:8080", True), ("localhost:1", True), ("[::1]:80", True),
                                     ("localhost", True), ("evil.example", False), ("127.0.0.1:80x", False),
                                     ("localhost.evil:80", False), ("", False), ("127.0.0.1 :80", False),
                                     ("[::1]evil:80", False)])
def test_host_rule(host: str, ok: bool) -> None:
    assert rules.local_host(host) is ok


def test_exo_ui_opens_through_a_private_file_and_ctrl_c_ends_open_streams(repo: Path, tmp_path: Path) -> None:
    """The browser gets a file path (0600), never the token; the token is in no log; Ctrl-C with an event
    stream open stops the server by ending the streams (no cancelled task), the redirect file removed."""
    env_for(repo).store.agents()
    seen = tmp_path / "browser.txt"
    fake = tmp_path / "browser.sh"  # the user's $BROWSER: records its argv and the file it was given
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {seen}.tmp; stat -c %a \"${{1#file://}}\" >> {seen}.tmp; "
                    f"cat \"${{1#file://}}\" >> {seen}.tmp; mv {seen}.tmp {seen}\n")
    fake.chmod(0o755)
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "BROWSER": f"{fake} %s", "DISPLAY": ":99"}
    proc = subprocess.Popen([sys.executable, "-m", "exo_cli", "ui", "--port", "0"], cwd=repo, env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("exo ui: http://127.0.0.1:"), line
        url = line.split()[-1]
        token = url.split("token=")[1]
        wait_for(seen.exists, what="the browser")
        argv, mode, content = seen.read_text().split("\n", 2)
        assert token not in argv and argv.startswith("file://") and mode == "600" and token in content
        opened = Path(argv.split()[0][len("file://"):])
        c = Client(url.split("/?")[0])
        c.sign_in(token)
        assert not opened.exists()  # used: the file is gone
        conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=60)
        conn.request("GET", "/api/events", headers={"Cookie": c.cookie, "Host": f"127.0.0.1:{c.port}"})
        resp = conn.getresponse()
        assert resp.readline() == b": open\n"
        began = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        took = time.monotonic() - began
        print(f"exo ui stopped {took:.2f} s after Ctrl-C with a stream open")
        out, err = proc.communicate()
        assert proc.returncode == 0, err
        assert "Cancel" not in err and "Traceback" not in err, err  # the streams ended, nothing was cancelled
        assert token not in out + err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_port_in_use_is_an_environment_error(served: tuple[Path, Running]) -> None:
    repo, running = served
    port = running.base.rsplit(":", 1)[1]
    proc = subprocess.run([sys.executable, "-m", "exo_cli", "ui", "--no-open", "--port", port], cwd=repo,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7 and f"Port {port} on 127.0.0.1 is in use" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("argv", [["status", "--json"], ["board", "--json"], ["agents", "--json"], ["--help"],
                                  ["ui", "--help"]], ids=" ".join)
def test_the_web_stack_is_imported_by_exo_ui_alone(repo: Path, argv: list[str]) -> None:
    code = ("import sys; from exo_cli.main import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('WEB=%s' % sorted({m.split('.')[0] for m in sys.modules} & "
            "{'starlette', 'uvicorn', 'pygments', 'exo_cli.web'}))")
    proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert "WEB=[]" in proc.stderr, proc.stderr


def test_redirect_file_is_private(tmp_path: Path) -> None:
    from exo_cli.adapters import browser

    path = browser.redirect_file(tmp_path / "rt", "http://127.0.0.1:1/?token=a\"<b>")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert "token=a&quot;&lt;b&gt;" in path.read_text()
    browser.forget(path)
    assert not path.exists()
    assert not browser.can_open({}) or sys.platform == "darwin"


def test_a_page_that_stops_reading_keeps_only_the_newest_events() -> None:
    """A stalled tab never makes the server hold every snapshot; the end of the stream still gets through."""
    import asyncio

    from exo_cli.web.live import END, QUEUE_MAX, Page

    async def scenario() -> list[tuple[str, str]]:
        page = Page(loop=asyncio.get_running_loop())
        for i in range(QUEUE_MAX * 4):
            page.push(("board", str(i)))
        await asyncio.sleep(0)
        assert page.queue.qsize() == QUEUE_MAX
        page.push(END)
        await asyncio.sleep(0)
        return [page.queue.get_nowait() for _ in range(page.queue.qsize())]

    got = asyncio.run(scenario())
    assert got == [END]


def test_exo_ui_is_the_humans(repo: Path) -> None:
    """A dev agent running `exo ui` is refused before anything listens (the board is the human's)."""
    from test_messages_helpers import make_agent, run_exo_as

    make_agent(repo, "w5", status="working")
    proc = run_exo_as(repo, "w5", "ui", "--no-open")
    assert proc.returncode == 5 and "cannot board" in proc.stderr and "exo ui:" not in proc.stdout, proc.stderr


def test_the_page_comes_back_with_a_restarted_store(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL stopped under an open page: the page is told, and once the server is back the snapshots
    follow the doorbell again (the watch is not lost). A private cluster: the shared one is left alone."""
    from pg_cluster import Cluster, pg_bin

    bindir = pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed")
    cluster = Cluster(bindir).start()
    running = None
    try:
        monkeypatch.setenv("EXO_STORE_URL", cluster.url())
        monkeypatch.setenv("EXO_STORE_TIMEOUT", "2")
        from test_messages_helpers import make_agent

        make_agent(repo, "w1", status="working")
        running = start(env_for(repo), fallback=1, pane_every=3600)
        c = Client(running.base)
        c.sign_in(running.auth.token)
        conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=90)
        conn.request("GET", "/api/events", headers={"Cookie": c.cookie, "Host": f"127.0.0.1:{c.port}"})
        resp = conn.getresponse()

        def next_event(kind: str, pred=lambda d: True):  # type: ignore[no-untyped-def]
            event, deadline = "", time.monotonic() + 120  # keepalives keep the socket busy: a deadline of its own
            while True:
                assert time.monotonic() < deadline, f"no {kind} event"
                line = resp.readline().decode()
                assert line, "the stream ended"
                if line.startswith("event: "):
                    event = line[7:].strip()
                elif line.startswith("data: ") and event == kind and pred(json.loads(line[6:])):
                    return json.loads(line[6:])

        next_event("board")
        cluster.stop_server()
        assert "PostgreSQL" in next_event("failure")["message"]
        cluster.start_server()
        make_agent(repo, "w2", status="working")
        next_event("board", lambda d: "w2" in {r["agent"]["id"] for r in d["rows"]})
        conn.close()
    finally:
        if running is not None:
            running.stop()
        cluster.stop()


def test_open_agent_pages_are_read_with_one_call(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages on two live agents and one not started: one ``read`` of the live ones per round (one capture call per
    multiplexer), the other read alone once it failed the shared call; each page sent its agent's text once, and
    again only when it changed."""
    import asyncio

    from pr_helpers import make_agent

    from exo_cli.web import live

    team(repo)  # w1 live (headless), w3 never started
    make_agent(repo, "w2", start=[sys.executable, "-c", "print('w2 here', flush=True); import time; time.sleep(600)"])
    wait_for(lambda: "w2 here" in live.invoke("read", env_for(repo), agent="w2").text, what="w2's log")
    calls: list[object] = []
    real = live.invoke

    def counting(name: str, env: object, **kw: object) -> object:
        if name == "read":
            calls.append(kw["agent"])
        return real(name, env, **kw)

    monkeypatch.setattr(live, "invoke", counting)
    hub = live.Hub(env_for(repo))

    async def scenario() -> list[list[tuple[str, str]]]:
        pages = [hub.open("w1"), hub.open("w2"), hub.open("w1"), hub.open("w3")]
        await asyncio.to_thread(hub.panes, ["w1", "w2", "w3"])
        await asyncio.to_thread(hub.panes, ["w1", "w2", "w3"])  # nothing changed: nothing sent
        await asyncio.sleep(0)
        return [[p.queue.get_nowait() for _ in range(p.queue.qsize())] for p in pages]

    try:
        got = asyncio.run(scenario())
    finally:
        stop_repo_agents(repo, tmux=False)
    assert calls == [["w1", "w2", "w3"], "w1", "w2", "w3", ["w1", "w2"], "w3"]
    assert [[json.loads(d)["agent"] for e, d in q if e == "pane"] for q in got] == [["w1"], ["w2"], ["w1"], []]
