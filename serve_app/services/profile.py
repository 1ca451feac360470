"""The self-hosted ("Your Cloud") profile: ``/v1/translate`` and ``/v1/transcribe`` over the native translation
and transcription services (the same checks, limits and metering; errors keep ``{"detail": ...}``).

- :func:`translate`: ``{"text", "src_lang", "tgt_lang"}`` (NLLB codes) -> ``{"translated_text"}``; 503 with the
  install instructions while no translation model is installed (the offline default).
- :func:`transcribe`: multipart ``file`` (any format and sample rate: the decoder resamples) with the query
  ``lang_code``, ``enable_translation``, ``enable_diarisation``, ``enable_dry_run`` -> ``{"success": true,
  "data": {...}}`` (``contracts/profile.py``). A dry run checks the upload and the language and transcribes nothing.
"""

from __future__ import annotations

from fastapi import Request

from contracts.profile import ProfileTranscription, ProfileTranscriptionData, ProfileTranslation
from serve_app.context import AppContext
from serve_app.services import speech, translation
from serve_app.tokens import Principal

ROUTE_TRANSLATE = "profile_translate"
ROUTE_TRANSCRIBE = "profile_transcribe"
FIELDS = translation.Fields(text="text", source="src_lang", target="tgt_lang")


async def translate(ctx: AppContext, caller: Principal, text: str, source: str, target: str) -> ProfileTranslation:
    result = await translation.translate(ctx, caller, text, source, target, FIELDS, ROUTE_TRANSLATE)
    return ProfileTranslation(translated_text=result.translation[0].translated_text)


async def transcribe(
    ctx: AppContext,
    caller: Principal,
    request: Request,
    lang_code: str | None,
    enable_translation: bool,
    enable_diarisation: bool,
    enable_dry_run: bool,
) -> ProfileTranscription:
    async with speech.file_transcription(ctx, caller, request, ROUTE_TRANSCRIBE) as job:
        assert job.upload is not None
        if enable_dry_run:  # the upload and the language checked, nothing transcribed (nor metered)
            code = await job.check_language(lang_code) if lang_code else None
            data = ProfileTranscriptionData(
                dry_run=True, file_name=job.upload.filename, upload_file_size=job.upload.size, language_code=code
            )
            return ProfileTranscription(data=data)
        await job.transcribe(
            timeout=ctx.settings.speech.sync_timeout_seconds,
            language=lang_code,
            diarise=enable_diarisation,
            translate=enable_translation,
        )
        record = speech.record_of(job, caller)
    return ProfileTranscription(data=ProfileTranscriptionData.of(record, enable_diarisation))
