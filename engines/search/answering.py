"""Which sentences of a question's passages may answer it: what the question asks about, and how much of it each
passage sentence holds. Shared by the extractive answerer (``engines/search/extractive.py``) and the check of a
language model's answer, which quotes such a sentence in place of one the passages do not support
(``engines/search/grounding.py``).

- **What a question asks about** (:func:`question_words`): its content words and names, less the words of how it
  is asked (``what time``, ``hoe laat``, ``use``).
- **What it names** (:func:`bound_names`): the places, people and days it names that the passages hold. A sentence
  answers only if it holds them too, in its context (the sentence, the one before it and its paragraph's first
  sentence): a question about Soshanguve's Saturday hours is not answered by its weekday hours, nor one about
  refuse in Chatsworth by Umlazi's collection day. Acronyms (``API``, ``SASSA``, ``BM25``) name a system or a kind
  that a passage often leaves implicit ("Tokens are stored as SHA-256 hashes"): not bound. A name no passage holds
  at all (:func:`unknown_names`) means the passages do not answer.
- **How much of it a sentence holds** (:func:`sentences`): the share of the question's words, each weighted by its
  rarity among the passages' sentences (an inverse document frequency: "manager" picks the one sentence that
  names a clinic's manager, "Mamelodi" does not); a name of the sentence's context counts, another word of its
  context half ("Put your bags out by 06:30" after "Refuse in Umlazi is collected on Wednesdays"). Headings and
  titles state no fact and are left out, and so is a sentence repeated by an overlapping passage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from engines.search import sentences as text

# words of how a question is asked rather than what it asks about
QUESTION_FRAME = frozenset(
    {
        "time", "much", "many", "long", "number", "day", "days", "date", "often", "get", "give", "tell", "know",
        "please", "need", "want", "find", "use", "used", "keep", "take", "make", "default", "laat", "tyd", "dag",
        "datum", "sikhathi", "ngasikhathi", "sini", "yiphi", "inombolo", "ngiyi", "ngithola",
    }
)  # fmt: skip
_FRAME_STEMS = frozenset(text.stem(w) for w in QUESTION_FRAME)
CALENDAR = frozenset(
    {
        "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "maandag", "dinsdag",
        "woensdag", "donderdag", "vrydag", "saterdag", "sondag", "msombuluko", "lwesibili", "lwesithathu",
        "lwesine", "lwesihlanu", "mgqibelo", "sonto", "january", "february", "march", "april", "may", "june",
        "july", "august", "september", "october", "november", "december", "januarie", "februarie", "maart", "mei",
        "junie", "julie", "augustus", "oktober", "desember", "juni",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Answering:
    """A passage sentence that may answer a question: its passage (an index), the sentence in its context, and
    the weighted share of the question's words it holds."""

    source: int
    place: text.Context
    coverage: float


def question_words(question: str) -> list[str]:
    """What a question asks about: its content words (and the names it holds without their class prefixes:
    ``waseMamelodi`` asks about Mamelodi) less the words of how it is asked."""
    words = text.content(question) + text.content(" ".join(sorted(text.names(question))))
    return [w for w in dict.fromkeys(words) if w not in _FRAME_STEMS]


def passage_words(passages: Sequence[str]) -> set[str]:
    """Every word of the passages as :func:`question_words` and :func:`sentences.names` spell them."""
    words: set[str] = set()
    for passage in passages:
        names = text.words_of(passage)  # eThekwini, ngoMgqibelo: without their class prefixes
        words |= set(text.content(passage)) | names | {text.stem(n) for n in names}
    return words


def unknown_names(question: str, held: set[str]) -> list[str]:
    """The names of ``question`` (days and months aside: they are spelt per language) that no passage holds
    (``held``: :func:`passage_words`)."""
    return [n for n in text.names(question) if n not in held and text.name_key(n) not in CALENDAR]


def bound_names(question: str, passages: Sequence[str]) -> set[str]:
    """The names of places, people and days in ``question`` that the passages hold (see the module's docstring)."""
    held: set[str] = set()
    for passage in passages:
        held |= text.words_of(passage)
    acronyms = {text.name_key(w) for w in text.words(question) if w.isupper() or any(ch.isdigit() for ch in w)}
    return (text.names(question) & held) - acronyms


def sentences(question: str, passages: Sequence[str]) -> list[Answering]:
    """The passage sentences that may answer ``question``, in passage order, each with its coverage."""
    asked = question_words(question)
    named = bound_names(question, passages)
    places: list[tuple[int, text.Context, set[str]]] = []
    seen: set[str] = set()
    for index, passage in enumerate(passages):
        for place in text.contexts(passage):
            if place.heading or len(place.sentence) <= 3 or place.sentence in seen:
                continue
            if not named <= place.names:
                continue  # about something else than what the question names
            seen.add(place.sentence)
            names = text.content(" ".join(sorted(text.names(place.around))))
            places.append((index, place, set(place.own) | set(names)))
    weight = _rarity(asked, [words for _, _, words in places])
    total = sum(weight.values()) or 1.0

    def covered(words: set[str], place: text.Context) -> float:
        return sum(weight[w] * (1.0 if w in words else 0.5 if w in place.words else 0.0) for w in asked) / total

    return [Answering(index, place, covered(words, place)) for index, place, words in places]


def _rarity(asked: Sequence[str], found: Sequence[set[str]]) -> dict[str, float]:
    count = len(found)
    return {w: math.log(1 + count / (1 + sum(w in s for s in found))) for w in asked}


def valued(sentence: str) -> bool:
    """Whether ``sentence`` states a number, a weekday or a month."""
    return bool(text.numbers(sentence)) or any(text.name_key(w) in CALENDAR for w in text.words_of(sentence))
