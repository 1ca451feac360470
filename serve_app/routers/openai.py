"""OpenAI-compatible routes: ``/v1/audio/transcriptions``, ``/v1/audio/translations``, ``/v1/embeddings``,
``/v1/chat/completions``, ``/v1/models``. Authenticated with ``Authorization: Bearer <Khuluma token>`` (or
X-CLIENT-TOKEN, HTTP Basic, x-api-key); errors in OpenAI's shape (``serve_app/errors.py``). What is and is not
supported: ``docs/compatibility.md``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from contracts.openai import (
    ChatCompletion,
    ChatCompletionRequest,
    EmbeddingList,
    EmbeddingRequest,
    ModelList,
    ModelObject,
    TranscriptionJson,
    VerboseTranscription,
)
from serve_app.admission.kinds import LLM, SPEECH, TEXT, admitted_as
from serve_app.auth import Ctx, OpenAICaller
from serve_app.services import openai_audio, openai_chat, openai_embeddings, openai_models
from serve_app.uploads import multipart_openapi

router = APIRouter(prefix="/v1", tags=["openai-compatible"])

_FORM = (
    "Audio in any format the native routes read, with the form fields model, language, prompt (ignored), "
    "temperature, response_format, timestamp_granularities[] and stream."
)
_AUDIO: dict[str, Any] = {
    "response_model": None,
    "responses": {
        200: {
            "description": "json: {text}; verbose_json: segments (and words); text, srt, vtt: plain text; "
            "stream=true: server-sent events.",
            "model": TranscriptionJson | VerboseTranscription,
        }
    },
    "openapi_extra": multipart_openapi("file", _FORM),
}


@router.post("/audio/transcriptions", **_AUDIO)
@admitted_as(SPEECH)
async def transcriptions(request: Request, caller: OpenAICaller, ctx: Ctx) -> Response | TranscriptionJson:
    return await openai_audio.transcriptions(ctx, caller, request)


@router.post("/audio/translations", **_AUDIO)
@admitted_as(SPEECH)
async def translations(request: Request, caller: OpenAICaller, ctx: Ctx) -> Response | TranscriptionJson:
    """Speech to English text: 503 for non-English audio while no translation model is installed."""
    return await openai_audio.translations(ctx, caller, request)


@router.post("/embeddings", response_model=EmbeddingList)
@admitted_as(TEXT)
async def embeddings(body: EmbeddingRequest, caller: OpenAICaller, ctx: Ctx) -> EmbeddingList:
    return await openai_embeddings.embed(ctx, caller, body)


@router.post(
    "/chat/completions",
    response_model=ChatCompletion,
    responses={
        200: {
            "description": "stream=true: server-sent events (chat.completion.chunk).",
            "content": {"text/event-stream": {}},
        }
    },
)
@admitted_as(LLM)
async def chat_completions(
    body: ChatCompletionRequest, caller: OpenAICaller, ctx: Ctx
) -> ChatCompletion | StreamingResponse:
    """The configured language model; with the `knowledge_base` extension, grounded on that knowledge base with
    `citations`. 503 (`model_not_installed`) while no language model is configured."""
    return await openai_chat.completions(ctx, caller, body)


@router.get("/models", response_model=ModelList)
async def models(caller: OpenAICaller, ctx: Ctx) -> ModelList:
    """The speech models (whisper-1: the default one), the embedding model and the language model this service
    serves."""
    return await openai_models.list_models(ctx)


@router.get("/models/{model:path}", response_model=ModelObject)
async def model(model: str, caller: OpenAICaller, ctx: Ctx) -> ModelObject:
    return await openai_models.retrieve(ctx, model)
