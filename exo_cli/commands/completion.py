"""``exo completion SHELL``: print a shell completion script."""

from __future__ import annotations

import click

SHELLS = ("bash", "zsh", "fish")


def completion_source(shell: str) -> str:
    """The completion script Click generates for ``shell`` (also written to completions/)."""
    from click.shell_completion import get_completion_class

    from exo_cli.cli import cli

    cls = get_completion_class(shell)
    if cls is None:  # pragma: no cover - guarded by the Choice below
        raise click.BadParameter(f"unsupported shell {shell}")
    return cls(cli, {}, "exo", "_EXO_COMPLETE").source()


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script for SHELL.

    \b
    Examples:
      exo completion bash > ~/.local/share/bash-completion/completions/exo
      exo completion zsh > "${fpath[1]}/_exo"
      exo completion fish > ~/.config/fish/completions/exo.fish
    """
    click.echo(completion_source(shell), nl=False)
