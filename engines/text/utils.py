"""Small text helpers shared by the text engines: sentence splitting and word spans with character offsets.

All offsets are Python ``str`` indices (Unicode code points) into the text as given, so
``text[start:end]`` is always the piece they describe.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from dataclasses import dataclass


def _mark_class() -> str:
    """A regex character class body of every combining mark (Unicode categories Mn, Mc, Me). ``\\w`` leaves them
    out, so a word in decomposed (NFD) text such as "Ma\\u0300ndela" would end at its first accent."""
    ranges: list[str] = []
    start: int | None = None
    for code in range(sys.maxunicode + 2):
        is_mark = code <= sys.maxunicode and unicodedata.category(chr(code))[0] == "M"
        if is_mark and start is None:
            start = code
        elif not is_mark and start is not None:
            ranges.append(re.escape(chr(start)) + ("-" + re.escape(chr(code - 1)) if code - 1 > start else ""))
            start = None
    return "".join(ranges)


MARKS = _mark_class()
# A sentence ends at '.' or '!' (the provider's rule), except a '.' inside a number such as 3.5 or 1.000.
_SENTENCE_END = re.compile(r"!|(?<!\d)\.|\.(?!\d)")
# letters/digits and the combining marks on them, with inner hyphens and apostrophes
_WORD = re.compile(rf"\w[\w{MARKS}]*(?:[-'’]\w[\w{MARKS}]*)*", re.UNICODE)


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


def nfc_with_offsets(text: str) -> tuple[str, list[int]]:
    """``text`` with each base character composed with its combining marks (NFC, per character cluster), and the
    offset map back: ``offsets[i]`` is where the cluster holding composed character ``i`` starts in ``text``
    (``offsets[len(composed)] == len(text)``). Models trained on composed text (spaCy) cut NFD words at their
    accents; run them on the composed text and map their spans back with :func:`original_span`."""
    if text.isascii() or unicodedata.is_normalized("NFC", text):
        return text, list(range(len(text) + 1))
    pieces: list[str] = []
    offsets: list[int] = []
    start = 0
    for i in range(1, len(text) + 1):
        if i < len(text) and (unicodedata.combining(text[i]) or unicodedata.category(text[i])[0] == "M"):
            continue  # a mark stays in its base character's cluster
        cluster = unicodedata.normalize("NFC", text[start:i])
        pieces.append(cluster)
        offsets.extend([start] * len(cluster))
        start = i
    offsets.append(len(text))
    return "".join(pieces), offsets


def original_span(offsets: list[int], start: int, end: int) -> tuple[int, int]:
    """A ``[start, end)`` span of :func:`nfc_with_offsets`' composed text, as offsets into the original text (whole
    clusters: a base character is never separated from its marks)."""
    if end <= start:
        return offsets[start], offsets[start]
    last = offsets[end - 1]
    stop = next((o for o in offsets[end:] if o > last), offsets[-1])
    return offsets[start], stop


def trim_span(text: str, start: int, end: int) -> tuple[int, int]:
    """Shrink ``[start, end)`` so it neither starts nor ends with whitespace."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end
