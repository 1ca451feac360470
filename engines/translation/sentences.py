"""A text cut into the segments a translation model decodes, and put back together with its whitespace.

Sentences end at . ! ? … (followed by whitespace or the end; not after a known abbreviation or an initial) and at
line breaks; a sentence longer than the model's ``max_segment_words`` is cut at clause punctuation, then into word
chunks. Whatever the cut, ``lead + "".join(p.text + p.trailing for p in pieces)`` is the text again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Piece:
    """One segment of a text: ``text`` is translated, ``trailing`` (whitespace) is kept as it was."""

    text: str
    trailing: str = ""


_SENTENCE_END = re.compile(r"[.!?…。]+[\"'”’»)\]]*(?=\s|$)|\n")
_CLAUSE_END = re.compile(r"[,;:](?=\s)")
# Words after which a full stop does not end the sentence (English and Afrikaans titles, months, ...).
_ABBREVIATION_WORDS = (
    "mr mrs ms dr prof st mt no nr vs etc e.g i.e cf mnr mev me dkt ds adv jan feb mar apr jun jul aug sep sept "
    "oct nov dec"
)
_ABBREVIATIONS = frozenset(_ABBREVIATION_WORDS.split())


def split_sentences(text: str, max_words: int = 80) -> tuple[str, list[Piece]]:
    """Split into sentences; returns (leading whitespace, pieces), and round-trips exactly:
    ``lead + "".join(p.text + p.trailing for p in pieces) == text``.

    Sentences end at . ! ? … (followed by whitespace or the end; not after a known abbreviation or an initial)
    and at line breaks. A sentence longer than ``max_words`` is cut at clause punctuation, then into word chunks.
    """
    cuts: list[int] = []
    prev = 0
    for match in _SENTENCE_END.finditer(text):
        end = match.start() if match.group() == "\n" else match.end()
        if match.group() == "." and _is_abbreviation(text[prev:end]):
            continue
        cuts.append(end)
        prev = end
    lead, sentences = _cut(text, cuts)
    pieces: list[Piece] = []
    for sentence in sentences:
        pieces.extend(_split_long(sentence, max_words))
    return lead, pieces


def _cut(text: str, cuts: list[int]) -> tuple[str, list[Piece]]:
    """Cut ``text`` at ``cuts``; whitespace around each cut goes to the preceding piece's ``trailing``."""
    lead = ""
    pieces: list[Piece] = []
    prev = 0
    for cut in [*cuts, len(text)]:
        chunk, prev = text[prev:cut], cut
        core = chunk.strip()
        head = chunk[: len(chunk) - len(chunk.lstrip())] if core else chunk
        if pieces:
            pieces[-1] = Piece(pieces[-1].text, pieces[-1].trailing + head)
        else:
            lead += head
        if core:
            pieces.append(Piece(core, chunk[len(head) + len(core) :]))
    return lead, pieces


def _is_abbreviation(sentence: str) -> bool:
    words = sentence.split()
    if not words:
        return False
    last = words[-1].rstrip(".").lower()
    return last in _ABBREVIATIONS or (len(last) == 1 and last.isalpha())


def _split_long(piece: Piece, max_words: int) -> list[Piece]:
    if len(piece.text.split()) <= max_words:
        return [piece]
    _, clauses = _cut(piece.text, [m.end() for m in _CLAUSE_END.finditer(piece.text)])
    out: list[Piece] = []
    for clause in clauses:
        word_ends = [m.end() for m in re.finditer(r"\S+", clause.text)]
        _, chunks = _cut(clause.text, word_ends[max_words - 1 : -1 : max_words])
        chunks[-1] = Piece(chunks[-1].text, chunks[-1].trailing + clause.trailing)
        out.extend(chunks)
    out[-1] = Piece(out[-1].text, out[-1].trailing + piece.trailing)
    return out


def join_pieces(lead: str, pieces: Sequence[Piece], translations: Sequence[str]) -> str:
    return lead + "".join(t + p.trailing for p, t in zip(pieces, translations, strict=True))
