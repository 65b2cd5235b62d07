"""Validation of names, ids and branch names that reach paths, git or a multiplexer.

Every id, name or branch that exo turns into a path, a ref or a window name passes
through here first; values that fail raise ``InvalidInput`` (-32002).
"""

from __future__ import annotations

import functools
import re
import unicodedata

from exo_cli.errors import InvalidInput
from exo_cli.limits import too_long

# A name: letters, digits, '.', '_' and '-', starting with a letter or digit.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_NAME = 64
_SLUG_STRIP = re.compile(r"[^a-z0-9]+")


def _reject(what: str, value: str, why: str) -> InvalidInput:
    shown = value if len(value) <= 80 else value[:77] + "..."
    return InvalidInput(
        f"Invalid {what} {shown!r}: {why}",
        hint=f"Use letters, digits, '.', '_' and '-' (at most {MAX_NAME} characters), starting with a letter or digit.",
        field=what,
    )


def check_name(value: object, what: str = "name", *, max_len: int = MAX_NAME) -> str:
    """Return ``value`` if it is safe as a path segment, ref segment and window name."""
    if not isinstance(value, str):
        raise InvalidInput(f"Invalid {what}: expected a string", field=what)
    if not value:
        raise _reject(what, value, "it is empty")
    if len(value) > max_len:
        raise _reject(what, value, f"it is longer than {max_len} characters")
    if "/" in value or "\\" in value:
        raise _reject(what, value, "it contains a path separator")
    if ".." in value:
        raise _reject(what, value, "it contains '..'")
    if any(unicodedata.category(c).startswith("C") for c in value):
        raise _reject(what, value, "it contains a control character")
    if not _NAME_RE.match(value):
        raise _reject(what, value, "it contains a character that is not allowed")
    if value.endswith(".") or value.endswith(".lock"):
        raise _reject(what, value, "it ends with '.' or '.lock'")
    return value


# Names no agent may take: "root" is the human at the root (the parent and mailbox of top-level
# agents); compared without case, so no file system or eye can mix them up.
RESERVED_NAMES = ("root",)


def check_agent_name(value: object, what: str = "agent name") -> str:
    """Return ``value`` if it is a safe name (``check_name``) that is not reserved for exo itself."""
    name = check_name(value, what)
    if name.lower() in RESERVED_NAMES:
        raise InvalidInput(
            f"Invalid {what} {name!r}: it is reserved ({name.lower()} is the human at the root)",
            hint="Pick another name.",
            field=what,
            reserved=list(RESERVED_NAMES),
        )
    return name


# The longest branch name exo makes or accepts, in bytes. git keeps a branch as a file named after
# it (refs/heads/..., its reflog, a .lock beside it), and exo names archive refs and folders after
# it (``refs/exo/archive/<branch>-HEAD``, ``archive/<time>-<branch>``): all within a file name's
# 255 bytes. The tree scheme (``<parent>.<name>``) grows by a name at each level.
MAX_BRANCH = 200


