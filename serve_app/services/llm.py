"""Answers from a knowledge base (``POST /api/v1/search/knowledgebase/{id}/ask``) and the grounding the chat
completions share when they name a knowledge base.

One question, one path:
1. checks before the first hop: the question's size, the language asked for, a language model configured (503
   naming ``KHULUMA_LLM_MODEL`` otherwise);
2. retrieval through the Search deployment (tenancy: another customer's knowledge base is 404), and the refusal
   rule: only passages whose similarity to the question reaches ``llm.min_similarity`` may ground an answer; with
   none, the answer is :data:`contracts.llm.REFUSAL` and no model runs;
3. the answer's language: the language model writes it where it writes that language (``llm.languages``), else
   the question goes to English and the answer comes back through the translation model where one is installed
   (translate-test, the strongest open pipeline for African languages in IrokoBench), else the answer is in
   English with a warning that names the missing model;
4. generation through the LLM deployment, which assembles the prompt within the context window and says which
   passages it used: those are the citations, numbered as the answer cites them;
5. metering (``knowledgebase_ask``: whitespace tokens of the question and the answer), failed once work started
   and did not finish.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi.responses import StreamingResponse

from contracts import languages
from contracts.errors import DomainError, InvalidInput, ModelMissing, UnsupportedLanguage, http_status
from contracts.installs import LLM_NOT_INSTALLED, install_hint
from contracts.llm import (
    REFUSAL,
    AskRequest,
    AskResult,
    AskUsage,
    ChatMessage,
    Citation,
    GenerationDelta,
    GenerationEnd,
    GenerationEvent,
    GenerationRequest,
    GenerationStart,
    LLMClient,
    PromptTooLong,
    Sampling,
    Source,
)
from contracts.search import Passage
from contracts.text import LanguageDetectRequest
from contracts.translation import TranslationRequest
from serve_app.context import AppContext, required
from serve_app.services import search
from serve_app.services.text_limits import TextLimits, check_size
from serve_app.services.usage import count_tokens, record_usage
from serve_app.tokens import Principal

log = logging.getLogger(__name__)

ROUTE = "knowledgebase_ask"
LANGUAGE_CONFIDENCE = 0.5  # a detected question language below this is not trusted: English is assumed
CACHE_SECONDS = 10.0  # how long the model's languages (from its describe()) are reused
DESCRIBE_TIMEOUT_S = 10.0
_MARKER = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")
_REFUSAL_KEY = "don't know from these documents"
_background: set[asyncio.Task[None]] = set()  # metering of streams whose client went away


# --- checks ------------------------------------------------------------------------------------------------------


def llm_client(ctx: AppContext) -> LLMClient:
    """The LLM deployment's handle, or the 503 that names the setting."""
    if ctx.llm_not_installed:
        raise ModelMissing(LLM_NOT_INSTALLED)
    return required(ctx.clients.llm, "llm")


def check_question(ctx: AppContext, text: str, field: str) -> None:
    if not text.strip():
        raise InvalidInput(f"Invalid request: field '{field}' must not be empty.")
    check_size(text, field, TextLimits.of(ctx.settings, ctx.settings.llm.max_question_chars))


def knowledge_base_id(value: str, field: str) -> str:
    """The id in its canonical form, or the 400 naming the field (before anything else is asked)."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidInput(f"Invalid request: field '{field}' must be a UUID.") from None


def answer_language(value: str | None) -> str | None:
    """ISO 639-3 code of ``lang`` (None: not given), or the 400 naming the field."""
    return search.text_language(value, "lang")


# --- retrieval and citations ---------------------------------------------------------------------------------------


async def relevant_passages(ctx: AppContext, caller: Principal, kb_id: str, question: str, top_k: int) -> list[Passage]:
    """The knowledge base's best passages for ``question`` that are close enough in meaning to answer from."""
    floor = ctx.settings.llm.min_similarity
    hits = await search.passages(ctx, caller, kb_id, question, top_k)
    return [p for p in hits if p.similarity is not None and p.similarity >= floor]


def sources(passages: list[Passage]) -> list[Source]:
    return [Source(text=p.text, title=p.filename) for p in passages]


