"""Which recogniser reads which sentence: English -> spaCy; other languages -> the configured transformers model,
else the heuristic, which answers only the types measured precise on real text in that language."""

from __future__ import annotations

import re
from typing import Any

from contracts.quality import NER_TYPES
from engines.text.gazetteers import gazetteers
from engines.text.ner.entities import Entity, NerBackend
from engines.text.ner.heuristic import HeuristicNER
from engines.text.ner.spacy_ner import SpacyNER
from engines.text.ner.transformers_ner import TransformersNER
from engines.text.utils import Span, split_sentences

# Names are no language's: language ID is unsure of "Hello, my name is Thandi Nkosi and I live in Johannesburg"
# (afr 0.25, zul 0.20, eng 0.10) and sure of it without the capitalised words inside sentences (eng 0.43).
_INNER_CAPITALISED = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w'’-]+")  # "I" stays
UNSURE_LANGUAGE = 0.5  # below this confidence, a sentence's language comes from its text as a whole
# English function words that are not also everyday Afrikaans or Sotho-Tswana words ("in", "is", "my", "a"...):
# a sentence whose other words are at least ENGLISH_SHARE of these is English (isiZulu, Setswana... have none)
ENGLISH_SHARE = 0.25
_LETTERS = re.compile(r"[^\W\d_]+")


def without_names(text: str) -> str:
    """``text`` without its capitalised words, except those that open a sentence."""
    return _INNER_CAPITALISED.sub(" ", text)


def english_share(text: str) -> float:
    """The share of ``text``'s words (names left out) that are English function words."""
    words = _LETTERS.findall(without_names(text).lower())
    english = gazetteers().english_function_words
    return sum(w in english for w in words) / len(words) if words else 0.0


class EntityRecogniser:
    """English -> spaCy; other languages -> the configured transformers model, else the heuristic."""

    def __init__(self, transformers_model: str | None = None, *, only_measured_types: bool = True) -> None:
        self.only_measured_types = only_measured_types  # False: every type the heuristic guesses (evaluation)
        self.english = SpacyNER()
        self.heuristic = HeuristicNER()
        self.transformer: TransformersNER | None = TransformersNER(transformers_model) if transformers_model else None

    def backend_for(self, language: str) -> NerBackend:
        if language == "eng":
            return self.english
        return self.transformer or self.heuristic

    def recognise_routed(self, texts: list[str], identifier: Any) -> list[list[Entity]]:
        """Entities of each text, sentence by sentence in the sentence's language (``identifier``: an
        ``engines.text.langid.LanguageIdentifier``), so an English sentence in isiZulu text goes to the English
        recogniser and the isiZulu one to the isiZulu rules. A sentence whose language ID is unsure takes its
        text's language; one that reads as English (:func:`english_share`) is English."""
        per_text = [split_sentences(t) or [Span(0, len(t), t)] for t in texts]
        sentences = [span for spans in per_text for span in spans]
        whole = identifier.detect_many(texts)
        guesses = identifier.detect_many([s.text for s in sentences])
        languages: list[str] = []
        k = 0
        for text_guess, spans in zip(whole, per_text):
            for span in spans:
                guess = guesses[k]
                k += 1
                if english_share(span.text) >= ENGLISH_SHARE:
                    languages.append("eng")
                elif guess.confidence >= UNSURE_LANGUAGE:
                    languages.append(guess.language)
                else:
                    languages.append(text_guess.language)
        found = self.recognise([s.text for s in sentences], languages)
        out: list[list[Entity]] = []
        k = 0
        for spans in per_text:
            entities: list[Entity] = []
            for span in spans:
                entities += [Entity(e.entity, e.word, e.start + span.start, e.end + span.start) for e in found[k]]
                k += 1
            out.append(entities)
        return out

    def recognise(self, texts: list[str], languages: list[str]) -> list[list[Entity]]:
        """Entities per text. The heuristic answers only the entity types measured precise enough on real text in
        that language (``contracts.quality.NER_TYPES``); a language with none is not even run."""
        out: list[list[Entity]] = [[] for _ in texts]
        groups: dict[int, tuple[NerBackend, list[int]]] = {}
        for i, language in enumerate(languages):
            backend = self.backend_for(language)
            if backend is self.heuristic and self.only_measured_types and not NER_TYPES.get(language):
                continue
            groups.setdefault(id(backend), (backend, []))[1].append(i)
        for backend, idx in groups.values():
            for i, ents in zip(idx, backend.recognise([texts[i] for i in idx])):
                if backend is self.heuristic and self.only_measured_types:
                    ents = [e for e in ents if e.entity in NER_TYPES[languages[i]]]
                out[i] = ents
        return out
