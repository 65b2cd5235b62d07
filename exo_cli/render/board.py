"""The live status board of ``exo demo`` (on stderr), written like every human view: made safe.

``PlainBoard`` prints a progress line when something changes (piped, ``NO_COLOR``, ``--json``);
``LiveBoard`` keeps a rich table of the agents with the latest progress lines under it. Every
cell is an agent's text (its task, its last message, a PR title): each goes through ``safe``
and reaches rich as plain ``Text``, never as markup.
"""

from __future__ import annotations

import sys
from typing import Any

from exo_cli.render.text import Out, cell, fancy, safe

ROWS = 8  # recent progress lines shown under the live table
HEADERS = ["agent", "status", "task", "branch", "PR", "last message"]


def short(text: str | None, n: int = 60) -> str:
    """``text`` on one line, cut to ``n`` characters."""
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def row(a: Any) -> list[str]:
    """One agent of the board: its cells, made safe."""
    pr = a.pr or {}
    shown_pr = f"#{pr['number']} {pr['state']}" if pr else "-"
    return [safe(x) for x in (a.name, a.status, short(a.task, 36), a.branch or "-", shown_pr,
                              short(a.last_message))]


class PlainBoard:
    """Progress lines on stderr, only when something changes."""

    def __init__(self) -> None:
        self.out = Out(sys.stderr, False)
        self.seen: dict[str, str] = {}

    def board(self, agents: Any, elapsed: float) -> None:
        for a in agents.agents:
            if self.seen.get(a.id) != a.status:
                self.seen[a.id] = a.status
                self.event(f"{a.name}: {a.status}")

    def event(self, text: str) -> None:
        self.out.line(f"demo: {text}")
        self.out.flush()

    def close(self) -> None:
        pass


class LiveBoard:
    """A rich Live table of the agents (refreshed ~4/s) with the latest progress lines under it."""

    def __init__(self) -> None:
        from rich.live import Live

        self.console = Out(sys.stderr, True).console()
        self.lines: list[str] = []
        self.agents: Any = None
        self.elapsed = 0.0
        self.live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)
        self.live.start()

    def _render(self) -> Any:
        from rich.console import Group
        from rich.table import Table

        table = Table(title=f"exo demo  {self.elapsed:5.1f}s", title_justify="left", header_style="bold",
                      expand=False)
        for h in HEADERS:
            table.add_column(h, overflow="ellipsis", no_wrap=True)
        for a in (self.agents.agents if self.agents else []):
            style = {"done": "green", "dead": "red", "asking": "yellow", "idle": "cyan"}.get(a.status, "")
            table.add_row(*(cell(c, safe_already=True) for c in row(a)), style=style)
        return Group(table, *(cell(line, style="dim") for line in self.lines[-ROWS:]))

    def board(self, agents: Any, elapsed: float) -> None:
        self.agents, self.elapsed = agents, elapsed
        self.live.update(self._render())

    def event(self, text: str) -> None:
        self.lines.append(text)
        self.live.update(self._render())

    def close(self) -> None:
        self.live.stop()


def new_board() -> PlainBoard | LiveBoard:
    """The live board on a colour terminal, progress lines otherwise."""
    return LiveBoard() if fancy(sys.stderr) else PlainBoard()
