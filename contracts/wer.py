"""Word error rate: the one scorer of transcripts against their reference (the WER scripts, the tests and
``khuluma qualify`` all count the same way).

Text is normalised first: Unicode NFKC, lower case, punctuation removed (apostrophes inside words kept, so
``l'école`` stays one word), digits kept.
"""

from __future__ import annotations

import re
import unicodedata


def normalise(text: str) -> list[str]:
    """The words of ``text`` as they are scored."""
    text = unicodedata.normalize("NFKC", text).lower().replace("’", "'")
    text = re.sub(r"[^\w\s']", " ", text)
    text = re.sub(r"(?<!\w)'|'(?!\w)", " ", text)
    return text.split()


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(edit distance in words, reference length) after normalisation."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        current = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h))
        previous = current
    return previous[-1], len(ref)


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Edits per reference word; an empty reference scores 0.0 against an empty hypothesis, else 1.0."""
    errors, words = word_errors(reference, hypothesis)
    if words == 0:
        return 0.0 if not normalise(hypothesis) else 1.0
    return errors / words