def cited_numbers(answer: str) -> set[int]:
    """The source numbers an answer cites: ``[1]``, ``[2, 3]``."""
    return {int(n) for group in _MARKER.findall(answer) for n in group.split(",")}


def is_refusal(answer: str) -> bool:
    return _REFUSAL_KEY in answer.lower().replace("’", "'")


def citations(
    passages: list[Passage], start: GenerationStart, grounded_on: list[Source], answer: str
) -> list[Citation]:
    """The passages the prompt held, numbered as the prompt numbered them, with the text the model read."""
    cited = cited_numbers(answer)
    return [
        Citation(
            id=number,
            document_id=passages[index].document_id,
            filename=passages[index].filename,
            chunk_index=passages[index].chunk_index,
            text=grounded_on[index].text,
            score=passages[index].score,
            cited=number in cited,
            truncated=index in start.truncated,
        )
        for number, index in enumerate(start.sources_used, 1)
    ]


# --- the answer's language -----------------------------------------------------------------------------------------


@dataclass
class LanguagePlan:
    question: str  # ISO 639-3 of the question
    answer: str  # of the answer
    generate_in: str  # what the model is asked to write
    translate_question: bool = False
    translate_answer: bool = False
    warnings: list[str] = field(default_factory=list)


_served: dict[int, tuple[float, tuple[str, ...]]] = {}  # id of the AppContext -> (when, the model's languages)


