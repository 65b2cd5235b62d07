"""The model an agent CLI will use, when it can be known before it starts (a dollar budget needs its price).

Each CLI's documented choice, first match wins:

- Claude Code: ``--model M`` in its arguments, ``ANTHROPIC_MODEL``, then ``"model"`` in the project's
  ``.claude/settings.local.json``, ``.claude/settings.json`` and the user's ``settings.json``
  (``$CLAUDE_CONFIG_DIR`` or ``~/.claude``). An alias (``sonnet``, ``opus``, ``haiku``, ``default``,
  ...) names whatever model that CLI version maps it to: not known.
- Gemini CLI: ``-m/--model M``, ``GEMINI_MODEL``, then ``model.name`` (or a string ``model``) in the
  project's ``.gemini/settings.json`` and the user's ``~/.gemini/settings.json``.
- Codex CLI: ``-m/--model M`` or ``-c model=M``, then ``model`` in ``$CODEX_HOME/config.toml``
  (``~/.codex``); a ``--profile``/``-p`` may choose another: not known.

None when nothing says (the CLI's built-in default, which changes with its version and account).
Standard library only; reads small files and never fails (an unreadable file says nothing).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

CLAUDE_ALIASES = frozenset({"default", "sonnet", "opus", "haiku", "opusplan", "best", "sonnet[1m]", "opus[1m]"})
MAX_FILE = 1 << 20  # a settings file bigger than this is not one exo reads


def _flag(args: Sequence[str], names: tuple[str, ...]) -> str | None:
    """The value of the last ``NAME VALUE`` / ``NAME=VALUE`` among ``args``."""
    found = None
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                found = args[i + 1]
            elif a.startswith(n + "=") and n.startswith("--"):
                found = a[len(n) + 1:]
    return found


def _read(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_FILE:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _json(path: Path) -> dict[str, Any]:
    text = _read(path)
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _clean(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value if value and len(value) <= 200 and value.isprintable() else None


def _home(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("HOME") or os.path.expanduser("~"))


def _claude(args: Sequence[str], environ: Mapping[str, str], project: Path) -> str | None:
    chosen = _clean(_flag(args, ("--model",))) or _clean(environ.get("ANTHROPIC_MODEL"))
    if chosen is None:
        user = Path(environ["CLAUDE_CONFIG_DIR"]) if environ.get("CLAUDE_CONFIG_DIR") else _home(environ) / ".claude"
        for path in (project / ".claude/settings.local.json", project / ".claude/settings.json",
                     user / "settings.json"):
            chosen = _clean(_json(path).get("model"))
            if chosen:
                break
    return None if chosen is None or chosen.lower() in CLAUDE_ALIASES else chosen


def _gemini(args: Sequence[str], environ: Mapping[str, str], project: Path) -> str | None:
    chosen = _clean(_flag(args, ("-m", "--model"))) or _clean(environ.get("GEMINI_MODEL"))
    if chosen:
        return chosen
    for path in (project / ".gemini/settings.json", _home(environ) / ".gemini/settings.json"):
        model = _json(path).get("model")
        chosen = _clean(model.get("name") if isinstance(model, dict) else model)
        if chosen:
            return chosen
    return None


def _codex(args: Sequence[str], environ: Mapping[str, str]) -> str | None:
    chosen = _clean(_flag(args, ("-m", "--model")))
    overrides = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-c", "--config")]
    for o in overrides:
        key, _, value = o.partition("=")
        if key.strip() == "model":
            chosen = _clean(value.strip().strip("\"'")) or chosen
    if chosen:
        return chosen
    if _flag(args, ("-p", "--profile")) is not None:
        return None
    home = Path(environ["CODEX_HOME"]) if environ.get("CODEX_HOME") else _home(environ) / ".codex"
    text = _read(home / "config.toml")
    if not text:
        return None
    import tomllib

    try:
        return _clean(tomllib.loads(text).get("model"))
    except tomllib.TOMLDecodeError:
        return None


def known_model(cli: str, args: Sequence[str], environ: Mapping[str, str], project: Path) -> str | None:
    """The model ``cli`` started with ``args`` in ``project`` will use, or None when it cannot be known now."""
    args = [str(a) for a in args]
    if cli == "claude":
        return _claude(args, environ, project)
    if cli == "gemini":
        return _gemini(args, environ, project)
    if cli == "codex":
        return _codex(args, environ)
    return None
