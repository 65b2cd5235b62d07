"""``exo board`` driven by Textual's pilot: hostile text everywhere, the inbox, the selection, failures.

Real repositories, real worktrees and a real headless agent process; the board's keys call the
real operations. What the screen shows is read from Textual's compositor (every widget, toasts
and modal screens included), as the terminal would get it.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pr_helpers import commit, env_for, make_agent
from test_messages_helpers import ROOT
from test_messages_helpers import make_agent as record_agent

from conftest import stop_repo_agents, wait_for

# Textual's markup would make the first an action (a click quits the board) and the second a
# broken closing tag (MarkupError: the board crashed, and exited 0)
ACTION = "[@click=app.quit]x"
TAG = "a[/b]"
BOLD = "[b]loud[/b]"
EVIL = f"{ACTION} {TAG} {BOLD} \x1b]0;PWNED\x07"


def screen_lines(app: Any) -> list[str]:
    """The whole screen as text lines: every widget, the toasts and the modal screen on top."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def screen_text(app: Any) -> str:
    return "\n".join(screen_lines(app))


def clickable(app: Any) -> list[str]:
    """Text on screen that carries a click action (markup's ``@click``): none may come from agent text."""
    found = []
    for strip in app.screen._compositor.render_strips():
        for seg in strip:
            meta = seg.style.meta if seg.style is not None else {}
            if any(k.startswith("@") for k in meta):
                found.append(f"{seg.text!r}: {meta}")
    return found


def selected_key(table: Any) -> str | None:
    """The key of the table's selected row (Textual's own API: these tests ran against the board before)."""
    return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value) if table.row_count else None


async def until(pilot: Any, predicate: Any, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.05)


def hostile_team(repo: Path) -> None:
    """w1: a live headless agent that printed hostile text, whose branch commits a hostile file name and
    whose worktree holds hostile untracked files; w2 asks a hostile question; hostile notes, PR
    title, events and a hostile display name."""
    commit(repo, "README.md", "readme\n", "readme")
    script = f"printf '%s\\n' {shlex.quote('pane says ' + EVIL)}; sleep 600"
    w1 = make_agent(repo, "w1", start=["sh", "-c", script])
    commit(w1.worktree, ACTION, f"{BOLD}\n", "add a file named like markup")
    (Path(w1.worktree) / "a[").mkdir()
    (Path(w1.worktree) / TAG).write_text("untracked\n")  # complete refuses: it would lose this file
    env = env_for(repo)
    env.store.update_agent("w1", task=f"task {EVIL}", status="working")
    make_agent(repo, "w2")
    env.store.update_agent("w2", status="asking")
    record_agent(repo, "w3", name="w3[/i]", status="idle", task=TAG)  # a name no spawn allows: shown as text
    env.store.post("note", "w1", "root", f"note {EVIL}", data={"from_name": "w1"})
    env.store.post("question", "w2", "root", f"question {EVIL}", data={"from_name": "w2"}, state="pending")
    env.store.post("pr-filed", "w1", "root", f"PR #1 filed: title {EVIL} (main.w1 -> main)",
                   data={"from_name": "w1", "pr": 1})
    env.store.post("event", "w3", "root", f"[SPAWNED w3] dev in /tmp/{ACTION}",
                   data={"from_name": "w3[/i]", "event": "spawned"})


