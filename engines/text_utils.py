"""Small text helpers shared by the text engines: sentence splitting and word spans with character offsets.

All offsets are Python ``str`` indices (Unicode code points) into the text as given, so
``text[start:end]`` is always the piece they describe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A sentence ends at '.' or '!' (the provider's rule), except a '.' inside a number such as 3.5 or 1.000.
_SENTENCE_END = re.compile(r"!|(?<!\d)\.|\.(?!\d)")
_WORD = re.compile(r"\w+(?:[-'’]\w+)*", re.UNICODE)


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    text: str


def split_sentences(text: str) -> list[Span]:
    """Split at '.' and '!' (the marks are dropped); each piece keeps its leading space.

    ``"am happy. i am sad"`` -> ``["am happy", " i am sad"]``. Pieces that are only whitespace or punctuation
    (``"..."``, a trailing space) are dropped. A text without the marks is one sentence.
    """
    spans: list[Span] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        _add_piece(spans, text, start, match.start())
        start = match.end()
    _add_piece(spans, text, start, len(text))
    return spans


def _add_piece(spans: list[Span], text: str, start: int, end: int) -> None:
    piece = text[start:end]
    if not any(ch.isalnum() for ch in piece):
        return
    stripped_end = start + len(piece.rstrip())
    spans.append(Span(start, stripped_end, text[start:stripped_end]))


def word_spans(text: str) -> list[Span]:
    """Words (letters/digits, with inner hyphens and apostrophes) with their character offsets."""
    return [Span(m.start(), m.end(), m.group()) for m in _WORD.finditer(text)]


def trim_span(text: str, start: int, end: int) -> tuple[int, int]:
    """Shrink ``[start, end)`` so it neither starts nor ends with whitespace."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end
