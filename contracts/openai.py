"""Wire shapes of the OpenAI-compatible routes (``/v1/audio/...``, ``/v1/embeddings``, ``/v1/models``), with
OpenAI's field names (https://platform.openai.com/docs/api-reference). Errors: ``serve_app/errors.py``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from contracts.unicode import UnicodeText

# --- models ---------------------------------------------------------------------------------------------------


class ModelObject(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(description="Unix time: when this service started (the models are loaded at start).")
    owned_by: str = "khuluma"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelObject]


# --- embeddings -----------------------------------------------------------------------------------------------


class EmbeddingRequest(BaseModel):
    input: Any = Field(
        description="A string or a list of strings (token-id arrays are not supported); checked for valid Unicode by "
        "the service."
    )
    model: UnicodeText
    encoding_format: UnicodeText = Field(default="float", description="float, or base64 (little-endian float32)")
    dimensions: int | None = Field(default=None, description="Not supported: 400 when given.")
    user: UnicodeText | None = Field(default=None, description="Accepted and ignored.")
    input_type: Literal["query", "passage"] = Field(
        default="query",
        description="Khuluma extension: e5 embeds a search query and the passages it should find on different "
        "sides; `query` (default) also suits comparing short texts with each other.",
    )


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(description="The vector, or its base64 (float32, little-endian).")


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


# --- audio ----------------------------------------------------------------------------------------------------


class DurationUsage(BaseModel):
    type: Literal["duration"] = "duration"
    seconds: float


class TranscriptionJson(BaseModel):
    """``response_format=json`` (the default)."""

    text: str
    usage: DurationUsage | None = None


class VerboseSegment(BaseModel):
    id: int
    seek: int = Field(description="Start of the segment in 10 ms frames (Whisper's seek).")
    start: float
    end: float
    text: str
    tokens: list[int] = Field(description="Always empty: the pipeline does not return token ids.")
    temperature: float
    avg_logprob: float = Field(description="ln of the segment's confidence (geometric mean token probability).")
    compression_ratio: float = Field(description="gzip compression ratio of the segment's text, as Whisper's.")
    no_speech_prob: float = Field(description="Always 0.0: the pipeline keeps speech segments only (VAD).")


class VerboseWord(BaseModel):
    word: str
    start: float
    end: float
    probability: float | None = Field(default=None, description="Khuluma extension: the word's probability.")


class VerboseTranscription(BaseModel):
    """``response_format=verbose_json``; ``words`` only with ``timestamp_granularities[]=word``."""

    task: Literal["transcribe", "translate"] = "transcribe"
    language: str = Field(description="The language's English name in lower case (english, afrikaans), as Whisper.")
    duration: float
    text: str
    segments: list[VerboseSegment]
    words: list[VerboseWord] | None = None
    usage: DurationUsage | None = None
