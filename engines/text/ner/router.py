"""Which recognisers read which sentence, and how their answers are merged.

Each sentence is read in the languages it plausibly is (:meth:`EntityRecogniser.plausible`): language ID judges it by
its words without its names (``engines.text.langid.without_names``); a sure guess is read in that language alone,
an unsure one in every language with a fair share of the probability (and the whole text's language). English goes
to spaCy with the entity ruler; the other languages to the configured token-classification model, else to the
heuristic, which answers only the types measured precise on real text in that language (``contracts.quality``). So
an English sentence full of African names is read by the English recogniser whatever language ID made of it, and
no language gets a type from the heuristic that was not measured at precision ``NER_MIN_PRECISION``.

Where two recognisers' spans overlap, the one more likely right wins: its recogniser's measured precision for the
type in that language (``contracts.quality.ner_precision``) times the probability that the sentence is in that
language; the rest are kept.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any

from contracts.quality import NER_TYPES, ner_precision
from engines.text.gazetteers import gazetteers
from engines.text.langid import LanguageIdentifier, without_names
from engines.text.ner.entities import Entity, NerBackend
from engines.text.ner.heuristic import HeuristicNER
from engines.text.ner.spacy_ner import SpacyNER
from engines.text.ner.transformers_ner import TransformersNER
from engines.text.utils import Span, split_sentences

SENTENCE_END = " \t\r\n.!?…"  # what may follow a text's one sentence
SURE_LANGUAGE = 0.8  # a sentence whose language ID is this sure is read in that language alone
PLAUSIBLE_LANGUAGE = 0.1  # otherwise every language with at least this probability is read too ...
PLAUSIBLE_SHARE = 0.5  # ... and at least this share of the likeliest language's
UNSURE_LANGUAGE = 0.5  # below this, the whole text's language is read too
# English function words that are not also everyday Afrikaans or Sotho-Tswana words ("in", "is", "my", "a"...):
# a sentence whose other words are at least ENGLISH_SHARE of these is English (isiZulu, Setswana... have none)
ENGLISH_SHARE = 0.25
_LETTERS = re.compile(r"[^\W\d_]+")


def english_share(text: str) -> float:
    """The share of ``text``'s words (names left out) that are English function words."""
    words = _LETTERS.findall((without_names(text) or text).lower())
    english = gazetteers().english_function_words
    return sum(w in english for w in words) / len(words) if words else 0.0


@dataclass(frozen=True)
class SentenceReading:
    """How one sentence was read: its span in the text, language ID's guess (names discounted) and the languages
    whose recognisers read it."""

    start: int
    end: int
    language: str
    confidence: float
    candidates: list[tuple[str, float]] = field(default_factory=list)
    read_as: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reading:
    """One text's entities (offsets into the text, each with its recogniser) and how each sentence was read."""

    entities: list[Entity]
    sentences: list[SentenceReading]


