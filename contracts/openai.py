"""Wire shapes of the OpenAI-compatible routes (``/v1/audio/...``, ``/v1/embeddings``, ``/v1/models``), with
OpenAI's field names (https://platform.openai.com/docs/api-reference). Errors: ``serve_app/errors.py``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from contracts.llm import Citation
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


# --- chat completions -----------------------------------------------------------------------------------------


class ChatContentPart(BaseModel):
    type: UnicodeText = Field(description="Only `text` parts are read; any other kind is 400.")
    text: UnicodeText | None = None


class ChatCompletionMessage(BaseModel):
    role: Literal["system", "developer", "user", "assistant"] = Field(
        description="`developer` is read as `system`; tool messages are not supported."
    )
    content: UnicodeText | list[ChatContentPart] | None = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    model: UnicodeText
    messages: list[ChatCompletionMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1, description="OpenAI's newer name of max_tokens.")
    temperature: float = Field(default=1.0, ge=0, le=2, description="As OpenAI's default; 0 decodes greedily.")
    top_p: float = Field(default=1.0, gt=0, le=1)
    stop: UnicodeText | list[UnicodeText] | None = Field(default=None, description="Up to 4 stop strings.")
    n: int = Field(default=1, description="Only 1 is supported (400 otherwise).")
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: UnicodeText | None = Field(default=None, description="Accepted and ignored.")
    tools: list[Any] | None = Field(default=None, description="Not supported: 400 when given.")
    knowledge_base: UnicodeText | None = Field(
        default=None,
        description="Khuluma extension: the id of one of your knowledge bases. The last user message is then "
        "answered from its documents only, with `citations`, as the ask route answers (a refusal when nothing "
        "relevant is found).",
    )
    top_k: int = Field(
        default=5, ge=1, le=20, description="Khuluma extension: passages retrieved with `knowledge_base`."
    )


class ChatCompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop", "length"]
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: ChatCompletionUsage
    citations: list[Citation] | None = Field(
        default=None, description="Khuluma extension, with `knowledge_base`: the passages the answer was given."
    )
