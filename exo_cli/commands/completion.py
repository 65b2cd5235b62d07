"""``exo completion [SHELL] [--install]``: print a shell completion script, or hook it into the shell."""

from __future__ import annotations

import os

import click

from exo_cli.errors import UsageError
from exo_cli.ops.completion_install import SHELLS, detect_shell, install
from exo_cli.render.text import Out


def completion_source(shell: str) -> str:
    """The completion script Click generates for ``shell`` (also written to completions/)."""
    from exo_cli.cli import cli
    from exo_cli.commands._complete import completion_class

    cls = completion_class(shell)
    if cls is None:  # pragma: no cover - guarded by the Choice below
        raise click.BadParameter(f"unsupported shell {shell}")
    return cls(cli, {}, "exo", "_EXO_COMPLETE").source()


@click.command()
@click.argument("shell", type=click.Choice(SHELLS), required=False)
@click.option("--install", "do_install", is_flag=True,
              help="Install exo's man pages in ~/.local/share/man, and add one line that loads exo's completion "
              "to the shell's startup file (~/.bashrc, ~/.zshrc or ~/.config/fish/config.fish; created when "
              "missing), once; SHELL defaults to $SHELL.")
@click.option("--rc", metavar="FILE", help="With --install: the startup file to add the line to.")
def completion(shell: str | None, do_install: bool, rc: str | None) -> None:
    """Print or install the shell completion script.

    Prints the script for SHELL, or with --install hooks it into your shell and installs
    exo's man pages. Completion offers commands, options, agent names, pull request
    numbers, bead ids and configuration keys. Installed from a wheel (pip, pipx, uv tool),
    exo puts its completion files and man pages under the install prefix, where the shells
    and man look only for some prefixes (share/bash-completion/completions,
    share/zsh/site-functions, share/fish/vendor_completions.d, share/man). --install
    makes both work from any prefix: it copies the man pages to ~/.local/share/man/man1
    and adds one line to the shell's startup file, creating the file when it does not
    exist yet. It never adds the line twice and says what it changed.

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
    out = Out.for_stdout()
    if done.added:
        out.line(f"{'Created' if done.created else 'Added to'} {done.rc_file}:\n  {done.line}")
    else:
        out.line(f"Already in {done.rc_file}, nothing changed:\n  {done.line}")
    if done.man_dir is not None:
        out.line(f"Man pages: {done.man_written} written to {done.man_dir}" if done.man_written else
                 f"Man pages: already in {done.man_dir}")
    for warning in done.warnings:
        out.line(f"warning: {warning}")
    if done.added:
        out.line("Open a new shell to use it.")
    out.flush()