def test_hostile_text_is_plain_text_in_every_place_of_the_board(repo: Path, request: pytest.FixtureRequest) -> None:
    """Rows, the inbox, a message's details, the answer prompt, the diff, the pane's tail, a refused
    `complete` (the toast names the hostile files), titles: all literal text, nothing clickable,
    and the board still running at the end."""
    from exo_cli.render.tui import AskScreen, BoardApp, TextScreen

    hostile_team(repo)
    env = env_for(repo)
    request.addfinalizer(lambda: stop_repo_agents(repo, tmux=False))  # w1's headless process

    async def scenario() -> None:
        app = BoardApp(env, fallback=2.0)
        app.bell = lambda: None  # type: ignore[method-assign]

        async def check(*must: str) -> None:
            await pilot.pause(0.1)
            text = screen_text(app)
            for literal in must:
                assert literal in text, f"{literal!r} not shown literally:\n{text}"
            assert "\x1b" not in text and "\x07" not in text
            assert clickable(app) == []
            assert getattr(app, "failure", None) is None and app.is_running

        async with app.run_test(size=(200, 50), notifications=True) as pilot:
            await until(pilot, lambda: "question" in screen_text(app) and "w3" in screen_text(app), what="rows")
            await check(f"task {ACTION} {TAG} {BOLD} ^[]0;PWNED^G", "w3[/i]", f"note {ACTION} {TAG}",
                        f"question {ACTION} {TAG}", f"title {ACTION} {TAG}")
            await pilot.press("e")  # the folded events, unfolded
            await check(f"[SPAWNED w3] dev in /tmp/{ACTION}")
            # w1's diff (the file's name and its text) and the tail of its pane
            table = app.query_one("#agents")
            table.move_cursor(row=table.get_row_index("w1"))
            await pilot.press("d")
            await until(pilot, lambda: isinstance(app.screen, TextScreen), what="the diff")
            await check(f"+++ b/{ACTION}", f"+{BOLD}")
            await pilot.press("escape")
            await pilot.press("r")
            await until(pilot, lambda: isinstance(app.screen, TextScreen) and "pane says" in screen_text(app),
                        what="the pane's tail")
            await check(f"pane says {ACTION} {TAG} {BOLD}")
            await pilot.press("escape")
            # complete refused: the toast names the files it would lose, as text
            await pilot.press("c")
            await until(pilot, lambda: isinstance(app.screen, AskScreen), what="the confirmation")
            await pilot.press("y")
            await until(pilot, lambda: "complete refused" in screen_text(app), what="the refusal")
            await check(TAG, "[@click=app.quit]")
            assert env_for(repo).store.agent("w1").status != "done"
            # the inbox: its first line is the question; Enter shows it in full, w asks for the answer
            await pilot.press("tab")
            await until(pilot, lambda: app.query_one("#inbox").has_focus, what="the inbox")
            app.query_one("#inbox").move_cursor(row=0)
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, TextScreen), what="the question's details")
            await check(f"question {ACTION} {TAG} {BOLD}", "question from w2")
            await pilot.press("escape")
            await pilot.press("w")
            await until(pilot, lambda: isinstance(app.screen, AskScreen), what="the answer prompt")
            await check(f"Answer w2: question {ACTION} {TAG}")
            await pilot.press("escape")
            await pilot.press("q")
        assert getattr(app, "failure", None) is None and not app.return_code

    asyncio.run(scenario())


def test_notifications_and_titles_are_never_markup(repo: Path) -> None:
    """Whoever calls the board's notify (an operation's refusal, a hint naming a path) gets plain text."""
    from exo_cli.render.tui import BoardApp

    async def scenario() -> None:
        app = BoardApp(env_for(repo), fallback=5.0)
        async with app.run_test(size=(120, 30), notifications=True) as pilot:
            app.notify(f"refused: {EVIL}", title=f"title {TAG}", severity="error", markup=True)
            await until(pilot, lambda: "refused" in screen_text(app), what="the toast")
            await pilot.pause(0.1)
            text = screen_text(app)
            for literal in (f"refused: {ACTION} {TAG} {BOLD}", "^[]0;PWNED^G", f"title {TAG}"):  # the toast wraps
                assert literal in text, text
            assert clickable(app) == [] and app.failure is None

    asyncio.run(scenario())


def run_board_in_tmux(repo: Path, tmp_path: Path, code: str) -> tuple[int, str]:
    """Run ``python -c code`` (which starts ``exo board``) in an 80x24 tmux pane; its exit status and stderr."""
    sock = Path(os.path.realpath("/tmp")) / f"exo-bt-{os.getpid()}-{tmp_path.name[-6:]}.sock"
    status, err = tmp_path / "status", tmp_path / "stderr"
    environ = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    environ.update(PYTHONPATH=str(ROOT), TERM="xterm-256color")
    cmd = (f"cd {shlex.quote(str(repo))} && {shlex.quote(sys.executable)} -c {shlex.quote(code)} board"
           f" 2>{shlex.quote(str(err))}; echo $? > {shlex.quote(str(status))}; sleep 600")
    try:
        subprocess.run(["tmux", "-S", str(sock), "-f", "/dev/null", "new-session", "-d", "-x", "80", "-y", "24",
                        "-s", "b", cmd], check=True, env=environ)
        wait_for(lambda: status.exists() and status.read_text().strip() != "", timeout=90, what="the board to end")
        return int(status.read_text()), err.read_text()
    finally:
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, env=environ)


