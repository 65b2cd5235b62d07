"""What an agent reads first: its ``.exo/context.md`` and the first prompt on its command line.

Plain text built from the task's ``Request`` and where the agent works; nothing is written
here (the task step writes the file).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exo_cli.ops.spawn.plan import Request


def context_text(req: Request, *, agent_id: str, role: str, branch: str | None, parent: str,
                 parent_branch: str | None, worktree: str, bead_text: str | None) -> str:
    """The text of ``.exo/context.md``: the bead's own context, or the task, the agent's place and its workflow."""
    if bead_text is not None:
        text = bead_text
        if req.prompt:
            text += f"\n## Additional instructions\n\n{req.prompt.strip()}\n"
        return text
    body = (req.task or req.prompt or "").strip()
    title = body.splitlines()[0][:80] if body else "(no task yet: wait for a message from your parent)"
    out = [f"# Task: {title}", "", f"**Agent:** {agent_id} ({role})", f"**Parent:** {parent}",
           f"**Worktree:** {worktree}"]
    if branch:
        out.append(f"**Branch:** {branch}")
    if parent_branch:
        out.append(f"**Parent branch:** {parent_branch}")
    if req.annotation:
        out.append(f"**Annotation:** {req.annotation}")
    out += ["", "## Task", "", body or "No task was given yet. Your parent will send it as a message.", ""]
    out += ["## Workflow", "", "1. Work only inside this worktree (use relative paths)."]
    if role == "tl":
        out += ["2. Split the work: `spawn_workers` for concrete leaf tasks, `spawn_subtree` for parts that need",
                "   further decomposition; collect results with `wait`, answer questions, merge with `merge_pr`."]
    else:
        out.append("2. Implement the change and its tests.")
    out += [
        f"3. Commit on your branch{f' {branch}' if branch else ''}.",
        "4. Report progress with `exo note \"...\"` (the 'note' tool); ask with `exo question` when blocked.",
        f"5. File a PR{f' against {parent_branch}' if parent_branch else ''}: `exo pr file --title ... --body ...`"
        " (the 'file_pr' tool).",
        "",
    ]
    return "\n".join(out)


def first_prompt(req: Request, agent_id: str, bead_full: str | None, title: str | None) -> str | None:
    """The prompt on the agent's command line; None for a worker that waits for its task."""
    if req.kind == "bead":
        text = f"You are agent {agent_id}. Work on bead {bead_full}: {title}. Your task context is in .exo/context.md."
        return text + (f"\n\n{req.prompt}" if req.prompt else "")
    if req.kind == "subtree":
        return req.task or req.prompt
    return req.prompt or None