async def model_languages(ctx: AppContext, llm: LLMClient) -> tuple[str, ...]:
    """The languages the language model writes (its describe(), asked at most every :data:`CACHE_SECONDS`)."""
    cached = _served.get(id(ctx))
    if cached and time.monotonic() - cached[0] < CACHE_SECONDS:
        return cached[1]
    try:
        entries = await llm.describe(DESCRIBE_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - without an answer, English only (the honest minimum)
        return ("eng",)
    entry = next((e for e in entries if e.capability == "llm"), None)
    found = tuple(lang.code for lang in entry.languages if lang.supported) if entry else ()
    _served[id(ctx)] = (time.monotonic(), found or ("eng",))
    return found or ("eng",)


async def question_language(ctx: AppContext, question: str, given: str | None) -> tuple[str, list[str]]:
    """The question's language: detected by language identification where it is deployed and sure, else the
    language asked for, else English."""
    text = ctx.clients.text
    if text is not None:
        try:
            found = await text.detect_language(LanguageDetectRequest(text=question))
        except DomainError:
            found = None
        if found is not None and found.language in languages.LANGUAGES and found.confidence >= LANGUAGE_CONFIDENCE:
            return found.language, []
    if given:
        return given, []
    if text is None:
        return "eng", [
            "The question's language was not identified (language identification is not deployed); it is "
            "taken as English. Pass `lang` to say which."
        ]
    return "eng", []


def _translation_ready(ctx: AppContext, code: str) -> bool:
    return not ctx.translation_not_installed and ctx.clients.translation is not None and bool(languages.nllb_code(code))


async def plan_language(ctx: AppContext, llm: LLMClient, question: str, lang: str | None) -> LanguagePlan:
    asked, warnings = await question_language(ctx, question, lang)
    wanted = lang or asked
    written = await model_languages(ctx, llm)
    plan = LanguagePlan(asked, wanted, wanted, warnings=warnings)
    if asked not in written and asked != "eng" and _translation_ready(ctx, asked):
        plan.translate_question = True
    if wanted in written:
        return plan
    plan.generate_in = "eng"
    if wanted == "eng":
        return plan
    if _translation_ready(ctx, wanted):
        plan.translate_answer = True
        return plan
    plan.answer = "eng"
    name = _local_name(wanted)
    missing = (
        f"no translation model is installed (KHULUMA_TRANSLATION_MODEL; install one: {install_hint('translation')})"
        if ctx.translation_not_installed or ctx.clients.translation is None
        else f"the translation model does not cover {name}"
    )
    plan.warnings.append(
        f"This answer is in English: the language model writes {', '.join(_local_name(c) for c in written)} "
        f"(KHULUMA_LLM_LANGUAGES), not {name}, and {missing}."
    )
    return plan


def _local_name(code: str) -> str:
    lang = languages.LANGUAGES.get(code)
    return lang.local_name if lang else code


async def _translate(ctx: AppContext, text: str, source: str, target: str) -> str:
    client = required(ctx.clients.translation, "translation")
    source_code, target_code = languages.nllb_code(source), languages.nllb_code(target)
    assert source_code and target_code
    return await client.translate(TranslationRequest(text=text, source=source_code, target=target_code))


_PIECE = re.compile(r"^([\s.,;:!?)\]]*)(.*?)(\s*)$", re.DOTALL)  # punctuation before, the words, space after


def translatable(answer: str) -> list[tuple[str, bool]]:
    """``answer`` in pieces, each (text, whether to translate it): citation markers and the punctuation and spaces
    around the words stay as they are, so joining the pieces gives ``answer`` back."""
    pieces: list[tuple[str, bool]] = []
    for i, part in enumerate(re.split(r"(\s*\[\d+(?:\s*,\s*\d+)*\])", answer)):
        if i % 2:  # a marker, with the space before it
            pieces.append((part, False))
            continue
        match = _PIECE.match(part)
        assert match is not None  # the pattern matches any text
        lead, words, tail = match.groups()
        pieces += [(lead, False), (words, bool(words.strip())), (tail, False)]
    return [(text, translate) for text, translate in pieces if text]


async def translate_answer(ctx: AppContext, answer: str, target: str) -> str:
    """``answer`` (English) in ``target``, sentence pieces between its citation markers translated (together, so
    the translation model batches them), the markers as they are."""
    pieces = translatable(answer)
    done = await asyncio.gather(*(_translate(ctx, t, "eng", target) for t, translate in pieces if translate))
    translated = iter(done)
    return "".join(next(translated) if translate else text for text, translate in pieces).strip()


def _language_fallback(plan: LanguagePlan, error: DomainError) -> None:
    """A translation the plan counted on failed (the model lacks the language, or went away): English, said so."""
    plan.warnings.append(
        f"This answer is in English: translating it to {_local_name(plan.answer)} failed: {error.detail}"
    )
    plan.translate_answer = False
    plan.answer = "eng"


# --- the route ---------------------------------------------------------------------------------------------------


@dataclass
class Prepared:
    """Everything decided before the first token: the plan, the passages, the request to the model."""

    plan: LanguagePlan
    passages: list[Passage]
    request: GenerationRequest
    question: str
    translated_with: str | None = None


async def _prepare(
    ctx: AppContext, caller: Principal, kb_id: str, body: AskRequest, lang: str | None, llm: LLMClient
) -> Prepared:
    plan_task = asyncio.ensure_future(plan_language(ctx, llm, body.question, lang))
    try:
        passages = await relevant_passages(ctx, caller, kb_id, body.question, body.top_k)
    except BaseException:
        plan_task.cancel()
        raise
    plan = await plan_task
    question, translated_with = body.question, None
    if plan.translate_question and passages:
        try:
            question = await _translate(ctx, body.question, plan.question, "eng")
            translated_with = _translation_model(ctx)
        except (UnsupportedLanguage, ModelMissing) as exc:
            plan.warnings.append(
                f"The question was not translated to English ({exc.detail}); the model reads it as is."
            )
    request = GenerationRequest(
        messages=[ChatMessage(role="user", content=question)],
        sources=sources(passages),
        grounded=True,
        answer_language=plan.generate_in,
        sampling=Sampling(temperature=0.0),
    )
    return Prepared(plan, passages, request, question, translated_with)


def _translation_model(ctx: AppContext) -> str:
    return ctx.settings.translation.model or "the translation model"


async def ask(ctx: AppContext, caller: Principal, kb_id: str, body: AskRequest) -> AskResult | StreamingResponse:
    kb_id = knowledge_base_id(kb_id, "knowledgebase_id")
    check_question(ctx, body.question, "question")
    lang = answer_language(body.lang)
    llm = llm_client(ctx)  # the request is well formed: now whether a model can answer it
    prepared = await _prepare(ctx, caller, kb_id, body, lang, llm)
    if not prepared.passages:  # nothing relevant: refuse without asking the model
        result = await _refusal(ctx, prepared)
        await record_usage(ctx, caller, ROUTE, tokens=count_tokens(body.question) + count_tokens(result.answer))
        if body.stream:
            return _stream_response(_replay(result))
        return result
    events = llm.stream(prepared.request)
    try:
        start = await anext(events)  # errors before the first token answer as HTTP errors
        assert isinstance(start, GenerationStart)
    except PromptTooLong as exc:
        await events.aclose()
        raise exc.for_field("question") from None
    except BaseException:
        await events.aclose()
        raise
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


async def _refusal(ctx: AppContext, prepared: Prepared) -> AskResult:
    """The answer when nothing relevant was found: :data:`REFUSAL`, in the answer's language where the translation
    model can say it (no language model runs), else in English."""
    plan = prepared.plan
    answer, language = REFUSAL, "eng"
    warnings = [*plan.warnings, "No passage of the knowledge base is close enough to the question to answer from."]
    if plan.answer != "eng":
        if _translation_ready(ctx, plan.answer):
            try:
                answer, language = await translate_answer(ctx, REFUSAL, plan.answer), plan.answer
            except (UnsupportedLanguage, ModelMissing) as exc:
                warnings.append(f"The refusal is in English: translating it failed: {exc.detail}")
        elif plan.generate_in == plan.answer:  # the model writes it, but no model ran
            warnings.append(
                f"The refusal is in English: no translation model is installed to say it in {_local_name(plan.answer)}."
            )
    return AskResult(answer=answer, language=language, model=None, citations=[], refused=True, warnings=warnings)


async def _answer_flow(
    ctx: AppContext,
    caller: Principal,
    body: AskRequest,
    prepared: Prepared,
    start: GenerationStart,
    events: AsyncIterator[GenerationEvent],
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """The answer as a sequence of (kind, data): ``citations`` (before any token), ``delta``, then ``done`` with the
    whole :class:`AskResult`, or ``error``. Metered once, at its end."""
    plan = prepared.plan
    first = citations(prepared.passages, start, prepared.request.sources, "")
    yield "citations", {"citations": first, "language": plan.answer, "model": start.model, "warnings": plan.warnings}
    parts: list[str] = []
    completion = 0
    status = "failed"
    try:
        async for event in events:
            if isinstance(event, GenerationDelta):
                parts.append(event.text)
                if not plan.translate_answer:
                    yield "delta", {"text": event.text}
            elif isinstance(event, GenerationEnd):
                completion = event.completion_tokens
        answer = "".join(parts).strip()
        refused = is_refusal(answer)
        if refused:
            answer = REFUSAL
        translated_with = prepared.translated_with
        if plan.translate_answer:
            try:
                answer = await translate_answer(ctx, answer, plan.answer)
                translated_with = _translation_model(ctx)
            except (UnsupportedLanguage, ModelMissing) as exc:
                _language_fallback(plan, exc)
            yield "delta", {"text": answer}
        if translated_with:
            plan.warnings.append(
                f"Answered through translation: the {'question and the ' if prepared.translated_with else ''}answer "
                f"went through {translated_with} (English in between)."
            )
        result = AskResult(
            answer=answer,
            language=plan.answer,
            model=start.model,
            citations=[] if refused else citations(prepared.passages, start, prepared.request.sources, answer),
            refused=refused,
            translated_with=translated_with,
            warnings=plan.warnings,
            usage=AskUsage(prompt_tokens=start.prompt_tokens, completion_tokens=completion),
        )
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


def _meter_later(ctx: AppContext, caller: Principal, tokens: int) -> None:
    task = asyncio.get_running_loop().create_task(record_usage(ctx, caller, ROUTE, status="failed", tokens=tokens))
    _background.add(task)
    task.add_done_callback(_background.discard)


async def _replay(result: AskResult) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    yield "citations", {"citations": [], "language": result.language, "model": None, "warnings": result.warnings}
    yield "delta", {"text": result.answer}
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