BOOM = ("import sys\nfrom exo_cli.render import teamboard\n"
        "def boom(*a, **k):\n    raise ValueError('a bug in the board [b]')\n"
        "teamboard.summary = boom\nfrom exo_cli.main import main\nmain(sys.argv[1:])\n")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_board_that_fails_exits_70_with_a_message_and_no_traceback(repo: Path, tmp_path: Path) -> None:
    """A bug inside the running board (here: its summary line raises) stops it with exit 70 and exo's
    one-line error, not Textual's traceback (which prints local variables: the environment's secrets)."""
    record_agent(repo, "w1", status="working")
    code, err = run_board_in_tmux(repo, tmp_path, BOOM)
    assert code == 70, err
    assert "Error: internal error: ValueError: a bug in the board [b]" in err
    assert "Traceback" not in err and "locals" not in err.lower()


def test_questions_first_events_folded_and_the_inbox_selection_stays_put(repo: Path) -> None:
    """A question older than 30 events is the inbox's first line; the events are one line (e unfolds
    them); a line selected deep in the unfolded inbox stays selected, and in view, while new events
    arrive and the snapshot is taken again."""
    from exo_cli.render.tui import BoardApp

    env = env_for(repo)
    record_agent(repo, "w1", status="working")
    question = env.store.post("question", "w1", "root", "Which port?", data={"from_name": "w1"}, state="pending")
    note = env.store.post("note", "w1", "root", "half way", data={"from_name": "w1"})
    events = [env.store.post("event", "w1", "root", f"[SPAWNED x{i}] dev", data={"event": "spawned"})
              for i in range(30)]
    env.store.post("event", "w1", "root", "w1 is idle", data={"event": "idle"})

    async def scenario() -> None:
        app = BoardApp(env, fallback=0.5)
        app.bell = lambda: None  # type: ignore[method-assign]
        async with app.run_test(size=(100, 30)) as pilot:
            inbox = app.query_one("#inbox")
            await until(pilot, lambda: inbox.row_count == 3, what="the folded inbox")
            lines = [inbox.get_row_at(i)[0].plain for i in range(inbox.row_count)]
            assert lines[0].startswith("?") and "Which port?" in lines[0]  # pinned first, in view
            assert "half way" in lines[1]
            assert "31 event(s): 1 idle, 30 spawned" in lines[2] and "e: show" in lines[2]
            assert "1 question(s) waiting" in screen_text(app)
            await pilot.press("e")
            await until(pilot, lambda: inbox.row_count == 34, what="the events unfolded")
            inbox.focus()
            target = str(events[3])  # an old event, far below the fold
            inbox.move_cursor(row=inbox.get_row_index(target))
            await pilot.pause(0.2)
            scrolled = inbox.scroll_y
            assert scrolled > 0
            for i in range(3):  # new events: the snapshot is taken again and rebuilt (new lines on top)
                env.store.post("event", "w1", "root", f"w1 event {i}", data={"event": "working"})
                await until(pilot, lambda i=i: any(f"w1 event {i}" in inbox.get_row_at(n)[0].plain
                                                   for n in range(inbox.row_count)), what="the new event")
                assert selected_key(inbox) == target
                assert inbox.scroll_y >= scrolled  # the view did not jump back to the top
            # answered: the question leaves, the selection stays on its line
            env.store.mark_messages([question], state="answered")  # as `exo answer` does
            env.store.consume([question])
            await until(pilot, lambda: str(question) not in [str(r.key.value) for r in inbox.ordered_rows],
                        what="the answered question gone")
            assert selected_key(inbox) == target and str(note) in [str(r.key.value) for r in inbox.ordered_rows]
            await pilot.press("e")
            await until(pilot, lambda: inbox.row_count == 2, what="folded again")
            assert selected_key(inbox) in (str(note), "events")
            await pilot.press("q")

    asyncio.run(scenario())


