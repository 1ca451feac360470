"""Repetition loops in generated text: a small model that loses its way repeats a phrase ("The source of the source
of the source of ...") until its token allowance runs out. :func:`loop_start` finds one as it forms, so the
generation can be cut there (decoding penalties make loops rarer, not impossible).
"""

from __future__ import annotations

MIN_UNIT = 4  # characters: shorter repeats (``...``, ``----``) are punctuation, not loops
MAX_UNIT = 200
REPEATS = 3  # a unit seen this many times in a row is a loop
LONG_UNIT = 30  # from this length, twice in a row is already a loop (a repeated sentence)


def loop_start(text: str) -> int | None:
    """Where the repetition at the end of ``text`` begins to repeat (its first occurrence is kept), or None. The
    first occurrence may lack up to a third of the unit (the separator before it, a capital letter)."""
    tail = text.rstrip().lower()
    for size in range(MIN_UNIT, min(MAX_UNIT, 3 * len(tail) // 5) + 1):
        times = REPEATS if size < LONG_UNIT else 2
        span = min(len(tail), times * size)
        if span < times * size - size // 3:
            continue
        segment = tail[-span:]
        if segment[:-size] == segment[size:] and segment[-size:].strip():
            return len(text.rstrip()) - span + size
    return None
