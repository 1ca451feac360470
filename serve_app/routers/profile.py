"""The self-hosted ("Your Cloud") profile: no ``/api`` prefix, HTTP Basic auth (a Khuluma token as the password)
or X-CLIENT-TOKEN. ``GET /health`` is the utility router's (no token)."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request

from contracts.profile import ProfileTranscription, ProfileTranslateRequest, ProfileTranslation
from serve_app.admission.kinds import SPEECH, TRANSLATION, admitted_as
from serve_app.auth import Ctx, ProfileCaller
from serve_app.services import profile as service
from serve_app.uploads import multipart_openapi

router = APIRouter(prefix="/v1", tags=["self-hosted profile"])


@router.post("/translate", response_model=ProfileTranslation)
@admitted_as(TRANSLATION)
async def translate(body: ProfileTranslateRequest, caller: ProfileCaller, ctx: Ctx) -> ProfileTranslation:
    """NLLB codes (zul_Latn, eng_Latn, ...). 503 until a translation model is installed."""
    return await service.translate(ctx, caller, body.text, body.src_lang, body.tgt_lang)


@router.post(
    "/transcribe",
    response_model=ProfileTranscription,
    openapi_extra=multipart_openapi("file", "Audio in any format and at any sample rate."),
)
@admitted_as(SPEECH)
async def transcribe(
    request: Request,
    caller: ProfileCaller,
    ctx: Ctx,
    lang_code: str | None = Query(None, description="afr, zul, sot, eng, fra, cs-zul; detected when absent"),
    enable_translation: bool = False,
    enable_diarisation: bool = False,
    enable_dry_run: bool = Query(False, description="Check the upload and the language; transcribe nothing."),
) -> ProfileTranscription:
    return await service.transcribe(
        ctx, caller, request, lang_code, enable_translation, enable_diarisation, enable_dry_run
    )
