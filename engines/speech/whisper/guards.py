"""Hallucination guards for Whisper's segments: deterministic checks, no sampling, run on every path (files,
batch, live partials and finals) by ``WhisperRecognizer.screen``.

Whisper fills audio it cannot understand with fluent text: a phrase or a syllable repeated until the window ends
("a phone, a phone, a phone...", "memememe..."), or words decoded from noise. Its own remedy, re-decoding at
higher temperatures, samples (so the same audio gives different transcripts) and is off here. Instead every
segment is judged on what Whisper already reports:

- **repetition**: a repetition loop (``engines.speech.screening.repeats``: a phrase of up to eight words three or
  more times in a row, a unit of one to twelve letters six or more times in a row, or a zlib compression ratio of
  the text above Whisper's own threshold): the segment is **dropped**;
- **no speech**: Whisper's no-speech probability above :data:`NO_SPEECH_LIMIT` and an average log-probability
  below :data:`LOGPROB_FLOOR` (Whisper's rule for skipping a window): **dropped**;
- **low confidence**: an average log-probability below :data:`LOGPROB_FLOOR`: **kept**, and the record warns
  that it is unreliable;
- **doubled**: one passage said twice in a row (:func:`doubled`): the second copy is **cut** (:func:`undoubled`).

Every segment also gets a ``confidence`` (``engines.speech.screening.confidence``): the geometric mean of its
tokens' probabilities, ``exp(avg_logprob)``. Nothing is dropped silently: :func:`screen` returns a warning for each
kind of problem, with the times.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from engines.speech.recognition import SpeechSegment
from engines.speech.screening import LOW_CONFIDENCE, PUNCTUATION, Judged, repeats, spans

LOGPROB_FLOOR = -1.0  # Whisper's log_prob_threshold
NO_SPEECH_LIMIT = 0.6  # Whisper's no_speech_threshold

REPETITION = "repetition"
NO_SPEECH = "no speech"


@dataclass(frozen=True)
class Verdict:
    problem: str  # REPETITION, NO_SPEECH or LOW_CONFIDENCE
    drop: bool


MIN_DOUBLED_WORDS = 4  # a passage said twice in a row must have at least this many words to count as doubled


def doubled(text: str) -> int | None:
    """The number of words of the first half when ``text`` is one passage said twice in a row ("The train leaves
    at four. The train leaves at four."): Whisper ends a short window that way where it found no end, and the
    loop guards need three repeats. None otherwise."""
    words = text.split()
    half = len(words) // 2
    if half < MIN_DOUBLED_WORDS or len(words) % 2:
        return None
    key = [PUNCTUATION.sub("", w.lower()) for w in words]
    return half if key[:half] == key[half:] else None


def undoubled(segment: SpeechSegment) -> SpeechSegment:
    """``segment`` without the second copy of a passage said twice in a row (:func:`doubled`); as it is when its
    words do not match its text one to one (a cut would lose their times)."""
    half = doubled(segment.text)
    if half is None or (segment.words and len(segment.words) != 2 * half):
        return segment
    words = segment.words[:half]
    end = words[-1].end if words else segment.start + (segment.end - segment.start) / 2
    return dataclasses.replace(segment, text=" ".join(segment.text.split()[:half]), words=words, end=end)


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
