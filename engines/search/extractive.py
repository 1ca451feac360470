"""The extractive answerer: the sentences of the retrieved passages that answer a question, quoted as they are.

A fresh install has no language model, and a small one states wrong facts; quoting the passage that states the
fact cannot. For a question and its passages (those the refusal rule let through, in rank order):

1. **Is it answered at all?** The question's words (its content words and names, less how it is asked: ``what
   time``, ``hoe laat``, ``use``) are looked up in the passages. A name the question asks about (``Soweto``,
   ``Pretoria Boys High``) that no passage mentions: not answered. Most of its words found
   (:data:`SAME_LANGUAGE`): answered when every one is, or when nearly all are and the best sentence is very close
   in meaning (:data:`CLOSE`). Few found (a question in another language than the documents): answered when the
   best sentence is close in meaning (:data:`CROSS_LINGUAL`). The thresholds are measured on the ask sets
   (docs/search.md).
2. **Which sentences?** The passages are read as Markdown (``engines/search/sentences.py``: a table row or a list
   item is one sentence, hard-wrapped lines are joined); headings and titles state no fact and are left out, and
   so is a sentence that lacks, in its context, a place, person or day the question names. Each remaining sentence
   is scored by its cosine similarity to the question (the embedding model's ``query:``/``passage:`` space), plus
   :data:`COVERAGE_WEIGHT` times the share of the question's words it holds (each weighted by its rarity among
   the sentences found; a name of its context counts, another word of its context half), plus
   :data:`VALUE_WEIGHT` when the question asks for a number, a time or a day and the sentence states one. The
   best, and the next best within :data:`MARGIN` of it (up to :data:`MAX_SENTENCES`), are the answer, in their
   passage's order.

Only :data:`MAX_CANDIDATES` sentences are embedded (those holding most of the question's words, then the
best-ranked passages' first): on a CPU an embedding costs tens of milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engines.search import answering

MAX_CANDIDATES = 8
MAX_SENTENCES = 2
MARGIN = 0.05
COVERAGE_WEIGHT = 0.1
VALUE_WEIGHT = 0.03  # a sentence with a number or a day, for a question that asks for one
SAME_LANGUAGE = 0.5  # share of the question's words in the passages from which it reads as the documents' language
CLOSE = (0.86, 0.75)  # best sentence's similarity and word share that excuse one missing word
CROSS_LINGUAL = 0.843  # least similarity of the best sentence to a question in another language
# how a question asks for a number, a time, a date or a day, in English, Afrikaans and isiZulu
_VALUE_QUESTION = re.compile(
    r"\b(?:how (?:many|much|long|often|old|far)|what (?:time|date|day|number|year|percentage)|when|by what|"
    r"which (?:day|date|number|year)|hoeveel|hoe (?:laat|lank|gereeld|oud)|wanneer|watter (?:datum|dag|nommer|tyd)|"
    r"\w*malini|nini|sikhathi|\w*nombolo|\w*ngaki)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Candidate:
    source: int  # index of its passage
    text: str
    coverage: float  # share of the question's words it holds (a name also in its context)
    position: int = 0  # its place among its passage's sentences
    valued: bool = False  # it states a number, a weekday or a month


@dataclass(frozen=True)
class Chosen:
    source: int
    text: str
    score: float


def expects_value(question: str) -> bool:
    """Whether ``question`` asks for a number, a time, a date or a day (how many, when, hoe laat, malini, ...)."""
    return bool(_VALUE_QUESTION.search(question))


def candidates(question: str, passages: Sequence[str]) -> list[Candidate]:
    """The sentences worth embedding (``engines/search/answering.py``: those that may answer), holding most of the
    question's words first, then by passage rank. A sentence cut short where its passage begins, found whole in
    another passage, is left to that one."""
    found = [
        Candidate(a.source, a.place.sentence, a.coverage, a.place.position, answering.valued(a.place.sentence))
        for a in answering.sentences(question, passages)
    ]
    found = [c for c in found if not any(c.text != o.text and c.text in o.text for o in found)]
    ranked = sorted(range(len(found)), key=lambda i: (-found[i].coverage, i))
    return [found[i] for i in sorted(ranked[:MAX_CANDIDATES])]


def answered(question: str, passages: Sequence[str], best_similarity: float) -> bool:
    """Whether the passages answer ``question`` at all (step 1 of the module's rule)."""
    words = answering.passage_words(passages)
    if answering.unknown_names(question, words):
        return False
    asked = answering.question_words(question)
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
    """The sentences of ``found`` (:func:`candidates`) that answer ``question``, in passage order; empty when the
    passages do not answer it. ``query``: the question's unit vector; ``vectors``: the candidates' (in order)."""
    if not found:
        return []
    similarity = np.asarray(vectors, dtype=np.float32) @ np.asarray(query, dtype=np.float32)
    value = expects_value(question)
    scores = [
        float(s) + COVERAGE_WEIGHT * c.coverage + (VALUE_WEIGHT if value and c.valued else 0.0)
        for s, c in zip(similarity, found)
    ]
    best = max(range(len(found)), key=lambda i: scores[i])
    if not answered(question, passages, float(similarity[best])):
        return []
    close = sorted((i for i in range(len(found)) if scores[i] >= scores[best] - MARGIN), key=lambda i: -scores[i])
    picked = close[:MAX_SENTENCES]
    # in a passage's order where they come from one passage ("Its ..." after what it points to)
    picked.sort(key=lambda i: (found[i].source != found[best].source, found[i].source, found[i].position))
    return [Chosen(found[i].source, found[i].text, round(scores[i], 4)) for i in picked]
