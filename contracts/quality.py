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


class Quality(BaseModel):
    """One capability's measured quality in one language (``measured: false``: nobody has measured it)."""

    measured: bool
    metric: str | None = None  # "WER" (lower is better), "precision", "accuracy"
    value: float | None = None
    data: str | None = None  # what it was measured on
    command: str | None = None
    poor: bool = False
    note: str | None = None


UNMEASURED = Quality(measured=False, note="not measured on real data")


def measured(
    metric: str, value: float, data: str, command: str, *, poor: bool = False, note: str | None = None
) -> Quality:
    return Quality(measured=True, metric=metric, value=value, data=data, command=command, poor=poor, note=note)


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
    "english": {"*": {"person": 0.85, "location": 0.6, "organisation": 0.4, "date": 0.8}},
    "heuristic": {
        "zul": {"date": 0.98, "location": 0.69, "organisation": 0.73, "person": 0.61},
        "xho": {"date": 0.84, "location": 0.71, "organisation": 0.75, "person": 0.71},
        "tsn": {"date": 0.96, "location": 0.76, "organisation": 0.63, "person": 0.45},
        "sna": {"date": 0.75, "location": 0.50, "organisation": 0.88, "person": 0.32},
        "swh": {"date": 0.93, "location": 0.80, "organisation": 0.65, "person": 0.55},
    },
}
# A configured token-classification model is not measured here: its spans count as just precise enough to return
UNMEASURED_MODEL_PRECISION = NER_MIN_PRECISION


def ner_precision(recogniser: str, language: str, entity_type: str) -> float:
    """The measured precision of a recogniser ("english", "heuristic", "model") for a type in a language; 0 where
    nothing was measured (a configured model: :data:`UNMEASURED_MODEL_PRECISION`)."""
    if recogniser == "model":
        return UNMEASURED_MODEL_PRECISION
    table = NER_PRECISION.get(recogniser, {})
    return (table.get(language) or table.get("*") or {}).get(entity_type, 0.0)


# The heuristic's precision on real text: of what it returns now (NER_TYPES), and of every type it would guess.
NER: dict[str, Quality] = {
    "eng": measured("precision", 0.938, "15 developer-written sentences (spaCy en_core_web_sm)", _TEXT_SETS),
    "zul": measured(
        "precision", 0.976, _MASAKHANER, EVAL_TEXT, note="dates only (166 found, recall 0.08); every type: 0.677"
    ),
    "xho": measured(
        "precision",
        0.720,
        _MASAKHANER,
        EVAL_TEXT,
        poor=True,
        note="below 0.8 for every type (persons 0.71): returns no entities",
    ),
    "tsn": measured(
        "precision", 0.963, _MASAKHANER, EVAL_TEXT, note="dates only (109 found, recall 0.07); every type: 0.620"
    ),
    "sna": measured(
        "precision",
        0.878,
        _MASAKHANER,
        EVAL_TEXT,
        note="organisations only (328 found, recall 0.07); every type: 0.507",
    ),
    "swh": measured(
        "precision", 0.933, _MASAKHANER, EVAL_TEXT, note="dates only (550 found, recall 0.12); every type: 0.741"
    ),
}

LANGUAGE_ID: dict[str, Quality] = {
    "zul": measured("accuracy", 0.961, _MASAKHANER + ", 1,571 sentences", EVAL_TEXT),
    "xho": measured("accuracy", 0.907, _MASAKHANER + ", 1,561 sentences", EVAL_TEXT, note="confused with zul"),
    "tsn": measured(
        "accuracy",
        0.727,
        _MASAKHANER + ", 950 sentences",
        EVAL_TEXT,
        poor=True,
        note="real news Setswana is often called sot or nso (0.90 on the formal UDHR)",
    ),
    "sna": measured("accuracy", 0.998, _MASAKHANER + ", 1,690 sentences", EVAL_TEXT),
    "swh": measured("accuracy", 0.994, _MASAKHANER + ", 1,818 sentences", EVAL_TEXT),
    **{
        code: measured("accuracy", value, _UDHR, "python scripts/eval_text.py")
        for code, value in (("afr", 1.0), ("eng", 1.0), ("fra", 1.0), ("nso", 1.0), ("sot", 1.0), ("ssw", 0.95))
    },
    "tso": measured("accuracy", 1.0, _UDHR, "python scripts/eval_text.py"),
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
