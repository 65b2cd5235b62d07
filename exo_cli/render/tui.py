"""``exo board``: the live board in Textual (imported by that command only: Textual costs ~150 ms).

The agents table (one line per agent, those that need you first and coloured) over the root's
inbox (the questions waiting for you first, what agents said, then the lifecycle events folded
into one line, ``e`` to unfold). A thread waits on the team doorbell and takes a new snapshot
(the ``board`` operation) when it rings, or every few seconds for the liveness check; nothing
polls each agent. A new snapshot keeps each table's selection on the same agent or message
(or at the same place when it is gone) and its scroll. Keys call the same operations as the
commands through ``registry.invoke``, so they have the same refusals (shown as notifications).
``NO_COLOR`` gives a board without colour codes; the selection is then shown in reverse video.

Everything an agent or a repository can write (names, tasks, notes, questions, file names in
a refusal, a diff) reaches Textual through ``render.text.cell`` (a plain ``Text``, control
characters made visible) or the app's ``notify`` (plain text, never markup): Textual's
markup would read ``[@click=app.quit]`` as an action and ``a[/b]`` as a broken tag.
A board that fails exits with the error's status (70 for a bug), never 0.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Input, Static
from textual.worker import WorkerFailed, get_current_worker

from exo_cli.errors import ExoError
from exo_cli.records import TEAM_BELL
from exo_cli.registry import invoke
from exo_cli.render import teamboard as fmt
from exo_cli.render.text import ago, cell, safe

FALLBACK = 5.0  # seconds between snapshots when nothing rings (the liveness check of panes and processes)
COLOURS = {"asking": "bold yellow", "permission": "bold yellow", "dialog": "bold magenta", "failed": "bold red",
           "pr-ready": "bold green",
           "dead": "bold red"}
NONE = "-"  # the key of the "No agents" line


def debugging() -> bool:
    return os.environ.get("EXO_DEBUG") == "1"


class TextScreen(ModalScreen[None]):
    """A scrollable text (a pane's tail, a diff, a message); Escape or q closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q", "dismiss", "Close")]
    DEFAULT_CSS = "TextScreen { align: center middle; } TextScreen > Vertical { width: 96%; height: 90%; " \
                  "border: round $accent; background: $surface; overflow-y: auto; }"

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text, self.body = title, text

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(cell(self.title_text, style="bold"))
            yield Static(cell(self.body or "(empty)"), id="body")  # agent text never acts on the terminal


class AskScreen(ModalScreen[str | None]):
    """One line of input (a message, an answer) or a yes/no confirmation; Escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = "AskScreen { align: center middle; } AskScreen > Vertical { width: 90%; height: auto; " \
                  "border: round $accent; background: $surface; padding: 0 1; }"

    def __init__(self, prompt: str, *, confirm: bool = False) -> None:
        super().__init__()
        self.prompt, self.confirm = prompt, confirm

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(cell(self.prompt + ("  [y/n]" if self.confirm else "")))
            if not self.confirm:
                yield Input(id="answer")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value if event.value.strip() else None)

    def on_key(self, event: Any) -> None:
        if self.confirm and event.key in ("y", "n"):
            self.dismiss("y" if event.key == "y" else None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class Table(DataTable[Text]):
    """A one-column table of lines; Enter opens the selected line (the app's ``open``), a click only selects."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "app.open", "Open", show=False)]


def selected_key(table: DataTable[Any]) -> str | None:
    if not table.row_count:
        return None
    return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)


def refill(table: DataTable[Any], header: Text, width: int, rows: list[tuple[str, Text]]) -> None:
    """Show ``rows`` (key, line) under ``header``, the selection kept on its key and the view where it was.

    Same header, keys and order: the cells change in place (nothing moves). Otherwise the
    table is rebuilt, the cursor put back on the selected key (or at the same place when that
    row is gone) and the scroll put back, so that a refresh never jumps to the top.
    """
    column = next(iter(table.columns.values()), None)
    same_column = column is not None and column.width == width and column.label.plain == header.plain
    keys = [k for k, _ in rows]
    if same_column and [str(r.key.value) for r in table.ordered_rows] == keys:
        for key, text in rows:
            table.update_cell(key, "line", text)
        return
    was, place, scroll = selected_key(table), table.cursor_row, table.scroll_y
    table.clear(columns=not same_column)
    if not same_column:
        table.add_column(header, width=width, key="line")
    for key, text in rows:
        table.add_row(text, key=key)
    if keys:
        table.scroll_to(y=scroll, animate=False, immediate=True)
        table.move_cursor(row=keys.index(was) if was in keys else min(place, len(keys) - 1), animate=False)


class BoardApp(App[None]):
    """The live board of one repository's agents."""

    TITLE = "exo board"
    ENABLE_COMMAND_PALETTE = False  # every action has its key, listed in the footer
    CSS = ("#agents { height: 2fr; } #inbox { height: 1fr; } #summary { height: 1; } #inbox-title { height: 1; }"
           # without colour, the selection is reverse video (a colour background would vanish)
           " App:nocolor DataTable > .datatable--cursor { text-style: reverse; }"
           " App:nocolor DataTable:focus > .datatable--cursor { text-style: bold reverse; }")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "attach", "Attach"),
        Binding("r", "read", "Read"),
        Binding("d", "diff", "Diff"),
        Binding("s", "send", "Send"),
        Binding("w", "answer", "Answer"),
        Binding("m", "merge", "Merge"),
        Binding("c", "complete", "Complete"),
        Binding("u", "undo", "Undo"),
        Binding("k", "kill", "Kill"),
        Binding("e", "events", "Events", show=False),  # named on the events' line itself
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, env: Any, *, fallback: float = FALLBACK) -> None:
        super().__init__(ansi_color=bool(os.environ.get("NO_COLOR")) or None)
        self.env = env
        self.fallback = fallback
        self.snapshot: Any = None
        self.needs_seen: set[tuple[str, str]] | None = None
        self.expanded = False  # the inbox's lifecycle events unfolded
        self.failure: BaseException | None = None  # what stopped the board, raised again by ``run``

    # -- text and failures ---------------------------------------------------------------------
    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Every notification as plain text, never markup, whatever the caller asks: its text may come
        from an agent or a repository (a refusal names files)."""
        super().notify(safe(message), title=safe(title), severity=severity, timeout=timeout, markup=False)

    def _handle_exception(self, error: Exception) -> None:
        """Textual's door for an unhandled exception: remember it for ``run``, which raises it again."""
        if self.failure is None:
            self.failure = error.error if isinstance(error, WorkerFailed) else error
        super()._handle_exception(error)

    def _fatal_error(self) -> None:
        """Stop without Textual's traceback (it shows local variables: the environment's secrets among
        them); ``run`` reports the error as exo does. ``EXO_DEBUG=1`` keeps the traceback."""
        if debugging():
            super()._fatal_error()
            return
        self.bell()
        self.exit(return_code=1)

    # -- layout and updates ------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="summary")
        yield Table(id="agents", cursor_type="row", show_row_labels=False)
        yield Static(cell("INBOX", style="bold"), id="inbox-title")
        yield Table(id="inbox", cursor_type="row", show_row_labels=False)
        yield Footer(compact=True)  # every key fits in 80 columns

    def on_mount(self) -> None:
        self.watch_team()

    def on_resize(self) -> None:
        if self.snapshot is not None:
            self.apply(self.snapshot)

    def take(self) -> None:
        """One snapshot, shown; a refusal (state unreadable) is a notification, the board stays."""
        try:
            snap = invoke("board", self.env)
        except ExoError as exc:
            self.call_from_thread(self.notify, exc.message, severity="error")
        else:
            self.call_from_thread(self.apply, snap)

    @work(thread=True, exclusive=True)
    def watch_team(self) -> None:
        """Take a snapshot now and whenever the team doorbell rings (or every ``fallback`` seconds)."""
        worker = get_current_worker()
        while not self.env.has_state():  # no agent yet: wait for the first one's state to appear
            self.take()
            for _ in range(int(self.fallback * 10)):
                if worker.is_cancelled:
                    return
                time.sleep(0.1)
        with self.env.store.bell.listen([TEAM_BELL]) as waiter:
            while not worker.is_cancelled:
                self.take()
                if waiter.wait(self.fallback):
                    time.sleep(0.1)  # let a burst of changes land: one snapshot for all of them

    def refresh_now(self) -> None:
        self.run_worker(self.take, thread=True)

    def _style(self, needs: str | None) -> str:
        if not needs:
            return ""
        return "bold" if os.environ.get("NO_COLOR") else COLOURS.get(needs, "bold")

    def apply(self, snap: Any) -> None:
        """Show a snapshot; ring when an agent newly needs you."""
        self.snapshot = snap
        width = max(self.size.width - 2, 40)
        self.query_one("#summary", Static).update(cell(fmt.summary(snap)))
        hosts = any(r.host for r in snap.rows)  # a team on several hosts: a HOST column
        rows = [(r.agent.id, cell(fmt.line(r, width), style=self._style(r.needs))) for r in snap.rows]
        refill(self.query_one("#agents", DataTable), cell(fmt.header(width, hosts=hosts), style="bold"), width,
               rows or [(NONE, cell("No agents. Start one with `exo spawn`."))])
        refill(self.query_one("#inbox", DataTable), cell(""), width,
               [(ln.key, cell(ln.text, style="bold" if ln.pending else ""))
                for ln in fmt.inbox_lines(snap.inbox, width, time.time(), expanded=self.expanded)])
        needs = {(r.agent.id, r.needs) for r in snap.rows if r.needs}
        fresh = needs - (self.needs_seen or set())
        if self.needs_seen is not None and fresh:
            self.bell()
            from exo_cli.adapters.notify import tmux_message

            first = next(r for r in snap.rows if (r.agent.id, r.needs) in fresh)
            tmux_message(f"exo: {fmt.clean(first.agent.name)} {fmt.NEEDS_TEXT.get(first.needs or '', first.needs)}",
                         os.environ)
        self.needs_seen = needs

    # -- the selection -----------------------------------------------------------------------
    def _selected(self) -> Any:
        aid = selected_key(self.query_one("#agents", DataTable))
        if self.snapshot is None or aid is None:
            return None
        return next((r for r in self.snapshot.rows if r.agent.id == aid), None)

    def _inbox_item(self) -> tuple[str | None, Any]:
        """The key of the inbox's selected line and its item (None for the events' line)."""
        key = selected_key(self.query_one("#inbox", DataTable))
        items = self.snapshot.inbox if self.snapshot is not None else []
        return key, next((i for i in items if str(i.id) == key), None)

    def _run(self, what: str, call: Callable[[], Any], done: Callable[[Any], object] | None = None) -> None:
        """Call an operation in a thread; a refusal becomes a notification with its hint."""

        def body() -> None:
            try:
                result = call()
            except ExoError as exc:
                text = exc.message + (f"\n{exc.hint}" if getattr(exc, "hint", None) else "")
                self.call_from_thread(self.notify, text, title=f"{what} refused", severity="error", timeout=10)
                return
            except Exception as exc:  # a bug in the operation: said, and the board stays (EXO_DEBUG=1 stops it)
                if debugging():
                    raise
                self.call_from_thread(self.notify, f"internal error: {type(exc).__name__}: {exc}\n"
                                      "This is a bug in exo; rerun with EXO_DEBUG=1 for a traceback.",
                                      title=f"{what} failed", severity="error", timeout=20)
                return
            if done is not None:
                self.call_from_thread(done, result)
            self.call_from_thread(self.refresh_now)

        self.run_worker(body, thread=True)

    # -- keys ----------------------------------------------------------------------------------
    def action_open(self) -> None:
        """Enter: on an agent, attach; on the inbox, the message in full (or the events unfolded)."""
        if not self.query_one("#inbox", DataTable).has_focus:
            self.action_attach()
            return
        key, item = self._inbox_item()
        if key == fmt.FOLD:
            self.action_events()
        elif item is not None:
            head = f"{item.event or item.kind} from {item.name}, {ago(time.time() - item.created_at)} ago"
            self.push_screen(TextScreen(head + (" (waiting for your answer: w)" if item.pending else ""), item.body))

    def action_events(self) -> None:
        self.expanded = not self.expanded
        if self.snapshot is not None:
            self.apply(self.snapshot)

    def action_attach(self) -> None:
        row = self._selected()
        if row is None:
            return
        aid = row.agent.id
        environ = dict(self.env.environ)  # the environment the plan was made for ($TMUX: whose tmux)

        def show(result: Any) -> None:
            from exo_cli.adapters.proc import run_foreground

            if result.mode in ("popup", "window"):  # shown by the user's tmux: the board stays live
                self.run_worker(lambda: run_foreground(result.argv, environ), thread=True)
                if result.hint:
                    self.notify(result.hint)
                return
            with self.suspend():
                try:
                    run_foreground(result.argv, environ)  # a plain attach, or `tail -F` of a headless agent's log
                except KeyboardInterrupt:
                    pass  # Ctrl-C ends the log's tail, not the board

        self._run("attach", lambda: invoke("attach", self.env, agent=aid), show)

    def action_read(self) -> None:
        row = self._selected()
        if row is not None:
            aid = row.agent.id
            self._run("read", lambda: invoke("read", self.env, agent=aid, lines=200, clean=True),
                      lambda r: self.push_screen(TextScreen(f"{aid} ({r.status}): the last {r.lines} lines", r.text)))

    def action_diff(self) -> None:
        row = self._selected()
        if row is not None:
            aid = row.agent.id

            def show(r: Any) -> None:
                head = f"{aid}: {r.head} vs {r.base}, {len(r.files)} file(s), +{r.added} -{r.deleted}"
                self.push_screen(TextScreen(head, r.patch or ""))

            self._run("diff", lambda: invoke("diff", self.env, agent=aid), show)

    def action_send(self) -> None:
        row = self._selected()
        if row is not None:
            aid = row.agent.id

            def sent(text: str | None) -> None:
                if text:
                    self._run("send", lambda: invoke("send", self.env, to=[aid], message=text),
                              lambda r: self.notify(f"sent to {aid} ({r.sent[0].delivery})"))

            self.push_screen(AskScreen(f"Message to {aid}:"), sent)

    def action_answer(self) -> None:
        aid: str | None = None
        question = ""
        if self.query_one("#inbox", DataTable).has_focus:
            _, item = self._inbox_item()
            if item is None or not item.pending:
                self.notify("Select a question waiting for your answer (marked ?)", severity="warning")
                return
            aid, question = item.sender, item.body
        else:
            row = self._selected()
            if row is not None and self.snapshot is not None:
                aid = row.agent.id
                question = next((i.body for i in self.snapshot.inbox if i.pending and i.sender == aid), "")
        if aid is None:
            return
        who = aid

        def answered(text: str | None) -> None:
            if text:
                self._run("answer", lambda: invoke("answer", self.env, agent=who, message=text),
                          lambda r: self.notify(f"answered {who}"))

        self.push_screen(AskScreen(f"Answer {who}: {fmt.clean(question)[:200]}"), answered)

    def _confirm(self, prompt: str, what: str, call: Callable[[], Any], said: Callable[[Any], str]) -> None:
        def go(yes: str | None) -> None:
            if yes:
                self._run(what, call, lambda r: self.notify(said(r)))

        self.push_screen(AskScreen(prompt, confirm=True), go)

    def action_merge(self) -> None:
        row = self._selected()
        if row is None:
            return
        if not row.agent.pr or row.agent.pr.get("state") != "open":
            self.notify(f"{row.agent.id} has no open pull request", severity="warning")
            return
        n = int(row.agent.pr["number"])
        self._confirm(f"Merge PR #{n} of {row.agent.id}?", "merge", lambda: invoke("pr_merge", self.env, number=n),
                      lambda r: f"merged PR #{n} as {r.merge_commit[:9]}" if r.merge_commit else
                      f"PR #{n} is {r.state} in the merge queue (position {r.position or '-'})")

    def action_complete(self) -> None:
        row = self._selected()
        if row is not None:
            aid = row.agent.id
            self._confirm(f"Complete {aid} (close its bead, stop it, remove its worktree if nothing is lost)?",
                          "complete", lambda: invoke("complete", self.env, target=aid), lambda r: f"completed {aid}")

    def action_undo(self) -> None:
        row = self._selected()
        if row is not None:
            aid = row.agent.id
            self._confirm(f"Undo {aid}'s last turn (its checkout back as its checkpoint before it; what it has now "
                          "is checkpointed first)?", "undo", lambda: invoke("undo", self.env, agent=aid),
                          lambda r: f"{aid}: checkpoint {r.restored} restored ({len(r.files)} file(s)); "
                                    f"exo undo {aid} --to {r.saved} puts back what it had")

    def action_kill(self) -> None:
        row = self._selected()
        if row is not None:
            aid = row.agent.id
            self._confirm(f"Kill {aid} and its descendants (worktrees are kept)?", "kill",
                          lambda: invoke("kill", self.env, agent=aid), lambda r: f"killed {', '.join(r.killed) or '-'}")


def run(env: Any) -> None:
    """Run the board until the user quits; what stopped it otherwise is raised (never a silent exit 0)."""
    app = BoardApp(env)
    app.run()
    if app.failure is not None:
        raise app.failure
    if app.return_code:
        raise RuntimeError(f"the board stopped with status {app.return_code}")
