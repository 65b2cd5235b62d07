"""The ``exo`` command line (Click): root group, global options, one error handler, the catch-all.

``main.py`` (the script's entry point) calls ``run_cli`` for everything but a hook it can
answer without Click.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from exo_cli import __version__
from exo_cli.errors import ExoError, UsageError
from exo_cli.render import guarded, report


class ExoGroup(click.Group):
    """Loads commands from the table on first use; turns ExoError into its exit code and output."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        from exo_cli.commands import COMMANDS

        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        from exo_cli.commands import COMMANDS

        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        import importlib

        module, attr = entry.target.split(":")
        command: click.Command = getattr(importlib.import_module(module), attr)
        self.commands[cmd_name] = command
        return command

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        """Click's, with "Did you mean" taken from every command (not only the ones loaded so far)."""
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as exc:
            from exo_cli.commands import COMMANDS

            visible = [name for name, e in COMMANDS.items() if not e.hidden]
            raise click.exceptions.NoSuchCommand(exc.command_name, possibilities=visible, ctx=ctx) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List commands from the table's summaries without importing them."""
        from exo_cli.commands import COMMANDS

        rows = [(name, e.summary) for name, e in sorted(COMMANDS.items()) if not e.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ExoError as exc:
            report(exc, as_json=bool(ctx.meta.get("exo.json")))
            ctx.exit(exc.exit_code)


@click.group(
    cls=ExoGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "-V", "--version", prog_name="exo")
@click.option(
    "-C",
    "directory",
    metavar="DIRECTORY",
    default=None,
    help="Run as if exo was started in this directory.",
)
@click.pass_context
def cli(ctx: click.Context, directory: str | None) -> None:
    """Run a team of AI coding agents on one git repository.

    Each task gets its own git worktree and branch and an agent (Claude Code, Gemini
    CLI, Codex CLI, a custom command, or the built-in demo agent) in a tmux pane or
    headless. Agents report (note), ask (question), file PRs against their parent
    branch and are merged, completed and cleaned up without losing work. `exo mcp`
    serves the same operations as MCP tools.

    \b
    Examples:
      exo init
      exo spawn --worker w1 --prompt "Add a --verbose flag" --agent claude
      exo agents
      exo wait w1
    """
    from exo_cli.env import Env

    if directory is not None:
        if "\x00" in directory or not os.path.isdir(directory):
            raise click.BadParameter(f"{directory!r} is not a directory", param_hint="-C")
        directory = os.path.abspath(directory)
    ctx.obj = Env(cwd=directory, cwd_given=directory is not None)


def _show_click_error(exc: click.exceptions.ClickException) -> None:
    """Click's own usage error text, made safe like every other message (it quotes the argument given)."""
    import io

    from exo_cli.render.text import safe

    buf = io.StringIO()
    exc.show(file=buf)
    sys.stderr.write(safe(buf.getvalue()))


def run_cli(args: list[str]) -> None:
    """Run the command line on ``args`` (without the program name) and exit with its code."""
    if "_EXO_COMPLETE" in os.environ:  # a shell asking for completions: answer without loading commands
        from exo_cli.commands._complete import fast_complete

        if fast_complete(cli, os.environ):
            sys.exit(0)
    as_json = "--json" in args

    def call() -> int | None:
        try:
            rv = cli.main(args=args, prog_name="exo", standalone_mode=False)
        except click.exceptions.Abort:
            sys.stderr.write("Aborted.\n")
            return 130
        except click.exceptions.ClickException as exc:
            if as_json:
                report(UsageError(exc.format_message(), hint="See `exo --help`."), as_json=True)
            else:
                _show_click_error(exc)
            return exc.exit_code
        return rv if isinstance(rv, int) else 0

    sys.exit(guarded(call, as_json=as_json))
