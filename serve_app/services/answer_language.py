"""The language of an answer from a knowledge base (the ask route): the question's language (identified, else
``lang``, else English), the answer's (``lang``, else the question's), and how to get there: the language model
writes it where it writes that language (``llm.languages``); otherwise the question goes to English and the answer
comes back through the translation model where one is installed (translate-test, the strongest open pipeline for
African languages in IrokoBench); otherwise the answer is in English with a warning naming the missing model.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field

from contracts import languages
from contracts.errors import DomainError
from contracts.installs import install_hint
from contracts.llm import LLMClient
from contracts.text import LanguageDetectRequest
from contracts.translation import TranslationRequest
from serve_app.context import AppContext, required

LANGUAGE_CONFIDENCE = 0.5  # a detected question language below this is not trusted: English is assumed
CACHE_SECONDS = 10.0  # how long the model's languages (from its describe()) are reused
DESCRIBE_TIMEOUT_S = 10.0


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


def translation_ready(ctx: AppContext, code: str) -> bool:
    return not ctx.translation_not_installed and ctx.clients.translation is not None and bool(languages.nllb_code(code))


async def plan_language(
    ctx: AppContext,
    question: str,
    lang: str | None,
    written: tuple[str, ...],
    writer: str = "the language model (KHULUMA_LLM_LANGUAGES)",
) -> LanguagePlan:
    """How to answer ``question`` in the language wanted, where the answerer writes the ``written`` languages."""
    asked, warnings = await question_language(ctx, question, lang)
    wanted = lang or asked
    plan = LanguagePlan(asked, wanted, wanted, warnings=warnings)
    if asked not in written and asked != "eng" and translation_ready(ctx, asked):
        plan.translate_question = True
    if wanted in written:
        return plan
    plan.generate_in = "eng"
    if wanted == "eng":
        return plan
    if translation_ready(ctx, wanted):
        plan.translate_answer = True
        return plan
    plan.answer = "eng"
    name = local_name(wanted)
    missing = (
        f"no translation model is installed (KHULUMA_TRANSLATION_MODEL; install one: {install_hint('translation')})"
        if ctx.translation_not_installed or ctx.clients.translation is None
        else f"the translation model does not cover {name}"
    )
    plan.warnings.append(
        f"This answer is in English: {writer} writes {', '.join(local_name(c) for c in written)}, not {name}, "
        f"and {missing}."
    )
    return plan


def local_name(code: str) -> str:
    lang = languages.LANGUAGES.get(code)
    return lang.local_name if lang else code


async def translate(ctx: AppContext, text: str, source: str, target: str) -> str:
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


async def translate_answer(ctx: AppContext, answer: str, target: str, source: str = "eng") -> str:
    """``answer`` (in ``source``) in ``target``, sentence pieces between its citation markers translated (together,
    so the translation model batches them), the markers as they are."""
    pieces = translatable(answer)
    done = await asyncio.gather(*(translate(ctx, t, source, target) for t, wanted in pieces if wanted))
    translated = iter(done)
    return "".join(next(translated) if wanted else text for text, wanted in pieces).strip()


_MARKERS = re.compile(r"\[\d+(?:\s*,\s*\d+)*\]")
_GROUPED = re.compile(r"(?<=\d)[ ,.\u00a0](?=\d{3}(?!\d))")  # a thousands separator: R2,315 / R2 315


def numbers_kept(checked: str, translated: str) -> bool:
    """Whether ``translated`` states the numbers of the ``checked`` text it was translated from, no more and no
    fewer (digit runs, thousands separators dropped): a translation model that changes a number is caught. Names
    are not compared (a translation may inflect them)."""

    def digits(text: str) -> list[str]:
        return sorted(re.findall(r"\d+", _GROUPED.sub("", _MARKERS.sub(" ", text))))

    return digits(checked) == digits(translated)


def language_fallback(plan: LanguagePlan, error: DomainError) -> None:
    """A translation the plan counted on failed (the model lacks the language, or went away): English, said so."""
    plan.warnings.append(
        f"This answer is in English: translating it to {local_name(plan.answer)} failed: {error.detail}"
    )
    plan.translate_answer = False
    plan.answer = "eng"
