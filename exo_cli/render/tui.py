"""``exo board``: the live board in Textual (imported by that command only: Textual costs ~150 ms).

The agents table (one line per agent, those that need you first and coloured) over the root's
inbox. A thread waits on the team doorbell and takes a new snapshot (the ``board`` operation)
when it rings, or every few seconds for the liveness check; nothing polls each agent. Keys call
the same operations as the commands through ``registry.invoke``, so they have the same
refusals (shown as notifications). ``NO_COLOR`` gives a board without colour codes.
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
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Input, Static
from textual.worker import get_current_worker

from exo_cli.errors import ExoError
from exo_cli.records import TEAM_BELL
from exo_cli.registry import invoke
from exo_cli.render import teamboard as fmt
from exo_cli.render.text import safe

FALLBACK = 5.0  # seconds between snapshots when nothing rings (the liveness check of panes and processes)
COLOURS = {"asking": "bold yellow", "permission": "bold yellow", "dialog": "bold magenta", "failed": "bold red",
           "pr-ready": "bold green",
           "dead": "bold red"}


class TextScreen(ModalScreen[None]):
    """A scrollable text (a pane's tail, a diff); Escape or q closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q", "dismiss", "Close")]
    DEFAULT_CSS = "TextScreen { align: center middle; } TextScreen > Vertical { width: 96%; height: 90%; " \
                  "border: round $accent; background: $surface; overflow-y: auto; }"

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text, self.body = title, text

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(safe(self.title_text), style="bold"))
            yield Static(Text(safe(self.body) or "(empty)"), id="body")  # agent text never acts on the terminal


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
            yield Static(Text(self.prompt + ("  [y/n]" if self.confirm else "")))
            if not self.confirm:
                yield Input(id="answer")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value if event.value.strip() else None)

    def on_key(self, event: Any) -> None:
        if self.confirm and event.key in ("y", "n"):
            self.dismiss("y" if event.key == "y" else None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class BoardApp(App[None]):
    """The live board of one repository's agents."""

    TITLE = "exo board"
    ENABLE_COMMAND_PALETTE = False  # every action has its key, listed in the footer
    CSS = "#agents { height: 2fr; } #inbox { height: 1fr; } #summary { height: 1; } #inbox-title { height: 1; }"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter,a", "attach", "Attach"),
        Binding("r", "read", "Read"),
        Binding("d", "diff", "Diff"),
        Binding("s", "send", "Send"),
        Binding("w", "answer", "Answer"),
        Binding("m", "merge", "Merge"),
        Binding("c", "complete", "Complete"),
        Binding("k", "kill", "Kill"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, env: Any, *, fallback: float = FALLBACK) -> None:
        super().__init__(ansi_color=bool(os.environ.get("NO_COLOR")) or None)
        self.env = env
        self.fallback = fallback
        self.snapshot: Any = None
        self.needs_seen: set[tuple[str, str]] | None = None
        self.width = 80
        self.hosts = False

    # -- layout and updates ------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="summary")
        yield DataTable(id="agents", cursor_type="row", show_row_labels=False)
        yield Static(Text("INBOX", style="bold"), id="inbox-title")
        yield DataTable(id="inbox", cursor_type="row", show_row_labels=False)
        yield Footer()

    def on_mount(self) -> None:
        self.watch_team()

    def on_resize(self) -> None:
        if self.snapshot is not None:
            self.apply(self.snapshot)

    @work(thread=True, exclusive=True)
    def watch_team(self) -> None:
        """Take a snapshot now and whenever the team doorbell rings (or every ``fallback`` seconds)."""
        worker = get_current_worker()
        while not self.env.has_state():  # no agent yet: wait for the first one's state to appear
            self.call_from_thread(self.apply, invoke("board", self.env))
            for _ in range(int(self.fallback * 10)):
                if worker.is_cancelled:
                    return
                time.sleep(0.1)
        with self.env.store.bell.listen([TEAM_BELL]) as waiter:
            while not worker.is_cancelled:
                try:
                    snap = invoke("board", self.env)
                except ExoError as exc:
                    self.call_from_thread(self.notify, exc.message, severity="error")
                else:
                    self.call_from_thread(self.apply, snap)
                if waiter.wait(self.fallback):
                    time.sleep(0.1)  # let a burst of changes land: one snapshot for all of them

    def refresh_now(self) -> None:
        self.run_worker(lambda: self.call_from_thread(self.apply, invoke("board", self.env)), thread=True)

    def _style(self, needs: str | None) -> str:
        if not needs:
            return ""
        return "bold" if os.environ.get("NO_COLOR") else COLOURS.get(needs, "bold")

    def apply(self, snap: Any) -> None:
        """Show a snapshot; ring when an agent newly needs you."""
        self.snapshot = snap
        width = max(self.size.width - 2, 40)
        self.query_one("#summary", Static).update(Text(fmt.summary(snap)))
        table = self.query_one("#agents", DataTable)
        selected = self._selected_id()
        hosts = any(r.host for r in snap.rows)  # a team on several hosts: a HOST column
        if width != self.width or not table.columns or hosts != self.hosts:
            self.width, self.hosts = width, hosts
            table.clear(columns=True)
            table.add_column(Text(fmt.header(width, hosts=hosts), style="bold"), width=width, key="line")
        table.clear()
        for row in snap.rows:
            table.add_row(Text(fmt.line(row, width), style=self._style(row.needs)), key=row.agent.id)
        if not snap.rows:
            table.add_row(Text("No agents. Start one with `exo spawn`."), key="-")
        if selected is not None and selected in {r.agent.id for r in snap.rows}:
            table.move_cursor(row=table.get_row_index(selected))
        inbox = self.query_one("#inbox", DataTable)
        if not inbox.columns:
            inbox.add_column("", width=width, key="line")
        inbox.clear()
        now = time.time()
        for item in snap.inbox:
            inbox.add_row(Text(fmt.inbox_line(item, width, now), style="bold" if item.pending else ""),
                          key=str(item.id))
        needs = {(r.agent.id, r.needs) for r in snap.rows if r.needs}
        fresh = needs - (self.needs_seen or set())
        if self.needs_seen is not None and fresh:
            self.bell()
            from exo_cli.adapters.notify import tmux_message

            first = next(r for r in snap.rows if (r.agent.id, r.needs) in fresh)
            tmux_message(f"exo: {first.agent.name} {fmt.NEEDS_TEXT.get(first.needs or '', first.needs)}", os.environ)
        self.needs_seen = needs

    # -- the selected agent ------------------------------------------------------------------
    def _selected_id(self) -> str | None:
        table = self.query_one("#agents", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return key if key and key != "-" else None

    def _selected(self) -> Any:
        aid = self._selected_id()
        if self.snapshot is None or aid is None:
            return None
        return next((r for r in self.snapshot.rows if r.agent.id == aid), None)

    def _run(self, what: str, call: Callable[[], Any], done: Callable[[Any], object] | None = None) -> None:
        """Call an operation in a thread; a refusal becomes a notification with its hint."""

        def body() -> None:
            try:
                result = call()
            except ExoError as exc:
                text = exc.message + (f"\n{exc.hint}" if getattr(exc, "hint", None) else "")
                self.call_from_thread(self.notify, text, title=f"{what} refused", severity="error", timeout=10)
                return
            if done is not None:
                self.call_from_thread(done, result)
            self.call_from_thread(self.refresh_now)

        self.run_worker(body, thread=True)

    # -- keys ----------------------------------------------------------------------------------
    def action_attach(self) -> None:
        row = self._selected()
        if row is None:
            return
        aid = row.agent.id

        def show(result: Any) -> None:
            from exo_cli.adapters.proc import run_foreground

            if result.mode in ("popup", "window"):  # shown by the user's tmux: the board stays live
                self.run_worker(lambda: run_foreground(result.argv), thread=True)
                if result.hint:
                    self.notify(result.hint)
                return
            with self.suspend():
                try:
                    run_foreground(result.argv)  # a plain attach, or `tail -F` of a headless agent's log
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
        inbox = self.query_one("#inbox", DataTable)
        aid: str | None = None
        question = ""
        if inbox.has_focus and inbox.row_count and self.snapshot is not None:
            key = inbox.coordinate_to_cell_key(inbox.cursor_coordinate).row_key.value
            item = next((i for i in self.snapshot.inbox if str(i.id) == key), None)
            if item is not None:
                aid, question = item.sender, item.body
        else:
            row = self._selected()
            if row is not None:
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
                      lambda r: f"merged PR #{n} as {r.merge_commit[:9]}")

    def action_complete(self) -> None:
        row = self._selected()
        if row is not None:
            aid = row.agent.id
            self._confirm(f"Complete {aid} (close its bead, stop it, remove its worktree if nothing is lost)?",
                          "complete", lambda: invoke("complete", self.env, target=aid), lambda r: f"completed {aid}")

    def action_kill(self) -> None:
        row = self._selected()
        if row is not None:
            aid = row.agent.id
            self._confirm(f"Kill {aid} and its descendants (worktrees are kept)?", "kill",
                          lambda: invoke("kill", self.env, agent=aid), lambda r: f"killed {', '.join(r.killed) or '-'}")


def run(env: Any) -> None:
    BoardApp(env).run()
