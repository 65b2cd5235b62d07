"""What each agent CLI records about its token usage, read from its own transcript at the end of a turn.

- Claude Code: every assistant line of its transcript (JSONL) carries ``message.usage``
  (``input_tokens``, ``output_tokens``, ``cache_creation_input_tokens``, ``cache_read_input_tokens``)
  and ``message.model``; one API message may be written as several lines (one per content block)
  with the same ``message.id``: the last one of a read counts, once.
- Gemini CLI: its session file (JSONL) holds ``{"type": "gemini", "id", "model", "tokens": {"input",
  "output", "cached", "thoughts", "tool", "total"}}``; a message is written again with the same id
  when its tokens arrive (set once). ``input`` (``promptTokenCount``) includes the cached tokens;
  thoughts are billed as output, tool-use prompt tokens as input.
- Codex CLI: its rollout file (JSONL) holds ``{"type": "token_usage_record", "payload":
  {"response_id", "usage": {"input_tokens", "cached_input_tokens", "cache_write_input_tokens",
  "output_tokens", ...}}}`` per model response, after the turn's ``turn_context`` naming the model;
  ``input_tokens`` includes the cached and cache-written tokens.

Each hook reads only what was appended since its last read (the offset, the file and the last ids
seen are kept in the hook's bookkeeping ``state``), at most ``TAIL`` bytes, so a stop hook stays fast.
Standard library only: the stop hook imports it.
"""

from __future__ import annotations

import json
import os

from exo_cli.records import Usage

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, BinaryIO

CLIS = ("claude", "gemini", "codex")
TAIL = 4 * 1024 * 1024  # the most a hook reads of a transcript at once (a longer gap: its end only)
_MARK = {"claude": b'"usage"', "gemini": b'"tokens"', "codex": b'"token_usage_record"'}
_CONTEXT = b'"turn_context"'


MAX_TOKENS = 10**12  # more than any response uses: a bigger count is not one (and would overflow the store)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_TOKENS else 0


def _model(value: Any) -> str:
    """A model's name as recorded: text, at most 200 characters ("unknown" when there is none)."""
    return str(value)[:200] if isinstance(value, str) and value else "unknown"


def open_regular(path: str) -> BinaryIO | None:
    """``path`` opened for reading when it is a regular file; None otherwise (missing, or a FIFO or a device
    named as a transcript: opened without blocking and never read)."""
    from exo_cli.adapters import files

    try:
        return os.fdopen(files.open_regular(path), "rb")
    except OSError:
        return None


FLUSH_WAIT = 2.0  # how long a stop hook waits for Claude to write the turn's last message to its transcript


def _new_lines(path: str, state: dict[str, Any], expect: bytes | None = None) -> list[bytes]:
    """The complete lines appended to ``path`` since the last call (the offset lives in ``state``).

    With ``expect``, first wait (``FLUSH_WAIT`` seconds at most) until those bytes were appended:
    Claude Code runs its Stop hook before it has written the turn's last message to the transcript.
    """
    fh = open_regular(path)
    if fh is None:
        return []
    with fh:
        if expect:
            import time

            deadline = time.monotonic() + FLUSH_WAIT
            start = state.get("uoff", 0) if state.get("upath") == path else 0
            while time.monotonic() < deadline:
                fh.seek(start if isinstance(start, int) else 0)
                if expect in fh.read():
                    break
                time.sleep(0.02)
        return _read_new(fh, path, state)


def _read_new(fh: BinaryIO, path: str, state: dict[str, Any]) -> list[bytes]:
    size = os.fstat(fh.fileno()).st_size
    off = state.get("uoff", 0) if state.get("upath") == path else 0
    if not isinstance(off, int) or off > size:  # another file, or one that was replaced: from the start
        off = 0
    skip_partial = size - off > TAIL
    if skip_partial:
        off = size - TAIL
    fh.seek(off)
    chunk = fh.read(size - off)
    if skip_partial:
        first = chunk.find(b"\n") + 1
        chunk, off = chunk[first:], off + first
    end = chunk.rfind(b"\n") + 1
    state["uoff"], state["upath"] = off + end, path
    return chunk[:end].splitlines()


