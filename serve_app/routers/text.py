"""Text analysis routes: entity recognition, sentiment, intent classification, language identification."""

from __future__ import annotations

from fastapi import APIRouter

from contracts.text import (
    ClassificationResult,
    ClassifyRequest,
    Entity,
    EntityExplanation,
    LanguageDetectRequest,
    LanguageDetectResult,
    SentimentResult,
    TextRequest,
)
from serve_app.admission.kinds import TEXT, admitted_as
from serve_app.auth import Caller, Ctx
from serve_app.services import text as service

router = APIRouter(prefix="/api/v1", tags=["text analysis"])


@router.post("/entity_recognition/process", response_model=list[Entity])
@admitted_as(TEXT)
async def entity_recognition(body: TextRequest, caller: Caller, ctx: Ctx) -> list[Entity]:
    """Named entities with character offsets into the input as sent."""
    return await service.entities(ctx, caller, body.encoded_text)


@router.post("/entity_recognition/explain", response_model=EntityExplanation)
@admitted_as(TEXT)
async def entity_recognition_explain(body: TextRequest, caller: Caller, ctx: Ctx) -> EntityExplanation:
    """The entities of ``/entity_recognition/process``, each with the recogniser that found it, and per sentence the
    language it was read as, with its confidence (our addition; the playground's view)."""
    return await service.explain_entities(ctx, caller, body.encoded_text)


@router.post("/sentiment_analysis/process", response_model=SentimentResult)
@admitted_as(TEXT)
async def sentiment_analysis(body: TextRequest, caller: Caller, ctx: Ctx) -> SentimentResult:
    """Sentiment per sentence (split at '.' and '!', leading space kept)."""
    return await service.sentiments(ctx, caller, body.encoded_text)


@router.post("/classify", response_model=list[ClassificationResult])
@admitted_as(TEXT)
async def classify(body: ClassifyRequest, caller: Caller, ctx: Ctx) -> list[ClassificationResult]:
    """Few-shot intent classification: one probability distribution over the intents per input."""
    return await service.classify(ctx, caller, body)


@router.post("/language/detect", response_model=LanguageDetectResult)
@admitted_as(TEXT)
async def language_detect(body: LanguageDetectRequest, caller: Caller, ctx: Ctx) -> LanguageDetectResult:
    """Text language identification (our addition)."""
    return await service.detect_language(ctx, caller, body)
