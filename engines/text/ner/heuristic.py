"""The offline fallback for the African languages. NOT a trained model: capitalised words, noun-class and locative
prefixes around them (uMandela, eThekwini, kwaZulu, ngoMsombuluko), honorifics, and the shared gazetteers
(``engines/text/gazetteers.py``: country, month and weekday names in each language from CLDR, southern African
places, the organisations South African text names). On real news text (MasakhaNER 2.0) it is not precise enough
for most types, so the router returns only the types measured at precision 0.8 or better per language
(``contracts.quality.NER_TYPES``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from contracts.languages import TEXT_CODES
from engines.text.gazetteers import PREFIXED, gazetteers
from engines.text.ner.entities import Entity, entity_at, on_composed
from engines.text.utils import word_spans

# Without a configured model every text language but English goes to the heuristic (EntityRecogniser.backend_for).
HEURISTIC_LANGUAGES = tuple(code for code in TEXT_CODES if code != "eng")
_ACRONYM = re.compile(r"^[A-Z]{2,5}[0-9]*$")  # longer all-capital words are shouted words (UMLINGISI), not acronyms
_SENTENCE_MARK = re.compile(r"[.!?:;\n]")
_NUMBER = re.compile(r"^\d{1,4}$")
_YEAR = re.compile(r"^(?:(?P<prefix>[a-z]{1,5})-)?(?P<year>1[89]\d\d|20\d\d)$")


def _strip_prefix(word: str) -> str:
    m = PREFIXED.match(word)
    return m.group("stem").lower() if m else word.lower()


@dataclass
class _Candidate:
    start: int
    end: int
    kind: str | None  # decided type, or None (undecided)
    prefix: str


class HeuristicNER:
    name = "heuristic (capitalisation + noun-class prefixes + CLDR gazetteers; not a trained model)"

    def __init__(self) -> None:
        self._g = gazetteers()
        self.places, self.date_words = self._g.places, self._g.date_words
        self._organisation_words = {o.lower() for o in self._g.known_organisations if " " not in o}
        self._organisation_runs = {o.lower() for o in self._g.known_organisations if " " in o}
        self._place_words = {p.lower() for p in self.places}
        self._place_first = {p.split()[0].lower() for p in self.places}

    def recognise(self, texts: list[str]) -> list[list[Entity]]:
        return on_composed(texts, lambda composed: [self._recognise_one(t) for t in composed])

    def _recognise_one(self, text: str) -> list[Entity]:
        words = word_spans(text)
        lowered = {w.text for w in words if w.text[:1].islower()}  # words this text also writes in lower case
        candidates: list[_Candidate | None] = []
        for i, w in enumerate(words):
            # sentence-initial: the first word, or the first after a sentence mark (whatever else lies between)
            initial = i == 0 or bool(_SENTENCE_MARK.search(text[words[i - 1].end : w.start]))
            candidates.append(
                self._candidate(
                    text,
                    w.start,
                    w.end,
                    w.text,
                    initial,
                    words[i - 1].text if i else "",
                    words[i + 1].text if i + 1 < len(words) else "",
                )
            )
        entities: list[Entity] = []
        i = 0
        while i < len(words):
            cand = candidates[i]
            if cand is None:
                i += 1
                continue
            j, last = i, cand
            kinds = [cand.kind]
            # join following capitalised words that carry no prefix (Cyril Ramaphosa, Afrika Borwa)
            while j + 1 < len(words) and (nxt := self._joined(text, cand, last, candidates[j + 1])) is not None:
                j, last = j + 1, nxt
                kinds.append(last.kind)
            start, end = cand.start, last.end
            kind = self._decide(text[start:end], cand, kinds)
            if kind == "person" and not self._person_evidence(text[start:end], cand, lowered):
                i = j + 1
                continue
            # dates: take an adjacent day number or year with them (12 Juni 2024)
            if kind == "date":
                if i > 0 and _NUMBER.match(words[i - 1].text) and not cand.prefix:
                    start = words[i - 1].start
                if j + 1 < len(words) and _NUMBER.match(words[j + 1].text):
                    end = words[j + 1].end
                    j += 1
            entity = entity_at(text, kind, start, end)
            if entity is not None:
                entities.append(entity)
            i = j + 1
        return entities

    def _joined(self, text: str, first: _Candidate, last: _Candidate, nxt: _Candidate | None) -> _Candidate | None:
        """The next capitalised word when it continues the name (Cyril Ramaphosa, Afrika Borwa), else None."""
        if nxt is None or nxt.prefix or text[last.end : nxt.start].strip() not in ("", "-"):
            return None
        if nxt.kind in (None, last.kind) or text[first.start : nxt.end].lower() in self._place_words:
            return nxt
        return None

    def _candidate(
        self, text: str, start: int, end: int, word: str, sentence_start: bool, previous: str, following: str
    ) -> _Candidate | None:
        if word.lower() in self.date_words:
            return _Candidate(start, end, "date", "")
        if word.replace("_", "").lower() in self._organisation_words:
            return _Candidate(start, end, "organisation", "")
        if word in self.places:  # whole-word gazetteer hit first: KwaZulu-Natal, not kwa + Zulu-Natal
            return _Candidate(start, end, "location", "")
        year = _YEAR.match(word)
        if year:
            return _Candidate(start + year.start("year"), end, "date", year.group("prefix") or "")
        if _ACRONYM.match(word):
            return _Candidate(start, end, "organisation", "")
        m = PREFIXED.match(word)
        if not m:
            return None
        prefix, stem = m.group("prefix"), m.group("stem")
        stem_start = start + m.start("stem")
        if prefix and prefix.lower() in self._g.prefixes and (prefix[1:].islower() or len(prefix) == 1):
            # "uMandela", "UThandi" (sentence start), "e-Durban"; the entity is the stem
            if stem.lower() in self.date_words:
                return _Candidate(stem_start, end, "date", prefix.lower())
            if _ACRONYM.match(stem) or stem.replace("_", "").lower() in self._organisation_words:
                return _Candidate(stem_start, end, "organisation", prefix.lower())
            if stem.lower() in self._g.honorifics:  # uMongameli, uMnumzana: a title, not the name
                return None
            return _Candidate(stem_start, end, None, prefix.lower())
        # a prefixed ordinary word such as "Ngiyabonga" that starts a sentence, or CamelCase: not a name
        if prefix and not (word[0].isupper() and word[1:].islower()):
            return None
        # a plain capitalised word
        if word.lower() in self._place_words or word.lower() in self._place_first:
            return _Candidate(start, end, "location", "")
        if previous.lower() in self._g.honorifics or _strip_prefix(previous) in self._g.honorifics:
            return _Candidate(start, end, "person", "")
        if word.lower() in self._g.honorifics:
            return None
        # a sentence-initial capitalised word is a name only when a capitalised word follows it
        if sentence_start and not (following[:1].isupper() and following.lower() not in self.date_words):
            return None
        return _Candidate(start, end, None, "")

    def _person_evidence(self, span: str, first: _Candidate, lowered: set[str]) -> bool:
        """Whether a span typed person has more than a capital letter for it: a person prefix (uMandela,
        kaZuma), a title before it (first.kind person), or two or more capitalised words (Cyril Ramaphosa) none of
        which the text also writes in lower case."""
        parts = span.split()
        if not all(p.replace("-", "").replace("'", "").isalpha() for p in parts):
            return False  # R500, N3: money and roads, not people
        if any(len(p) > 5 and p.isupper() for p in parts):
            return False  # a shouted headline word (UMLINGISI), not a name
        if first.prefix in self._g.person_prefixes or first.kind == "person":
            return True
        if parts[0] in ("The", "A", "An"):  # English titles of shows, songs and works
            return False
        return len(parts) >= 2 and not any(p.lower() in lowered for p in parts)

    def _decide(self, span: str, first: _Candidate, kinds: list[str | None]) -> str:
        if span.lower() in self._organisation_runs:
            return "organisation"
        if any(k == "organisation" for k in kinds) or any(
            w.lower() in self._g.organisation_words for w in span.split()
        ):
            return "organisation"
        if all(k == "date" for k in kinds):
            return "date"
        if span in self.places or span.lower() in self._place_words or first.kind == "location":
            return "location"
        if first.prefix in self._g.locative_prefixes - self._g.person_prefixes:
            return "location"
        if span.endswith("ini") and first.prefix in ("e", "o", "kwa"):
            return "location"
        return "person"