def _claude(obj: dict[str, Any]) -> tuple[Any, Usage] | None:
    message = obj.get("message")
    if not isinstance(message, dict) or not isinstance(usage := message.get("usage"), dict):
        return None
    return message.get("id"), Usage(_model(message.get("model")), _int(usage.get("input_tokens")),
                                    _int(usage.get("output_tokens")), _int(usage.get("cache_creation_input_tokens")),
                                    _int(usage.get("cache_read_input_tokens")))


def _gemini(obj: dict[str, Any]) -> tuple[Any, Usage] | None:
    tokens = obj.get("tokens")
    if obj.get("type") != "gemini" or not isinstance(tokens, dict):
        return None
    cached = _int(tokens.get("cached"))
    return obj.get("id"), Usage(_model(obj.get("model")),
                                max(0, _int(tokens.get("input")) - cached) + _int(tokens.get("tool")),
                                _int(tokens.get("output")) + _int(tokens.get("thoughts")), 0, cached)


def _codex(obj: dict[str, Any], model: str) -> tuple[Any, Usage] | None:
    payload = obj.get("payload")
    if obj.get("type") != "token_usage_record" or not isinstance(payload, dict):
        return None
    usage = payload.get("usage")
    if not isinstance(usage, dict):
        return None
    read, written = _int(usage.get("cached_input_tokens")), _int(usage.get("cache_write_input_tokens"))
    return payload.get("response_id"), Usage(model, max(0, _int(usage.get("input_tokens")) - read - written),
                                             _int(usage.get("output_tokens")), written, read)


def read_usage(cli: str, path: str, state: dict[str, Any], last_text: str | None = None) -> list[Usage]:
    """The usage the agent CLI ``cli`` recorded in its transcript ``path`` since the last call, by model.

    ``state`` is the hook's bookkeeping of this agent (updated here). [] for another CLI or an
    unreadable file; a line that is not JSON is skipped. ``last_text``: the turn's last message as
    the Stop hook reports it, which Claude may not have written to its transcript yet (waited for).
    """
    if cli not in CLIS:
        return []
    expect = None
    if cli == "claude" and last_text and last_text.strip():
        expect = json.dumps(last_text.strip()[:60], ensure_ascii=False)[1:-1].encode("utf-8")
    try:
        lines = _new_lines(path, state, expect)
    except OSError:
        return []
    seen = list(state.get("uids") or [])
    model = str(state.get("umodel") or "unknown")
    found: dict[Any, Usage] = {}
    for line in lines:
        context = cli == "codex" and _CONTEXT in line
        if not context and _MARK[cli] not in line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        if context:
            payload = obj.get("payload")
            if obj.get("type") == "turn_context" and isinstance(payload, dict) and payload.get("model"):
                model = _model(payload["model"])
            continue
        got = _claude(obj) if cli == "claude" else _gemini(obj) if cli == "gemini" else _codex(obj, model)
        if got is None or got[0] in seen:
            continue
        key, usage = got
        if cli == "gemini" and key in found:  # tokens are set once: the first line that has them
            continue
        found[key if key is not None else object()] = usage  # Claude: the last line of a message
    state["umodel"] = model
    state["uids"] = (seen + [k for k in found if isinstance(k, str)])[-50:]
    return merge(found.values())


def merge(usage: Any) -> list[Usage]:
    """Usage rows summed per model (first-seen order); rows without a token left out."""
    out: dict[str, Usage] = {}
    for u in usage:
        if not u.total:
            continue
        was = out.get(u.model)
        out[u.model] = u if was is None else Usage(u.model, was.input + u.input, was.output + u.output,
                                                   was.cache_write + u.cache_write, was.cache_read + u.cache_read)
    return list(out.values())
