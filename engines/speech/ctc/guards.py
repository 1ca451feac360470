"""Guards for CTC segments: deterministic checks, in the style of :mod:`engines.speech.whisper.guards` (Whisper's).

A CTC model never loops (it emits at most one token per frame and cannot repeat a phrase it has not heard), but on
audio in a language it was not trained for, on noise or on music it emits *letter soup*: letters at an implausible
rate, words without vowels, strings of one-letter words, or a script the language is not written in. Each segment
is judged on its own text, times and letter posteriors:

- **letter soup** (:data:`LETTER_SOUP`, **dropped**), when any of these holds:

  - mean letter log-probability below :data:`SOUP_LOGPROB` (a geometric mean probability under 0.14: the model
    is guessing among many letters);
  - more than :data:`MAX_LETTERS_PER_SECOND` letters per second of the segment (fast read speech is 12 to 18;
    a model that emits a letter on most 20 ms frames writes up to 50);
  - among at least :data:`MIN_WORDS` words, more than half without a vowel (every South African language, English
    and French write a vowel in nearly every word; Afrikaans' ``'n`` is one of few exceptions);
  - among at least :data:`MIN_WORDS` words, more than half of one letter (``a``, ``e``, ``'n`` exist, but not as
    most of a sentence);
  - letters mostly outside the Latin script, for a language written in it (all the service's languages).
- **low confidence** (:data:`LOW_CONFIDENCE`, **kept**, with a warning): mean letter log-probability below
  :data:`LOGPROB_FLOOR` (a geometric mean probability under 0.37, as Whisper's ``log_prob_threshold``).

Nothing is dropped silently: :func:`screen` returns one warning per kind of problem, with the times, as
:func:`engines.speech.whisper.guards.screen` does.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from engines.speech.screening import LOW_CONFIDENCE, Judged, spans

LETTER_SOUP = "letter soup"
SOUP_LOGPROB = -2.0
LOGPROB_FLOOR = -1.0
MAX_LETTERS_PER_SECOND = 25.0
MIN_WORDS = 4  # the word-shape checks need this many words to say anything
MIN_SECONDS = 0.5  # a segment's duration is counted as at least this (one short word)
VOWELS = frozenset("aeiouy")


@dataclass(frozen=True)
class Verdict:
    problem: str  # LETTER_SOUP or LOW_CONFIDENCE
    drop: bool
    reason: str = ""  # which check (letter soup)


def _base(letter: str) -> str:
    """A letter without its accents, lower-cased ('é' -> 'e')."""
    return unicodedata.normalize("NFD", letter)[0].lower()


def _latin(letter: str) -> bool:
    try:
        return unicodedata.name(letter).startswith("LATIN")
    except ValueError:
        return False


def soup_reason(text: str, seconds: float, avg_logprob: float, latin_script: bool = True) -> str | None:
    """Why ``text`` (``seconds`` long, mean letter log-probability ``avg_logprob``) is letter soup, or None."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return "no letters" if text.strip() else None
    if avg_logprob < SOUP_LOGPROB:
        return f"mean letter probability {math.exp(avg_logprob):.2f}"
    rate = len(letters) / max(seconds, MIN_SECONDS)
    if rate > MAX_LETTERS_PER_SECOND:
        return f"{rate:.0f} letters per second"
    if latin_script and sum(map(_latin, letters)) < len(letters) / 2:
        return "not in the Latin script"
    words = ["".join(c for c in w if c.isalpha()) for w in text.split()]
    words = [w for w in words if w]
    if len(words) >= MIN_WORDS:
        vowelless = sum(1 for w in words if not any(_base(c) in VOWELS for c in w))
        if vowelless * 2 > len(words):
            return f"{vowelless} of {len(words)} words without a vowel"
        single = sum(1 for w in words if len(w) == 1)
        if single * 2 > len(words):
            return f"{single} of {len(words)} words of one letter"
    return None


def judge(segment: Judged, latin_script: bool = True) -> Verdict | None:
    """The segment's problem, or None when it passes every guard."""
    if not segment.text.strip():
        return None
    reason = soup_reason(segment.text, segment.end - segment.start, segment.avg_logprob, latin_script)
    if reason is not None:
        return Verdict(LETTER_SOUP, drop=True, reason=reason)
    if segment.avg_logprob < LOGPROB_FLOOR:
        return Verdict(LOW_CONFIDENCE, drop=False)
    return None


S = TypeVar("S", bound=Judged)


def screen(segments: Sequence[S], latin_script: bool = True) -> tuple[list[S], list[str]]:
    """The segments that pass (low-confidence ones stay, flagged) and one warning per kind of problem found."""
    kept: list[S] = []
    soup: list[S] = []
    reasons: list[str] = []
    unsure: list[S] = []
    for segment in segments:
        verdict = judge(segment, latin_script)
        if verdict is None:
            kept.append(segment)
        elif verdict.drop:
            soup.append(segment)
            if verdict.reason not in reasons:
                reasons.append(verdict.reason)
        else:
            unsure.append(segment)
            kept.append(segment)
    warnings = []
    if soup:
        shown = "; ".join(reasons[:3]) + ("; ..." if len(reasons) > 3 else "")
        warnings.append(
            f"{spans(soup)} were left out: the speech model's output there does not read as words ({shown}), a "
            "sign of audio in another language, noise or music (CTC letter-soup guard)."
        )
    if unsure:
        warnings.append(
            f"{spans(unsure)} are unreliable: the speech model's confidence is low (mean letter log-probability "
            f"below {LOGPROB_FLOOR:g})."
        )
    return kept, warnings
