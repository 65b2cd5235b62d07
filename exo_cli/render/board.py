"""The live status board of ``exo demo`` (on stderr), written like every human view: made safe.

``PlainBoard`` prints a progress line when something changes (piped, ``NO_COLOR``, ``--json``);
``LiveBoard`` shows the agents in the lines of ``exo board`` (``render/teamboard.py``, those that
need you first) with the latest progress lines under it. Every agent text (its task, its last
message, a PR title) goes through ``safe`` and reaches rich as plain ``Text``, never as markup.
"""

from __future__ import annotations

import sys
from typing import Any

from exo_cli.render.text import Out, cell, fancy

ROWS = 8  # recent progress lines shown under the live table


def short(text: str | None, n: int = 60) -> str:
    """``text`` on one line, cut to ``n`` characters."""
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


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
        """The lines of ``exo board`` (``render/teamboard.py``), one per agent, under the demo's clock."""
        from types import SimpleNamespace

        from rich.console import Group

        from exo_cli.ops.board import needs_of
        from exo_cli.render import teamboard

        width = max(self.console.width - 1, 60)
        rows = [SimpleNamespace(agent=a, needs=needs_of(a), conflicts=[])
                for a in (self.agents.agents if self.agents else [])]
        rows.sort(key=lambda r: 0 if r.needs else 1)  # those that need you first, as on the board
        lines = [cell(f"exo demo  {self.elapsed:5.1f}s", style="bold"),
                 cell(teamboard.header(width).rstrip(), style="bold")]
        for r in rows:
            style = {"done": "green", "dead": "red", "asking": "yellow", "idle": "cyan"}.get(r.agent.status, "")
            lines.append(cell(teamboard.line(r, width).rstrip(), style=style, safe_already=True))
        return Group(*lines, *(cell(line, style="dim") for line in self.lines[-ROWS:]))

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
