"""Hallucination guards for Whisper's segments: deterministic checks, no sampling, run on every path (files,
batch, live partials and finals).

Whisper fills audio it cannot understand with fluent text: a phrase or a syllable repeated until the window ends
("a phone, a phone, a phone...", "memememe..."), or words decoded from noise. Its own remedy, re-decoding at
higher temperatures, samples (so the same audio gives different transcripts) and is off here. Instead every
segment is judged on what Whisper already reports:

- **repetition**: a phrase of up to eight words three or more times in a row (at least eight words in all), a unit
  of one to twelve letters six or more times in a row, or a zlib compression ratio of the text above
  :data:`COMPRESSION_RATIO_LIMIT` (Whisper's own threshold): the segment is **dropped**;
- **no speech**: Whisper's no-speech probability above :data:`NO_SPEECH_LIMIT` and an average log-probability
  below :data:`LOGPROB_FLOOR` (Whisper's rule for skipping a window): **dropped**;
- **low confidence**: an average log-probability below :data:`LOGPROB_FLOOR`: **kept**, and the record warns
  that it is unreliable;
- **doubled**: one passage said twice in a row (:func:`doubled`): the second copy is **cut** by the pipeline.

Every segment also gets a ``confidence``: the geometric mean of its tokens' probabilities, ``exp(avg_logprob)``.
Nothing is dropped silently: :func:`screen` returns a warning for each kind of problem, with the times.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

COMPRESSION_RATIO_LIMIT = 2.4  # Whisper's compression_ratio_threshold
LOGPROB_FLOOR = -1.0  # Whisper's log_prob_threshold
NO_SPEECH_LIMIT = 0.6  # Whisper's no_speech_threshold
MIN_LOOP_WORDS = 8  # a repeated phrase must cover at least this many words to count as a loop

_LETTER_LOOP = re.compile(r"(\D{1,12}?)\1{5,}")  # "wwwwww", "memememememe"; digits never ("1000000")
_PHRASE_LOOP = re.compile(r"((?:\S+ ){1,8}?)\1{2,}")  # on lower-cased words without punctuation
_PUNCTUATION = re.compile(r"[^\w\s']+")

REPETITION = "repetition"
NO_SPEECH = "no speech"
LOW_CONFIDENCE = "low confidence"


class Judged(Protocol):
    """What a guard reads of a segment (engines.speech.recognition.SpeechSegment)."""

    start: float
    end: float
    text: str
    avg_logprob: float
    no_speech_prob: float


@dataclass(frozen=True)
class Verdict:
    problem: str  # REPETITION, NO_SPEECH or LOW_CONFIDENCE
    drop: bool


def compression_ratio(text: str) -> float:
    """Bytes of ``text`` over bytes of its zlib compression (Whisper's measure; high means repetitive)."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def repeats(text: str) -> bool:
    """Whether ``text`` holds a repetition loop (a repeated phrase or letter pattern, or a high compression ratio)."""
    if not text.strip():
        return False
    if _LETTER_LOOP.search(text) or compression_ratio(text) > COMPRESSION_RATIO_LIMIT:
        return True
    words = " ".join(_PUNCTUATION.sub(" ", text.lower()).split()) + " "
    return any(len(match.group(0).split()) >= MIN_LOOP_WORDS for match in _PHRASE_LOOP.finditer(words))


MIN_DOUBLED_WORDS = 4  # a passage said twice in a row must have at least this many words to count as doubled


def doubled(text: str) -> int | None:
    """The number of words of the first half when ``text`` is one passage said twice in a row ("The train leaves
    at four. The train leaves at four."): Whisper ends a short window that way where it found no end, and the
    loop guards need three repeats. None otherwise."""
    words = text.split()
    half = len(words) // 2
    if half < MIN_DOUBLED_WORDS or len(words) % 2:
        return None
    key = [_PUNCTUATION.sub("", w.lower()) for w in words]
    return half if key[:half] == key[half:] else None


def confidence(avg_logprob: float) -> float:
    """A segment's confidence in [0, 1]: the geometric mean of its tokens' probabilities."""
    return round(min(1.0, max(0.0, math.exp(avg_logprob))), 3)


def judge(segment: Judged) -> Verdict | None:
    """The segment's problem, or None when it passes every guard."""
    if not segment.text.strip():
        return None
    if repeats(segment.text):
        return Verdict(REPETITION, drop=True)
    if segment.avg_logprob < LOGPROB_FLOOR:
        if segment.no_speech_prob > NO_SPEECH_LIMIT:
            return Verdict(NO_SPEECH, drop=True)
        return Verdict(LOW_CONFIDENCE, drop=False)
    return None


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}:{secs:02d}"


def spans(segments: Sequence[Judged]) -> str:
    """How a warning names segments: their count and the times of the first five (``2 segment(s) (0:03-0:07, ...)``)."""
    shown = ", ".join(f"{_clock(s.start)}-{_clock(s.end)}" for s in segments[:5])
    more = f" and {len(segments) - 5} more" if len(segments) > 5 else ""
    return f"{len(segments)} segment(s) ({shown}{more})"


_WHY = {
    REPETITION: "were left out: the decoder repeated itself there, a sign of hallucinated text (hallucination guard)",
    NO_SPEECH: "were left out: the model found no speech there and had low confidence in the words it produced",
    LOW_CONFIDENCE: f"are unreliable: the model's confidence is low (average log-probability below {LOGPROB_FLOOR:g})",
}


S = TypeVar("S", bound=Judged)


def screen(segments: Sequence[S]) -> tuple[list[S], list[str]]:
    """The segments that pass (low-confidence ones stay, flagged) and one warning per kind of problem found."""
    kept: list[S] = []
    found: dict[str, list[S]] = {}
    for segment in segments:
        verdict = judge(segment)
        if verdict is not None:
            found.setdefault(verdict.problem, []).append(segment)
        if verdict is None or not verdict.drop:
            kept.append(segment)
    warnings = [f"{spans(found[p])} {_WHY[p]}." for p in (REPETITION, NO_SPEECH, LOW_CONFIDENCE) if p in found]
    return kept, warnings
