"""Answers from a knowledge base (``POST /api/v1/search/knowledgebase/{id}/ask``).

One question, one path:
1. checks before the first hop: the question's size, the language asked for, the answerer (a language model
   configured but not deployed is a 503);
2. retrieval through the Search deployment (tenancy: another customer's knowledge base is 404), and the refusal
   rule: only passages whose similarity to the question reaches ``llm.min_similarity`` may ground an answer; with
   none, the answer is :data:`contracts.llm.REFUSAL` and no answerer runs;
3. the answer: the extractive answerer's passage sentences (no language model configured), or the language
   model's, each sentence checked against its passages in the LLM deployment before it is shown (the deltas lag
   a sentence behind the model and never take text back); the answer's language (``services/answer_language.py``:
   a translation that changes a number of the checked text is not shown);
4. citations: the passages the answerer read, numbered as the answer cites them;
5. metering (``knowledgebase_ask``: whitespace tokens of the question and the answer), failed once work started
   and did not finish.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi.responses import StreamingResponse

from contracts.errors import DomainError, ModelMissing, UnsupportedLanguage, http_status
from contracts.llm import (
    EXTRACTIVE,
    REFUSAL,
    AnswerSentence,
    AskRequest,
    AskResult,
    AskUsage,
    ChatMessage,
    GenerationDelta,
    GenerationEnd,
    GenerationEvent,
    GenerationRequest,
    GenerationStart,
    LLMClient,
    Sampling,
)
from contracts.search import Passage
from serve_app.context import AppContext
from serve_app.services import answer_language as language
from serve_app.services import grounding, search
from serve_app.services.usage import count_tokens, record_usage
from serve_app.tokens import Principal

log = logging.getLogger(__name__)

ROUTE = "knowledgebase_ask"
_NUMBER_CHANGED = (
    "The translation into {} changed a number, so the answer is the checked text as it was, before translation."
)
_background: set[asyncio.Task[None]] = set()  # metering of streams whose client went away


async def ask(ctx: AppContext, caller: Principal, kb_id: str, body: AskRequest) -> AskResult | StreamingResponse:
    kb_id = search.parse_id(kb_id)
    grounding.check_question(ctx, body.question, "question")
    lang = search.text_language(body.lang, "lang")
    llm = grounding.language_model(ctx)  # the request is well formed: now whether an answerer can answer it
    if llm is None:
        result = await _extractive(ctx, caller, kb_id, body, lang)
        await record_usage(ctx, caller, ROUTE, tokens=count_tokens(body.question) + count_tokens(result.answer))
        return _stream_response(_replay(result)) if body.stream else result
    prepared = await _prepare(ctx, caller, kb_id, body, lang, llm)
    if not prepared.passages:  # nothing relevant: refuse without asking the model
        result = await _refusal(ctx, prepared.plan)
        await record_usage(ctx, caller, ROUTE, tokens=count_tokens(body.question) + count_tokens(result.answer))
        return _stream_response(_replay(result)) if body.stream else result
    events = llm.stream(prepared.request)
    start = await grounding.started(events, "question")
    flow = _answer_flow(ctx, caller, body, prepared, start, events)
    if body.stream:
        return _stream_response(flow)
    answer: AskResult | None = None
    async for kind, data in flow:
        if kind == "error":
            raise data["error"]
        if kind == "done":
            answer = data["result"]
    assert answer is not None
    return answer


# --- the extractive answerer ----------------------------------------------------------------------------------------


async def _extractive(ctx: AppContext, caller: Principal, kb_id: str, body: AskRequest, lang: str | None) -> AskResult:
    """The passage sentences that answer the question, cited, in the documents' own language (through the
    translation model into the one asked for where one is installed)."""
    plan_task = asyncio.ensure_future(language.question_language(ctx, body.question, lang))
    try:
        passages = await grounding.relevant_passages(ctx, caller, kb_id, body.question, body.top_k)
        sentences = await grounding.extract(ctx, body.question, passages) if passages else []
    except BaseException:
        plan_task.cancel()
        raise
    asked, warnings = await plan_task
    wanted = lang or asked
    if not sentences:
        plan = language.LanguagePlan(asked, wanted, wanted, warnings=warnings)
        return await _refusal(ctx, plan, model=EXTRACTIVE if passages else None)
    answer = grounding.shown(sentences)
    quoted = passages[sentences[0].citations[0] - 1].language or "und"
    written, translated_with = quoted, None
    if wanted not in (quoted, "und") and quoted != "und":
        if language.translation_ready(ctx, wanted) and language.translation_ready(ctx, quoted):
            try:
                translated = await language.translate_answer(ctx, answer, wanted, source=quoted)
                if language.numbers_kept(answer, translated):
                    answer, written, translated_with = translated, wanted, _translation_model(ctx)
                    warnings.append(
                        f"The quoted sentences were translated with {translated_with}: their numbers are the "
                        "passages', their names are not checked again."
                    )
                else:
                    warnings.append(_NUMBER_CHANGED.format(language.local_name(wanted)))
            except (UnsupportedLanguage, ModelMissing) as exc:
                warnings.append(
                    f"The quoted sentences are as the documents have them: translating failed: {exc.detail}"
                )
        else:
            warnings.append(
                f"The answer quotes the documents, which are in {language.local_name(quoted)}; no translation "
                f"model is installed to put it in {language.local_name(wanted)} (KHULUMA_TRANSLATION_MODEL)."
            )
    return AskResult(
        answer=answer,
        language=written,
        model=EXTRACTIVE,
        citations=grounding.citations(passages, range(len(passages)), cited=sentences),
        refused=False,
        translated_with=translated_with,
        warnings=warnings,
        sentences=sentences,
    )


# --- the language model -------------------------------------------------------------------------------------------


@dataclass
class Prepared:
    """Everything decided before the first token: the plan, the passages, the request to the model."""

    plan: language.LanguagePlan
    passages: list[Passage]
    request: GenerationRequest
    translated_with: str | None = None


async def _prepare(
    ctx: AppContext, caller: Principal, kb_id: str, body: AskRequest, lang: str | None, llm: LLMClient
) -> Prepared:
    async def plan() -> language.LanguagePlan:
        written = await language.model_languages(ctx, llm)
        return await language.plan_language(ctx, body.question, lang, written)

    plan_task = asyncio.ensure_future(plan())
    try:
        passages = await grounding.relevant_passages(ctx, caller, kb_id, body.question, body.top_k)
    except BaseException:
        plan_task.cancel()
        raise
    chosen = await plan_task
    question, translated_with = body.question, None
    if chosen.translate_question and passages:
        try:
            question = await language.translate(ctx, body.question, chosen.question, "eng")
            translated_with = _translation_model(ctx)
        except (UnsupportedLanguage, ModelMissing) as exc:
            chosen.warnings.append(
                f"The question was not translated to English ({exc.detail}); the model reads it as is."
            )
    request = GenerationRequest(
        messages=[ChatMessage(role="user", content=question)],
        sources=grounding.sources(passages),
        grounded=True,
        answer_language=chosen.generate_in,
        sampling=Sampling(temperature=0.0),
    )
    return Prepared(chosen, passages, request, translated_with)


def _translation_model(ctx: AppContext) -> str:
    return ctx.settings.translation.model or "the translation model"


async def _refusal(ctx: AppContext, plan: language.LanguagePlan, model: str | None = None) -> AskResult:
    """:data:`REFUSAL`, in the answer's language where the translation model can say it, else in English: nothing
    relevant was found (``model`` None: no answerer ran), or the extractive answerer found no sentence that answers."""
    answer, written = REFUSAL, "eng"
    warnings = [
        *plan.warnings,
        "No passage of the knowledge base is close enough to the question to answer from."
        if model is None
        else "No sentence of the passages found answers the question.",
    ]
    if plan.answer != "eng":
        if language.translation_ready(ctx, plan.answer):
            try:
                answer, written = await language.translate_answer(ctx, REFUSAL, plan.answer), plan.answer
            except (UnsupportedLanguage, ModelMissing) as exc:
                warnings.append(f"The refusal is in English: translating it failed: {exc.detail}")
        else:
            warnings.append(
                f"The refusal is in English: no translation model is installed to say it in "
                f"{language.local_name(plan.answer)}."
            )
    return AskResult(answer=answer, language=written, model=model, citations=[], refused=True, warnings=warnings)


async def _answer_flow(
    ctx: AppContext,
    caller: Principal,
    body: AskRequest,
    prepared: Prepared,
    start: GenerationStart,
    events: AsyncIterator[GenerationEvent],
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """The answer as a sequence of (kind, data): ``citations`` (before any token), ``delta`` (checked sentences),
    then ``done`` with the whole :class:`AskResult`, or ``error``. Metered once, at its end."""
    plan = prepared.plan
    read = [s.text for s in prepared.request.sources]
    first = grounding.citations(prepared.passages, start.sources_used, read, start.truncated)
    yield "citations", {"citations": first, "language": plan.answer, "model": start.model, "warnings": plan.warnings}
    parts: list[str] = []
    end: GenerationEnd | None = None
    status = "failed"
    try:
        async for event in events:
            if isinstance(event, GenerationDelta):
                parts.append(event.text)
                if not plan.translate_answer:
                    yield "delta", {"text": event.text}
            elif isinstance(event, GenerationEnd):
                end = event
        assert end is not None
        answer = "".join(parts).strip()
        refused = grounding.is_refusal(answer) or not answer
        if refused:
            answer = REFUSAL
            if not parts and not plan.translate_answer:  # nothing was shown: the refusal is
                yield "delta", {"text": answer}
        translated_with = prepared.translated_with
        if plan.translate_answer:
            try:
                translated = await language.translate_answer(ctx, answer, plan.answer)
                if language.numbers_kept(answer, translated):
                    answer, translated_with = translated, _translation_model(ctx)
                else:
                    plan.warnings.append(_NUMBER_CHANGED.format(language.local_name(plan.answer)))
                    plan.answer, plan.translate_answer = "eng", False
            except (UnsupportedLanguage, ModelMissing) as exc:
                language.language_fallback(plan, exc)
            yield "delta", {"text": answer}
        result = _result(prepared, start, end, answer, refused, translated_with)
        status = "successful"
        await record_usage(ctx, caller, ROUTE, tokens=count_tokens(body.question) + count_tokens(answer))
        yield "done", {"result": result}
    except DomainError as exc:
        await record_usage(ctx, caller, ROUTE, status="failed", tokens=count_tokens(body.question))
        status = "reported"
        yield "error", {"error": exc}
    finally:
        if status == "failed":  # the client went away (or an unexpected error): metered off this task
            _meter_later(ctx, caller, count_tokens(body.question))


def _result(
    prepared: Prepared,
    start: GenerationStart,
    end: GenerationEnd,
    answer: str,
    refused: bool,
    translated_with: str | None,
) -> AskResult:
    plan = prepared.plan
    warnings = [*plan.warnings, *_checked_warnings(end.sentences, end.looped)]
    if translated_with:
        warnings.append(
            f"Answered through translation: the {'question and the ' if prepared.translated_with else ''}answer "
            f"went through {translated_with} (English in between)."
        )
    read = [s.text for s in prepared.request.sources]
    return AskResult(
        answer=answer,
        language=plan.answer,
        model=start.model,
        citations=[]
        if refused
        else grounding.citations(prepared.passages, start.sources_used, read, start.truncated, end.sentences),
        refused=refused,
        translated_with=translated_with,
        warnings=warnings,
        usage=AskUsage(prompt_tokens=start.prompt_tokens, completion_tokens=end.completion_tokens),
        sentences=end.sentences,
    )


def _checked_warnings(sentences: list[AnswerSentence], looped: bool) -> list[str]:
    """What the check of the model's sentences changed, said once."""
    replaced = sum(s.origin == "extracted" for s in sentences)
    withheld = sum(s.origin == "withheld" for s in sentences)
    warnings = []
    if replaced or withheld:
        warnings.append(
            f"Of the model's {len(sentences)} sentences, {replaced} stated what the passages do not and were "
            f"replaced by the passage's own sentence, and {withheld} were withheld (see `sentences`)."
        )
    if looped:
        warnings.append("The model began repeating itself; its answer was cut there.")
    return warnings


