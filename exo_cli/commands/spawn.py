"""``exo spawn``: beads, workers or a subtree; one operation behind spawn_agents/subtree/workers."""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any

import click

from exo_cli.commands._complete import completer
from exo_cli.commands._options import json_option, op_help, op_option
from exo_cli.errors import EnvironmentError_, ExternalFailure, UsageError
from exo_cli.ops import completion as kinds
from exo_cli.ops.spawn.op import BACKENDS, MUXES, WHOLE_CALL, SpawnResult
from exo_cli.records import LAYOUTS
from exo_cli.registry import invoke
from exo_cli.render import emit
from exo_cli.render.text import Out


def render_spawn(out: Out, result: SpawnResult) -> None:
    rows = []
    for a in result.agents:
        where = a.location.get("pane") or a.location.get("tab") or a.location.get("pid")
        rows.append([a.id, a.role, a.backend, a.status, a.branch, a.worktree, where])
    if rows:
        out.table(["AGENT", "ROLE", "BACKEND", "STATUS", "BRANCH", "WORKTREE", "PANE"], rows)
        first = shlex.quote(result.agents[0].id)
        out.line(f"watch: exo agents --watch    attach: exo attach {first}    read: exo read {first}")
    for w in result.warnings:
        out.line(f"warning: {w}")
    failed = [str(e["id"]) for e in result.errors if e["id"] != WHOLE_CALL]
    if failed:
        out.line(f"{len(rows)} of {len(rows) + len(failed)} task(s) spawned; failed: {', '.join(failed)}")
    elif not rows:
        out.line("Nothing spawned.")


def report_failures(result: SpawnResult) -> None:
    """Each failed task as ``Error:``/``Hint:`` on stderr, as every other failure is reported; a failure of
    the whole call (the multiplexer cannot run, say) without a task id."""
    from exo_cli.render import warn  # made safe: an id or message may carry control characters

    for err in result.errors:
        warn(f"Error: {err['message']}" if err["id"] == WHOLE_CALL else f"Error: {err['id']}: {err['message']}")
        if err.get("hint"):
            warn(f"Hint: {err['hint']}")


def _specs(values: tuple[str, ...]) -> list[dict[str, Any]]:
    out = []
    for v in values:
        try:
            obj = json.loads(v)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--spec is not JSON: {exc}", hint='Example: --spec \'{"name": "w1", "prompt": "..."}\'') from exc
        if not isinstance(obj, dict):
            raise UsageError("--spec must be a JSON object")
        out.append(obj)
    return out


def _edit(template: str) -> str | None:
    """The text written in ``$VISUAL``/``$EDITOR``; EnvironmentError_ when it cannot start, ExternalFailure when it fails."""
    import os
    import shlex
    import shutil

    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or next(
        (e for e in ("sensible-editor", "vim", "nano") if shutil.which(e)), "vi")  # as click.edit picks it
    try:
        program = shlex.split(editor)[0] if editor.strip() else editor
    except ValueError:
        program = editor
    if not program or shutil.which(program) is None:
        raise EnvironmentError_(f"The editor {editor!r} is not installed or not on PATH",
                                hint="Set $VISUAL or $EDITOR to an editor, or give the prompt with --prompt.",
                                editor=editor)
    try:
        return click.edit(template, editor=editor)
    except click.ClickException as exc:  # click says "<editor>: Editing failed"
        raise ExternalFailure(f"The editor {editor!r} failed: {exc.format_message()}",
                              hint="Fix $VISUAL/$EDITOR, or give the prompt with --prompt or --prompt-file.",
                              editor=editor) from exc


