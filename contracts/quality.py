"""Measured quality, per capability and language: the figures behind ``GET /api/v1/models``' labels, the
playground's side panel and the records' warnings. Every figure comes from real data (never espeak) by the command
named in its ``source``; a language without a figure is labelled unmeasured, never a bare tick.

The engines read this too: the heuristic NER returns only the entity types that reached
:data:`NER_MIN_PRECISION` on real text for that language (:data:`NER_TYPES`), and a transcript in a language whose
real-speech WER is poor carries a warning.
"""

from __future__ import annotations

from pydantic import BaseModel

NER_MIN_PRECISION = 0.8  # an entity type is returned for a language only when measured at least this precise
POOR_WER = 0.5  # a real-speech WER above this is labelled poor, and each record in that language warns

EVAL_SPEECH = "python scripts/eval_real.py speech DIR (docs/speech.md)"
EVAL_TEXT = "python scripts/eval_real.py text DIR (docs/text.md)"
EVAL_NER = "python scripts/eval_ner.py english --newswire DIR (docs/text.md)"
EVAL_LANGID = "python scripts/eval_ner.py langid --masakhaner DIR --newswire DIR (docs/text.md)"


class Quality(BaseModel):
    """One capability's quality in one language: measured here (``measured``), or its publisher's figure
    (``published``: not measured here; ``data`` says where it is from), or neither (both false: nobody has)."""

    measured: bool
    published: bool = False
    metric: str | None = None  # "WER" (lower is better), "precision", "accuracy"
    value: float | None = None
    data: str | None = None  # what it was measured on
    command: str | None = None
    poor: bool = False
    note: str | None = None
    short_value: float | None = None  # the same metric on short sentences (under 80 characters, names included)
    short_data: str | None = None


UNMEASURED = Quality(measured=False, note="not measured on real data")


def published(metric: str, value: float | None, source: str, note: str | None = None) -> Quality:
    """A figure its publisher measured (a model card, a paper; with ``value`` None, what it publishes), labelled as
    such: never measured here."""
    return Quality(measured=False, published=True, metric=metric or None, value=value, data=source, note=note)


def measured(
    metric: str,
    value: float,
    data: str,
    command: str,
    *,
    poor: bool = False,
    note: str | None = None,
    short_value: float | None = None,
    short_data: str | None = None,
) -> Quality:
    return Quality(
        measured=True,
        metric=metric,
        value=value,
        data=data,
        command=command,
        poor=poor,
        note=note,
        short_value=short_value,
        short_data=short_data,
    )


_MASAKHANER = "MasakhaNER 2.0 test split, real news text (CC BY-NC 4.0, not shipped)"
_UDHR = "20 held-out UDHR sentences (tests/data/text/langid_udhr.tsv)"
_TEXT_SETS = "python scripts/eval_text.py (developer-written sets, tests/data/text/README.md)"

# Entity types the heuristic recogniser returns per language: those at NER_MIN_PRECISION or better on both the dev
# and the test split of MasakhaNER 2.0 (scripts/eval_real.py text). Every other type, and every language without
# real annotated text here (afr, fra, nso, sot, ssw, tso, ven, nbl), returns no entities from the heuristic.
NER_TYPES: dict[str, tuple[str, ...]] = {
    "zul": ("date",),
    "tsn": ("date",),
    "sna": ("organisation",),
    "swh": ("date",),
}

# Precision per entity type on real text, by recogniser: what the router merges overlapping spans by
# (engines/text/ner/router.py). "english": spaCy with the entity ruler (scripts/eval_ner.py english, Namibian newswire,
# the development split); "heuristic": per language, MasakhaNER 2.0 test (scripts/eval_real.py text).
NER_PRECISION: dict[str, dict[str, dict[str, float]]] = {
    "english": {"*": {"person": 0.796, "location": 0.676, "organisation": 0.277}},
    "heuristic": {
        "zul": {"date": 0.98, "location": 0.69, "organisation": 0.73, "person": 0.61},
        "xho": {"date": 0.84, "location": 0.71, "organisation": 0.78, "person": 0.72},
        "tsn": {"date": 0.96, "location": 0.85, "organisation": 0.64, "person": 0.45},
        "sna": {"date": 0.75, "location": 0.52, "organisation": 0.85, "person": 0.33},
        "swh": {"date": 0.93, "location": 0.80, "organisation": 0.65, "person": 0.55},
    },
}
# A configured token-classification model is not measured here: its spans count as just precise enough to return
UNMEASURED_MODEL_PRECISION = NER_MIN_PRECISION


def ner_precision(recogniser: str, language: str, entity_type: str) -> float:
    """The measured precision of a recogniser ("english", "heuristic", "model") for a type in a language; 0 where
    nothing was measured, so a measured span wins an overlap (a configured model:
    :data:`UNMEASURED_MODEL_PRECISION`)."""
    if recogniser == "model":
        return UNMEASURED_MODEL_PRECISION
    table = NER_PRECISION.get(recogniser, {})
    return (table.get(language) or table.get("*") or {}).get(entity_type, 0.0)


