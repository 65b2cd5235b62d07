"""``exo completion [SHELL] [--install]``: print a shell completion script, or hook it into the shell."""

from __future__ import annotations

import os

import click

from exo_cli.errors import UsageError
from exo_cli.ops.completion import SHELLS, detect_shell, install


def completion_source(shell: str) -> str:
    """The completion script Click generates for ``shell`` (also written to completions/)."""
    from click.shell_completion import get_completion_class

    from exo_cli.cli import cli

    cls = get_completion_class(shell)
    if cls is None:  # pragma: no cover - guarded by the Choice below
        raise click.BadParameter(f"unsupported shell {shell}")
    return cls(cli, {}, "exo", "_EXO_COMPLETE").source()


@click.command()
@click.argument("shell", type=click.Choice(SHELLS), required=False)
@click.option("--install", "do_install", is_flag=True,
              help="Add one line that loads exo's completion to the shell's startup file (~/.bashrc, "
              "~/.zshrc or ~/.config/fish/config.fish), once; SHELL defaults to $SHELL.")
@click.option("--rc", metavar="FILE", help="With --install: the startup file to add the line to.")
def completion(shell: str | None, do_install: bool, rc: str | None) -> None:
    """Print or install the shell completion script.

    Prints the script for SHELL, or with --install hooks it into your shell.
    Completion offers commands, options, agent names, pull request numbers, bead ids and
    configuration keys. Installed from a wheel (pip, pipx, uv tool), exo puts its
    completion files where the shells look under the install prefix
    (share/bash-completion/completions, share/zsh/site-functions,
    share/fish/vendor_completions.d); when your shell does not look there, --install adds
    one line to its startup file instead. It never adds the line twice, says what it
    changed, and never creates a startup file.

    \b
    Examples:
      exo completion --install
      exo completion zsh --install --rc ~/.zshrc.local
      exo completion bash > ~/.local/share/bash-completion/completions/exo
      exo completion fish > ~/.config/fish/completions/exo.fish
    """
    if rc and not do_install:
        raise UsageError("--rc goes with --install", hint="exo completion --install --rc FILE")
    if not do_install:
        if shell is None:
            raise UsageError("Name the shell: exo completion bash|zsh|fish",
                             hint="Or add it to your shell's startup file with `exo completion --install`.")
        click.echo(completion_source(shell), nl=False)
        return
    done = install(shell or detect_shell(os.environ), environ=os.environ, rc=rc)
    if done.added:
        click.echo(f"Added to {done.rc_file}:\n  {done.line}\nOpen a new shell to use it.")
    else:
        click.echo(f"Already in {done.rc_file}, nothing changed:\n  {done.line}")
