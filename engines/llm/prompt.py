"""Prompt assembly within the context window.

A grounded prompt is the grounding instruction (a system message), the conversation, and in its last user message
the sources, numbered from 1 in rank order, before the question. Sources are added while the prompt and the
answer's allowance fit the model's context window; the first one that does not fit whole is cut at a word when at
least :data:`MIN_SOURCE_TOKENS` of it fit, and the rest are left out. The answer keeps its whole allowance unless
the question alone leaves less (then it gets what is left, at least :data:`MIN_ANSWER_TOKENS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from contracts import languages
from contracts.errors import InvalidInput
from contracts.llm import REFUSAL, ChatMessage, GenerationRequest, PromptTooLong, Source

MIN_SOURCE_TOKENS = 32  # a source cut shorter than this is left out instead
MIN_ANSWER_TOKENS = 16
# a grounded answer ends where a small model starts to write the prompt's layout again
GROUNDED_STOPS = ("\nQuestion:", "\nSources:", "\n[1] (")

GROUNDING = (
    "You answer questions from documents. Use only the numbered sources in the user's message: never add facts "
    "they do not state. After each sentence, write the number of the source it comes from in square brackets, "
    f'for example [1]. If the sources do not answer the question, reply exactly: "{REFUSAL}"'
)


class Encoder(Protocol):
    context_window: int

    def encode(self, messages: Sequence[ChatMessage]) -> list[int]: ...


@dataclass
class Assembled:
    messages: list[ChatMessage]
    prompt_ids: list[int]
    max_tokens: int
    used: list[int] = field(default_factory=list)  # indexes of the request's sources in the prompt, in order
    truncated: list[int] = field(default_factory=list)


def instruction(answer_language: str | None) -> str:
    if answer_language:
        return f"{GROUNDING} Write the answer in {languages.name(answer_language)}."
    return GROUNDING


def source_block(sources: Sequence[Source], question: str) -> str:
    """The last user message of a grounded prompt: the numbered sources, then the question."""
    parts = ["Sources:"]
    for number, source in enumerate(sources, 1):
        title = f" ({source.title})" if source.title else ""
        parts.append(f"[{number}]{title}\n{source.text.strip()}")
    parts.append(f"Question: {question.strip()}")
    return "\n\n".join(parts)


def grounded_messages(request: GenerationRequest, sources: Sequence[Source]) -> list[ChatMessage]:
    """The grounding instruction first (the caller's system messages after it), the conversation, and the sources
    in its last user message."""
    turns = [m for m in request.messages if m.role != "system"]
    if not turns or turns[-1].role != "user":
        raise InvalidInput("Invalid request: field 'messages': the last message must be the user's question.")
    system = "\n\n".join(
        [instruction(request.answer_language)] + [m.content for m in request.messages if m.role == "system"]
    )
    last = ChatMessage(role="user", content=source_block(sources, turns[-1].content))
    return [ChatMessage(role="system", content=system), *turns[:-1], last]


def assemble(encoder: Encoder, request: GenerationRequest, max_answer_tokens: int) -> Assembled:
    """The prompt of ``request`` within ``encoder.context_window``; :class:`PromptTooLong` (400) when the
    conversation itself does not fit."""
    window = encoder.context_window
    wanted = max(1, min(request.sampling.max_tokens or max_answer_tokens, max_answer_tokens))
    if not request.grounded:
        ids = encoder.encode(request.messages)
        if len(ids) >= window:
            raise PromptTooLong(len(ids), window)
        return Assembled(list(request.messages), ids, min(wanted, window - len(ids)))

    messages = grounded_messages(request, [])
    ids = encoder.encode(messages)
    if len(ids) + min(wanted, MIN_ANSWER_TOKENS) > window:
        raise PromptTooLong(len(ids), window)
    answer = min(wanted, window - len(ids))
    budget = window - answer
    used: list[int] = []
    truncated: list[int] = []
    chosen: list[Source] = []
    for index, source in enumerate(request.sources):
        trial = grounded_messages(request, [*chosen, source])
        trial_ids = encoder.encode(trial)
        if len(trial_ids) <= budget:
            chosen.append(source)
            used.append(index)
            messages, ids = trial, trial_ids
            continue
        cut = _cut_to_fit(encoder, request, chosen, source, budget, len(ids))
        if cut is not None:
            chosen.append(cut[0])
            used.append(index)
            truncated.append(index)
            messages, ids = cut[1], cut[2]
        break
    return Assembled(messages, ids, answer, used, truncated)


def _cut_to_fit(
    encoder: Encoder, request: GenerationRequest, chosen: list[Source], source: Source, budget: int, without: int
) -> tuple[Source, list[ChatMessage], list[int]] | None:
    """The longest prefix of ``source`` (whole words) that fits ``budget``, when it brings at least
    :data:`MIN_SOURCE_TOKENS`; binary search over the word count."""
    if budget - without < MIN_SOURCE_TOKENS:
        return None
    words = source.text.split()
    best: tuple[Source, list[ChatMessage], list[int]] | None = None
    lo, hi = 1, len(words) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        candidate = Source(text=" ".join(words[:mid]) + " ...", title=source.title)
        messages = grounded_messages(request, [*chosen, candidate])
        ids = encoder.encode(messages)
        if len(ids) <= budget:
            best, lo = (candidate, messages, ids), mid + 1
        else:
            hi = mid - 1
    if best is None or len(best[2]) - without < MIN_SOURCE_TOKENS:
        return None
    return best