# The heuristic's precision on real text: of what it returns now (NER_TYPES), and of every type it would guess.
_NEWSWIRE_SA = (
    "English Worldwide Newswire, 38 South African articles (IOL, The Star, Mail & Guardian; real news text, not "
    "shipped), person / location / organisation, exact span and type"
)
NER: dict[str, Quality] = {
    "eng": measured(
        "precision",
        0.691,
        _NEWSWIRE_SA,
        EVAL_NER,
        note="persons 0.83 (recall 0.78), locations 0.62 (0.63), organisations 0.56 (0.57); on the frozen held-out "
        "set of 40 short sentences with South African names: persons 0.95 (0.93), locations 0.83 (0.91), "
        "organisations 0.75 (0.71), no sentence without an entity",
    ),
    "zul": measured(
        "precision", 0.976, _MASAKHANER, EVAL_TEXT, note="dates only (166 found, recall 0.08); every type: 0.677"
    ),
    "xho": measured(
        "precision",
        0.733,
        _MASAKHANER,
        EVAL_TEXT,
        poor=True,
        note="below 0.8 on dev or test for every type (persons 0.72, dev 0.87): returns no entities",
    ),
    "tsn": measured(
        "precision", 0.964, _MASAKHANER, EVAL_TEXT, note="dates only (112 found, recall 0.07); every type: 0.636"
    ),
    "sna": measured(
        "precision",
        0.852,
        _MASAKHANER,
        EVAL_TEXT,
        note="organisations only (425 found, recall 0.09); every type: 0.532",
    ),
    "swh": measured(
        "precision", 0.933, _MASAKHANER, EVAL_TEXT, note="dates only (550 found, recall 0.12); every type: 0.741"
    ),
}

_SHORT = "sentences under 80 characters, names included"
LANGUAGE_ID: dict[str, Quality] = {
    "zul": measured(
        "accuracy",
        0.983,
        _MASAKHANER + ", 1,202 sentences of 80+ characters",
        EVAL_LANGID,
        short_value=0.897,
        short_data=f"468 {_SHORT} (MasakhaNER 2.0 test)",
        note="short ones confused with ssw",
    ),
    "xho": measured(
        "accuracy",
        0.931,
        _MASAKHANER + ", 1,197 sentences of 80+ characters",
        EVAL_LANGID,
        short_value=0.836,
        short_data=f"432 {_SHORT} (MasakhaNER 2.0 test)",
        note="confused with zul",
    ),
    "tsn": measured(
        "accuracy",
        0.842,
        _MASAKHANER + ", 777 sentences of 80+ characters",
        EVAL_LANGID,
        short_value=0.673,
        short_data=f"217 {_SHORT} (MasakhaNER 2.0 test)",
        poor=True,
        note="real news Setswana is often called nso or sot (0.90 on the formal UDHR)",
    ),
    "sna": measured(
        "accuracy",
        0.999,
        _MASAKHANER + ", 1,552 sentences of 80+ characters",
        EVAL_LANGID,
        short_value=0.816,
        short_data=f"217 {_SHORT} (MasakhaNER 2.0 test)",
        note="short ones that are only names (football fixtures) are often called eng",
    ),
    "swh": measured(
        "accuracy",
        0.997,
        _MASAKHANER + ", 1,627 sentences of 80+ characters",
        EVAL_LANGID,
        short_value=0.969,
        short_data=f"255 {_SHORT} (MasakhaNER 2.0 test)",
    ),
    "eng": measured(
        "accuracy",
        1.0,
        "English Worldwide Newswire, South African articles, 483 sentences of 80+ characters",
        EVAL_LANGID,
        short_value=0.839,
        short_data=f"62 {_SHORT}: 22 from the same articles and the 40 of the frozen held-out set",
        note="short ones that are nothing but names (bylines) have no English words to go by",
    ),
    **{
        code: measured(
            "accuracy",
            value,
            _UDHR,
            "python scripts/eval_text.py",
            note="short sentences: not measured (no real short text in this language here)",
        )
        for code, value in (("afr", 1.0), ("fra", 1.0), ("nso", 1.0), ("sot", 1.0), ("ssw", 0.95), ("tso", 1.0))
    },
}

SENTIMENT: dict[str, Quality] = {
    "eng": measured("accuracy", 1.0, "24 developer-written sentences", _TEXT_SETS),
    "afr": measured("accuracy", 0.917, "24 developer-written sentences", _TEXT_SETS),
    "sot": measured("accuracy", 0.75, "24 developer-written sentences", _TEXT_SETS),
    "zul": measured(
        "accuracy",
        0.625,
        "24 developer-written sentences",
        _TEXT_SETS,
        poor=True,
        note="negative sentences often called positive",
    ),
}

INTENT: dict[str, Quality] = {
    code: measured("accuracy", 1.0, "8 labelled + 3 unrelated developer-written inputs", _TEXT_SETS)
    for code in ("eng", "zul", "afr")
}

TEXT: dict[str, dict[str, Quality]] = {
    "entity_recognition": NER,
    "language_identification": LANGUAGE_ID,
    "sentiment_analysis": SENTIMENT,
    "intent_classification": INTENT,
}


def text_quality(capability: str, code: str) -> Quality:
    """The measured quality of a text capability in a language, or :data:`UNMEASURED`."""
    return TEXT.get(capability, {}).get(code, UNMEASURED)


_REAL_SPEECH = "python scripts/eval_real.py speech DIR"

# Whisper base (the offline default) on real speech, with the language given (lang_code); scripts/eval_real.py
SPEECH: dict[str, Quality] = {
    "eng": measured(
        "WER",
        0.27,
        "real African-accented read English (AfriSpeech-200, 2 clips, 27 s)",
        _REAL_SPEECH,
        note="South African English read by an isiZulu speaker (Lwazi II, 8 clips) 0.20; native (FLEURS) 0.09",
    ),
    "afr": measured(
        "WER",
        0.87,
        "real read Afrikaans (Lwazi II, 38 clips, 151 s)",
        _REAL_SPEECH,
        poor=True,
        note="Whisper base writes much real Afrikaans as Dutch or English",
    ),
    "fra": measured("WER", 0.30, "real read French (FLEURS, 10 clips, 110 s)", _REAL_SPEECH),
}


def speech_quality(code: str) -> Quality:
    """Whisper base's measured quality in a language on real speech, or :data:`UNMEASURED`."""
    return SPEECH.get(code, UNMEASURED)