class EntityRecogniser:
    """English -> spaCy with the entity ruler; other languages -> the configured transformers model, else the
    heuristic (measured types only); unsure sentences -> every plausible language's, merged by precision."""

    def __init__(
        self,
        transformers_model: str | None = None,
        *,
        only_measured_types: bool = True,
        identifier: LanguageIdentifier | None = None,
        model_languages: Collection[str] | None = None,
    ) -> None:
        self.only_measured_types = only_measured_types  # False: every type the heuristic guesses (evaluation)
        self.english = SpacyNER(identifier=identifier)  # reads the shape of names with this language ID
        self.heuristic = HeuristicNER()
        self.transformer: TransformersNER | None = TransformersNER(transformers_model) if transformers_model else None
        # the languages the configured model reads (None: every language but English)
        self.model_languages = frozenset(model_languages) if model_languages is not None else None

    def backend_for(self, language: str) -> NerBackend:
        if language == "eng":
            return self.english
        if self.transformer is not None and (self.model_languages is None or language in self.model_languages):
            return self.transformer
        return self.heuristic

    def kind_of(self, backend: NerBackend) -> str:
        """The name ``contracts.quality.ner_precision`` knows the backend by."""
        if backend is self.english:
            return "english"
        return "heuristic" if backend is self.heuristic else "model"

    @staticmethod
    def plausible(sentence: str, guess: Any, text_language: str) -> tuple[tuple[str, float], ...]:
        """The languages a sentence is read in, each with its probability: English when its words are English
        enough, the guess alone when language ID is sure, else every language with a fair share (and the text's
        own when it is unsure, at its share or :data:`PLAUSIBLE_LANGUAGE`)."""
        if english_share(sentence) >= ENGLISH_SHARE:
            return (("eng", 1.0),)
        if guess.confidence >= SURE_LANGUAGE:
            return ((guess.language, 1.0),)
        floor = max(PLAUSIBLE_LANGUAGE, PLAUSIBLE_SHARE * guess.confidence)
        languages = [(guess.language, guess.confidence)] + [(c, p) for c, p in guess.candidates[1:] if p >= floor]
        if guess.confidence < UNSURE_LANGUAGE and text_language not in [c for c, _ in languages]:
            share = dict(guess.candidates).get(text_language, 0.0)
            languages.append((text_language, max(share, PLAUSIBLE_LANGUAGE)))
        return tuple(languages)

    def recognise_routed(self, texts: list[str], identifier: Any) -> list[list[Entity]]:
        """Entities of each text, sentence by sentence in the languages each sentence plausibly is (``identifier``:
        an ``engines.text.langid.LanguageIdentifier``)."""
        return [reading.entities for reading in self.read(texts, identifier)]

    def read(self, texts: list[str], identifier: Any) -> list[Reading]:
        """:meth:`recognise_routed` with how each sentence was read (the playground shows it)."""
        per_text = [split_sentences(t) or [Span(0, len(t), t)] for t in texts]
        sentences = [span for spans in per_text for span in spans]
        guesses = identifier.detect_many([s.text for s in sentences])
        whole = self._text_guesses(texts, per_text, guesses, identifier)
        plans: list[tuple[tuple[str, float], ...]] = []
        k = 0
        for text_guess, spans in zip(whole, per_text):
            for span in spans:
                plans.append(self.plausible(span.text, guesses[k], text_guess.language if text_guess else ""))
                k += 1
        found = self._recognise_plans([s.text for s in sentences], plans, guesses)
        out: list[Reading] = []
        k = 0
        for spans in per_text:
            entities: list[Entity] = []
            readings: list[SentenceReading] = []
            for span in spans:
                shift = span.start
                entities += [replace(e, start=e.start + shift, end=e.end + shift) for e in found[k]]
                guess = guesses[k]
                readings.append(
                    SentenceReading(
                        span.start,
                        span.end,
                        guess.language,
                        guess.confidence,
                        list(guess.candidates[:3]),
                        tuple(language for language, _ in plans[k]),
                    )
                )
                k += 1
            out.append(Reading(same_people(entities), readings))
        return out

    @staticmethod
    def _text_guesses(texts: list[str], per_text: list[list[Span]], guesses: list[Any], identifier: Any) -> list[Any]:
        """Each whole text's language where :meth:`plausible` may use it: a text that is one sentence (its end
        punctuation and spaces aside) has its sentence's guess (the language came out the same for all 240 single
        sentences of the UDHR set); a text whose sentences are all sure enough needs none (None); only the others
        are identified whole. Most requests read the identifier once, not twice."""
        firsts = list(itertools.accumulate([0] + [len(spans) for spans in per_text[:-1]]))
        single = [
            len(spans) == 1 and not text[: spans[0].start].strip() and not text[spans[0].end :].strip(SENTENCE_END)
            for text, spans in zip(texts, per_text)
        ]
        unsure = [
            any(g.confidence < UNSURE_LANGUAGE for g in guesses[first : first + len(spans)])
            for first, spans in zip(firsts, per_text)
        ]
        wanted = [not one and doubt for one, doubt in zip(single, unsure)]
        rest = iter(identifier.detect_many([t for t, want in zip(texts, wanted) if want]) if any(wanted) else [])
        return [
            guesses[first] if one else next(rest) if want else None for first, one, want in zip(firsts, single, wanted)
        ]

    def recognise(self, texts: list[str], languages: list[str]) -> list[list[Entity]]:
        """Entities per text, each text read in the one language given. The heuristic answers only the entity types
        measured precise enough on real text in that language (``contracts.quality.NER_TYPES``); a language with
        none is not even run."""
        return self._recognise_plans(texts, [((language, 1.0),) for language in languages], None)

    def _recognise_plans(
        self, texts: list[str], plans: list[tuple[tuple[str, float], ...]], guesses: list[Any] | None
    ) -> list[list[Entity]]:
        runs: dict[int, tuple[NerBackend, list[tuple[int, str, float]]]] = {}
        for i, languages in enumerate(plans):
            for language, probability in languages:
                backend = self.backend_for(language)
                if backend is self.heuristic and self.only_measured_types and not NER_TYPES.get(language):
                    continue
                runs.setdefault(id(backend), (backend, []))[1].append((i, language, probability))
        candidates: list[list[tuple[float, float, Entity]]] = [[] for _ in texts]
        for backend, items in runs.values():
            # a text read in two languages by one backend is run once; the types allowed are each language's
            unique = sorted({i for i, _, _ in items})
            results = dict(zip(unique, backend.recognise([texts[i] for i in unique])))
            kind = self.kind_of(backend)
            for i, language, probability in items:
                for e in results[i]:
                    if backend is self.heuristic and self.only_measured_types and e.entity not in NER_TYPES[language]:
                        continue
                    label = "heuristic rules" if backend is self.heuristic else backend.name
                    named = e if e.recogniser else replace(e, recogniser=f"{label} ({language})")
                    # how likely the span is right: the recogniser's precision in a sentence of this language
                    share = probability / max(p for _, p in plans[i])
                    candidates[i].append((probability * ner_precision(kind, language, e.entity), share, named))
        return [merge(c) for c in candidates]


