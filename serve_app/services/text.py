"""Text analysis services: NER, sentiment, intent classification, language identification."""

from __future__ import annotations

import uuid
from typing import Any

from serve_app.context import AppContext
from contracts.errors import InvalidInput, Unavailable
from serve_app.services.usage import count_tokens, record_usage
from serve_app.tokens import Principal


def check_text(text: str, limit: int, field: str = "encoded_text") -> int:
    if not text or not text.strip():
        raise InvalidInput(f"Invalid request: field '{field}' must not be empty.")
    tokens = count_tokens(text)
    if tokens > limit:
        raise InvalidInput(f"Text has {tokens} tokens; the limit is {limit} tokens per request.")
    return tokens


async def entities(ctx: AppContext, caller: Principal, text: str) -> list[dict[str, Any]]:
    tokens = check_text(text, ctx.settings.text.max_tokens)
    result = await ctx.backends.require("text").ner(text)
    await record_usage(ctx, caller, "entity_recognition", tokens=tokens)
    return result


async def sentiments(ctx: AppContext, caller: Principal, text: str) -> dict[str, Any]:
    tokens = check_text(text, ctx.settings.text.max_tokens)
    sentences = await ctx.backends.require("text").sentiment(text)
    await record_usage(ctx, caller, "sentiment_analysis", tokens=tokens)
    return {"Id": str(uuid.uuid4()), "Sentiments": sentences}


async def classify(ctx: AppContext, caller: Principal, examples: list[dict[str, str]],
                   inputs: list[str]) -> list[dict[str, Any]]:
    if not ctx.settings.text.classify_enabled:
        raise Unavailable("Intent classification is temporarily unavailable because of maintenance.")
    counts: dict[str, int] = {}
    for ex in examples:
        if not ex["intent"].strip() or not ex["example"].strip():
            raise InvalidInput("Invalid request: every example needs a non-empty 'intent' and 'example'.")
        counts[ex["intent"]] = counts.get(ex["intent"], 0) + 1
    if len(counts) < 2:
        raise InvalidInput("Invalid request: 'examples' must cover at least two intents.")
    few = sorted(intent for intent, n in counts.items() if n < 2)
    if few:
        raise InvalidInput(f"Invalid request: at least two examples are needed per intent; too few for: {', '.join(few)}.")
    if not inputs or any(not t.strip() for t in inputs):
        raise InvalidInput("Invalid request: 'inputs' must be a non-empty list of non-empty strings.")
    result = await ctx.backends.require("text").classify(examples, inputs)
    await record_usage(ctx, caller, "classify", tokens=sum(count_tokens(t) for t in inputs))
    return result


async def detect_language(ctx: AppContext, caller: Principal, text: str, spans: bool) -> dict[str, Any]:
    tokens = check_text(text, ctx.settings.text.max_tokens, "text")
    result = await ctx.backends.require("text").detect_language(text, spans)
    await record_usage(ctx, caller, "language_detect", tokens=tokens)
    return result
