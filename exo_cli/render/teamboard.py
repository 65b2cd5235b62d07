"""The board's lines: one line per agent that fits the terminal's width (80 columns and up).

Pure formatting shared by ``exo board`` (Textual) and ``exo agents --watch`` (plain text).
Columns: a mark (``!`` when the agent needs you), the name (indented by depth), the status,
turns/tool calls/tokens, the dollars, the PR, the age, then what is left for the task and the last
message (why it needs you, or a foreseen conflict, first). Agent text has its control
characters made visible (``render.text.safe``) and is never interpreted as markup.
"""

from __future__ import annotations

import sys
import time
from typing import Any, NamedTuple

from exo_cli.records import TEAM_OVER
from exo_cli.render.text import ago

PR_STATE = {"open": "open", "merged": "mrgd", "closed": "clsd", "queued": "qued", "testing": "test", "tested": "tstd",
            "bounced": "bncd"}
SHORT_STATUS = {"waiting-permission": "permission", "blocked-on-dialog": "dialog", "failed-turn": "failed"}
NEEDS_TEXT = {"asking": "asks you", "permission": "waits for a permission", "dialog": "shows a dialog",
              "failed": "its turn failed", "budget": "over its budget",
              "pr-ready": "PR ready to merge", "dead": "dead"}
NAME_W, STATUS_W, COUNT_W, COST_W, PR_W, AGE_W, HOST_W = 12, 10, 10, 6, 8, 5, 8
COST_FROM = 100  # the dollars column shows on boards at least this wide (at 80, why an agent needs you keeps its room)
HEADER = ("", "AGENT", "STATUS", "TRN/TL/TOK", "COST", "PR", "AGE")


def clean(text: Any) -> str:
    """One line of agent text: control characters made visible (``ESC`` as ``^[``), whitespace runs one space."""
    from exo_cli.render.text import safe

    return " ".join(safe(str(text or "")).split())


