"""Batch transcription routes (``/api/v2alpha/transcribe/batch``): see ``docs/batch.md``."""

from __future__ import annotations

from fastapi import APIRouter, Response

from contracts.batch import BatchCreated, BatchInfo
from contracts.speech import TranscriptionRecord
from serve_app.admission.kinds import not_capacity_checked
from serve_app.auth import Caller, Ctx
from serve_app.services import batch as service

router = APIRouter(prefix="/api/v2alpha/transcribe/batch", tags=["batch transcription"])


@router.post("", response_model=BatchCreated, status_code=201)
@not_capacity_checked("creates a batch: asks the speech deployment only whether it serves the language")
async def create_batch(caller: Caller, ctx: Ctx, lang_code: str | None = None) -> BatchCreated:
    return await service.create(ctx, caller, lang_code)


@router.post("/{batch_id}/process", status_code=202, responses={204: {"description": "Already processed"}})
async def process_batch(batch_id: str, caller: Caller, ctx: Ctx, diarise: int = 0) -> Response:
    started = await service.process(ctx, caller, batch_id, bool(diarise))
    return Response(status_code=202 if started else 204)


@router.get("", response_model=list[BatchInfo])
async def list_batches(caller: Caller, ctx: Ctx) -> list[BatchInfo]:
    return await service.list_batches(ctx, caller)


@router.get("/{batch_id}/transcriptions", response_model=list[TranscriptionRecord])
async def batch_transcriptions(batch_id: str, caller: Caller, ctx: Ctx) -> list[TranscriptionRecord]:
    return await service.transcriptions(ctx, caller, batch_id)
