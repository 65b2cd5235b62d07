"""One error model for the CLI and the MCP server (docs/errors.md lists the codes).

Every failure exo anticipates is an ``ExoError`` subclass. Each class carries its
JSON-RPC code (-32001..-32005, as the ``exo_*`` tool family uses; -32602 for what a parser rejects), the
process exit code, and whether the MCP side reports it as a protocol error
(``protocol = True``: the model cannot fix it) or as a tool error.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar

INTERNAL_EXIT = 70


class ExoError(Exception):
    """Base of every error exo raises on purpose."""

    name: ClassVar[str] = "ExoError"
    rpc_code: ClassVar[int] = -32603
    exit_code: ClassVar[int] = INTERNAL_EXIT
    protocol: ClassVar[bool] = False

    def __init__(self, message: str, *, hint: str | None = None, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.data: dict[str, Any] = data

    def to_dict(self) -> dict[str, Any]:
        return {
            "error": {
                "code": self.rpc_code,
                "name": self.name,
                "message": self.message,
                "hint": self.hint,
                "data": self.data,
            }
        }

    def __str__(self) -> str:
        return self.message


class UsageError(ExoError):
    """A call the parser itself rejects (unknown flag, wrong type, bad flag combination)."""

    name = "UsageError"
    rpc_code = -32602
    exit_code = 2


class NotFound(ExoError):
    """An agent, bead, PR or file that does not exist."""

    name = "NotFound"
    rpc_code = -32001
    exit_code = 3


class InvalidInput(ExoError):
    """A value exo's own validation rejects (unsafe name, bad id, bad config value)."""

    name = "InvalidInput"
    rpc_code = -32002
    exit_code = 4


class ExternalFailure(ExoError):
    """git, gh, tmux, zellij or an agent CLI failed; its stderr goes in ``data``."""

    name = "ExternalFailure"
    rpc_code = -32003
    exit_code = 6


class StateError(ExoError):
    """The request conflicts with the current state (blocked bead, dirty tree, ...)."""

    name = "StateError"
    rpc_code = -32004
    exit_code = 5


class EnvironmentError_(ExoError):  # noqa: N801 - keeps the builtin name free
    """Not in a repo, multiplexer or binary missing: nothing a model can fix."""

    name = "EnvironmentError"
    rpc_code = -32005
    exit_code = 7
    protocol = True


BY_NAME: dict[str, type[ExoError]] = {
    cls.name: cls
    for cls in (UsageError, NotFound, InvalidInput, ExternalFailure, StateError, EnvironmentError_)
}


def external(what: str, proc: Any, *, hint: str | None = None, **data: Any) -> ExternalFailure:
    """Build an ExternalFailure from a finished ``subprocess.CompletedProcess``."""
    stderr = proc.stderr if isinstance(proc.stderr, str) else (proc.stderr or b"").decode("utf-8", "replace")
    stdout = proc.stdout if isinstance(proc.stdout, str) else (proc.stdout or b"").decode("utf-8", "replace")
    args = proc.args if isinstance(proc.args, list | tuple) else [str(proc.args)]
    first = (stderr.strip() or stdout.strip()).splitlines()
    detail = first[-1] if first else f"exit status {proc.returncode}"
    return ExternalFailure(
        f"{what} failed: {detail}",
        hint=hint,
        command=[str(a) for a in args],
        returncode=proc.returncode,
        stderr=stderr[-4000:],
        **data,
    )


def rebuild(data: Any, *, default: str = "exo failed without saying why") -> ExoError:
    """The ExoError an error object (``to_dict()["error"]``) stands for: same class, message, hint and data.

    For answers that crossed a wire (the broker's, another host's). Text is made terminal-safe by
    whoever prints it; an object that is not one becomes an ExternalFailure saying ``default``.
    """
    if not isinstance(data, dict):
        return ExternalFailure(default)
    cls = BY_NAME.get(str(data.get("name")), ExoError)
    extra = {k: v for k, v in data["data"].items() if k not in ("hint", "message")} \
        if isinstance(data.get("data"), dict) else {}  # those two are the error's own arguments
    hint = data.get("hint")
    return cls(str(data.get("message") or "failed"), hint=hint if isinstance(hint, str) else None, **extra)
