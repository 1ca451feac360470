"""Contract of the LLM deployment (the language model behind the ask route and ``/v1/chat/completions``): its
request, event and result models and the typed handle callers use; below, the wire models of the ask route.

One handle serves both engines: CTranslate2's generator in the LLM replica, or vLLM through Ray Serve LLM (the
replica then hands generation to an ``LLMServer`` deployment). The replica owns the tokenizer and the chat
template, so it assembles every prompt: the sources a grounded answer may use go in as plain passages and come
back numbered, only those that fit the model's context window (:class:`GenerationStart`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import Literal

from pydantic import BaseModel, Field

from contracts.capabilities import CapabilityInfo
from contracts.errors import DomainError, InvalidInput, find_domain_error
from contracts.handles import DeploymentClient, overload_of
from contracts.installs import LLM_NOT_INSTALLED, install_hint
from contracts.unicode import UnicodeText

Role = Literal["system", "user", "assistant"]
FinishReason = Literal["stop", "length"]
# What a grounded answer says when its sources do not hold the answer (the route refuses with it without asking
# the model when retrieval finds nothing relevant, and the model is told to answer exactly this).
REFUSAL = "I don't know from these documents."
# The answerer of a fresh install (no language model configured): passage sentences chosen by the embedding model.
EXTRACTIVE = "extractive"


class PromptTooLong(InvalidInput):
    """The prompt (before any source) leaves no room for an answer in the model's context window. ``field``: the
    request field to shorten, as the service names it (:meth:`for_field`)."""

    def __init__(self, tokens: int, window: int, field: str = "messages") -> None:
        self.tokens, self.window, self.field = tokens, window, field
        super().__init__(
            f"Invalid request: field '{field}': the prompt has {tokens} tokens and the model's context window is "
            f"{window} with room for the answer (KHULUMA_LLM_CONTEXT_TOKENS caps it); shorten it."
        )

    def for_field(self, field: str) -> PromptTooLong:
        return PromptTooLong(self.tokens, self.window, field)

    def __reduce__(self) -> tuple[object, ...]:
        return (PromptTooLong, (self.tokens, self.window, self.field))


class ChatMessage(BaseModel):
    role: Role
    content: str


class Source(BaseModel):
    """A passage an answer may be grounded on, in rank order; the replica numbers those that fit from 1."""

    text: str
    title: str | None = Field(default=None, description="What the prompt names it by (the document's file name).")


class Sampling(BaseModel):
    max_tokens: int | None = Field(default=None, description="None: the deployment's `llm.max_answer_tokens`.")
    temperature: float = Field(default=0.0, ge=0, le=2, description="0: greedy (the default for grounded answers).")
    top_p: float = Field(default=1.0, gt=0, le=1)
    stop: list[str] = Field(default_factory=list, description="Generation ends before any of these strings.")


class GenerationRequest(BaseModel):
    """A conversation to continue. With ``grounded``, the replica puts the grounding instruction first and the
    sources that fit into the last user message; ``answer_language`` (ISO 639-3) is the language it is told to
    answer in."""

    messages: list[ChatMessage]
    sources: list[Source] = Field(default_factory=list)
    grounded: bool = False
    answer_language: str | None = None
    sampling: Sampling = Field(default_factory=Sampling)


class GenerationStart(BaseModel):
    """The first event of a generation: the prompt as assembled, before any token."""

    type: Literal["start"] = "start"
    model: str
    prompt_tokens: int
    max_tokens: int = Field(description="The answer's token allowance (what the context window leaves, at most).")
    sources_used: list[int] = Field(
        description="Indexes (into the request's sources) of the passages in the prompt, in order: the prompt "
        "numbers them 1, 2, ... The others did not fit the context window."
    )
    truncated: list[int] = Field(default_factory=list, description="Of those, the ones cut short to fit.")


class GenerationDelta(BaseModel):
    type: Literal["delta"] = "delta"
    text: str


SentenceOrigin = Literal["generated", "extracted", "withheld"]


class AnswerSentence(BaseModel):
    """One sentence of a grounded answer and what became of it: ``generated`` (the model's, checked against the
    passages it cites), ``extracted`` (a passage's own sentence: the extractive answerer's, or in place of a
    generated one the passages did not support) or ``withheld`` (not shown: unsupported with no passage sentence
    to answer instead, a repetition, or cut short by a loop)."""

    text: str = Field(description="The sentence as shown, with its citation markers; empty when withheld.")
    origin: SentenceOrigin
    citations: list[int] = Field(default_factory=list, description="The passages it cites, numbered as `citations`.")
    note: str | None = Field(default=None, description="Why it was replaced or withheld (the value is not repeated).")


class GenerationEnd(BaseModel):
    type: Literal["end"] = "end"
    finish_reason: FinishReason
    completion_tokens: int
    looped: bool = Field(default=False, description="A repetition loop was detected: the generation was cut there.")
    sentences: list[AnswerSentence] = Field(
        default_factory=list, description="A grounded generation's sentences, checked (the deltas showed these)."
    )


GenerationEvent = GenerationStart | GenerationDelta | GenerationEnd


class Generation(BaseModel):
    """A whole generation (what :meth:`LLMClient.generate` returns)."""

    text: str
    start: GenerationStart
    end: GenerationEnd


class LLMClient(DeploymentClient):
    """Typed handle of ``deployments.llm:LLM``."""

    deployment = "LLM"

    async def generate(self, request: GenerationRequest) -> Generation:
        """deployments.llm.LLM.generate: the whole answer at once."""
        return await self._call(self._handle.generate.remote(request))

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[GenerationEvent]:
        """deployments.llm.LLM.stream: a :class:`GenerationStart`, deltas, then a :class:`GenerationEnd`. A domain
        error raised in the replica comes back as itself, a full queue as ``Overloaded``; closing the iterator
        early cancels the generation in the replica."""
        response = self._handle.options(stream=True).stream.remote(request)
        try:
            async for event in response:
                yield event
        except DomainError:
            raise
        except Exception as exc:
            known = find_domain_error(exc) or overload_of(exc)
            if known is not None:
                raise known from None
            raise
        finally:
            response.cancel()  # the caller stopped reading (a client gone): the replica stops generating
        self.last_answer = time.monotonic()


def not_installed(note: str = LLM_NOT_INSTALLED) -> CapabilityInfo:
    """/api/v1/models' entry for a language model that is configured but cannot serve."""
    return CapabilityInfo(capability="llm", installed=False, note=note)


