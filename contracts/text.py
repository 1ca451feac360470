"""Contract of the TextAnalysis deployment (entity recognition, sentiment, intent classification, language
identification): its request and result models, and the typed handle callers use.

The result models are also the routes' response models (``serve_app/routers/text.py``), so their field names are
the wire's (``Id``/``Sentiments`` included) and must not change. The deployment trusts its input: empty texts,
token limits and the classify rules are checked once, by the service (``serve_app/services/text.py``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import BaseModel, Field

from contracts.batching import ItemFailed, MicroBatcher, run_isolated
from contracts.embeddings import EmbeddingKind, Vectors
from contracts.handles import DeploymentClient
from contracts.settings import Settings
from contracts.unicode import UnicodeText

# --- requests ---------------------------------------------------------------------------------------------------


class TextRequest(BaseModel):
    """Body of the entity-recognition and sentiment routes (wire only: the deployment is sent a :class:`TextInput`)."""

    encoded_text: UnicodeText = Field(description="Text to analyse; any language.")


class TextInput(BaseModel):
    """One text for entity recognition or sentiment; checked by the service (not empty, within the token limit)."""

    text: str


class IntentExample(BaseModel):
    intent: UnicodeText
    example: UnicodeText


class ClassifyRequest(BaseModel):
    """Body of ``/api/v1/classify`` and the deployment's input (the service checks it first)."""

    examples: list[IntentExample] = Field(description="At least two examples per intent.")
    inputs: list[UnicodeText]


class LanguageDetectRequest(BaseModel):
    """Body of ``/api/v1/language/detect`` and the deployment's input (the service checks the text first)."""

    text: UnicodeText
    spans: bool = Field(default=False, description="Also detect per-span languages (code-switched text).")


# --- results ----------------------------------------------------------------------------------------------------


class Entity(BaseModel):
    entity: str = Field(description="Entity type: person, location, organisation, date, ...")
    word: str
    start: int = Field(description="Character offset of the entity in the input (text[start:end] == word).")
    end: int


class SentimentScore(BaseModel):
    label: str = Field(description="positive, negative or neutral")
    score: float


class SentenceSentiment(BaseModel):
    text: str
    sentiment: list[SentimentScore]


class SentimentResult(BaseModel):
    """The sentiment route's answer: the deployment's sentences under a request id the service assigns."""

    Id: str
    Sentiments: list[SentenceSentiment]


class IntentScore(BaseModel):
    intent: str
    score: float


class ClassificationResult(BaseModel):
    probabilities: list[IntentScore]


class LanguageScore(BaseModel):
    language: str = Field(description="ISO 639-3 code, e.g. zul")
    nllb_code: str = Field(description="NLLB-200 code, e.g. zul_Latn")
    score: float


class LanguageSpan(BaseModel):
    start: int
    end: int
    text: str
    language: str


class RecognisedEntity(Entity):
    """An entity of ``/api/v1/entity_recognition/explain``: the standard four fields and what found it."""

    recogniser: str = Field(
        description="What found it: the English model (spaCy), the entity ruler over the gazetteers, a name-shape or "
        "place rule, the heuristic of a language, or the configured model, with the language it read the sentence "
        "in where that is not English."
    )


class SentenceReading(BaseModel):
    """How one sentence was read for entity recognition."""

    start: int
    end: int
    text: str
    language: str = Field(description="What language ID read the sentence as, its names discounted.")
    nllb_code: str
    confidence: float
    candidates: list[LanguageScore] = Field(description="The three likeliest languages.")
    read_as: list[str] = Field(
        description="The languages whose recognisers read the sentence: the one language when language ID is sure, "
        "every plausible one when it is not."
    )


class EntityExplanation(BaseModel):
    """Answer of ``/api/v1/entity_recognition/explain`` (ours): the entities the standard route returns for the same
    text, each with its recogniser, and how each sentence was read."""

    entities: list[RecognisedEntity]
    sentences: list[SentenceReading]


class LanguageDetectResult(BaseModel):
    language: str
    nllb_code: str
    confidence: float
    candidates: list[LanguageScore]
    spans: list[LanguageSpan] = Field(default_factory=list)


# --- typed handle -----------------------------------------------------------------------------------------------


class EntitiesPass(Protocol):
    """An entity recogniser run in the caller's process (``engines/text/entity_pass.py``): one pass over a group."""

    def entities(self, texts: list[str]) -> list[list[Entity]]: ...


