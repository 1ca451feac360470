"""The extractive answerer: the sentences of the retrieved passages that answer a question, quoted as they are.

A fresh install has no language model, and a small one states wrong facts; quoting the passage that states the
fact cannot. For a question and its passages (those the refusal rule let through, in rank order):

1. **Is it answered at all?** The question's words (its content words, less how it is asked: ``what time``,
   ``hoe laat``) are looked up in the passages. A name the question asks about (``Soweto``, ``Pretoria Boys High``)
   that no passage mentions: not answered. Most of its words found (:data:`SAME_LANGUAGE`): answered when every
   one is, or when nearly all are and the best sentence is very close in meaning (:data:`CLOSE`). Few found (a
   question in another language than the documents): answered when the best sentence is close in meaning
   (:data:`CROSS_LINGUAL`). The thresholds are measured on the ask sets (docs/search.md).
2. **Which sentences?** Each candidate sentence is scored by its cosine similarity to the question (the
   embedding model's ``query:``/``passage:`` space) plus :data:`COVERAGE_WEIGHT` times the share of the
   question's words it holds; the best, and up to :data:`MAX_SENTENCES` - 1 more within :data:`MARGIN` of it, are
   the answer, best first.

Only :data:`MAX_CANDIDATES` sentences are embedded (those holding most of the question's words, then the
best-ranked passages' first): on a CPU an embedding costs tens of milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engines.search import grounding
from engines.search import sentences as text

MAX_CANDIDATES = 8
MAX_SENTENCES = 3
MARGIN = 0.08
COVERAGE_WEIGHT = 0.1
SAME_LANGUAGE = 0.5  # share of the question's words in the passages from which it reads as the documents' language
CLOSE = (0.86, 0.75)  # best sentence's similarity and word share that excuse one missing word
CROSS_LINGUAL = 0.843  # least similarity of the best sentence to a question in another language
_CALENDAR = frozenset(
    {
        "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "maandag", "dinsdag",
        "woensdag", "donderdag", "vrydag", "saterdag", "sondag", "msombuluko", "lwesibili", "lwesithathu",
        "lwesine", "lwesihlanu", "mgqibelo", "sonto", "january", "february", "march", "april", "may", "june",
        "july", "august", "september", "october", "november", "december", "januarie", "februarie", "maart", "mei",
        "junie", "julie", "augustus", "oktober", "desember", "juni",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Candidate:
    source: int  # index of its passage
    text: str
    coverage: float  # share of the question's words it holds


@dataclass(frozen=True)
class Chosen:
    source: int
    text: str
    score: float


def candidates(question: str, passages: Sequence[str]) -> list[Candidate]:
    """The sentences worth embedding: those holding most of the question's words first, then by passage rank."""
    asked = grounding.question_words(question)
    found: list[Candidate] = []
    seen: set[str] = set()
    for index, passage in enumerate(passages):
        for span in text.split(passage):
            if len(span.text) > 3 and span.text not in seen:  # overlapping chunks repeat their boundary sentences
                seen.add(span.text)
                found.append(Candidate(index, span.text, grounding.coverage(asked, span.text)))
    ranked = sorted(range(len(found)), key=lambda i: (-found[i].coverage, i))
    return [found[i] for i in sorted(ranked[:MAX_CANDIDATES])]


def answered(question: str, passages: Sequence[str], best_similarity: float) -> bool:
    """Whether the passages answer ``question`` at all (step 1 of the module's rule)."""
    words: set[str] = set()
    for passage in passages:
        words |= set(text.content(passage)) | text.words_of(passage)
    unknown = [n for n in text.names(question) if n not in words and text.name_key(n) not in _CALENDAR]
    if unknown:
        return False
    asked = grounding.question_words(question)
    if not asked:
        return best_similarity >= CROSS_LINGUAL
    missing = sum(w not in words for w in asked)
    share = 1 - missing / len(asked)
    if share >= SAME_LANGUAGE:
        return missing == 0 or (best_similarity >= CLOSE[0] and share >= CLOSE[1])
    return best_similarity >= CROSS_LINGUAL


def choose(
    question: str, passages: Sequence[str], found: Sequence[Candidate], query: np.ndarray, vectors: np.ndarray
) -> list[Chosen]:
    """The sentences of ``found`` (:func:`candidates`) that answer ``question``, best first; empty when the
    passages do not answer it. ``query``: the question's unit vector; ``vectors``: the candidates' (in order)."""
    if not found:
        return []
    similarity = np.asarray(vectors, dtype=np.float32) @ np.asarray(query, dtype=np.float32)
    scores = [float(s) + COVERAGE_WEIGHT * c.coverage for s, c in zip(similarity, found)]
    order = sorted(range(len(found)), key=lambda i: -scores[i])
    if not answered(question, passages, float(similarity[order[0]])):
        return []
    top = scores[order[0]]
    picked = [i for i in order[:MAX_SENTENCES] if scores[i] >= top - MARGIN]
    return [Chosen(found[i].source, found[i].text, round(scores[i], 4)) for i in picked]
