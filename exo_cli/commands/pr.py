"""``exo pr file|merge|list|show``."""

from __future__ import annotations

from typing import Any

import click

from exo_cli.commands._complete import completer
from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.ops import completion as kinds
from exo_cli.ops.pr import STATES, STRATEGIES, FileResult, MergeResult, PrDiffView, PrList, PrView
from exo_cli.ops.queueview import QueueView
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def render_pr(out: Out, pr: PrView) -> None:
    out.kv([
        ("pr", f"#{pr.number} {pr.title}"),
        ("state", pr.state + (" (draft)" if pr.draft else "")),
        ("branch", f"{pr.head} -> {pr.base}"),
        ("author", pr.author),
        ("forge", pr.forge + (f" #{pr.remote_number}" if pr.remote_number else "")),
        ("url", pr.url),
        ("review", pr.review),
        ("checks", pr.checks),
        ("merged", f"{pr.strategy} as {pr.merge_commit[:12]}" if pr.merge_commit else None),
    ])
    if pr.body:
        out.line()
        out.line(pr.body)


def render_file(out: Out, result: FileResult) -> None:
    pr = result.pr
    verb = "Filed" if result.created else "Updated"
    if result.base_pushed:
        out.line(f"Pushed the base branch {pr.base}: the remote did not have it")
    out.line(f"{verb} PR #{pr.number}: {pr.title} ({pr.head} -> {pr.base}, {result.commits} commit(s))")
    if pr.url:
        out.line(pr.url)


def render_merge(out: Out, result: MergeResult) -> None:
    pr = result.pr
    if result.state != "merged" or result.merge_commit is None:
        where = f", position {result.position}" if result.position else ""
        out.line(f"PR #{pr.number} ({pr.head} -> {pr.base}) is {result.state} in the merge queue{where}")
        q = result.queue or {}
        if result.state == "bounced":
            out.line(f"Bounced: {q.get('reason')}")
            if q.get("files"):
                out.line("Conflicting paths: " + ", ".join(q["files"]))
            if q.get("tail"):
                out.line(str(q["tail"]).rstrip())
        else:
            out.line("It lands once the gates pass. Follow it with `exo pr queue`.")
        return
    out.line(f"Merged PR #{pr.number} ({pr.head} -> {pr.base}) by {result.strategy} as {result.merge_commit[:12]}")
    if result.base_worktree:
        out.line(f"Updated {result.base_worktree}")
    if result.notified:
        out.line(f"Told: {', '.join(result.notified)}")
    for w in result.warnings:
        out.line(f"warning: {w}")


def render_list(out: Out, result: PrList) -> None:
    out.table(["PR", "STATE", "TITLE", "BRANCH", "AUTHOR", "REVIEW", "CHECKS"],
              [[f"#{p.number}", p.state + (" draft" if p.draft else ""), p.title, f"{p.head} -> {p.base}", p.author,
                p.review, p.checks] for p in result.prs],
              empty="No pull requests. File one with `exo pr file`.")


@click.group(help="File, merge and list pull requests.\n\n"
             "A pull request asks to merge an agent's branch into its parent branch, on the local forge "
             "(records in exo's state, merged with git) or on GitHub (git push and gh)."
             "\n\n\b\nExamples:\n  exo pr file --title 'Add login'\n  exo pr list --state open\n  exo pr merge 3")
def pr() -> None:
    pass


@pr.command("file", help=op_help("pr_file") + "\n\n\b\nExamples:\n  exo pr file\n"
            "  exo pr file --title 'Add login' --body 'Closes bd-4hj' --draft")
@op_option("pr_file", "title", "--title")
@op_option("pr_file", "body", "--body")
@op_option("pr_file", "draft", "--draft", is_flag=True)
@json_option
@click.pass_obj
def file_cmd(env: Any, title: str | None, body: str | None, draft: bool, as_json: bool) -> None:
    emit(invoke("pr_file", env, title=title, body=body, draft=draft), as_json=as_json, human=render_file)


@pr.command("merge", help=op_help("pr_merge") + "\n\n\b\nExamples:\n  exo pr merge 3\n"
            "  exo pr merge 3 --strategy merge --json")
@click.argument("number", type=click.IntRange(min=1), shell_complete=completer(kinds.OPEN_PR))
@op_option("pr_merge", "strategy", "--strategy", type=click.Choice(STRATEGIES))
@op_option("pr_merge", "priority", "--priority", type=click.IntRange(0, 4))
@op_option("pr_merge", "wait", "--wait", is_flag=True)
@op_option("pr_merge", "now", "--now", is_flag=True)
@op_option("pr_merge", "force", "--force", is_flag=True)
@json_option
@click.pass_obj
def merge_cmd(env: Any, number: int, strategy: str | None, priority: int | None, wait: bool, now: bool, force: bool,
              as_json: bool) -> None:
    if now and (wait or priority is not None):
        raise click.UsageError("--now merges at once: it takes neither --wait nor --priority")
    result = invoke("pr_merge", env, number=number, strategy=strategy, priority=priority, wait=wait, now=now,
                    force=force)
    emit(result, as_json=as_json, human=render_merge)
    if wait and result.state == "bounced":
        raise click.exceptions.Exit(5)  # a StateError's status: it did not merge


def render_queue(out: Out, result: QueueView) -> None:
    out.table(["#", "PR", "STATE", "PRIO", "BRANCH", "AUTHOR", "NOTE"],
              [[e.position or "", f"#{e.pr}", e.state, e.priority, f"{e.head} -> {e.base}", e.author,
                e.reason or (e.merge_commit or "")[:12]] for e in result.entries],
              empty="The merge queue is empty.")
    for e in result.entries:
        if e.state == "bounced" and e.log:
            out.line(f"#{e.pr} log: {e.log}")


@pr.command("queue", help=op_help("pr_queue") + "\n\n\b\nExamples:\n  exo pr queue\n  exo pr queue --base main --json")
@op_option("pr_queue", "base", "--base")
@op_option("pr_queue", "run", "--run", is_flag=True)
@json_option
@click.pass_obj
def queue_cmd(env: Any, base: str | None, run: bool, as_json: bool) -> None:
    emit(invoke("pr_queue", env, base=base, run=run), as_json=as_json, human=render_queue)


@pr.command("list", help=op_help("pr_list") + "\n\n\b\nExamples:\n  exo pr list\n  exo pr list --state open --json")
@op_option("pr_list", "state", "--state", type=click.Choice(STATES), default="all")
@json_option
@click.pass_obj
def list_cmd(env: Any, state: str, as_json: bool) -> None:
    emit(invoke("pr_list", env, state=state), as_json=as_json, human=render_list)


def render_show(out: Out, pr: PrView) -> None:
    render_pr(out, pr)
    if isinstance(pr, PrDiffView) and pr.diff is not None:
        from exo_cli.commands.diff import render_diff

        out.line()
        render_diff(out, pr.diff)


@pr.command("show", help=op_help("pr_show") + "\n\n\b\nExamples:\n  exo pr show 3\n  exo pr show 3 --diff\n"
            "  exo pr show 3 --json")
@click.argument("number", type=click.IntRange(min=1), shell_complete=completer(kinds.PR))
@op_option("pr_show", "diff", "--diff", is_flag=True)
@json_option
@click.pass_obj
def show_cmd(env: Any, number: int, diff: bool, as_json: bool) -> None:
    emit(invoke("pr_show", env, number=number, diff=diff), as_json=as_json, human=render_show)
