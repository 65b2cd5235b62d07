"""The size limits of the texts exo stores, and the one check of them (docs/concepts.md#limits).

Stdlib only and tiny: the hooks import it (``clip``) on every turn. ``validate.check_text``
refuses what a caller gives over its limit; ``clip`` cuts what an agent's CLI reports through
a hook (it never refuses: hooks fail open) and says so.
"""

from __future__ import annotations

from exo_cli.errors import InvalidInput

KIB = 1024
# The most bytes (UTF-8) of each kind of text exo stores (docs/concepts.md#limits). A message (note,
# question, answer, send) is typed into panes and hook contexts: long text belongs in a file. A
# prompt goes on the agent CLI's command line, where Linux takes at most 128 KiB in one argument.
# GitHub takes a pull request body of at most 65,536 characters.
TEXT_LIMITS: dict[str, int] = {"message": 64 * KIB, "output": 1024 * KIB, "prompt": 100 * KIB,
                               "title": 1 * KIB, "body": 64 * KIB}
_KINDS = {"message": "a message", "output": "an output", "prompt": "a prompt", "title": "a pull request title",
          "body": "a pull request body"}


def _size(n: int) -> str:
    return f"{n // (1024 * KIB)} MiB" if n % (1024 * KIB) == 0 else f"{n // KIB} KiB" if n % KIB == 0 else f"{n:,} bytes"


def too_long(value: str, what: str, kind: str) -> InvalidInput | None:
    """The error when ``value`` is over the size limit of ``kind`` (``TEXT_LIMITS``), else None."""
    limit = TEXT_LIMITS[kind]
    if len(value) * 4 <= limit:  # no character takes more than 4 bytes: surely within
        return None
    size = len(value.encode("utf-8", "surrogatepass"))
    if size <= limit:
        return None
    return InvalidInput(
        f"Invalid {what}: {size:,} bytes, over exo's limit of {_size(limit)} for {_KINDS[kind]}",
        hint="Put long text in a file (in the worktree, or a path the reader can open) and pass its path instead.",
        field=what, size=size, limit=limit, kind=kind)


def clip(value: str, what: str, kind: str) -> tuple[str, str | None]:
    """``value`` cut to the size limit of ``kind``, and the warning naming the limit when it was cut.

    For what an agent's CLI reports through a hook (its last message, an error): a hook never
    refuses (it fails open), so the text is kept up to the limit and the warning says so.
    """
    error = too_long(value, what, kind)
    if error is None:
        return value, None
    limit = TEXT_LIMITS[kind]
    mark = f"\n[exo: cut at {_size(limit)} of {error.data['size']:,} bytes]"
    cut = value.encode("utf-8", "surrogatepass")[:limit - len(mark.encode())].decode("utf-8", "ignore")
    return cut + mark, f"{error.message}; exo kept its first {_size(limit)}"
