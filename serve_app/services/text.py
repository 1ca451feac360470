"""Text analysis services: NER, sentiment, intent classification, language identification.

Every request check runs here, once (empty texts, the size limits of ``services/text_limits.py``, the token
limit, the classify rules), before the first hop: the TextAnalysis deployment trusts what it is sent.
"""

from __future__ import annotations

import uuid

from contracts.errors import InvalidInput, Unavailable
from contracts.text import (
    ClassificationResult,
    ClassifyRequest,
    Entity,
    EntityExplanation,
    LanguageDetectRequest,
    LanguageDetectResult,
    SentimentResult,
    TextClient,
    TextInput,
)
from serve_app.context import AppContext, required
from serve_app.services.text_limits import TextLimits, check_size
from serve_app.services.usage import count_tokens, record_usage
from serve_app.tokens import Principal


def check_text(text: str, limits: TextLimits, max_tokens: int, field: str = "encoded_text") -> int:
    """The text's tokens, or 400 naming ``field`` (empty, over a size limit) or saying the token limit."""
    if not text or not text.strip():
        raise InvalidInput(f"Invalid request: field '{field}' must not be empty.")
    check_size(text, field, limits)
    tokens = count_tokens(text)
    limit = max_tokens
    if tokens > limit:
        raise InvalidInput(f"Text has {tokens} tokens; the limit is {limit} tokens per request.")
    return tokens


def _text(ctx: AppContext) -> TextClient:
    return required(ctx.clients.text, "text")


async def entities(ctx: AppContext, caller: Principal, text: str) -> list[Entity]:
    tokens = check_text(text, TextLimits.of(ctx.settings), ctx.settings.text.max_tokens)
    result = await _text(ctx).entities(TextInput(text=text))
    await record_usage(ctx, caller, "entity_recognition", tokens=tokens)
    return result


async def explain_entities(ctx: AppContext, caller: Principal, text: str) -> EntityExplanation:
    """The entities of :func:`entities`, each with its recogniser, and how each sentence was read (the playground's
    view); checked and metered as entity recognition."""
    tokens = check_text(text, TextLimits.of(ctx.settings), ctx.settings.text.max_tokens)
    result = await _text(ctx).explain_entities(TextInput(text=text))
    await record_usage(ctx, caller, "entity_recognition", tokens=tokens)
    return result


async def sentiments(ctx: AppContext, caller: Principal, text: str) -> SentimentResult:
    tokens = check_text(text, TextLimits.of(ctx.settings), ctx.settings.text.max_tokens)
    sentences = await _text(ctx).sentiment(TextInput(text=text))
    await record_usage(ctx, caller, "sentiment_analysis", tokens=tokens)
    return SentimentResult(Id=str(uuid.uuid4()), Sentiments=sentences)


def check_classify(request: ClassifyRequest, limits: TextLimits) -> None:
    """400 unless every example is filled in, at least two intents have two examples each, every input has text
    and the examples (intents included) and the inputs are each within the size limits, counted together. The
    messages name the request's fields (and the intents with too few examples)."""
    check_size([t for ex in request.examples for t in (ex.intent, ex.example)], "examples", limits)
    check_size(request.inputs, "inputs", limits)
    counts: dict[str, int] = {}
    for ex in request.examples:
        if not ex.intent.strip() or not ex.example.strip():
            raise InvalidInput("Invalid request: every example needs a non-empty 'intent' and 'example'.")
        counts[ex.intent] = counts.get(ex.intent, 0) + 1
    if len(counts) < 2:
        raise InvalidInput("Invalid request: 'examples' must cover at least two intents.")
    few = sorted(intent for intent, n in counts.items() if n < 2)
    if few:
        raise InvalidInput(
            f"Invalid request: at least two examples are needed per intent; too few for: {', '.join(few)}."
        )
    if not request.inputs or any(not t.strip() for t in request.inputs):
        raise InvalidInput("Invalid request: 'inputs' must be a non-empty list of non-empty strings.")


async def classify(ctx: AppContext, caller: Principal, request: ClassifyRequest) -> list[ClassificationResult]:
    if not ctx.settings.text.classify_enabled:
        raise Unavailable("Intent classification is temporarily unavailable because of maintenance.")
    check_classify(request, TextLimits.of(ctx.settings))
    result = await _text(ctx).classify(request)
    await record_usage(ctx, caller, "classify", tokens=sum(count_tokens(t) for t in request.inputs))
    return result


async def detect_language(ctx: AppContext, caller: Principal, request: LanguageDetectRequest) -> LanguageDetectResult:
    tokens = check_text(request.text, TextLimits.of(ctx.settings), ctx.settings.text.max_tokens, "text")
    result = await _text(ctx).detect_language(request)
    await record_usage(ctx, caller, "language_detect", tokens=tokens)
    return result
