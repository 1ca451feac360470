"""What spaCy's small English model does not know about South African text, applied around it:

- an **entity ruler ahead of the statistical NER** (:func:`ruler_patterns`): the organisations and southern African
  places of the gazetteers are organisations and places whatever the small model would call them (Eskom is not a
  person, Orlando Pirates not a place); the statistical NER reads the rest of the sentence around them;
- **name shape** (:class:`NameShape`): a run of two to four capitalised words that the model typed as an
  organisation or a place, or did not see at all, is a person when at least one word is shaped like a word of the
  African languages (language ID read on the word alone says so) and none is an English word or a known place or
  organisation ("Busisiwe Mkhwebane", "Bheki Cele"); so is one such word the gazetteers do not know;
- **places by context and form**: a capitalised word after "in", "near", "from" ... that GeoNames knows as a
  southern African place, or that is shaped like one, is a place even where the model saw a person or an
  organisation ("in Umlazi"), and so is a Nguni locative (Esikhawini, Empangeni);
- **spans**: "the" is not part of a name, a name runs on through an organisation word ("ANC Women's League",
  "Metro FM") or a compass word ("Orlando East"), and an African-shaped first name joins the surname the model
  found ("Simphiwe Dana").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from engines.text.gazetteers import Gazetteers
from engines.text.langid import LanguageIdentifier
from engines.text.ner.entities import Entity, entity_at

RULER = "entity ruler (gazetteers)"
NAME_SHAPE = "name shape (language ID of each word)"
PLACE_CONTEXT = "place by its context or form"
# Labels the small model gives names it misreads: a person-shaped span under one of them is a person
MISREAD_AS = {"ORG", "GPE", "LOC", "FAC", "NORP", "PRODUCT", "WORK_OF_ART", "EVENT", "LAW"}
# ... and the labels under which one African-shaped word no gazetteer knows is a surname ("Usiku said")
SURNAME_AS = {"GPE", "LOC", "FAC"}
AFRICAN_SHAPE = 0.6  # language ID's probability of the African languages that makes a word African-shaped
ENGLISH_SHAPE = 0.6  # ... of English that makes a capitalised word an English word (Swallows, Socks)
NGRAM_ENGLISH_SHAPE = 0.9  # ... by the n-gram model alone, which knows English word endings best (Sundowns, Arrows)
NOT_AFRICAN = ("eng", "afr", "fra")
# A Nguni locative written as a name: e- or kwa- before the stem, -ini or -eni after it (Esikhawini, Empangeni)
LOCATIVE = re.compile(r"^(?:E|Kwa|Ku|O)[a-z]{2,}(?:ini|eni)$")
COMPASS = {"East", "West", "North", "South", "Central", "Extension"}
POSSESSIVE = {"'s", "’s"}


class NameShape:
    """Whether a capitalised word is shaped like a word of the African languages, by language ID (lingua and the
    n-gram model) read on the word alone: names of people from the African languages are (Siphiwe, Mkhwebane),
    English words are not (Swallows, Sundowns: the n-gram model alone knows those best)."""

    CACHE = 65536  # words remembered

    def __init__(self, identifier: LanguageIdentifier | None = None) -> None:
        self._identifier = identifier
        self._scores: dict[str, tuple[float, float, float]] = {}

    @property
    def identifier(self) -> LanguageIdentifier:
        if self._identifier is None:
            self._identifier = LanguageIdentifier()
        return self._identifier

    def prepare(self, words: set[str]) -> None:
        """Score the words not scored yet, in one language-ID pass."""
        todo = sorted(w for w in words if w not in self._scores)
        if not todo:
            return
        if len(self._scores) + len(todo) > self.CACHE:
            self._scores.clear()
        ngram = self.identifier.ngram
        english = ngram.languages.index("eng")
        rows = ngram.probabilities(todo)
        for word, guess, row in zip(todo, self.identifier.detect_many(todo), rows):
            scores = dict(guess.candidates)
            african = 1.0 - sum(scores.get(code, 0.0) for code in NOT_AFRICAN)
            self._scores[word] = (african, scores.get("eng", 0.0), float(row[english]))

    def scores(self, word: str) -> tuple[float, float, float]:
        """The word's probability of the African languages, of English, and of English by the n-gram model alone."""
        if word not in self._scores:
            self.prepare({word})
        return self._scores[word]

    def african(self, word: str) -> bool:
        return self.scores(word)[0] >= AFRICAN_SHAPE

    def english(self, word: str) -> bool:
        _, english, ngram_english = self.scores(word)
        return english >= ENGLISH_SHAPE or ngram_english >= NGRAM_ENGLISH_SHAPE


