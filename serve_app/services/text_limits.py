"""Size limits of request texts, counted by what costs work: characters, UTF-8 bytes and the longest run without
whitespace (``text.max_chars``, ``text.max_bytes``, ``text.max_word_chars``; ``translation.max_chars`` for a
translation).

The token limits count whitespace-separated tokens only, so a text without spaces passes them whatever its size,
and language identification works super-linearly through one long run. Every text route's service calls
:func:`check_size` before its first hop (before any model runs); over a limit is a 400 naming the field, like the
token limit (the spec lists 413 for file uploads only; a text is a request field).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contracts.errors import InvalidInput
from contracts.settings import Settings


@dataclass(frozen=True)
class TextLimits:
    chars: int
    bytes: int
    word_chars: int

    @classmethod
    def of(cls, settings: Settings, max_chars: int | None = None) -> TextLimits:
        """The ``text`` section's limits; ``max_chars`` replaces its character limit (translation has its own)."""
        text = settings.text
        return cls(chars=max_chars or text.max_chars, bytes=text.max_bytes, word_chars=text.max_word_chars)


def longest_run(text: str) -> int:
    """Length of the longest run of characters without whitespace."""
    return max(map(len, text.split()), default=0)


def check_size(texts: str | Sequence[str], field: str, limits: TextLimits) -> None:
    """400 naming ``field`` when the text (or the texts of one list field, counted together) is over a limit.
    Characters are counted first (free), then bytes, then runs, so the work done here is bounded too."""
    items = [texts] if isinstance(texts, str) else list(texts)
    in_all = "" if isinstance(texts, str) else " in all"
    chars = sum(len(t) for t in items)
    if chars > limits.chars:
        raise InvalidInput(
            f"Invalid request: field '{field}' has {chars:,} characters{in_all}; the limit is {limits.chars:,} "
            "characters per request."
        )
    size = sum(len(t.encode("utf-8", "surrogatepass")) for t in items)
    if size > limits.bytes:
        raise InvalidInput(
            f"Invalid request: field '{field}' is {size:,} bytes{in_all} as UTF-8; the limit is {limits.bytes:,} "
            "bytes per request."
        )
    run = max((longest_run(t) for t in items), default=0)
    if run > limits.word_chars:
        raise InvalidInput(
            f"Invalid request: field '{field}' has {run:,} characters without whitespace in a row; the limit is "
            f"{limits.word_chars:,} (split long words, URLs or encoded data)."
        )