def check_branch(value: object, what: str = "branch") -> str:
    """Return ``value`` if it is a safe git branch name (a subset of git-check-ref-format)."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"Invalid {what}: expected a non-empty string", field=what)
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_BRANCH:
        shown = value if len(value) <= 80 else value[:77] + "..."
        raise InvalidInput(
            f"Invalid {what} {shown!r}: {size} bytes, longer than exo's limit of {MAX_BRANCH} for a branch name",
            hint="git keeps each branch as a file named after it. A child's branch is its parent's plus its name "
            "(worktree.child_branch): use shorter agent names, a shorter template, or spawn from a higher level.",
            field=what, size=size, limit=MAX_BRANCH)
    if value.startswith("-") or value.startswith("/") or value.endswith("/"):
        raise _reject(what, value, "it starts with '-' or '/' or ends with '/'")
    if value == "@" or "@{" in value or "//" in value:
        raise _reject(what, value, "it contains '@{' or '//'")
    for part in value.split("/"):
        check_name(part, what, max_len=MAX_BRANCH)
    return value


def slugify(text: str, max_len: int = 40) -> str:
    """A short, git- and path-safe slug of free text ("Fix the TUI!" -> "fix-the-tui")."""
    norm = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    slug = _SLUG_STRIP.sub("-", norm).strip("-")
    if len(slug) > max_len:
        slug = slug[:max_len].rsplit("-", 1)[0] or slug[:max_len]
    return slug.strip("-") or "task"


def check_text(value: object, what: str, *, kind: str = "message", max_len: int | None = None,
               allow_empty: bool = False) -> str:
    """Free text exo stores (messages, prompts, outputs, titles): any characters but NUL and bytes that
    are not UTF-8, at most ``TEXT_LIMITS[kind]`` bytes (``max_len`` characters, when given, instead).

    Control characters are kept as written (``--json`` and the MCP tools return them exactly);
    ``visible`` makes them harmless wherever the text meets a terminal.
    """
    if not isinstance(value, str):
        raise InvalidInput(f"Invalid {what}: expected a string", field=what)
    if not value and not allow_empty:
        raise InvalidInput(f"Invalid {what}: it is empty", field=what)
    if max_len is not None and len(value) > max_len:
        raise InvalidInput(f"Invalid {what}: longer than {max_len} characters", field=what)
    error = too_long(value, what, kind) if max_len is None else None
    if error is not None:
        raise error
    if "\x00" in value:
        raise InvalidInput(f"Invalid {what}: it contains a NUL byte", field=what)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates: bytes that were not UTF-8
        raise InvalidInput(f"Invalid {what}: it is not valid UTF-8 text", field=what) from exc
    return value


# Longest wait exo accepts, in seconds (about 31 years: below every OS and threading limit).
MAX_TIMEOUT = 1_000_000_000


def check_timeout(value: object, what: str = "timeout", *, allow_zero: bool = True) -> float | None:
    """A timeout in seconds as a float (None stays None: no limit); InvalidInput for anything else.

    NaN (it would never expire), infinity, negative values, values above ``MAX_TIMEOUT`` and,
    without ``allow_zero``, 0 are refused with a message naming the value.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"Invalid {what} {value!r}: expected a number of seconds", field=what)
    seconds = float(value)
    if seconds != seconds:
        why = "it is not a number"
    elif seconds in (float("inf"), float("-inf")):
        why = "it is infinite (leave the timeout out for the command's default)"
    elif seconds < 0:
        why = "it is negative"
    elif seconds == 0 and not allow_zero:
        why = "it must be more than 0 seconds"
    elif seconds > MAX_TIMEOUT:
        why = f"it is more than {MAX_TIMEOUT} seconds"
    else:
        return seconds
    raise InvalidInput(f"Invalid {what} {value!r}: {why}", hint=f"Give {what} as a number of seconds.", field=what)


# --------------------------------------------------------------------------- text on a terminal


def _caret_table() -> dict[int, str]:
    table = {c: "^" + chr(c + 0x40) for c in range(0x20) if c not in (0x09, 0x0A)}  # ^@ .. ^_ (ESC is ^[)
    table[0x7F] = "^?"
    table.update({c: "M-^" + chr(c - 0x80 + 0x40) for c in range(0x80, 0xA0)})  # C1, as `cat -v` shows them
    return table


@functools.cache
def _visible_parts() -> tuple[re.Pattern[str], dict[int, str], re.Pattern[str]]:
    """What ``visible`` needs, built on first use: importing this module stays cheap."""
    unsafe = re.compile("[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f\\ud800-\\udfff]")
    return unsafe, _caret_table(), re.compile("[\\ud800-\\udfff]")


def visible(text: str) -> str:
    """``text`` safe for a terminal: every C0/C1 control character but newline and tab made visible.

    exo applies it to every text it types into a pane and to every text it renders for a
    human, so nothing an agent wrote can act as a key or an escape sequence: ESC shows as
    ``^[`` (``ESC[201~`` as ``^[[201~``), Ctrl-C as ``^C``, DEL as ``^?``, a C1 control such as
    U+009B as ``M-^[`` (the notation of ``cat -v``). A CR before a newline is dropped (Windows
    line ends), any other CR shows as ``^M``. Lone surrogates (bytes that were not UTF-8)
    become U+FFFD. Text without any of these is returned as it is.
    """
    unsafe, table, surrogates = _visible_parts()
    if unsafe.search(text) is None:
        return text
    text = text.replace("\r\n", "\n").translate(table)
    return surrogates.sub("\ufffd", text)

