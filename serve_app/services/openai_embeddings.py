"""``POST /v1/embeddings`` (OpenAI's shape): sentence vectors from the service's embedder.

The embedder is the Embeddings deployment when it runs on its own (``embeddings.placement: deployment``), else the
one inside the TextAnalysis replicas (the offline default), reached through ``TextClient.embed``. The inputs are
checked like the text routes' before the first hop: none empty, the size limits (``text.max_chars``,
``max_bytes``, ``max_word_chars``) over all inputs together, ``text.max_tokens`` per input, at most
:data:`MAX_INPUTS` inputs. Usage counts whitespace tokens, the unit the other text routes meter.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from contracts.embeddings import EmbeddingSource
from contracts.errors import InvalidInput
from contracts.openai import Embedding, EmbeddingList, EmbeddingRequest, EmbeddingUsage
from contracts.unicode import lone_surrogate
from serve_app.context import AppContext, required
from serve_app.services.openai_models import embedding_model
from serve_app.services.text import check_text
from serve_app.services.text_limits import TextLimits, check_size
from serve_app.services.usage import record_usage
from serve_app.tokens import Principal

ROUTE = "embeddings"
MAX_INPUTS = 2048  # OpenAI's limit per request


def _inputs(value: Any) -> list[str]:
    texts = [value] if isinstance(value, str) else value
    if isinstance(texts, list) and texts and all(isinstance(v, str) for v in texts):
        for i, text in enumerate(texts):
            if lone_surrogate(text) is not None:
                where = "input" if isinstance(value, str) else f"input.{i}"
                raise InvalidInput(f"Invalid request: field '{where}': text is not valid Unicode (a lone surrogate).")
        return texts
    if isinstance(value, list) and value and all(isinstance(v, int | list) for v in value):
        raise InvalidInput(
            "Invalid request: field 'input': token-id arrays are not supported; send the text as a string or a "
            "list of strings."
        )
    raise InvalidInput("Invalid request: field 'input' must be a non-empty string or a non-empty list of strings.")


def _embedder(ctx: AppContext) -> EmbeddingSource:
    return ctx.clients.embeddings or required(ctx.clients.text, "embeddings")


def _encoded(vector: np.ndarray, encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return [float(x) for x in vector.tolist()]


async def embed(ctx: AppContext, caller: Principal, request: EmbeddingRequest) -> EmbeddingList:
    if request.encoding_format not in ("float", "base64"):
        raise InvalidInput("Invalid request: field 'encoding_format' must be 'float' or 'base64'.")
    if request.dimensions is not None:
        raise InvalidInput(
            "Invalid request: field 'dimensions' is not supported: the model answers its own dimensions only."
        )
    texts = _inputs(request.input)
    if len(texts) > MAX_INPUTS:
        raise InvalidInput(f"Invalid request: field 'input' has {len(texts)} items; the limit is {MAX_INPUTS}.")
    limits = TextLimits.of(ctx.settings)
    check_size(texts, "input", limits)
    tokens = sum(check_text(t, limits, ctx.settings.text.max_tokens, "input") for t in texts)
    model = await embedding_model(ctx, request.model)
    vectors = await _embedder(ctx).embed(texts, request.input_type)
    await record_usage(ctx, caller, ROUTE, tokens=tokens)
    return EmbeddingList(
        data=[Embedding(index=i, embedding=_encoded(v, request.encoding_format)) for i, v in enumerate(vectors)],
        model=model,
        usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens),
    )
