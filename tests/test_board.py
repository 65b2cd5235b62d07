"""``exo board`` and ``exo agents --watch``: real demo agents in real tmux, Textual's pilot, an 80x24 pane.

The pilot drives the board's keys (answer, diff, kill) against real agents; a private tmux
server shows ``exo board`` in an 80x24 pane, captured as the user would see it.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_demo_agent import start_demo
from test_messages_helpers import ROOT, env_for, make_agent

from conftest import Exo, wait_for
from exo_cli import registry
from exo_cli.ops import agentctl
from exo_cli.render import teamboard as fmt

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@pytest.fixture
def team(repo: Path, tmp_path: Path) -> Iterator[Path]:
    """w1 (idle after its work) and w2 (asking its parent, the root, a question): real demo agents in tmux."""
    env = env_for(repo)
    env.store.agents()
    start_demo(repo, tmp_path, "w1")
    start_demo(repo, tmp_path, "w2", script=[
        {"write": {"path": "a.txt", "content": "a\n"}},
        {"commit": {"message": "w2: a"}},
        {"question": {"message": "Which [bold]port[/bold]?", "timeout": 120}},
        {"note": {"message": "after the answer"}},
    ])
    wait_for(lambda: env_for(repo).store.agent("w2").status == "asking", timeout=60, what="w2 asking")
    wait_for(lambda: env_for(repo).store.agent("w1").status == "idle", timeout=60, what="w1 idle")
    yield repo
    agentctl.mux_for(env_for(repo), "tmux").kill_server()


def table_text(app, selector: str) -> list[str]:  # type: ignore[no-untyped-def]
    table = app.query_one(selector)
    return [table.render_line(y).text for y in range(table.size.height)]


async def until(pilot, predicate, timeout: float = 60.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.05)


@needs_tmux
def test_board_pilot_answer_diff_kill_on_real_agents(team: Path) -> None:
    from exo_cli.render.tui import AskScreen, BoardApp, TextScreen

    repo = team
    env = env_for(repo)

    async def scenario() -> None:
        app = BoardApp(env, fallback=2.0)
        rang: list[int] = []
        app.bell = lambda: rang.append(1)  # type: ignore[method-assign]
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: any("w2" in ln for ln in table_text(app, "#agents")), what="rows")
            rows = [ln for ln in table_text(app, "#agents") if re.search(r"\bw[12]\b", ln)]
            assert "w2" in rows[0] and "asks you" in rows[0] and rows[0].lstrip().startswith("!")  # first: needs you
            assert "w1" in rows[1] and "idle" in rows[1]
            assert all(len(ln) <= 80 for ln in table_text(app, "#agents"))
            inbox = "\n".join(table_text(app, "#inbox"))
            assert "Which [bold]port[/bold]?" in inbox  # agent text is never markup
            # diff of the selected agent (w2, first)
            await pilot.press("d")
            await until(pilot, lambda: isinstance(app.screen, TextScreen), what="the diff")
            assert "+a" in str(app.screen.body) and "a.txt" in str(app.screen.body)
            await pilot.press("escape")
            # answer w2's question: the same operation as `exo answer`
            await pilot.press("w")
            await until(pilot, lambda: isinstance(app.screen, AskScreen), what="the answer prompt")
            await pilot.press(*"8080", "enter")
            await until(pilot, lambda: env_for(repo).store.agent("w2").status != "asking", what="w2 answered")
            await until(pilot, lambda: not any("asks you" in ln for ln in table_text(app, "#agents")),
                        what="the board updated")
            # kill w1 (select it, confirm): same refusals and effects as `exo kill`
            await until(pilot, lambda: any("w1" in ln for ln in table_text(app, "#agents")), what="w1's row")
            table = app.query_one("#agents")
            table.move_cursor(row=table.get_row_index("w1"))
            await pilot.press("k")
            await until(pilot, lambda: isinstance(app.screen, AskScreen), what="the confirmation")
            await pilot.press("y")
            await until(pilot, lambda: env_for(repo).store.agent("w1").status == "dead", what="w1 killed")
            await until(pilot, lambda: any("w1" in ln and "dead" in ln for ln in table_text(app, "#agents")),
                        what="w1 dead on the board")
            assert rang  # an agent newly needing you rings the terminal bell (not the ones there at the start)
            # a refusal is shown, not raised: merge without a PR
            await pilot.press("m")
            await pilot.pause(0.2)
            await pilot.press("q")

    asyncio.run(scenario())
    answer = [m for m in env.store.messages(sender="root", kinds=["answer"])]
    assert answer and answer[0].body == "8080"


@needs_tmux
def test_board_in_an_80x24_tmux_pane(team: Path, tmp_path: Path) -> None:
    sock = Path(os.path.realpath("/tmp")) / f"exo-board-{os.getpid()}-{tmp_path.name[-6:]}.sock"
    conf = tmp_path / "nostatus.conf"
    conf.write_text("set -g status off\n")
    environ = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE", "NO_COLOR")}
    environ.update(PYTHONPATH=str(ROOT), TERM="xterm-256color")
    cmd = f"cd {shlex.quote(str(team))} && exec {shlex.quote(sys.executable)} -m exo_cli board"
    try:
        for no_color in (False, True):
            env = {**environ, **({"NO_COLOR": "1"} if no_color else {})}
            # NO_COLOR given to the pane itself: a server still ending from the last round would start the
            # session with its own environment, not this client's
            subprocess.run(["tmux", "-S", str(sock), "-f", str(conf), "new-session", "-d", "-x", "80", "-y", "24",
                            *(["-e", "NO_COLOR=1"] if no_color else []), "-s", "b", cmd], check=True, env=env)

            def screen(escapes: bool = False) -> str:
                return subprocess.run(["tmux", "-S", str(sock), "capture-pane", "-p", *(["-e"] if escapes else []),
                                       "-t", "b"], capture_output=True, text=True, env=environ).stdout

            wait_for(lambda: "asks you" in screen() and "q Quit" in screen(), timeout=60, what="the board in the pane")
            lines = screen().splitlines()
            assert len(lines) <= 24 and all(len(ln) <= 80 for ln in lines)
            assert any("exo board: 2 agent(s), 1 need you" in ln for ln in lines)
            w2 = next(i for i, ln in enumerate(lines) if "asks you" in ln)
            w1 = next(i for i, ln in enumerate(lines) if re.search(r"\bw1\b", ln) and "idle" in ln)
            assert w2 < w1  # the agent that needs you first
            assert "q Quit" in lines[-1] and "a Attach" in lines[-1]  # the keys, in the footer
            assert any("INBOX" in ln for ln in lines) and any("Which [bold]port" in ln for ln in lines)
            colours = re.findall(r"\x1b\[([0-9;]*)m", screen(escapes=True))
            coloured = [c for c in colours if re.search(r"(^|;)(3[0-7]|38|4[0-7]|48|9[0-7]|10[0-7])(;|$)", c)]
            assert (coloured == []) == no_color, colours[:20]
            # the selected agent (the first row, w2) stands out without colour too: reverse video
            raw = screen(escapes=True).splitlines()
            reversed_rows = [re.sub(r"\x1b\[[0-9;]*m", "", ln) for ln in raw
                             if re.search(r"\x1b\[([0-9;]*;)?7(;[0-9;]*)?m", ln)]
            if no_color:
                assert any("asks you" in ln for ln in reversed_rows), raw
            subprocess.run(["tmux", "-S", str(sock), "send-keys", "-t", "b", "q"], check=True, env=environ)
            wait_for(lambda: subprocess.run(["tmux", "-S", str(sock), "has-session", "-t", "b"], capture_output=True,
                                            env=environ).returncode != 0, what="the board to quit")
    finally:
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, env=environ)


def _row(name: str, status: str = "idle", needs: str | None = None, **kw: object) -> SimpleNamespace:
    agent = SimpleNamespace(id=name, name=name, depth=0, status=status, task=kw.get("task"), bead=None,
                            last_message=kw.get("last"), pr=kw.get("pr"), turns=3, tool_calls=12, tokens=45200,
                            age_seconds=125.0, cost_usd=kw.get("usd", 0.25))
    return SimpleNamespace(agent=agent, needs=needs, conflicts=list(kw.get("conflicts") or []))  # type: ignore[arg-type]


@pytest.mark.parametrize("width", [80, 200])
def test_one_line_per_agent_at_any_width(width: int) -> None:
    long = "a very long task description " * 10
    rows = [_row("w1", task=long, last="line one\nline two\x1b[31m red", pr={"number": 12, "state": "open"}),
            _row("auth-service-lead", "waiting-permission", "permission", task="[demo-cfg] cfg"),
            _row("w3", conflicts=["w1: src/api.py"], task="api")]
    for r in rows:
        text = fmt.line(r, width)
        assert len(text) == width and "\n" not in text and "\x1b" not in text
    assert "#12 open" in fmt.line(rows[0], width) and "3/12/45k" in fmt.line(rows[0], width)
    if width >= fmt.COST_FROM:  # the dollars, on a board wide enough
        assert "3/12/45k   $0.25" in fmt.line(rows[0], width) and "COST" in fmt.header(width)
        assert "45k   ?" in fmt.line(_row("w5", usd=None), width)  # a model without a price: never a guess
    assert "over its budget" in fmt.line(_row("w6", "over-budget", "budget"), width)
    assert fmt.line(rows[1], width).startswith("!") and "waits for a permission" in fmt.line(rows[1], width)
    assert ("conflicts with w1: src/api.py" if width > 80 else "conflicts w1: src/api.py") in fmt.line(rows[2], width)
    assert len(fmt.header(width)) == width
    wide = fmt.line(_row("w4", task="修复登录" * 40, last="已完成" * 40), width)  # wide characters: 2 columns
    assert sum(fmt._cells(ch) for ch in wide) == width and "修复" in wide


def test_board_snapshot_needs_first_inbox_and_conflicts(repo: Path) -> None:
    env = env_for(repo)
    for name, status in (("w1", "working"), ("w2", "idle"), ("w3", "waiting-permission"), ("w4", "dead")):
        make_agent(repo, name, status=status)
    env.store.post("question", "w2", "root", "Port?", data={"from_name": "w2"}, state="pending")
    env.store.post("note", "w1", "root", "half way", data={"from_name": "w1"})
    env.store.kv_set("conflicts:w1", '{"w2": {"branch": "main.w1", "other_branch": "main.w2", "paths": ["x.py"]}}')
    r = registry.invoke("board", env)
    assert [(row.agent.id, row.needs) for row in r.rows] == [("w3", "permission"), ("w4", "dead"), ("w1", None),
                                                             ("w2", None)]
    assert r.needs_you == 2 and r.rows[2].conflicts == ["w2: x.py"]
    assert r.rows[3].conflicts == ["w1: x.py"]  # recorded by w1's check only: w2's row shows it too
    assert [(i.kind, i.pending) for i in r.inbox] == [("question", True), ("note", False)]  # questions first


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_agents_watch_wakes_on_the_team_doorbell(repo: Path, monkeypatch: pytest.MonkeyPatch, store: str,
                                                 request: pytest.FixtureRequest) -> None:
    """The second snapshot comes from a ring (the fallback is an hour): nothing polls. SQLite's
    doorbell sockets and PostgreSQL's LISTEN/NOTIFY alike."""
    from exo_cli.render.teamboard import watch

    if store == "postgres":
        monkeypatch.setenv("EXO_STORE_URL", request.getfixturevalue("pg_cluster").url())
    env = env_for(repo)
    env.store.agents()
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    t = threading.Thread(target=watch, args=(env_for(repo),), kwargs={"fallback": 3600, "rounds": 2})
    t.start()
    wait_for(lambda: "No agents" in out.getvalue(), what="the first board")
    time.sleep(0.2)  # the watcher is now waiting on the doorbell
    make_agent(repo, "w9", status="working")
    env.store.update_agent("w9", status="asking")
    t.join(timeout=60)
    assert not t.is_alive()
    assert "w9" in out.getvalue() and "asks you" in out.getvalue()


