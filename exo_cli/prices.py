"""exo's default price table: US dollars per million tokens, per model and kind of token.

The prices the vendors published for the models Claude Code, Gemini CLI and Codex CLI use, as of
``DATE``; ``[prices."MODEL"]`` in the configuration overrides or adds a model (every key: ``input``,
``output``, ``cache_write``, ``cache_read``). Gemini's prices are those of prompts up to 200k
tokens (its longer prompts cost more), and Gemini bills no cache write: its cache_write is its
input price. A model in neither table has no price: exo says "price unknown" and never guesses.
A model recorded with a date suffix (``claude-sonnet-4-5-20250929``) takes its family's price.
"""

from __future__ import annotations

DATE = "2025-11-01"
KINDS = ("input", "output", "cache_write", "cache_read")

# model -> (input, output, cache_write, cache_read), dollars per million tokens
DEFAULTS: dict[str, tuple[float, float, float, float]] = {
    "claude-opus-4-5": (5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-1": (15.0, 75.0, 18.75, 1.50),
    "claude-opus-4": (15.0, 75.0, 18.75, 1.50),
    "claude-sonnet-4-5": (3.0, 15.0, 3.75, 0.30),
    "claude-sonnet-4": (3.0, 15.0, 3.75, 0.30),
    "claude-haiku-4-5": (1.0, 5.0, 1.25, 0.10),
    "claude-3-5-haiku": (0.80, 4.0, 1.0, 0.08),
    "gemini-2.5-pro": (1.25, 10.0, 1.25, 0.125),
    "gemini-2.5-flash": (0.30, 2.50, 0.30, 0.03),
    "gemini-2.5-flash-lite": (0.10, 0.40, 0.10, 0.01),
    "gpt-5": (1.25, 10.0, 1.25, 0.125),
    "gpt-5-codex": (1.25, 10.0, 1.25, 0.125),
    "gpt-5-mini": (0.25, 2.0, 0.25, 0.025),
}
