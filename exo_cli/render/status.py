"""The human views of ``exo status`` and ``exo agents``, shared by the Click commands and ``readrun``."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from exo_cli.ops.status import AgentsResult, StatusResult
    from exo_cli.render.text import Out


def _tokens(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def render_agents(out: Out, result: AgentsResult) -> None:
    from exo_cli.render.text import ago

    rows = []
    for a in result.agents:
        where = a.location.get("pane") or a.location.get("tab") or a.location.get("pid")
        pr = f"#{a.pr['number']} {a.pr.get('queue') or a.pr['state']}" if a.pr else None
        task = a.bead or (a.task or "")
        task = task if len(task) <= 40 else task[:37] + "..."
        last = a.last_message or ""
        last = last if len(last) <= 40 else last[:37] + "..."
        rows.append([
            "  " * a.depth + (a.name if a.id == a.name else a.id), a.role, a.status, a.backend, task, a.branch, where, pr,
            f"{a.turns}/{a.tool_calls}/{_tokens(a.tokens)}", "?" if a.cost_usd is None else f"${a.cost_usd:.2f}",
            last, ago(a.age_seconds),
        ])
    headers = ["AGENT", "ROLE", "STATUS", "BACKEND", "TASK", "BRANCH", "PANE", "PR", "TURNS/TOOLS/TOK", "COST",
               "LAST MESSAGE", "AGE"]
    if any(a.layout == "clone" for a in result.agents):  # some work in their own clone: say which
        headers.insert(headers.index("BRANCH"), "LAYOUT")
        for row, a in zip(rows, result.agents, strict=True):
            row.insert(5, a.layout + (" (sandboxed)" if a.sandboxed else ""))
    if any(a.host not in ("", result.this_host) for a in result.agents):  # a team on several hosts
        headers.insert(1, "HOST")
        for row, a in zip(rows, result.agents, strict=True):
            row.insert(1, a.host or result.this_host)
    out.table(headers, rows, empty="No agents. Start one with `exo spawn`.")


def render_status(out: Out, result: StatusResult) -> None:
    g = result.git
    ahead = "" if g.ahead is None else f"  (+{g.ahead} / -{g.behind} vs {g.parent_branch})"
    pairs: list[tuple[str, Any]] = [
        ("repo", result.repo),
        ("worktree", result.worktree),
        ("you are", f"{result.caller} ({result.role})"),
    ]
    if result.agent:
        pairs += [("status", result.agent.status), ("task", result.bead or result.task)]
    pairs += [
        ("branch", f"{g.branch or '(detached)'} @ {g.head or '-'}{ahead}"),
        ("dirty", f"{len(g.dirty)} file(s)" if g.dirty else "clean"),
        ("pr", f"#{result.pr['number']} {result.pr.get('queue') or result.pr['state']} -> {result.pr['base']}"
               if result.pr else None),
    ]
    if result.team is not None:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(result.team["by_status"].items())) or "none"
        pairs.append(("team", f"{result.team['agents']} agent(s): {counts}; {result.team['open_prs']} open PR(s)"))
    out.kv(pairs)
    for line in g.dirty[:20]:
        out.line(f"  {line}")
    if len(g.dirty) > 20:
        out.line(f"  ... and {len(g.dirty) - 20} more")
