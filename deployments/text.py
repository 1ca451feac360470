"""TextAnalysis deployment: entity recognition, sentiment, intent classification and language identification
(contract: ``contracts/text.py``).

Each request is batched at one point. NER, sentiment and classify take a group of requests per call
(``entities_many`` and the like): the ingress's typed handle is where they are batched (``contracts/text.TextClient``),
so Serve's per-request work here runs once per group, and a group is one model pass as it came: one language-ID
pass, one spaCy ``pipe``, one embeddings call. Here a group is neither merged with others nor split, and one pass of
a kind runs at a time. Language ID takes single requests and batches them here, with ``@batched``. The embedder
runs in this replica (``embeddings.placement`` local, the default for the offline model), or is the Embeddings
deployment, whose handle the app builder then passes in (``khuluma/app.py``).

Inputs arrive checked: the service rejects empty texts, texts over the token limit and malformed classify
requests before they get here (``serve_app/services/text.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np

from contracts import languages
from contracts.batching import ItemFailed, run_isolated, unwrap
from contracts.capabilities import CapabilityInfo
from contracts.embeddings import EmbeddingKind, EmbeddingsClient, EmbeddingSource, Vectors
from contracts.text import (
    ClassificationResult,
    ClassifyRequest,
    Entity,
    EntityExplanation,
    IntentScore,
    LanguageDetectRequest,
    LanguageDetectResult,
    LanguageScore,
    LanguageSpan,
    RecognisedEntity,
    SentenceReading,
    SentenceSentiment,
    SentimentScore,
    TextInput,
)
from deployments.common import configure_replica_logging, load_settings
from deployments.embeddings import LocalEmbeddings
from deployments.serve_batch import batched
from deployments.text_capabilities import text_capabilities
from engines.text.configured import NON_ENGLISH, ConfiguredModel, configured_model
from engines.text.entity_pass import as_contract
from engines.text.intent import DEFAULT_TEMPERATURE, DEFAULT_TOP_K, EmbeddingCache, intent_probabilities
from engines.text.langid import LanguageGuess, LanguageIdentifier
from engines.text.ner import EntityRecogniser, TransformersNER
from engines.text.sentiment import SentimentClassifier
from engines.text.sentiment_model import TransformersSentiment
from engines.text.utils import split_sentences
from runtime.memory import release_freed_memory
from runtime.metrics import model_timer

log = logging.getLogger(__name__)
# NLLB-200 code of every language the identifier can answer with (all text languages have one).
NLLB = {code: nllb for code in languages.TEXT_CODES if (nllb := languages.nllb_code(code))}
MIN_CANDIDATE_SCORE = 0.001  # candidates below this are noise, left out of the answer


class TextAnalysis:
    def __init__(self, settings: dict[str, Any] | None = None, embeddings: Any = None) -> None:
        self.settings = load_settings(settings)
        configure_replica_logging("TextAnalysis", self.settings)
        # the builder binds the Embeddings deployment's handle when the embedder is placed there
        self.local_embeddings = LocalEmbeddings(self.settings) if embeddings is None else None
        self.embeddings: EmbeddingSource = self.local_embeddings or EmbeddingsClient(embeddings)
        self.langid = LanguageIdentifier()
        self.sentiment_model = SentimentClassifier()
        self.recogniser = EntityRecogniser(identifier=self.langid)
        self.ner_model_name: str | None = None
        self.ner_configured: ConfiguredModel | None = None
        self._configure_ner(self.settings.text.ner_model)
        self.sentiment_transformer: TransformersSentiment | None = None
        self.sentiment_configured: ConfiguredModel | None = None
        self._configure_sentiment(self.settings.text.sentiment_model)
        self.cache = EmbeddingCache()
        self.temperature = DEFAULT_TEMPERATURE
        self.top_k = DEFAULT_TOP_K
        # One model pass of a kind at a time, whichever ingress replica sent the group: two at once would split the
        # cores between two passes that each cost more per text (a larger pass costs less per text:
        # docs/performance.md). The groups wait their turn whole; they are not merged (the ingress
        # batched them already). Locks of the running event loop (tests run one instance under several).
        self._pass_locks: dict[str, asyncio.Lock] = {}
        self._pass_loop: asyncio.AbstractEventLoop | None = None
        release_freed_memory()  # what loading the models freed goes back to the system (idle memory)

    # --- lifecycle -----------------------------------------------------------------------------------------

    def ping(self) -> bool:
        return True

    def _configure_ner(self, ref: str | None) -> None:
        """The configured NER model (a registered name, Hugging Face id or directory) and the languages it reads."""
        text = self.settings.text
        configured = (
            configured_model(ref, "ner", self.settings.data_dir, text.ner_model_languages, NON_ENGLISH) if ref else None
        )
        self.recogniser.transformer = TransformersNER(configured.path) if configured else None
        self.recogniser.model_languages = configured.languages if configured else None
        self.ner_model_name, self.ner_configured = ref, configured
        log.info("NER model: %s", f"{ref} for {sorted(configured.languages)}" if configured else "none (offline)")

    def _configure_sentiment(self, ref: str | None) -> None:
        """The configured sentiment model and the languages it reads (the others keep the offline classifier)."""
        text = self.settings.text
        configured = (
            configured_model(ref, "sentiment", self.settings.data_dir, text.sentiment_model_languages, frozenset())
            if ref
            else None
        )
        self.sentiment_transformer = TransformersSentiment(configured.path) if configured else None
        self.sentiment_configured = configured

    def reconfigure(self, config: dict[str, Any]) -> None:
        """Serve ``user_config``: ``ner_model`` and ``sentiment_model`` (name, id, dir or null),
        ``intent_temperature``, ``intent_top_k``."""
        config = dict(config or {})
        if "ner_model" in config:
            wanted = config.get("ner_model") or self.settings.text.ner_model
            if wanted != self.ner_model_name:
                self._configure_ner(wanted)
        if "sentiment_model" in config:
            wanted = config.get("sentiment_model") or self.settings.text.sentiment_model
            if wanted != (self.sentiment_configured.ref if self.sentiment_configured else None):
                self._configure_sentiment(wanted)
        self.temperature = float(config.get("intent_temperature") or self.temperature)
        self.top_k = int(config.get("intent_top_k") or self.top_k)

    # --- entity recognition --------------------------------------------------------------------------------

    async def entities(self, request: TextInput) -> list[Entity]:
        """One request alone: for an ingress of the previous release during a rolling update, and for other
        applications composing with this deployment. The ingress itself sends groups."""
        return unwrap((await self.entities_many([request]))[0])

    async def entities_many(self, requests: list[TextInput]) -> list[list[Entity] | ItemFailed]:
        """One caller's group (the ingress batches concurrent requests), run in one model pass; each item gets its
        own result or its own error."""
        async with self._one_pass("entities"):
            return await run_isolated(self._entities_run, [r.text for r in requests])

    async def _entities_run(self, texts: list[str]) -> list[list[Entity]]:
        return await asyncio.to_thread(self._entities_sync, texts)

    def _entities_sync(self, texts: list[str]) -> list[list[Entity]]:
        with model_timer("TextAnalysis.entities"):
            return [as_contract(found) for found in self.recogniser.recognise_routed(texts, self.langid)]

    async def explain_entities(self, request: TextInput) -> EntityExplanation:
        """The entities of ``entities_many`` for one text, each with its recogniser, and how each sentence was read."""
        async with self._one_pass("entities"):
            return await asyncio.to_thread(self._explain_sync, request.text)

    def _explain_sync(self, text: str) -> EntityExplanation:
        with model_timer("TextAnalysis.entities"):
            reading = self.recogniser.read([text], self.langid)[0]
        return EntityExplanation(
            entities=[
                RecognisedEntity(entity=e.entity, word=e.word, start=e.start, end=e.end, recogniser=e.recogniser)
                for e in reading.entities
            ],
            sentences=[
                SentenceReading(
                    start=s.start,
                    end=s.end,
                    text=text[s.start : s.end],
                    language=s.language,
                    nllb_code=NLLB[s.language],
                    confidence=round(s.confidence, 6),
                    candidates=[
                        LanguageScore(language=c, nllb_code=NLLB[c], score=round(p, 6)) for c, p in s.candidates
                    ],
                    read_as=list(s.read_as),
                )
                for s in reading.sentences
            ],
        )

    # --- sentiment -----------------------------------------------------------------------------------------

    async def sentiment(self, request: TextInput) -> list[SentenceSentiment]:
        """One request alone (see ``entities``)."""
        return unwrap((await self.sentiment_many([request]))[0])

    async def sentiment_many(self, requests: list[TextInput]) -> list[list[SentenceSentiment] | ItemFailed]:
        """One caller's group: one language-ID pass and one embeddings call, each item's own result or error."""
        async with self._one_pass("sentiment"):
            return await run_isolated(self._sentiment_run, [r.text for r in requests])

    async def _sentiment_run(self, texts: list[str]) -> list[list[SentenceSentiment]]:
        per_text = [[s.text for s in split_sentences(t)] or [t] for t in texts]
        text_langs = [g.language for g in await asyncio.to_thread(self.langid.detect_many, texts)]
        sentences = [s for group in per_text for s in group]
        sentence_langs = [lang for group, lang in zip(per_text, text_langs) for _ in group]
        routed = self.sentiment_configured.languages if self.sentiment_configured else frozenset()
        by_model = [i for i, lang in enumerate(sentence_langs) if lang in routed]
        offline = [i for i, lang in enumerate(sentence_langs) if lang not in routed]
        scores: list[Any] = [None] * len(sentences)
        if offline:
            vectors = await self._embed([sentences[i] for i in offline])
            with model_timer("TextAnalysis.sentiment"):
                found = await asyncio.to_thread(
                    self.sentiment_model.classify,
                    [sentences[i] for i in offline],
                    vectors,
                    [sentence_langs[i] for i in offline],
                )
            for i, score in zip(offline, found):
                scores[i] = score
        if by_model and self.sentiment_transformer is not None:
            with model_timer("TextAnalysis.sentiment"):
                found = await asyncio.to_thread(self.sentiment_transformer.classify, [sentences[i] for i in by_model])
            for i, score in zip(by_model, found):
                scores[i] = score
        out: list[list[SentenceSentiment]] = []
        pos = 0
        for group in per_text:
            out.append(
                [
                    SentenceSentiment(text=s, sentiment=[SentimentScore(label=r.label, score=round(r.score, 6))])
                    for s, r in zip(group, scores[pos : pos + len(group)])
                ]
            )
            pos += len(group)
        return out

    # --- intent classification -----------------------------------------------------------------------------

    async def classify(self, request: ClassifyRequest) -> list[ClassificationResult]:
        """One request alone (see ``entities``)."""
        return unwrap((await self.classify_many([request]))[0])

    async def classify_many(self, requests: list[ClassifyRequest]) -> list[list[ClassificationResult] | ItemFailed]:
        """One caller's group: the texts of every request not cached yet are embedded in one model call; each
        request gets its own result or error."""
        async with self._one_pass("classify"):
            return await run_isolated(self._classify_run, requests)

    async def _classify_run(self, requests: list[ClassifyRequest]) -> list[list[ClassificationResult]]:
        texts = [t for r in requests for t in [e.example for e in r.examples] + r.inputs]
        vectors = await self._cached_embed(texts)
        return [self._classify_one(r, vectors) for r in requests]

    def _classify_one(self, request: ClassifyRequest, vectors: dict[str, np.ndarray]) -> list[ClassificationResult]:
        intents = list(dict.fromkeys(e.intent for e in request.examples))  # first-seen order, as answered
        probs = intent_probabilities(
            intents,
            [e.intent for e in request.examples],
            np.stack([vectors[e.example] for e in request.examples]),
            np.stack([vectors[t] for t in request.inputs]),
            self.temperature,
            self.top_k,
        )
        return [
            ClassificationResult(
                probabilities=[IntentScore(intent=intent, score=float(p)) for intent, p in zip(intents, row)]
            )
            for row in probs
        ]

    async def _cached_embed(self, texts: list[str]) -> dict[str, np.ndarray]:
        """Each text's vector. Example sets repeat across requests: their embeddings come from the LRU after the
        first time; the texts missing from it are embedded in one call."""
        found, missing = self.cache.lookup(texts)
        if missing:
            fresh = await self._embed(missing)
            self.cache.store(missing, fresh)
            found.update(zip(missing, fresh))
        return found

    # --- language identification ---------------------------------------------------------------------------

    async def detect_language(self, request: LanguageDetectRequest) -> LanguageDetectResult:
        guess = await self._langid_batch(request.text)
        spans: list[LanguageSpan] = []
        if request.spans:
            found = await asyncio.to_thread(self.langid.detect_spans, request.text)
            spans = [LanguageSpan(start=s.start, end=s.end, text=s.text, language=s.language) for s in found]
        return LanguageDetectResult(
            language=guess.language,
            nllb_code=NLLB[guess.language],
            confidence=round(guess.confidence, 6),
            candidates=[
                LanguageScore(language=c, nllb_code=NLLB[c], score=round(s, 6))
                for c, s in guess.candidates
                if s >= MIN_CANDIDATE_SCORE
            ],
            spans=spans,
        )

    @batched(max_batch_size=64, batch_wait_timeout_s=0.005)
    async def _langid_batch(self, texts: list[str]) -> list[LanguageGuess]:
        return await asyncio.to_thread(self.langid.detect_many, texts)

    # --- shared --------------------------------------------------------------------------------------------

    @asynccontextmanager
    async def _one_pass(self, kind: str) -> AsyncIterator[None]:
        """Held while a group's model pass of ``kind`` runs: the next group of that kind waits, whole."""
        loop = asyncio.get_running_loop()
        if loop is not self._pass_loop:
            self._pass_locks, self._pass_loop = {}, loop
        async with self._pass_locks.setdefault(kind, asyncio.Lock()):
            yield

    async def embed(self, texts: list[str], kind: EmbeddingKind) -> Vectors:
        """See ``contracts.text.TextClient.embed``: the embedder of this replica, for the ingress's embeddings
        route while no Embeddings deployment runs."""
        return await self.embeddings.embed(texts, kind)

    async def _embed(self, texts: list[str]) -> Vectors:
        # e5's query side: sentences and intent examples are compared with each other, not searched as passages.
        # A group's texts are a batch already: the embedder in this replica runs them as one model call, never
        # through its micro-batcher (the Embeddings deployment batches only lists of at most DIRECT_BATCH texts)
        if self.local_embeddings is not None:
            return await self.local_embeddings.embed_batch(texts, "query")
        return await self.embeddings.embed(texts, "query")

    async def describe(self) -> list[CapabilityInfo]:
        # the embedder in this replica describes itself here; a deployment of its own answers for itself
        embedder = await self.local_embeddings.describe() if self.local_embeddings else []
        return self._describe_text() + embedder

    def _describe_text(self) -> list[CapabilityInfo]:
        ner_model = self.ner_model_name if self.recogniser.transformer else None
        return text_capabilities(
            self.recogniser.english.name,
            ner_model,
            self.ner_configured,
            self.sentiment_configured,
            self.settings.text.classify_enabled,
        )
