"""What every family's guards share (``engines.speech.whisper.guards``: Whisper's hallucination guards;
``engines.speech.ctc.guards``: the CTC models' letter-soup guards): the segment a guard reads (:class:`Judged`),
how a warning names segments (:func:`spans`), the low-confidence problem, a segment's ``confidence``, and
:func:`repeats`, the test for a decoder's repetition loop that Whisper's guards drop and that auto-detection applies
to any decode it reads as fluent text (``engines.speech.language_choice.fluent``).
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence
from typing import Protocol

COMPRESSION_RATIO_LIMIT = 2.4  # Whisper's compression_ratio_threshold
MIN_LOOP_WORDS = 8  # a repeated phrase must cover at least this many words to count as a loop

_LETTER_LOOP = re.compile(r"(\D{1,12}?)\1{5,}")  # "wwwwww", "memememememe"; digits never ("1000000")
_PHRASE_LOOP = re.compile(r"((?:\S+ ){1,8}?)\1{2,}")  # on lower-cased words without punctuation
PUNCTUATION = re.compile(r"[^\w\s']+")

LOW_CONFIDENCE = "low confidence"


class Judged(Protocol):
    """What a guard reads of a segment (engines.speech.recognition.SpeechSegment)."""

    start: float
    end: float
    text: str
    avg_logprob: float
    no_speech_prob: float


def compression_ratio(text: str) -> float:
    """Bytes of ``text`` over bytes of its zlib compression (Whisper's measure; high means repetitive)."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def repeats(text: str) -> bool:
    """Whether ``text`` holds a repetition loop: a phrase of up to eight words three or more times in a row (at
    least :data:`MIN_LOOP_WORDS` words in all), a unit of one to twelve letters six or more times in a row, or a
    zlib compression ratio above :data:`COMPRESSION_RATIO_LIMIT`."""
    if not text.strip():
        return False
    if _LETTER_LOOP.search(text) or compression_ratio(text) > COMPRESSION_RATIO_LIMIT:
        return True
    words = " ".join(PUNCTUATION.sub(" ", text.lower()).split()) + " "
    return any(len(match.group(0).split()) >= MIN_LOOP_WORDS for match in _PHRASE_LOOP.finditer(words))


def confidence(avg_logprob: float) -> float:
    """A segment's confidence in [0, 1]: the geometric mean of its tokens' probabilities."""
    return round(min(1.0, max(0.0, math.exp(avg_logprob))), 3)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}:{secs:02d}"


def spans(segments: Sequence[Judged]) -> str:
    """How a warning names segments: their count and the times of the first five (``2 segment(s) (0:03-0:07, ...)``)."""
    shown = ", ".join(f"{_clock(s.start)}-{_clock(s.end)}" for s in segments[:5])
    more = f" and {len(segments) - 5} more" if len(segments) > 5 else ""
    return f"{len(segments)} segment(s) ({shown}{more})"