def ruler_patterns(g: Gazetteers) -> list[dict[str, Any]]:
    """The entity ruler's patterns: known organisations (not those named by an everyday word; an acronym of four
    or more letters also as a word, Prasa for PRASA), the hand-written southern African places, and the known places
    of several capitalised words, matched as written."""
    organisations = g.known_organisations - g.common_word_organisations
    organisations |= {o.title() for o in organisations if o.isupper() and len(o) >= 4}
    patterns: list[dict[str, Any]] = [
        {"label": "ORG", "pattern": name, "id": "gazetteer"} for name in sorted(organisations)
    ]
    # and the places of several capitalised words (South Africa, Walvis Bay): longer than the place inside them
    places = g.southern_african_places | {
        p for p in g.places | g.geonames_places if " " in p and all(w[:1].isupper() for w in p.split())
    }
    places -= g.known_organisations
    patterns += [{"label": "GPE", "pattern": name, "id": "gazetteer"} for name in sorted(places)]
    return patterns


class EnglishRules:
    """The rules after the statistical model, on one spaCy ``Doc`` (token offsets)."""

    def __init__(self, g: Gazetteers, shape: NameShape, model_name: str, stop_words: set[str]) -> None:
        self._g = g
        self._stop_words = {w.lower() for w in stop_words}
        self.shape = shape
        self.model_name = model_name
        lowered = g.organisation_words | g.honorifics | g.english_function_words | g.place_words
        self._not_names = g.places | g.known_organisations | {w.title() for w in lowered | g.date_words}

    def entities(self, text: str, doc: Any) -> list[Entity]:
        found: list[Found] = []
        for ent in doc.ents:
            if ent.ent_id_ == "gazetteer":
                found.append(Found(ent.start, ent.end, ent.label_, RULER))
                continue
            # "the United States" is "United States" (CoNLL and OntoNotes leave the article out of the name)
            start = ent.start + (ent.label_ != "PERSON" and ent[0].lower_ == "the" and len(ent) > 1)
            found.append(self._retyped(doc, Found(start, ent.end, ent.label_, self.model_name)))
        found += self._unseen(doc, {i for f in found for i in range(f.start, f.end)})
        found = self._extended(doc, sorted(found, key=lambda f: f.start))
        found = self._coordinated(doc, longest(found))
        out = []
        for f in found:
            span = doc[f.start : f.end]
            entity = entity_at(text, f.label, span.start_char, span.end_char, f.recogniser)
            if entity is not None:
                out.append(entity)
        return out

    def _retyped(self, doc: Any, f: Found) -> Found:
        """The model's entity, retyped where its form or its context says otherwise."""
        words = [t.text for t in doc[f.start : f.end]]
        if self._locative(words) or (f.label in ("PERSON", "ORG") and self._is_place(doc, f.start, f.end)):
            return Found(f.start, f.end, "GPE", PLACE_CONTEXT)
        # an organisation's name needs every word African-shaped to be a person's (not Rössing Uranium)
        strict = f.label == "ORG"
        if f.label in MISREAD_AS and self._person_shaped(words, every_word=strict):
            return Found(f.start, f.end, "PERSON", NAME_SHAPE)
        if f.label in SURNAME_AS and self._surname_shaped(doc, f.start, f.end):
            return Found(f.start, f.end, "PERSON", NAME_SHAPE)
        return f

    def _unseen(self, doc: Any, taken: set[int]) -> list[Found]:
        """Names the model did not see: runs of capitalised words outside every entity that are person-shaped,
        Nguni locatives, or a known place after a preposition."""
        out = []
        i = 0
        while i < len(doc):
            if i in taken or not capitalised(doc[i].text):
                i += 1
                continue
            j = i
            while j + 1 < len(doc) and j + 1 not in taken and capitalised(doc[j + 1].text):
                j += 1
            start = i
            # a sentence's first word ("Yesterday", "The") is not part of the name after it
            while start <= j and (doc[start].is_sent_start or start == 0) and self._english_word(doc[start]):
                start += 1
            words = [t.text for t in doc[start : j + 1]]
            if words and self._person_shaped(words):
                out.append(Found(start, j + 1, "PERSON", NAME_SHAPE))
            elif words and (self._locative(words) or self._is_place(doc, start, j + 1)):
                out.append(Found(start, j + 1, "GPE", PLACE_CONTEXT))
            i = j + 1
        return out

    def _extended(self, doc: Any, found: list[Found]) -> list[Found]:
        """Spans run on: through capitalised words up to an organisation word (ANC Women's League, Metro FM), a
        place through a compass word (Orlando East), and a person back over an African-shaped first name."""
        taken = {i for f in found for i in range(f.start, f.end)}
        out = []
        for f in found:
            end = f.end
            j = end
            while j < len(doc) and j not in taken and (capitalised(doc[j].text) or doc[j].lower_ in POSSESSIVE):
                if j - end >= 4:
                    break
                j += 1
                if doc[j - 1].lower_ in self._g.organisation_words:
                    f = Found(f.start, j, "ORG", f.recogniser)
                    end = j
                    break
            if f.label in ("GPE", "LOC") and end < len(doc) and end not in taken and doc[end].text in COMPASS:
                f = Found(f.start, end + 1, f.label, f.recogniser)
            if f.label == "GPE":
                f = self._organisation_named_after(doc, f, taken)
            start = f.start
            if f.label == "PERSON" and start > 0 and start - 1 not in taken:
                before = doc[start - 1].text
                if capitalised(before) and before not in self._not_names and self.shape.african(before):
                    f = Found(start - 1, f.end, "PERSON", f.recogniser)
            taken |= set(range(f.start, f.end))
            out.append(f)
        return out

    def _organisation_named_after(self, doc: Any, f: Found, taken: set[int]) -> Found:
        """A place inside an organisation's name: "University of Pretoria", "Cricket South Africa" (capitalised
        English words right before the place, none opening the sentence)."""
        start = f.start
        if start >= 2 and doc[start - 1].lower_ == "of" and doc[start - 2].lower_ in self._g.organisation_words:
            start -= 2
        while (
            start > 0
            and start - 1 not in taken
            and not doc[start - 1].is_sent_start
            and start - 1 > 0
            and capitalised(doc[start - 1].text)
            and doc[start - 1].lower_ not in self._g.place_prepositions
            and self._english_word(doc[start - 1])
        ):
            start -= 1
        return f if start == f.start else Found(start, f.end, "ORG", f.recogniser)

    def _coordinated(self, doc: Any, found: list[Found]) -> list[Found]:
        """ "in Vryheid and Dundee": one word the model typed as an organisation or a person, joined to a place by
        "and" or a comma, is a place too (unless the gazetteers know it as an organisation)."""
        out = list(found)
        for k in range(1, len(out)):
            for place, other in ((k - 1, k), (k, k - 1)):
                first, second = sorted((out[place], out[other]), key=lambda f: f.start)
                joined = doc[first.end : second.start].text.strip() in (",", "and", "&")
                if out[place].label == "GPE" and joined and self._lone_guess(doc, out[other]):
                    out[other] = Found(out[other].start, out[other].end, "GPE", PLACE_CONTEXT)
        return out

    def _lone_guess(self, doc: Any, f: Found) -> bool:
        """One word the model (not a gazetteer) typed as an organisation or a person, not an acronym."""
        word = doc[f.start].text
        return (
            f.end - f.start == 1
            and f.label in ("ORG", "PERSON")
            and f.recogniser == self.model_name
            and word not in self._g.known_organisations
            and not word.isupper()
        )

    def _english_word(self, token: Any) -> bool:
        """An English word, not a name: a stop word (since, yesterday), a function word, or English-shaped."""
        word = token if isinstance(token, str) else token.text
        return (
            word.lower() in self._g.english_function_words
            or word.lower() in self._stop_words
            or self.shape.english(word)
        )

    def _person_shaped(self, words: list[str], every_word: bool = False) -> bool:
        """Two to four capitalised words, none an English word or a known name, one (or every) African-shaped."""
        if not 2 <= len(words) <= 4 or not all(capitalised(w) and len(w) > 1 for w in words):
            return False
        if any(w in self._not_names or self._english_word(w) for w in words):
            return False
        african = all if every_word else any
        return " ".join(words) not in self._g.places and african(self.shape.african(w) for w in words)

    def _surname_shaped(self, doc: Any, start: int, end: int) -> bool:
        """One African-shaped capitalised word the model typed as something else, that no gazetteer knows and no
        preposition makes a place: a surname on its second mention ("Hamaambo said")."""
        if end - start != 1:
            return False
        word = doc[start].text
        if not capitalised(word) or word.isupper() or word in self._not_names or word in self._g.geonames_places:
            return False
        return not self._after_preposition(doc, start) and self.shape.african(word) and not self._english_word(word)

    @staticmethod
    def _locative(words: list[str]) -> bool:
        return len(words) == 1 and bool(LOCATIVE.match(words[0]))

    def _after_preposition(self, doc: Any, start: int) -> bool:
        return start > 0 and doc[start - 1].lower_ in self._g.place_prepositions

    def _is_place(self, doc: Any, start: int, end: int) -> bool:
        """A known place name (exactly a gazetteer place), or after a preposition a GeoNames place or one
        African-shaped word that no gazetteer knows as an organisation."""
        name = doc[start:end].text
        if name in self._g.places:
            return True
        if not self._after_preposition(doc, start):
            return False
        if name in self._g.geonames_places:
            return True
        return (
            end - start == 1
            and not name.isupper()
            and name not in self._not_names
            and self.shape.african(name)
            and not self._english_word(name)
        )


def longest(found: list[Found]) -> list[Found]:
    """Where spans overlap (a rule ran one over another's words), the longest stays; in text order."""
    kept: list[Found] = []
    for f in sorted(found, key=lambda f: (f.start - f.end, f.start)):
        if all(f.end <= k.start or k.end <= f.start for k in kept):
            kept.append(f)
    return sorted(kept, key=lambda f: f.start)


@dataclass(frozen=True)
class Found:
    """An entity in token offsets, with its spaCy-style label and what found it."""

    start: int
    end: int
    label: str
    recogniser: str


def capitalised(word: str) -> bool:
    return word[:1].isupper() and word.replace("-", "").replace("'", "").replace("’", "").isalpha()