COMMANDS = [["status", "--json"], ["agents", "--json"], ["diff", "--help"], ["hook", "stop", "--cli", "claude"],
            ["board", "--json"], ["mcp", "--help"], ["--help"]]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a))
def test_textual_is_never_imported_but_by_the_board(repo: Path, argv: list[str]) -> None:
    code = ("import sys; from exo_cli.main import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('TEXTUAL=%s' % any(m == 'textual' or m.startswith('textual.') for m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, input="{}", timeout=60)
    assert "TEXTUAL=False" in proc.stderr, proc.stderr


def test_every_module_but_the_board_imports_without_textual() -> None:
    code = ("import importlib, pkgutil, sys, exo_cli\n"
            "from exo_cli import registry; registry.load_all()\n"
            "for m in pkgutil.walk_packages(exo_cli.__path__, 'exo_cli.'):\n"
            "    if m.name not in ('exo_cli.render.tui', 'exo_cli.__main__'): importlib.import_module(m.name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_board_of_a_repository_without_agents_picks_up_the_first_one(repo: Path) -> None:
    from exo_cli.render.tui import BoardApp

    async def scenario() -> None:
        app = BoardApp(env_for(repo), fallback=0.2)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: any("No agents" in ln for ln in table_text(app, "#agents")), what="empty")
            make_agent(repo, "w1", status="working")
            await until(pilot, lambda: any(re.search(r"\bw1\b", ln) for ln in table_text(app, "#agents")),
                        what="the first agent")
            await pilot.press("q")

    asyncio.run(scenario())


def test_the_boards_text_views_never_pass_agent_escapes_to_the_terminal() -> None:
    """A diff or a pane's tail shown on the board (TextScreen) has every control character made visible:
    an agent's committed ESC ]0;title BEL or ESC [2J stays text."""
    from textual.app import App
    from textual.widgets import Static

    from exo_cli.render.tui import TextScreen

    async def scenario() -> str:
        app: App[None] = App()
        async with app.run_test(size=(80, 24)) as pilot:
            app.push_screen(TextScreen("diff of \x1b[2Jw1", "+a \x1b]0;PWNED\x07 \x1b]52;c;ZXZpbA==\x07 \x1b[31mred"))
            await pilot.pause()
            shown = str(app.screen.query_one("#body", Static).content)
            title = str(app.screen.query(Static).first().content)
            return shown + "\n" + title

    text = asyncio.run(scenario())
    assert "\x1b" not in text and "\x07" not in text
    assert "^[]0;PWNED^G" in text and "^[]52;c;ZXZpbA==^G" in text and "^[[2Jw1" in text


def test_each_row_shows_what_its_own_agent_said_never_a_notice_sent_by_it(repo: Path) -> None:
    """A message's row follows who said it. Notices exo posts from whichever process noticed something
    (a foreseen conflict found by cx2's check, a PR merged by tl1, a completion done by top) are not
    the sender's words: cx2's row never shows the heads-up sent to cx1 (nor its own copy), tl1's never
    "Your PR was merged", top's never "g1 was completed". Both siblings of the conflict show it."""
    import pr_helpers as ph

    from exo_cli.ops import foresight

    ph.commit(repo, "src/api.py", "one\ntwo\n", "api")
    top = ph.make_agent(repo, "top", role="tl")
    tl1 = ph.make_agent(repo, "tl1", role="tl", parent="top", base="main.top")
    cx1 = ph.make_agent(repo, "cx1", parent="tl1", base="main.top.tl1")
    cx2 = ph.make_agent(repo, "cx2", parent="tl1", base="main.top.tl1")
    ph.make_agent(repo, "g1", parent="tl1", base="main.top.tl1")
    for agent in (top, tl1, cx1, cx2):
        registry.invoke("note", ph.env_for(agent.worktree, agent.id), message=f"{agent.id}'s own words")
    ph.commit(cx1.worktree, "src/api.py", "one\ncx1\n", "cx1")
    ph.commit(cx2.worktree, "src/api.py", "one\ncx2\n", "cx2")
    env = ph.env_for(repo)
    found, told = foresight.run_check(env, env.store.agent("cx2"))
    assert list(found) == ["cx1"] and sorted(told) == ["cx1", "cx2"]
    # tl1 merges cx1's PR: notices to cx1 and its siblings, posted by tl1
    n = registry.invoke("pr_file", ph.env_for(cx1.worktree, "cx1"), title="cx1's work").pr.number
    registry.invoke("pr_merge", ph.env_for(tl1.worktree, "tl1"), number=n)
    assert [m.sender for m in env.store.messages(kinds=["pr-merged"])] == ["tl1"] * 3
    # top completes its grandchild g1 (nothing to lose): tl1, g1's parent, is told
    registry.invoke("complete", ph.env_for(top.worktree, "top"), target="g1")
    told_tl1 = env.store.messages(recipient="tl1", kinds=["completed"])
    assert [m.body for m in told_tl1] == ["g1 was completed by top: agent was not running, worktree removed, branch deleted."]
    rows = {r.agent.id: r for r in registry.invoke("board", env).rows}
    said = {aid: r.agent.last_message for aid, r in rows.items()}
    assert said["cx2"] == "cx2's own words"  # not "Heads-up: your branch main.top.tl1.cx1 conflicts..."
    assert said["tl1"] == "tl1's own words"  # not "Your PR #1 ... was merged" nor "PR #1 ... was merged"
    assert said["top"] == "top's own words"  # not "g1 was completed"
    assert said["cx1"].startswith("PR #1 filed")  # what cx1 itself said last
    listed = {a["id"]: a["last_message"] for a in Exo(repo)("agents", "--json").json()["agents"]}
    assert listed["cx2"] == "cx2's own words" and listed["tl1"] == "tl1's own words"
    # the conflict was found by cx2's check only, and shows on both rows
    assert rows["cx2"].conflicts == ["cx1: src/api.py"] and rows["cx1"].conflicts == ["cx2: src/api.py"]
