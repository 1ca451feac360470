"""Split a document's text into overlapping chunks along paragraph and sentence boundaries.

Every chunk is an exact slice ``text[start:end]`` of the extracted text, so a search result can point at its
place in the source. Chunks are packed from whole sentences up to ``max_chars``; the next chunk repeats the last
sentences of the previous one (up to ``overlap_chars``) so a fact that straddles a boundary is found in one
piece. A chunk never runs across a paragraph break once it holds ``min_chars`` (headings and table rows stay
with their paragraph when small). A sentence longer than ``max_chars`` is cut at whitespace into windows that
overlap by ``overlap_chars``.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass

from contracts.errors import TooLarge

# A sentence ends at . ! ? or … (plus closing quotes/brackets) followed by whitespace; a paragraph at a blank
# line. A single newline (CSV rows, list items, PDF lines) is a soft boundary handled like a sentence end.
_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"'”’)\]]*\s+|\n+")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
# Common abbreviations that end with a period but do not end a sentence (English, Afrikaans).
_ABBREVIATIONS = re.compile(r"(?:\b(?:Mr|Mrs|Ms|Dr|Prof|St|No|Nr|Mnr|Mev|Me|bv|ens|e\.g|i\.e|vs|etc)|\b[A-Z])\.$")


@dataclass(frozen=True)
class Chunk:
    index: int
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class _Span:
    start: int
    end: int
    paragraph_start: bool  # first span of a paragraph


def sentence_spans(text: str) -> list[_Span]:
    """Sentence spans (start, end) with surrounding whitespace excluded."""
    spans: list[_Span] = []
    # sorted, so each span finds the nearest paragraph start by bisection (linear time on many tiny paragraphs)
    paragraph_starts = [m.end() for m in _PARAGRAPH_BREAK.finditer(text)]
    cursor = 0
    pending_start: int | None = None
    for match in _SENTENCE_END.finditer(text):
        end = match.start()
        piece = text[cursor:end]
        if "\n" not in match.group() and _ABBREVIATIONS.search(piece):
            if pending_start is None:
                pending_start = cursor
            cursor = match.end()
            continue  # "Dr. Dlamini" is one sentence
        start = pending_start if pending_start is not None else cursor
        pending_start = None
        _add_span(text, start, end, paragraph_starts, spans)
        cursor = match.end()
    start = pending_start if pending_start is not None else cursor
    _add_span(text, start, len(text), paragraph_starts, spans)
    return spans


def _add_span(text: str, start: int, end: int, paragraph_starts: list[int], spans: list[_Span]) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        # a span opens a paragraph if a paragraph break lies between the previous span and this one
        prev_end = spans[-1].end if spans else 0
        at = bisect_left(paragraph_starts, max(prev_end, 1))
        new_para = not spans or (at < len(paragraph_starts) and paragraph_starts[at] <= start)
        spans.append(_Span(start, end, new_para))


def _split_long(text: str, span: _Span, max_chars: int, overlap_chars: int) -> list[_Span]:
    """Cut one over-long sentence into whitespace-aligned windows that overlap."""
    out: list[_Span] = []
    start = span.start
    while start < span.end:
        end = min(start + max_chars, span.end)
        if end < span.end:
            cut = text.rfind(" ", start + max_chars // 2, end)
            if cut > start:
                end = cut
        out.append(_Span(start, end, span.paragraph_start and not out))
        if end >= span.end:
            break
        next_start = max(end - overlap_chars, start + 1)
        space = text.find(" ", next_start, end)
        start = space + 1 if space != -1 else next_start
        while start < span.end and text[start].isspace():
            start += 1
    return out


def chunk_text(
    text: str,
    max_chars: int = 800,
    overlap_chars: int = 150,
    min_chars: int = 200,
    max_chunks: int | None = None,
    name: str = "document",
) -> list[Chunk]:
    """Chunks of at most ``max_chars`` characters from whole sentences, overlapping by up to ``overlap_chars``.

    More than ``max_chunks`` chunks is :class:`TooLarge`, raised as soon as the count passes it: each chunk costs
    an embedding (seconds per hundred on a CPU), so a small file of many tiny paragraphs must not buy hours."""
    if max_chars < 50:
        raise ValueError("max_chars must be at least 50")
    overlap_chars = max(0, min(overlap_chars, max_chars // 2))
    spans: list[_Span] = []
    for span in sentence_spans(text):
        if span.end - span.start > max_chars:
            spans.extend(_split_long(text, span, max_chars, overlap_chars))
        else:
            spans.append(span)

    chunks: list[Chunk] = []
    i = 0
    fresh = 0  # index of the first span not yet in any chunk: every chunk must take at least one
    while i < len(spans):
        first = i
        end_index = max(i, fresh)  # inclusive index of the last span in this chunk
        while end_index + 1 < len(spans):
            nxt = spans[end_index + 1]
            if nxt.end - spans[first].start > max_chars:
                break
            if nxt.paragraph_start and spans[end_index].end - spans[first].start >= min_chars:
                break
            end_index += 1
        start, end = spans[first].start, spans[end_index].end
        if max_chunks is not None and len(chunks) >= max_chunks:
            raise TooLarge(
                f"The document '{name}' splits into more than {max_chunks} passages, the most one document may "
                "index (search.max_document_chunks): split it into smaller documents."
            )
        chunks.append(Chunk(len(chunks), start, end, text[start:end]))
        fresh = end_index + 1
        if fresh >= len(spans):
            break
        # overlap: repeat the last sentences that fit in overlap_chars (and leave room for the next sentence)
        following = spans[fresh]
        back = fresh
        while (
            back - 1 > first
            and spans[end_index].end - spans[back - 1].start <= overlap_chars
            and following.end - spans[back - 1].start <= max_chars
        ):
            back -= 1
        i = back
    return chunks