def same_people(entities: list[Entity]) -> list[Entity]:
    """A single word that a text names elsewhere as part of a person's full name is that person, whatever type the
    statistical model gave it on its own ("Thandi Nkosi said ... Nkosi added")."""
    names = {word for e in entities if e.entity == "person" for word in e.word.split() if " " in e.word}
    return [
        replace(e, entity="person", recogniser=f"{e.recogniser}; same name as a person in the text")
        if e.entity in ("organisation", "location") and e.word in names and "ruler" not in e.recogniser
        else e
        for e in entities
    ]


def merge(candidates: list[tuple[float, float, Entity]]) -> list[Entity]:
    """Non-overlapping entities, the likelier right first where two overlap (then the longer), in text order. The
    spans of a language far less likely than the sentence's likeliest (the whole text's language, read because the
    sentence's own guess was unsure) count only when the likelier languages' recognisers found nothing."""
    strong = [(score, entity) for score, share, entity in candidates if share >= PLAUSIBLE_SHARE]
    weak = [(score, entity) for score, share, entity in candidates if share < PLAUSIBLE_SHARE]
    return _non_overlapping(strong) or _non_overlapping(weak)


def _non_overlapping(candidates: list[tuple[float, Entity]]) -> list[Entity]:
    chosen: list[Entity] = []
    for _, entity in sorted(candidates, key=lambda c: (-c[0], c[1].start - c[1].end, c[1].start)):
        if all(entity.end <= other.start or other.end <= entity.start for other in chosen):
            chosen.append(entity)
    return sorted(chosen, key=lambda e: (e.start, e.end))
