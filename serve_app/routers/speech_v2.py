"""Synchronous transcription routes: v2alpha sync/fast and the {api_url} ``/v1/transcribe/sync``."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request

from contracts.speech import FastTranscription, TranscriptionRecord
from serve_app.admission.kinds import SPEECH, admitted_as
from serve_app.auth import Caller, Ctx
from serve_app.services import speech as service
from serve_app.uploads import multipart_openapi

router = APIRouter(tags=["transcription"])

_AUDIO = "Audio: WAV, MP3, FLAC, AAC, OGG, MP4, AIFF or OPUS."


@router.post(
    "/api/v2alpha/transcribe/sync/file",
    response_model=TranscriptionRecord,
    openapi_extra=multipart_openapi("file", _AUDIO),
)
@admitted_as(SPEECH)
async def sync_file(
    request: Request,
    caller: Caller,
    ctx: Ctx,
    lang_code: str | None = Query(None, description="afr, zul, sot, eng, fra, cs-zul; auto if absent"),
    diarise: bool = False,
    detect_music: bool = False,
) -> TranscriptionRecord:
    return await service.sync_file(ctx, caller, request, lang_code, diarise, detect_music)


@router.post(
    "/api/v2alpha/transcribe/fast", response_model=FastTranscription, openapi_extra=multipart_openapi("upload", _AUDIO)
)
@admitted_as(SPEECH)
async def fast(request: Request, caller: Caller, ctx: Ctx, lang_code: str | None = None) -> FastTranscription:
    return await service.fast(ctx, caller, request, lang_code)


@router.post("/v1/transcribe/sync", response_model=TranscriptionRecord, openapi_extra=multipart_openapi("file", _AUDIO))
@admitted_as(SPEECH)
async def api_url_sync(
    request: Request,
    caller: Caller,
    ctx: Ctx,
    lang_code: str | None = None,
    diarise: bool = False,
    detect_music: bool = False,
    translate: bool = False,
) -> TranscriptionRecord:
    """The {api_url} family: same record, plus optional translation of the transcript to English."""
    return await service.sync_file(ctx, caller, request, lang_code, diarise, detect_music, translate)
