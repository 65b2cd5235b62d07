"""What an agent reads about its bead (``render_context``) and what changed (``diff_beads``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from exo_cli.adapters.beads.model import Bead, Comment


def render_context(
    bead: Bead,
    *,
    branch: str,
    parent_branch: str | None = None,
    dependencies_resolved: Mapping[str, Bead] | Sequence[Bead] | None = None,
) -> str:
    """Return the task context markdown an agent gets for its bead (its ``bead.md``).

    ``dependencies_resolved`` gives the dependency targets (by id or as a list) so each line
    shows the target's title and status; an unknown target is shown as such.
    """
    if dependencies_resolved is None:
        targets: dict[str, Bead] = {}
    elif isinstance(dependencies_resolved, Mapping):
        targets = dict(dependencies_resolved)
    else:
        targets = {b.id: b for b in dependencies_resolved}
    out = [f"# Task: {bead.title}", ""]
    out.append(f"**ID:** {bead.id}")
    out.append(f"**Status:** {bead.status}")
    out.append(f"**Priority:** {bead.priority}")
    out.append(f"**Type:** {bead.issue_type}")
    out.append(f"**Branch:** {branch}")
    if parent_branch:
        out.append(f"**Parent branch:** {parent_branch}")
    if bead.labels:
        out.append(f"**Labels:** {', '.join(bead.labels)}")
    for heading, text in (
        ("Description", bead.description),
        ("Design", bead.design),
        ("Acceptance criteria", bead.acceptance_criteria),
        ("Notes", bead.notes),
    ):
        if text.strip():
            out += ["", f"## {heading}", "", text.strip()]
    if bead.dependencies:
        out += ["", "## Dependencies", ""]
        for dep in bead.dependencies:
            t = targets.get(dep.depends_on_id)
            kind = "" if dep.type == "blocks" else f" [{dep.type}]"
            if t is None:
                out.append(f"- {dep.depends_on_id}: (not found){kind}")
            else:
                out.append(f"- {t.id}: {t.title} ({t.status}){kind}")
    push = f"git push -u origin {branch}"
    out += [
        "",
        "## Workflow",
        "",
        "1. Implement changes",
        f"2. Commit: [{bead.id}] <description>",
        f"3. Push: {push}",
        "4. File PR: Call the 'file_pr' tool (or run `exo pr file`); do NOT use the gh cli manually"
        + (f" (base: {parent_branch})" if parent_branch else ""),
        "5. Report progress, blockers and questions with `exo note` (the 'note' tool)",
        "",
    ]
    return "\n".join(out)


def diff_beads(old: Bead | None, new: Bead) -> dict[str, Any]:
    """Return what changed from ``old`` to ``new`` (JSON-native), for ``exo reconstitute``.

    Keys: ``id``, ``new`` (no old version), ``status`` (``{"from", "to"}`` or None),
    ``dependencies_added``/``dependencies_removed`` (dependency dicts), ``comments_added``
    (comment dicts), ``fields_changed`` (names of other exo fields whose value changed) and
    ``changed`` (anything at all).
    """
    old_deps = {(d.depends_on_id, d.type): d for d in (old.dependencies if old else ())}
    new_deps = {(d.depends_on_id, d.type): d for d in new.dependencies}
    old_comments = {_comment_key(c) for c in (old.comments if old else ())}
    added_comments = [c.to_dict() for c in new.comments if _comment_key(c) not in old_comments]
    status = None
    if old is None or old.status != new.status:
        status = {"from": old.status if old else None, "to": new.status}
    fields_changed: list[str] = []
    if old is not None:
        for name in (
            "title", "priority", "issue_type", "description", "design", "acceptance_criteria",
            "notes", "assignee", "labels", "close_reason", "defer_until",
        ):  # fmt: skip
            if getattr(old, name) != getattr(new, name):
                fields_changed.append(name)
    result: dict[str, Any] = {
        "id": new.id,
        "new": old is None,
        "status": status,
        "dependencies_added": [new_deps[k].to_dict() for k in new_deps if k not in old_deps],
        "dependencies_removed": [old_deps[k].to_dict() for k in old_deps if k not in new_deps],
        "comments_added": added_comments,
        "fields_changed": fields_changed,
    }
    result["changed"] = bool(
        result["new"]
        or status
        or result["dependencies_added"]
        or result["dependencies_removed"]
        or added_comments
        or fields_changed
    )
    return result


def _comment_key(c: Comment) -> tuple[str, str, str, str]:
    return (c.id, c.author, c.created_at, c.text)