@click.command(
    help=op_help("spawn")
    + "\n\n\b\nExamples:\n"
    "  exo spawn 4hj kg6 --agent claude\n"
    "  exo spawn --ready 3\n"
    "  exo spawn --worker api --worker ui --prompt 'Add the /health endpoint' --prompt 'Show it'\n"
    "  exo spawn --subtree --task 'Build the auth system' --branch auth\n"
    "  echo 'Fix the flaky test' | exo spawn --worker fixer -\n"
    "  exo spawn --host gpu1 --worker trainer --prompt 'Tune the model'"
)
@click.argument("beads", nargs=-1, shell_complete=completer(kinds.READY_BEAD))
@op_option("spawn", "worker", "--worker", multiple=True, metavar="NAME")
@op_option("spawn", "prompt", "--prompt", multiple=True, metavar="TEXT")
@op_option("spawn", "prompt_file", "--prompt-file", metavar="FILE")
@op_option("spawn", "edit", "--edit", is_flag=True)
@op_option("spawn", "subtree", "--subtree", is_flag=True)
@op_option("spawn", "task", "--task", metavar="TEXT")
@op_option("spawn", "branch", "--branch", metavar="NAME")
@op_option("spawn", "fork_session", "--fork-session/--no-fork-session", default=None)
@op_option("spawn", "parent_session_id", "--parent-session-id", metavar="ID")
@op_option("spawn", "ready", "--ready", type=click.IntRange(min=1), metavar="N")
@op_option("spawn", "specs", "--spec", multiple=True, metavar="JSON")
@op_option("spawn", "agent", "--agent", type=click.Choice(BACKENDS))
@op_option("spawn", "mux", "--mux", type=click.Choice(MUXES))
@op_option("spawn", "from_branch", "--from", metavar="BRANCH")
@op_option("spawn", "no_worktree", "--no-worktree", is_flag=True)
@op_option("spawn", "layout", "--layout", type=click.Choice(LAYOUTS))
@op_option("spawn", "repo", "--repo", metavar="PATH")
@op_option("spawn", "skip_permissions", "--skip-permissions/--no-skip-permissions", default=None)
@op_option("spawn", "sandbox", "--sandbox/--no-sandbox", default=None)
@op_option("spawn", "after", "--after", multiple=True, metavar="AGENT", shell_complete=completer(kinds.AGENT))
@op_option("spawn", "demo_script", "--demo-script", metavar="FILE")
@op_option("spawn", "host", "--host", metavar="NAME", shell_complete=completer(kinds.HOST))
@op_option("spawn", "budget_usd", "--budget-usd", type=click.FloatRange(min=0), metavar="DOLLARS")
@op_option("spawn", "budget_tokens", "--budget-tokens", type=click.IntRange(min=1), metavar="N")
@json_option
@click.pass_obj
@click.pass_context
def spawn(ctx: click.Context, env: Any, beads: tuple[str, ...], worker: tuple[str, ...],
          prompt: tuple[str, ...], prompt_file: str | None, edit: bool, subtree: bool, task: str | None,
          branch: str | None, fork_session: bool | None, parent_session_id: str | None, ready: int | None,
          specs: tuple[str, ...], agent: str | None, mux: str | None, from_branch: str | None,
          no_worktree: bool, layout: str | None, repo: str | None, skip_permissions: bool | None, sandbox: bool | None,
          after: tuple[str, ...],
          demo_script: str | None, host: str | None, budget_usd: float | None, budget_tokens: int | None,
          as_json: bool) -> None:
    prompts = list(prompt)
    bead_ids = [b for b in beads if b != "-"]
    if len(bead_ids) != len(beads):
        if prompts or prompt_file or edit:
            raise UsageError("Give the prompt once: '-' (stdin), --prompt, --prompt-file or --edit")
        prompts = [sys.stdin.read()]
    if edit:
        if prompts or prompt_file:
            raise UsageError("Give the prompt once: '-' (stdin), --prompt, --prompt-file or --edit")
        text = _edit("\n# Write the task above. Lines starting with '#' are dropped.\n")
        text = "\n".join(line for line in (text or "").splitlines() if not line.startswith("#")).strip()
        if not text:
            raise UsageError("Empty prompt: nothing was written in the editor")
        prompts = [text]
    result = invoke(
        "spawn", env, beads=bead_ids, worker=list(worker), prompt=prompts, prompt_file=prompt_file, edit=False,
        subtree=subtree, task=task, branch=branch, fork_session=fork_session,
        parent_session_id=parent_session_id, ready=ready, specs=_specs(specs), agent=agent, mux=mux,
        from_branch=from_branch, no_worktree=no_worktree, layout=layout, repo=repo, skip_permissions=skip_permissions,
        sandbox=sandbox, after=list(after), demo_script=demo_script, host=host, budget_usd=budget_usd,
        budget_tokens=budget_tokens,
    )  # fmt: skip
    emit(result, as_json=as_json, human=render_spawn)
    if not as_json:
        report_failures(result)
    if result.exit_code:
        ctx.exit(result.exit_code)