# What each answerer measured (scripts/eval_ask.py over tests/data/ask: 37 questions on the repository's docs and 62
# in South African settings; docs/search.md has the tables and the commands): shown in /api/v1/models. A model's
# entry is keyed by the name scripts/build_smollm2.py registers it under.
MEASURED = {
    EXTRACTIVE: "Measured (scripts/eval_ask.py --answer): on 62 questions in South African settings (English, "
    "isiZulu, Afrikaans) fact recall 0.82 on the 44 answerable, 17 of 18 unanswerable refused; on 37 questions over "
    "the project's docs fact recall 0.79 on 24, 12 of 13 refused; no shown sentence with a number or name its "
    "passages lack; first delta 0.28 s (South African set) and 0.6 to 0.9 s (docs) median on a shared 2-core "
    "machine.",
    "smollm2-135m-instruct": "Measured (scripts/eval_ask.py --model smollm2-135m-instruct, the model built by "
    "scripts/build_smollm2.py, repetition_penalty 1.1, no_repeat_ngram_size 4): fact recall 0.71 on 44 answerable "
    "questions in South African settings (12 refused), 17 of 18 unanswerable refused; 0.46 on 24 over the "
    "project's docs (8 refused), 11 of 13 refused; most of its sentences withheld or replaced by the passage's own; "
    "no shown sentence with a number or name its passages lack; first delta 1.1 to 2.5 s (South African set) and "
    "3 to 6 s (docs) median on a shared 2-core machine.",
}


def measured(answerer: str) -> str:
    """What ``answerer`` (``extractive`` or a registered model's name) measured, or how to measure it."""
    return MEASURED.get(answerer, "Not measured here: scripts/eval_ask.py --model NAME measures it.")


def extractive_answerer(embedding_model: str | None) -> CapabilityInfo:
    """/api/v1/models' entry while no language model is configured: the extractive answerer serves."""
    return CapabilityInfo(
        capability="llm",
        installed=True,
        model=EXTRACTIVE,
        backend=f"passage sentences ranked by {embedding_model or 'the embedding model'} in the Search deployment",
        note="The extractive answerer (no language model is configured: KHULUMA_LLM_MODEL): answers from a "
        "knowledge base (POST /api/v1/search/knowledgebase/{id}/ask, and /v1/chat/completions with "
        "`knowledge_base`) quote the passage sentences that answer the question, with citations, in the documents' "
        f"language; a chat without a knowledge base needs a language model ({install_hint('llm')}). "
        + measured(EXTRACTIVE),
    )


# --- wire models of the routes (what only the HTTP edge reads and writes) ---


class AskRequest(BaseModel):
    question: UnicodeText = Field(description="What to answer from the knowledge base's documents.")
    top_k: int = Field(default=5, ge=1, le=20, description="Passages retrieved to ground the answer on.")
    stream: bool = Field(
        default=False,
        description="Answer as server-sent events: `citations` first, then `delta` events with the answer's text, "
        "then `done` with the whole answer (an `error` event if it fails midway).",
    )
    lang: UnicodeText | None = Field(
        default=None,
        description="Language of the answer (any spelling the search routes accept: zul, zu, isiZulu, ...). Null: "
        "the question's language, detected.",
    )


class Citation(BaseModel):
    id: int = Field(description="The number the answer cites this passage by: [1], [2], ...")
    document_id: str | None
    filename: str | None
    chunk_index: int | None
    text: str = Field(description="The passage (the model read only its beginning where `truncated`).")
    score: float = Field(description="The passage's retrieval score (0..1, as the query route ranks).")
    cited: bool = Field(description="Whether the answer cites it.")
    truncated: bool = Field(default=False, description="Cut at a word to fit the model's context window.")


class AskUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int


class AskResult(BaseModel):
    answer: str = Field(description="The shown sentences, each checked against the passages it cites.")
    language: str = Field(description="ISO 639-3 code of the answer's language.")
    model: str | None = Field(
        description="What answered: the language model, or `extractive` (passage sentences chosen by the embedding "
        "model); null: refused before asking either."
    )
    citations: list[Citation]
    refused: bool = Field(
        description="The documents do not answer the question: the answer says so (\"I don't know from these "
        'documents.") and cites nothing.'
    )
    translated_with: str | None = Field(
        default=None,
        description="The translation model when the question went to English and the answer came back through it.",
    )
    warnings: list[str] = Field(default_factory=list)
    usage: AskUsage | None = None
    sentences: list[AnswerSentence] = Field(
        default_factory=list,
        description="Every sentence of the answer and where it came from: generated by the model and checked "
        "against its passages, extracted from a passage, or withheld (then not in `answer`).",
    )