def _cells(ch: str) -> int:
    """The terminal columns of one character: 2 for wide (CJK) ones, 0 for combining marks."""
    import unicodedata

    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` terminal columns (an ellipsis marks the cut), padded to it; a wide
    (CJK) character takes two columns."""
    if width <= 0:
        return ""
    if text.isascii():
        if len(text) > width:
            text = text[: width - 1] + "…" if width > 1 else text[:width]
        return text.ljust(width)
    cells = [_cells(ch) for ch in text]
    if sum(cells) > width:
        room, used, cut = width - 1 if width > 1 else width, 0, 0
        while cut < len(text) and used + cells[cut] <= room:
            used += cells[cut]
            cut += 1
        text, cells = text[:cut] + ("…" if width > 1 else ""), cells[:cut] + ([1] if width > 1 else [])
    return text + " " * (width - sum(cells))


def tokens(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    return f"{n / 1000:.0f}k" if n >= 1000 else str(n)


def dollars(usd: float | None, used: int) -> str:
    """An agent's dollars in at most COST_W columns: "-" before any token, "?" when a model has no price."""
    if usd is None:
        return "?"
    if not used:
        return "-"
    if usd >= 1000:
        return f"${usd / 1000:.0f}k"
    return f"${usd:.0f}" if usd >= 100 else f"${usd:.2f}" if usd < 10 else f"${usd:.1f}"


def _rest(row: Any, room: int) -> tuple[str, str]:
    a = row.agent
    task = clean(a.bead or a.task)
    said = clean(a.last_message)
    if row.needs:
        said = NEEDS_TEXT.get(row.needs, row.needs) + (f": {said}" if said and row.needs == "asking" else "")
        if row.needs == "budget" and str(getattr(a, "status_reason", "") or "").startswith(TEAM_OVER):
            said = "the team is over its budget"
    refused = getattr(a, "net_refused", 0)
    if refused:  # its sandbox's proxy refused connections: the agent tried to reach a host it may not
        said = f"net refused {refused}" + (f" · {said}" if said else "")
    if row.conflicts:
        said = f"conflicts{' with' if room >= 40 else ''} {clean(row.conflicts[0])}" + (f" (+{len(row.conflicts) - 1})" if len(row.conflicts) > 1
                                                                else "") + (f" · {said}" if said else "")
    return task, said


def line(row: Any, width: int = 80) -> str:
    """The board line of one ``BoardRow``, exactly ``width`` columns."""
    a = row.agent
    state = a.pr.get("queue") or a.pr["state"] if a.pr else ""
    pr = f"#{a.pr['number']} {PR_STATE.get(state, state)}" if a.pr else "-"
    counts = f"{a.turns}/{a.tool_calls}/{tokens(a.tokens)}"
    name = "  " * min(a.depth, 4) + clean(a.name) + ("*" if getattr(a, "sandboxed", False) else "")  # in bubblewrap
    host = [fit(clean(row.host), HOST_W)] if getattr(row, "host", "") else []  # a team on several hosts
    head = " ".join([("!" if row.needs else " "), fit(name, NAME_W), *host,
                     fit(SHORT_STATUS.get(a.status, a.status), STATUS_W), fit(counts, COUNT_W),
                     *([fit(dollars(a.cost_usd, a.tokens), COST_W)] if width >= COST_FROM else []), fit(pr, PR_W),
                     fit(ago(a.age_seconds), AGE_W)])
    room = width - len(head) - 1
    task, said = _rest(row, room)
    if room <= 0:
        return fit(head, width)
    if not said:
        tail = task
    elif not task:
        tail = said
    elif row.needs or row.conflicts:  # why it needs you comes first; the task gets what is left
        tail = said + " · " + task
    else:
        share = max(room * 2 // 5, min(len(task), 12))
        task_w = min(len(task), share)
        tail = fit(task, task_w) + " " + said
    return fit(head + " " + tail, width)


def header(width: int = 80, *, hosts: bool = False) -> str:
    mark, name, status, counts, cost, pr, age = HEADER
    head = " ".join([fit(mark, 1), fit(name, NAME_W), *([fit("HOST", HOST_W)] if hosts else []), fit(status, STATUS_W),
                     fit(counts, COUNT_W), *([fit(cost, COST_W)] if width >= COST_FROM else []), fit(pr, PR_W),
                     fit(age, AGE_W)])
    return fit(head + " TASK · LAST MESSAGE", width)


def inbox_line(item: Any, width: int = 80, now: float | None = None) -> str:
    """One inbox entry: age, who, kind (``?`` marks a pending question), the text."""
    now = time.time() if now is None else now
    mark = "?" if item.pending else " "
    kind = getattr(item, "event", "") or item.kind
    head = f"{mark} {fit(ago(now - item.created_at), AGE_W)} {fit(clean(item.name), NAME_W)} {fit(clean(kind), 9)}"
    return fit(head + " " + clean(item.body), width)


FOLD = "events"  # the key of the line that stands for the folded lifecycle events


class InboxLine(NamedTuple):
    key: str  # the message's id, or FOLD
    text: str  # exactly the width asked for
    item: Any  # the InboxItem; None for the FOLD line
    pending: bool  # a question waiting for its answer


def fold_text(events: list[Any], *, expanded: bool) -> str:
    """The one line that stands for the lifecycle events: how many of each, newest kind first."""
    counts: dict[str, int] = {}
    for e in events:
        name = clean(getattr(e, "event", "") or e.kind)
        counts[name] = counts.get(name, 0) + 1
    what = ", ".join(f"{n} {name}" for name, n in counts.items())
    return f"{'-' if expanded else '+'} {len(events)} event(s): {what}  ({'e: fold' if expanded else 'e: show'})"


def inbox_lines(items: list[Any], width: int = 80, now: float | None = None, *,
                expanded: bool = False) -> list[InboxLine]:
    """The inbox as lines: questions waiting for you and what agents said (in the snapshot's order:
    pending questions first), then one line for the lifecycle events, each of them under it when
    ``expanded``."""
    said = [i for i in items if not getattr(i, "event", "")]
    events = [i for i in items if getattr(i, "event", "")]
    out = [InboxLine(str(i.id), inbox_line(i, width, now), i, bool(i.pending)) for i in said]
    if events:
        out.append(InboxLine(FOLD, fit("  " + fold_text(events, expanded=expanded), width), None, False))
        if expanded:
            out += [InboxLine(str(i.id), inbox_line(i, width, now), i, False) for i in events]
    return out


def summary(result: Any) -> str:
    needs = f", {result.needs_you} need you" if result.needs_you else ""
    pending = sum(1 for i in result.inbox if i.pending)
    asks = f", {pending} question(s) waiting" if pending else ""
    queue = "".join(f" · {clean(q)}" for q in getattr(result, "queue", None) or [])
    return f"exo board: {result.count} agent(s){needs}{asks}{queue}"


INBOX_PLAIN = 10  # inbox lines of ``exo agents --watch`` (every pending question is shown, even beyond)


def plain(result: Any, width: int = 80) -> list[str]:
    """The whole board as plain lines (``exo agents --watch``)."""
    out = [summary(result), header(width, hosts=any(getattr(r, "host", "") for r in result.rows)).rstrip()]
    out += [line(r, width).rstrip() for r in result.rows] or ["  No agents. Start one with `exo spawn`."]
    if result.inbox:
        lines = inbox_lines(result.inbox, width)  # folded: what was said, then the events' one line
        fold = [ln for ln in lines if ln.key == FOLD]
        room = INBOX_PLAIN - len(fold)
        shown = [ln for n, ln in enumerate(lines) if ln.key != FOLD and (n < room or ln.pending)] + fold
        out += ["", fit("INBOX", width).rstrip()]
        out += [ln.text.rstrip() for ln in shown]
    return out


FALLBACK = 5.0  # seconds between snapshots when nothing rings (liveness of panes and processes)


def watch(env: Any, *, fallback: float = FALLBACK, rounds: int | None = None) -> None:
    """``exo agents --watch``: print the board, then again whenever the team doorbell rings.

    On a terminal the board is redrawn in place; piped, each new board follows the last one
    after a blank line. Every agent text in it went through ``clean`` (no control character).
    """
    import contextlib
    import shutil

    from exo_cli.records import TEAM_BELL
    from exo_cli.registry import invoke

    tty = sys.stdout.isatty()
    last: list[str] | None = None
    listening = env.store.bell.listen([TEAM_BELL]) if env.has_state() else contextlib.nullcontext(None)
    with listening as waiter:
        n = 0
        while True:
            n += 1
            lines = plain(invoke("board", env), shutil.get_terminal_size((80, 24)).columns)
            if lines != last:
                sys.stdout.write(("\x1b[H\x1b[2J" if tty else "") + "\n".join(lines) + ("\n" if tty else "\n\n"))
                sys.stdout.flush()
                last = lines
            if rounds is not None and n >= rounds:
                return
            if waiter is None:
                time.sleep(fallback)
            elif waiter.wait(fallback):
                time.sleep(0.1)  # one snapshot for a burst of changes
