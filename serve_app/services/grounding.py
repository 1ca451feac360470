"""What the ask route and the chat completions share when they answer from a knowledge base: which answerer serves,
the question's checks, the passages close enough to answer from (the refusal rule), the extractive answer, and the
citations.

Two answerers:

- the **extractive** answerer (``llm.model`` unset: every fresh install): the Search deployment quotes the passage
  sentences that answer the question, chosen with the embedder it has loaded already (``SearchClient.extract``);
  nothing else is loaded, and every sentence is a passage's own;
- a **language model** (``llm.model``): the LLM deployment writes the answer and checks each sentence against the
  passages it cites before it is shown (``GenerationEnd.sentences`` says which were generated, replaced by the
  passage's own sentence, or withheld).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence

from contracts.errors import InvalidInput
from contracts.llm import (
    AnswerSentence,
    Citation,
    GenerationEvent,
    GenerationStart,
    LLMClient,
    PromptTooLong,
    Source,
)
from contracts.search import ExtractRequest, Passage
from serve_app.context import AppContext, required
from serve_app.services import search
from serve_app.services.text_limits import TextLimits, check_size
from serve_app.tokens import Principal

_REFUSAL_KEY = "don't know from these documents"


def language_model(ctx: AppContext) -> LLMClient | None:
    """The LLM deployment's handle; None where the extractive answerer serves (no language model configured). A
    model that is configured but not deployed is the 503 of :func:`serve_app.context.required`."""
    if ctx.answers_extractively:
        return None
    return required(ctx.clients.llm, "llm")


def check_question(ctx: AppContext, text: str, field: str) -> None:
    if not text.strip():
        raise InvalidInput(f"Invalid request: field '{field}' must not be empty.")
    check_size(text, field, TextLimits.of(ctx.settings, ctx.settings.llm.max_question_chars))


async def relevant_passages(ctx: AppContext, caller: Principal, kb_id: str, question: str, top_k: int) -> list[Passage]:
    """The knowledge base's best passages for ``question`` that are close enough in meaning to answer from."""
    floor = ctx.settings.llm.min_similarity
    hits = await search.passages(ctx, caller, kb_id, question, top_k)
    return [p for p in hits if p.similarity is not None and p.similarity >= floor]


def sources(passages: Sequence[Passage]) -> list[Source]:
    return [Source(text=p.text, title=p.filename) for p in passages]


def is_refusal(answer: str) -> bool:
    return _REFUSAL_KEY in answer.lower().replace("’", "'")


def citations(
    passages: Sequence[Passage],
    used: Sequence[int],
    texts: Sequence[str] | None = None,
    truncated: Sequence[int] = (),
    cited: Sequence[AnswerSentence] = (),
) -> list[Citation]:
    """The passages the answerer read (``used``: indexes into ``passages``), numbered from 1 in that order, each
    with the text it read (``texts``, by the same index: a passage cut to fit a context window) and whether a shown
    sentence of the answer cites it."""
    numbers = {n for sentence in cited if sentence.origin != "withheld" for n in sentence.citations}
    return [
        Citation(
            id=number,
            document_id=passages[index].document_id,
            filename=passages[index].filename,
            chunk_index=passages[index].chunk_index,
            text=texts[index] if texts is not None else passages[index].text,
            score=passages[index].score,
            cited=number in numbers,
            truncated=index in truncated,
        )
        for number, index in enumerate(used, 1)
    ]


async def extract(ctx: AppContext, question: str, passages: Sequence[Passage]) -> list[AnswerSentence]:
    """The extractive answer: the passage sentences that answer ``question``, each citing its passage (numbered as
    the passages are); empty when none does."""
    store = required(ctx.clients.search, "search")
    found = await store.extract(ExtractRequest(question=question, passages=[p.text for p in passages]))
    return [
        AnswerSentence(text=cite(s.text, [s.source + 1]), origin="extracted", citations=[s.source + 1])
        for s in found.sentences
    ]


def cite(sentence: str, numbers: Sequence[int]) -> str:
    """``sentence`` with citation markers before its final stop: ``Open at 08:00 [1].``"""
    body = sentence.rstrip()
    stop = len(body) - len(body.rstrip(".!?;:"))
    marker = f" [{', '.join(map(str, numbers))}]"
    return f"{body[: len(body) - stop]}{marker}{body[len(body) - stop :]}"


def shown(sentences: Sequence[AnswerSentence]) -> str:
    """The answer's text: its shown sentences, in order."""
    return " ".join(s.text for s in sentences if s.origin != "withheld" and s.text)


async def started(events: AsyncGenerator[GenerationEvent], field: str) -> GenerationStart:
    """The generation's first event (the prompt as assembled, before any token): errors before it answer as HTTP
    errors, a prompt that leaves no room for an answer as a 400 naming ``field``. ``events`` is closed on any
    error."""
    try:
        start = await anext(events)
        assert isinstance(start, GenerationStart)
        return start
    except PromptTooLong as exc:
        await events.aclose()
        raise exc.for_field(field) from None
    except BaseException:
        await events.aclose()
        raise
