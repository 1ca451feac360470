"""``POST /v1/chat/completions`` (OpenAI's shape) from the language model's handle.

A conversation of text messages is continued by the configured model (``model`` must name it: ``GET /v1/models``).
With the ``knowledge_base`` extension the last user message is answered as the ask route answers it: from that
knowledge base's passages only (the same refusal rule, the same answerer: the extractive one where no language
model is configured, else the model's sentences checked against the passages before they are sent), with their
``citations`` in the completion (in the first chunk when streaming). Metered as ``chat_completions`` (whitespace
tokens of the messages and the answer); ``usage`` counts the model's own tokens, as OpenAI's does.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse

from contracts.errors import DomainError, InvalidInput, ModelMissing, http_status
from contracts.installs import LLM_NOT_INSTALLED
from contracts.llm import (
    REFUSAL,
    ChatMessage,
    Citation,
    GenerationDelta,
    GenerationEnd,
    GenerationEvent,
    GenerationRequest,
    GenerationStart,
    Role,
    Sampling,
)
from contracts.openai import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionMessage,
    ChatCompletionRequest,
    ChatCompletionUsage,
)
from contracts.search import Passage
from serve_app.context import AppContext
from serve_app.errors import error_body
from serve_app.services import grounding, search
from serve_app.services.openai_models import chat_model
from serve_app.services.text_limits import TextLimits, check_size
from serve_app.services.usage import count_tokens, record_usage
from serve_app.tokens import Principal

ROUTE = "chat_completions"
PATH = "/v1/chat/completions"
MAX_STOPS = 4  # OpenAI's limit
_background: set[asyncio.Task[None]] = set()


def _text(message: ChatCompletionMessage, index: int) -> str:
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if part.type != "text" or part.text is None:
            raise InvalidInput(
                f"Invalid request: field 'messages.{index}.content': only text parts are supported (not {part.type})."
            )
        texts.append(part.text)
    return "".join(texts)


def _messages(body: ChatCompletionRequest) -> list[ChatMessage]:
    roles: dict[str, Role] = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
    return [ChatMessage(role=roles[m.role], content=_text(m, i)) for i, m in enumerate(body.messages)]


def _sampling(body: ChatCompletionRequest) -> Sampling:
    stops = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    if len(stops) > MAX_STOPS:
        raise InvalidInput(f"Invalid request: field 'stop': at most {MAX_STOPS} stop strings.")
    return Sampling(
        max_tokens=body.max_completion_tokens or body.max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        stop=[s for s in stops if s],
    )


async def completions(
    ctx: AppContext, caller: Principal, body: ChatCompletionRequest
) -> ChatCompletion | StreamingResponse:
    if body.n != 1:
        raise InvalidInput("Invalid request: field 'n': only 1 choice is supported.")
    if body.tools:
        raise InvalidInput("Invalid request: field 'tools': tool calls are not supported.")
    kb_id = None if body.knowledge_base is None else search.parse_id(body.knowledge_base, "knowledge_base")
    llm = grounding.language_model(ctx)
    if llm is None and kb_id is None:  # the extractive answerer answers from a knowledge base only
        raise ModelMissing(LLM_NOT_INSTALLED)
    model = await chat_model(ctx, body.model)
    messages = _messages(body)
    check_size([m.content for m in messages], "messages", TextLimits.of(ctx.settings))
    sampling = _sampling(body)
    metered = sum(count_tokens(m.content) for m in messages)
    passages: list[Passage] = []
    request = GenerationRequest(messages=messages, sampling=sampling)
    if kb_id is not None:
        question = next((m.content for m in reversed(messages) if m.role == "user"), "")
        grounding.check_question(ctx, question, "messages")
        passages = await grounding.relevant_passages(ctx, caller, kb_id, question, body.top_k)
        if llm is None or not passages:  # the extractive answer, or the refusal without asking the model
            sentences = await grounding.extract(ctx, question, passages) if passages else []
            text = grounding.shown(sentences) or REFUSAL
            cited = grounding.citations(passages, range(len(passages)), cited=sentences) if sentences else []
            await record_usage(ctx, caller, ROUTE, tokens=metered + count_tokens(text))
            return _whole(body, model, text, cited)
        request = GenerationRequest(
            messages=messages, sources=grounding.sources(passages), grounded=True, sampling=sampling
        )
    assert llm is not None  # without a language model every case returned above
    events = llm.stream(request)
    start = await grounding.started(events, "messages")
    read = [source.text for source in request.sources]
    citations = grounding.citations(passages, start.sources_used, read, start.truncated) if kb_id else None
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        chunks = _chunks(ctx, caller, completion_id, model, start, events, citations, include_usage, metered)
        return StreamingResponse(chunks, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    parts: list[str] = []
    end: GenerationEnd | None = None
    try:
        async for event in events:
            if isinstance(event, GenerationDelta):
                parts.append(event.text)
            elif isinstance(event, GenerationEnd):
                end = event
    except DomainError:
        await record_usage(ctx, caller, ROUTE, status="failed", tokens=metered)
        raise
    assert end is not None
    text = "".join(parts)
    if kb_id is not None:  # now that the answer is whole: which passages its shown sentences cite
        citations = grounding.citations(passages, start.sources_used, read, start.truncated, end.sentences)
    await record_usage(ctx, caller, ROUTE, tokens=metered + count_tokens(text))
    return ChatCompletion(
        id=completion_id,
        created=int(time.time()),
        model=model,
        choices=[ChatChoice(message=AssistantMessage(content=text), finish_reason=end.finish_reason)],
        usage=_usage(start.prompt_tokens, end.completion_tokens),
        citations=citations,
    )


def _usage(prompt: int, completion: int) -> ChatCompletionUsage:
    return ChatCompletionUsage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


def _whole(
    body: ChatCompletionRequest, model: str, text: str, citations: list[Citation]
) -> ChatCompletion | StreamingResponse:
    """A completion no language model wrote: the extractive answer, or the refusal."""
    completion = ChatCompletion(
        id=f"chatcmpl-{uuid.uuid4().hex}",
        created=int(time.time()),
        model=model,
        choices=[ChatChoice(message=AssistantMessage(content=text), finish_reason="stop")],
        usage=_usage(0, 0),
        citations=citations,
    )
    if not body.stream:
        return completion

    async def chunks() -> AsyncIterator[str]:
        base = {"id": completion.id, "object": "chat.completion.chunk", "created": completion.created, "model": model}
        first = {"role": "assistant", "content": text}
        yield _data({**base, "choices": [_choice(first, None)], "citations": [c.model_dump() for c in citations]})
        yield _data({**base, "choices": [_choice({}, "stop")]})
        if body.stream_options and body.stream_options.include_usage:
            yield _data({**base, "choices": [], "usage": completion.usage.model_dump()})
        yield "data: [DONE]\n\n"

    return StreamingResponse(chunks(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def _choice(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}


def _data(chunk: dict[str, Any]) -> str:
    return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"


async def _chunks(
    ctx: AppContext,
    caller: Principal,
    completion_id: str,
    model: str,
    start: GenerationStart,
    events: AsyncIterator[GenerationEvent],
    citations: list[Citation] | None,
    include_usage: bool,
    metered: int,
) -> AsyncIterator[str]:
    """OpenAI's stream: a first chunk with the role (and the citations), content chunks, a last chunk with the
    finish reason, the usage chunk when asked for, then ``[DONE]``; an error midway is an ``error`` chunk."""
    base = {"id": completion_id, "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    first: dict[str, Any] = {**base, "choices": [_choice({"role": "assistant", "content": ""}, None)]}
    if citations is not None:
        first["citations"] = [c.model_dump() for c in citations]
    yield _data(first)
    parts: list[str] = []
    done = False
    try:
        async for event in events:
            if isinstance(event, GenerationDelta):
                parts.append(event.text)
                yield _data({**base, "choices": [_choice({"content": event.text}, None)]})
            elif isinstance(event, GenerationEnd):
                yield _data({**base, "choices": [_choice({}, event.finish_reason)]})
                if include_usage:
                    usage = _usage(start.prompt_tokens, event.completion_tokens)
                    yield _data({**base, "choices": [], "usage": usage.model_dump()})
        done = True
        await record_usage(ctx, caller, ROUTE, tokens=metered + count_tokens("".join(parts)))
        yield "data: [DONE]\n\n"
    except DomainError as exc:
        done = True
        await record_usage(ctx, caller, ROUTE, status="failed", tokens=metered)
        yield _data(error_body(PATH, http_status(exc), exc.detail, exc))
    finally:
        if not done:  # the client went away: metered off this task
            task = asyncio.get_running_loop().create_task(
                record_usage(ctx, caller, ROUTE, status="failed", tokens=metered)
            )
            _background.add(task)
            task.add_done_callback(_background.discard)
