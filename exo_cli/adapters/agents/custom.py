"""A user-defined agent command from ``exo.toml``, with placeholders filled per argv element."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from exo_cli.adapters.agents.base import Backend, Launch, LaunchContext
from exo_cli.errors import InvalidInput


def parse_template(command: str | Sequence[str]) -> list[str]:
    """Return the template as argv: a list is taken as is, a string is split with shlex."""
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise InvalidInput(f"cannot split custom agent command: {exc}", key="agent.command") from exc
    else:
        argv = [str(part) for part in command]
    if not argv or not argv[0]:
        raise InvalidInput("the custom agent command is empty", key="agent.command")
    return argv


def render(template: Sequence[str], *, prompt: str | None, worktree: str, name: str) -> list[str]:
    """Substitute the placeholders in each element (never through a shell).

    An element that is exactly ``{prompt}`` is dropped when there is no prompt.
    """
    values = {"{prompt}": prompt or "", "{worktree}": worktree, "{name}": name}
    out: list[str] = []
    for part in template:
        if part == "{prompt}" and not prompt:
            continue
        # One pass over the element, so a value containing a placeholder is never expanded.
        pieces = [part]
        for key, value in values.items():
            pieces = [segment for piece in pieces for segment in _split_keep(piece, key, value)]
        out.append("".join(pieces))
    return out


def _split_keep(text: str, key: str, value: str) -> list[str]:
    """Replace ``key`` in ``text`` but return already-substituted values as opaque pieces."""
    if isinstance(text, _Done):
        return [text]
    parts = text.split(key)
    result: list[str] = []
    for i, part in enumerate(parts):
        if i:
            result.append(_Done(value))
        if part:
            result.append(part)
    return result


class _Done(str):
    """A substituted value: later placeholders are not looked for inside it."""


class CustomBackend(Backend):
    """A command template from config: ``{prompt}``, ``{worktree}``, ``{name}``."""

    name = "custom"
    binary = None

    def __init__(self, command: str | Sequence[str] | None = None) -> None:
        self.template = parse_template(command) if command is not None else None

    def prepare(self, ctx: LaunchContext, identity_env: Mapping[str, str]) -> Launch:
        """Return the rendered command; nothing is written."""
        if self.template is None:
            raise InvalidInput("the custom backend needs a command template (agent.command in exo.toml)")
        self.no_resume(ctx)
        env = self.base_env(ctx, identity_env)
        argv = render(self.template, prompt=ctx.prompt, worktree=str(ctx.worktree), name=ctx.name)
        return Launch(argv=[*argv, *ctx.extra_args], env=env, cwd=str(ctx.worktree))
