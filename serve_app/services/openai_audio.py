"""``POST /v1/audio/transcriptions`` and ``POST /v1/audio/translations`` (OpenAI's shape) over the file
transcription of the native routes (``services/speech.file_transcription``: the same limits, time limit,
language refusals and metering).

Form fields (multipart, beside ``file``): ``model`` (``whisper-1`` or a served speech model, ``services/
openai_models.py``), ``language`` (ISO 639-1 ``en``, ``af``, ``fr``, ``zu``, or any code the native routes take;
absent: detected), ``prompt`` (accepted, not used: the pipeline takes no initial prompt), ``temperature`` (0 to 1,
accepted; decoding is greedy), ``response_format`` (:data:`~serve_app.services.openai_formats.FORMATS`),
``timestamp_granularities[]`` (``segment``, ``word``; verbose_json only), ``stream`` (transcriptions:
server-sent events, sent once the file is transcribed). Other fields OpenAI defines (``include[]``,
``chunking_strategy``) are accepted and ignored.

Translations are to English: English audio answers its transcript; other audio the transcription's English
translation, or 503 when no translation model is installed (400 where the language has no NLLB code). OpenAI's
translations take no ``language``; here it is accepted as the audio's language (an extension: detection decides
without it).
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from contracts import languages
from contracts.errors import InvalidInput, ModelMissing, Unavailable
from contracts.installs import TRANSLATION_NOT_INSTALLED
from contracts.openai import DurationUsage, TranscriptionJson
from contracts.speech import TranscriptionResult
from serve_app.context import AppContext
from serve_app.services import openai_formats as formats
from serve_app.services.openai_models import speech_model
from serve_app.services.speech import file_transcription
from serve_app.tokens import Principal
from serve_app.uploads import SavedUpload

ROUTE_TRANSCRIPTIONS = "openai_transcriptions"
ROUTE_TRANSLATIONS = "openai_translations"
GRANULARITIES = ("segment", "word")
TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off", "")


@dataclass
class AudioForm:
    """The form fields of one request, checked."""

    model: str = ""
    language: str | None = None
    response_format: str = "json"
    words: bool = False
    stream: bool = False


def _flag(upload: SavedUpload, name: str) -> bool:
    value = (upload.first(name) or "").strip().lower()
    if value not in TRUE + FALSE:
        raise InvalidInput(f"Invalid request: field '{name}' must be true or false.")
    return value in TRUE


def _granularities(upload: SavedUpload) -> list[str]:
    values = upload.fields.get("timestamp_granularities[]", []) + upload.fields.get("timestamp_granularities", [])
    for value in values:
        if value not in GRANULARITIES:
            raise InvalidInput(
                f"Invalid request: field 'timestamp_granularities[]': '{value}' is not one of segment, word."
            )
    return values


def _temperature(upload: SavedUpload) -> None:
    value = upload.first("temperature")
    if value is None or not value.strip():
        return
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0.0 <= number <= 1.0:
        raise InvalidInput("Invalid request: field 'temperature' must be a number between 0 and 1.")


async def read_form(ctx: AppContext, upload: SavedUpload, translating: bool) -> AudioForm:
    """The request's fields, checked (400 naming the field), and the model (404)."""
    form = AudioForm()
    form.response_format = (upload.first("response_format") or "json").strip() or "json"
    if form.response_format not in formats.FORMATS:
        raise InvalidInput(
            f"Invalid request: field 'response_format': '{form.response_format}' is not one of "
            f"{', '.join(formats.FORMATS)}."
        )
    granularities = _granularities(upload)
    if granularities and form.response_format != "verbose_json":
        raise InvalidInput(
            "Invalid request: field 'timestamp_granularities[]' is only supported with response_format verbose_json."
        )
    form.words = "word" in granularities
    form.stream = not translating and _flag(upload, "stream")
    _temperature(upload)
    language = (upload.first("language") or "").strip()
    form.language = languages.transcription_code(language) if language else None
    form.model = await speech_model(ctx, upload.first("model"))
    return form


def _check_translated(ctx: AppContext, result: TranscriptionResult) -> None:
    """A translation the route can answer, else the honest refusal (metered as failed)."""
    if result.translation is not None or not result.text.strip() or result.language_code == "eng":
        return
    why = next((w for w in result.warnings if w.startswith("Translation to English")), "")
    if ctx.translation_not_installed or TRANSLATION_NOT_INSTALLED in why:
        raise ModelMissing(
            f"The audio is in {languages.speech_name(result.language_code)}: translating it to English needs a "
            f"translation model. {TRANSLATION_NOT_INSTALLED}"
        )
    if "not available for language" in why:
        raise InvalidInput(why)
    raise Unavailable(why or "Translation to English is not available.")


async def _transcribed(
    ctx: AppContext, caller: Principal, request: Request, translating: bool
) -> tuple[AudioForm, TranscriptionResult]:
    route = ROUTE_TRANSLATIONS if translating else ROUTE_TRANSCRIPTIONS
    async with file_transcription(ctx, caller, request, route) as job:
        assert job.upload is not None
        form = await read_form(ctx, job.upload, translating)
        result = await job.transcribe(
            timeout=ctx.settings.speech.sync_timeout_seconds,
            language=form.language,
            translate=translating,
            language_field="language",
        )
        if translating:
            _check_translated(ctx, result)  # a refusal here is metered as a failed call
    return form, result


async def transcriptions(ctx: AppContext, caller: Principal, request: Request) -> Response | TranscriptionJson:
    form, result = await _transcribed(ctx, caller, request, translating=False)
    if form.stream:
        return StreamingResponse(formats.events(result, result.text), media_type="text/event-stream")
    return _answer(form, result, task="transcribe")


async def translations(ctx: AppContext, caller: Principal, request: Request) -> Response | TranscriptionJson:
    form, result = await _transcribed(ctx, caller, request, translating=True)
    return _answer(form, result, task="translate")


def _answer(form: AudioForm, result: TranscriptionResult, task: str) -> Response | TranscriptionJson:
    """The result in the requested format; a translation (of non-English audio) replaces the transcript."""
    translated = result.translation if task == "translate" and result.language_code != "eng" else None
    text = translated if translated is not None else result.text
    if form.response_format == "json":
        return TranscriptionJson(text=text, usage=DurationUsage(seconds=round(result.audio_length_seconds, 3)))
    if form.response_format == "verbose_json":
        body = formats.verbose(result, task=task, words=form.words, translated=translated)
        return JSONResponse(body.model_dump(exclude_none=True))
    if form.response_format == "text":
        return Response(text + "\n", media_type="text/plain; charset=utf-8")
    cues = formats.cues(result, translated)
    subtitles = formats.srt(cues) if form.response_format == "srt" else formats.vtt(cues)
    return Response(subtitles, media_type="text/plain; charset=utf-8")
