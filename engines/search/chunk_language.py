"""The language of each chunk, detected at ingest: what a query's ``language`` boosts or filters on.

The text-analysis language identifier (``engines.text.langid``: lingua plus an n-gram model that separates nso/sot/tsn
and ssw/zul/xho) labels every chunk; a guess below :data:`MIN_LANGUAGE_CONFIDENCE` leaves the chunk unlabelled.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from engines.text.langid import LanguageIdentifier

MIN_LANGUAGE_CONFIDENCE = 0.5

_identifier_lock = threading.Lock()
_identifier: LanguageIdentifier | None = None


def _get_identifier() -> LanguageIdentifier:
    global _identifier
    with _identifier_lock:
        if _identifier is None:
            _identifier = LanguageIdentifier()
        return _identifier


def detect_languages(texts: Sequence[str]) -> list[str | None]:
    """ISO 639-3 code per text, or None when the identifier is unsure (confidence below 0.5)."""
    if not texts:
        return []
    guesses = _get_identifier().detect_many(list(texts))
    return [g.language if g.confidence >= MIN_LANGUAGE_CONFIDENCE else None for g in guesses]


def detectable_languages() -> tuple[str, ...]:
    """Languages the ingest-time detector can assign to a chunk."""
    return tuple(_get_identifier().languages)


def dominant_language(languages: Sequence[str | None], weights: Sequence[int] | None = None) -> str | None:
    """The language covering most of a document (``weights``: each chunk's size), or None when none is known."""
    tally: dict[str, int] = {}
    for i, lang in enumerate(languages):
        if lang:
            tally[lang] = tally.get(lang, 0) + (weights[i] if weights else 1)
    return max(tally, key=tally.__getitem__) if tally else None
