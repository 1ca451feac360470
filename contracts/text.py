"""Contract of the TextAnalysis deployment (entity recognition, sentiment, intent classification, language
identification): its request and result models, and the typed handle callers use.

The result models are also the routes' response models (``serve_app/routers/text.py``), so their field names are
the wire's (``Id``/``Sentiments`` included) and must not change. The deployment trusts its input: empty texts,
token limits and the classify rules are checked once, by the service (``serve_app/services/text.py``).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from contracts.handles import DeploymentClient, call
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


class LanguageDetectResult(BaseModel):
    language: str
    nllb_code: str
    confidence: float
    candidates: list[LanguageScore]
    spans: list[LanguageSpan] = Field(default_factory=list)


# --- typed handle -----------------------------------------------------------------------------------------------


class TextClient(DeploymentClient):
    """Typed handle of ``deployments.text:TextAnalysis``."""

    deployment = "TextAnalysis"

    async def entities(self, request: TextInput) -> list[Entity]:
        """``deployments.text.TextAnalysis.entities``: named entities with offsets into the text as given."""
        return await call(self._handle.entities.remote(request))

    async def sentiment(self, request: TextInput) -> list[SentenceSentiment]:
        """``deployments.text.TextAnalysis.sentiment``: one entry per sentence (split at '.' and '!')."""
        return await call(self._handle.sentiment.remote(request))

    async def classify(self, request: ClassifyRequest) -> list[ClassificationResult]:
        """``deployments.text.TextAnalysis.classify``: one distribution over the intents per input, in order."""
        return await call(self._handle.classify.remote(request))

    async def detect_language(self, request: LanguageDetectRequest) -> LanguageDetectResult:
        """``deployments.text.TextAnalysis.detect_language``: the language, its candidates and optional spans."""
        return await call(self._handle.detect_language.remote(request))