class TextClient(DeploymentClient):
    """Typed handle of ``deployments.text:TextAnalysis``.

    Entity recognition, sentiment and classify requests are batched here, and only here: those that arrive
    together are sent in one call (``entities_many`` and the like), which TextAnalysis runs as one model pass, whole
    (it neither merges nor splits groups). Serve's per-request work in the replica (gRPC, request context, metrics)
    then runs once per group, where on NER it cost as much CPU as spaCy. At most ``batches_in_flight`` calls of a
    kind are open at once and requests arriving meanwhile form the next one, so a group's size follows the load and
    a lone request goes at once. Each request still gets its own result or its own error. At most ``max_queued``
    requests of a kind wait for the next call (``text.ingress_max_queued``): the next one is refused at once with
    503 and ``Retry-After`` (these calls never reach Serve's own queue, whose ``max_queued_requests`` bounds only
    the ungrouped language-ID calls).
    """

    deployment = "TextAnalysis"

    def __init__(
        self,
        handle: Any,
        batch_max: int = 32,
        batches_in_flight: int = 2,
        catch_up_s: float = 0.005,
        max_queued: int = 0,
    ) -> None:
        super().__init__(handle)
        self._entities = MicroBatcher(
            self._entities_many, batch_max, 0.0, batches_in_flight, catch_up_s, max_queued, "entity recognition"
        )
        self._sentiment = MicroBatcher(
            self._sentiment_many, batch_max, 0.0, batches_in_flight, catch_up_s, max_queued, "sentiment"
        )
        self._classify = MicroBatcher(
            self._classify_many, batch_max, 0.0, batches_in_flight, catch_up_s, max_queued, "classify"
        )
        self._load_entities: Callable[[], EntitiesPass] | None = None
        self._entities_engine: EntitiesPass | None = None
        self._entities_lock = threading.Lock()  # one pass at a time, and one load, whichever event loop asks

    def recognise_in_process(self, load: Callable[[], EntitiesPass]) -> None:
        """Entity recognition runs in this process from now on, batched as before, one pass at a time in a worker
        thread, with the engine ``load`` makes on the first request (once); the other methods still call the
        deployment (``text.ner_in_ingress``)."""
        self._load_entities = load

    @property
    def recognises_in_process(self) -> bool:
        return self._load_entities is not None

    @classmethod
    def configured(cls, handle: Any, settings: Settings) -> TextClient:
        text = settings.text
        return cls(
            handle,
            text.ingress_batch_max,
            text.ingress_batches_in_flight,
            text.ingress_catch_up_ms / 1000,
            text.ingress_max_queued,
        )

    async def entities(self, request: TextInput) -> list[Entity]:
        """``deployments.text.TextAnalysis.entities_many``: named entities with offsets into the text as given."""
        return await self._entities.submit(request)

    async def sentiment(self, request: TextInput) -> list[SentenceSentiment]:
        """``deployments.text.TextAnalysis.sentiment_many``: one entry per sentence (split at '.' and '!')."""
        return await self._sentiment.submit(request)

    async def classify(self, request: ClassifyRequest) -> list[ClassificationResult]:
        """``deployments.text.TextAnalysis.classify_many``: one distribution over the intents per input, in order."""
        return await self._classify.submit(request)

    async def embed(self, texts: list[str], kind: EmbeddingKind) -> Vectors:
        """``deployments.text.TextAnalysis.embed``: the embedder this replica uses (its own, or the Embeddings
        deployment's), for callers that need vectors while no Embeddings deployment runs (``embeddings.placement``
        local). One unit vector per text, in order (``contracts.embeddings.EmbeddingSource``)."""
        return await self._call(self._handle.embed.remote(texts, kind))

    async def explain_entities(self, request: TextInput) -> EntityExplanation:
        """``deployments.text.TextAnalysis.explain_entities``: the entities of ``entities`` with their recognisers,
        and how each sentence was read (language, confidence, the recognisers' languages). Not batched: the
        playground's call, one text at a time."""
        return await self._call(self._handle.explain_entities.remote(request))

    async def detect_language(self, request: LanguageDetectRequest) -> LanguageDetectResult:
        """``deployments.text.TextAnalysis.detect_language``: the language, its candidates and optional spans."""
        return await self._call(self._handle.detect_language.remote(request))

    async def _entities_many(self, requests: list[TextInput]) -> list[list[Entity] | ItemFailed]:
        if self._load_entities is not None:
            return await run_isolated(self._entities_here, [r.text for r in requests])
        return await self._call(self._handle.entities_many.remote(requests))

    async def _entities_here(self, texts: list[str]) -> list[list[Entity]]:
        return await asyncio.to_thread(self._entities_pass, texts)

    def _entities_pass(self, texts: list[str]) -> list[list[Entity]]:
        with self._entities_lock:
            if self._entities_engine is None:
                assert self._load_entities is not None
                self._entities_engine = self._load_entities()
            return self._entities_engine.entities(texts)

    async def _sentiment_many(self, requests: list[TextInput]) -> list[list[SentenceSentiment] | ItemFailed]:
        return await self._call(self._handle.sentiment_many.remote(requests))

    async def _classify_many(self, requests: list[ClassifyRequest]) -> list[list[ClassificationResult] | ItemFailed]:
        return await self._call(self._handle.classify_many.remote(requests))