def test_the_agent_selection_follows_its_agent_when_the_list_reorders(repo: Path) -> None:
    """w3 selected; w5 starts asking (it moves first), then w3 itself needs you (it moves up), then the
    other rows change in place: the selection is on w3 every time."""
    from exo_cli.render.tui import BoardApp

    env = env_for(repo)
    for n in range(1, 6):
        record_agent(repo, f"w{n}", status="working")

    def order(app: Any) -> list[str]:
        return [str(r.key.value) for r in app.query_one("#agents").ordered_rows]

    async def scenario() -> None:
        app = BoardApp(env, fallback=0.5)
        app.bell = lambda: None  # type: ignore[method-assign]
        async with app.run_test(size=(100, 30)) as pilot:
            table = app.query_one("#agents")
            await until(pilot, lambda: order(app) == ["w1", "w2", "w3", "w4", "w5"], what="the tree order")
            table.move_cursor(row=2)
            await pilot.pause(0.1)
            assert selected_key(table) == "w3"
            env.store.update_agent("w5", status="asking")
            await until(pilot, lambda: order(app)[0] == "w5", what="w5 first")
            assert selected_key(table) == "w3" and table.cursor_row == 3
            env.store.update_agent("w3", status="waiting-permission")
            await until(pilot, lambda: order(app)[:2] == ["w5", "w3"], what="w3 second")
            assert selected_key(table) == "w3" and table.cursor_row == 1
            env.store.update_agent("w1", status="idle")
            await until(pilot, lambda: any("idle" in table.get_row_at(i)[0].plain for i in range(table.row_count)),
                        what="w1 idle")
            assert selected_key(table) == "w3"
            env.store.delete_agent("w3")  # gone: the selection stays at its place
            await until(pilot, lambda: "w3" not in order(app), what="w3 gone")
            assert table.cursor_row == 1 and selected_key(table) == order(app)[1]
            await pilot.press("q")

    asyncio.run(scenario())


def test_enter_attaches_on_an_agent_and_a_click_only_selects(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Enter on the agents opens the agent (the attach operation); clicking a row selects it, nothing more."""
    from exo_cli import registry
    from exo_cli.errors import StateError
    from exo_cli.render.tui import BoardApp

    env = env_for(repo)
    record_agent(repo, "w1", status="working")
    record_agent(repo, "w2", status="working")
    calls: list[dict[str, Any]] = []
    real = registry.invoke

    def spy(name: str, e: Any, **kw: Any) -> Any:
        if name == "attach":
            calls.append(kw)
            raise StateError("not started")
        return real(name, e, **kw)

    monkeypatch.setattr("exo_cli.render.tui.invoke", spy)

    async def scenario() -> None:
        app = BoardApp(env, fallback=5.0)
        async with app.run_test(size=(100, 30), notifications=True) as pilot:
            table = app.query_one("#agents")
            await until(pilot, lambda: table.row_count == 2 and selected_key(table) == "w1", what="rows")
            await pilot.click("#agents", offset=(5, 2))  # the second row (under the header)
            await until(pilot, lambda: selected_key(table) == "w2", what="w2 selected by the click")
            await pilot.pause(0.3)
            assert calls == []
            await pilot.press("enter")
            await until(pilot, lambda: calls == [{"agent": "w2"}], what="attach w2")
            await until(pilot, lambda: "attach refused" in screen_text(app), what="the refusal")
            await pilot.press("q")

    asyncio.run(scenario())


def test_the_plain_board_pins_questions_and_folds_events() -> None:
    """``exo agents --watch``'s lines: every pending question even past the 10 lines, one line of events."""
    from types import SimpleNamespace

    from exo_cli.render import teamboard as fmt

    now = time.time()

    def item(i: int, kind: str, pending: bool = False, event: str = "") -> SimpleNamespace:
        return SimpleNamespace(id=i, kind=kind, sender="w1", name="w1", body=f"{kind} {i}", created_at=now,
                               pending=pending, event=event)

    inbox = [item(i, "question", True) for i in range(12)] + [item(100 + i, "note") for i in range(5)] + \
        [item(200 + i, "event", event="spawned") for i in range(40)]
    result = SimpleNamespace(rows=[], inbox=inbox, needs_you=0, count=0)
    lines = fmt.plain(result, 80)
    body = lines[lines.index("INBOX") + 1:]
    assert [ln for ln in body if ln.startswith("?")] == [ln for ln in body[:12]]  # all 12 questions, first
    assert not any("note" in ln for ln in body)  # no room left for notes
    assert re.search(r"\+ 40 event\(s\): 40 spawned", body[-1]) and len(body) == 13

