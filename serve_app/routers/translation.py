from __future__ import annotations

from fastapi import APIRouter

from contracts.translation import TranslateRequest, TranslationResult
from serve_app.admission.kinds import TRANSLATION, admitted_as
from serve_app.auth import Caller, Ctx
from serve_app.services import translation as service

router = APIRouter(prefix="/api/v1", tags=["translation"])


@router.post("/translate/process", response_model=TranslationResult)
@admitted_as(TRANSLATION)
async def translate(body: TranslateRequest, caller: Caller, ctx: Ctx) -> TranslationResult:
    """Translate between the NLLB codes listed in the spec. 503 until a translation model is installed."""
    return await service.translate(ctx, caller, body.input_text, body.source_lang, body.target_lang)