def _meter_later(ctx: AppContext, caller: Principal, tokens: int) -> None:
    task = asyncio.get_running_loop().create_task(record_usage(ctx, caller, ROUTE, status="failed", tokens=tokens))
    _background.add(task)
    task.add_done_callback(_background.discard)


# --- server-sent events -------------------------------------------------------------------------------------------


async def _replay(result: AskResult) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """A whole answer as the stream's events: its citations, a delta per shown sentence, then done."""
    yield (
        "citations",
        {
            "citations": result.citations,
            "language": result.language,
            "model": result.model,
            "warnings": result.warnings,
        },
    )
    pieces = [s.text for s in result.sentences if s.origin != "withheld" and s.text]
    if not pieces or result.translated_with:
        pieces = [result.answer]
    for i, piece in enumerate(pieces):
        yield "delta", {"text": piece if i == 0 else f" {piece}"}
    yield "done", {"result": result}


def _stream_response(flow: AsyncIterator[tuple[str, dict[str, Any]]]) -> StreamingResponse:
    return StreamingResponse(_events(flow), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _events(flow: AsyncIterator[tuple[str, dict[str, Any]]]) -> AsyncIterator[str]:
    """Server-sent events: ``citations``, ``delta``..., then ``done`` (the whole answer) or ``error``."""
    async for kind, data in flow:
        if kind == "citations":
            data = {**data, "citations": [c.model_dump() for c in data["citations"]]}
        elif kind == "done":
            data = data["result"].model_dump()
        elif kind == "error":
            error: DomainError = data["error"]
            data = {"detail": error.detail, "status": http_status(error)}
        yield sse(kind, data)


def sse(event: str, data: dict[str, Any]) -> str:
    """One server-sent event: its name, and JSON data that carries the same name as ``type``."""
    return f"event: {event}\ndata: {json.dumps({'type': event, **data}, ensure_ascii=False)}\n\n"
