"""Version 1 transcription (deprecated, still served): every response carries a Deprecation header."""

from __future__ import annotations

from fastapi import APIRouter, Response

from contracts.speech import (
    MessageResult,
    ProcessRequest,
    UploadedText,
    UploadResult,
    V1SyncRequest,
    V1SyncResult,
)
from serve_app.admission.kinds import SPEECH, admitted_as, not_capacity_checked
from serve_app.auth import Caller, Ctx
from serve_app.services import jobs as jobs_service
from serve_app.services import speech as service


def _deprecated(response: Response) -> None:
    response.headers["Deprecation"] = "true"
    response.headers["Link"] = '</api/v2alpha/transcribe/sync/file>; rel="successor-version"'


router = APIRouter(prefix="/api/v1", tags=["transcription v1 (deprecated)"], deprecated=True)


@router.post("/transcribe/sync", response_model=V1SyncResult)
@admitted_as(SPEECH)
async def transcribe_sync(body: V1SyncRequest, caller: Caller, ctx: Ctx, response: Response) -> V1SyncResult:
    _deprecated(response)
    return await service.v1_sync(ctx, caller, body.file_name, body.audio_blob)


@router.post("/transport/file-upload", response_model=UploadResult)
async def file_upload(body: V1SyncRequest, caller: Caller, ctx: Ctx, response: Response) -> UploadResult:
    _deprecated(response)
    return await jobs_service.v1_upload(ctx, caller, body.file_name, body.audio_blob)


@router.post("/transcribe/process/{upload_id}", response_model=MessageResult)
@not_capacity_checked("queues an async job: asks the speech deployment only whether it serves the language")
async def transcribe_process(
    upload_id: str, caller: Caller, ctx: Ctx, response: Response, body: ProcessRequest | None = None
) -> MessageResult:
    _deprecated(response)
    body = body or ProcessRequest()
    return await jobs_service.v1_process(ctx, caller, upload_id, body.webhook, body.language_code)


@router.post("/transcribe/{upload_id}/get", response_model=UploadedText, response_model_exclude_none=True)
async def get_transcribed_text(upload_id: str, caller: Caller, ctx: Ctx, response: Response) -> UploadedText:
    _deprecated(response)
    return await jobs_service.v1_get(ctx, caller, upload_id)
