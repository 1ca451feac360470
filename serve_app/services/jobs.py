"""Version 1 asynchronous transcription: upload (base64 JSON), process (durable job, optional webhook), get.

The job itself is run by the ``Jobs`` deployment (``deployments/jobs.py``); this module only stores uploads,
places jobs in the database queue (``persistence/jobs.py``), nudges the worker and reports the jobs' state.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re

import anyio

from cluster.transfer import delete_upload, store_upload
from cluster.webhooks import check_webhook_url_async
from contracts.errors import InvalidInput, NotFound, TooLarge, UnsupportedLanguage
from contracts.jobs import JobResult, JobsClient
from contracts.speech import MessageResult, UploadedText, UploadResult
from persistence import jobs as job_queue
from persistence.jobs import JobStatus
from persistence.models import Upload, new_uuid
from serve_app.context import AppContext, required, speech_client
from serve_app.tokens import Principal
from serve_app.uploads import sanitize_filename

log = logging.getLogger(__name__)

NOT_PROCESSED = "Item has not been processed."  # clients loop on this exact string
_BASE64_JUNK = re.compile(r"\s+")


def decode_audio_blob(audio_blob: str, limit_bytes: int, field: str = "audio_blob") -> bytes:
    """Bytes of a base64 string (standard or URL-safe alphabet, optional ``data:...;base64,`` prefix).

    413 when it would decode to more than ``limit_bytes`` (checked before decoding), 400 when it is empty or
    not base64.
    """
    blob = audio_blob or ""
    if blob.startswith("data:") and "," in blob[:200]:
        blob = blob.split(",", 1)[1]
    if len(blob) // 4 * 3 > limit_bytes + 3:
        raise TooLarge(f"field '{field}' exceeds the limit of {limit_bytes // (1024 * 1024)} MB.")
    blob = _BASE64_JUNK.sub("", blob)
    if not blob:
        raise InvalidInput(f"field '{field}' is empty.")
    try:
        if "-" in blob or "_" in blob:
            data = base64.b64decode(blob.translate(str.maketrans("-_", "+/")), validate=True)
        else:
            data = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"field '{field}' is not valid base64.") from None
    if not data:
        raise InvalidInput(f"field '{field}' is empty.")
    if len(data) > limit_bytes:
        raise TooLarge(f"field '{field}' exceeds the limit of {limit_bytes // (1024 * 1024)} MB.")
    return data


def _limit_bytes(ctx: AppContext) -> int:
    return int(ctx.settings.max_request_mb * 1024 * 1024)


def _store(ctx: AppContext, caller: Principal, file_name: str, data: bytes) -> Upload:
    """Keep the audio (object storage: any node's Jobs replica can read it), then the row that points to it."""
    row = Upload(
        customer_id=caller.customer_id,
        project_id=caller.project_id,
        token_id=caller.token_id,
        file_name=(file_name or "")[:500],
        path="",
        size_bytes=len(data),
    )
    row.id = new_uuid()
    row.path = store_upload(ctx.settings, row.id, sanitize_filename(file_name, default="audio"), data)
    try:
        with ctx.db.session() as s:
            s.add(row)
    except BaseException:
        delete_upload(ctx.settings, row.id, row.path)  # no audio without its row
        raise
    return row


async def v1_upload(ctx: AppContext, caller: Principal, file_name: str, audio_blob: str) -> UploadResult:
    data = await anyio.to_thread.run_sync(decode_audio_blob, audio_blob, _limit_bytes(ctx))  # ~1 s per GB
    row = await anyio.to_thread.run_sync(_store, ctx, caller, file_name, data)
    return UploadResult(upload_id=row.id, customer_id=row.customer_id, project_id=row.project_id)


def _owned(ctx: AppContext, caller: Principal, upload_id: str) -> Upload:
    with ctx.db.session() as s:
        row = s.get(Upload, upload_id)
        if row is None or row.customer_id != caller.customer_id:
            raise NotFound(f"Upload {upload_id} not found.")
        return row


async def v1_process(
    ctx: AppContext, caller: Principal, upload_id: str, webhook: str | None, language_code: str | None
) -> MessageResult:
    await anyio.to_thread.run_sync(_owned, ctx, caller, upload_id)
    jobs = required(ctx.clients.jobs, "jobs")
    await ctx.admission.customers.check_audio(caller)  # the customer's audio of the day: 429 before the job is queued
    language_code = await _check_language(ctx, language_code)
    if webhook is not None and webhook.strip():
        webhook = await check_webhook_url_async(webhook, ctx.settings.webhooks.allow_private)
    else:
        webhook = None
    placed = await anyio.to_thread.run_sync(job_queue.enqueue, ctx.db, upload_id, webhook, language_code)
    if placed:
        await _wake(jobs)
        return MessageResult(message=f"Upload {upload_id} has been placed on the processing queue.")
    return MessageResult(message=f"Upload {upload_id} is already on the processing queue.")


async def _check_language(ctx: AppContext, language_code: str | None) -> str | None:
    """The normalised code, or 400 now (not a failed job later) when no speech model serves it. The
    Speech deployment decides: it knows the models it really has (including ones added by reconfigure)."""
    if language_code is None or not language_code.strip():
        return None
    try:
        return await speech_client(ctx).check_language(language_code)
    except UnsupportedLanguage as exc:
        raise exc.for_field("language_code") from None


async def _wake(jobs: JobsClient) -> None:
    """Tell the worker there is work now (it also polls, so a lost nudge only delays the job)."""
    try:
        await asyncio.wait_for(jobs.wake(), 5.0)
    except Exception as exc:  # noqa: BLE001 - the job is durable; the worker's poll will find it
        log.warning("could not wake the jobs worker: %s", exc)


async def v1_get(ctx: AppContext, caller: Principal, upload_id: str) -> UploadedText:
    row = await anyio.to_thread.run_sync(_owned, ctx, caller, upload_id)
    if row.job_status == JobStatus.COMPLETED:
        result = JobResult.model_validate(row.result or {})
        return UploadedText(
            message="Item has been processed.",
            upload_id=row.id,
            status="completed",
            text=result.text,
            language_id=result.language_id,
            postprocessed_text=[s.model_dump(exclude_none=True) for s in result.postprocessed_text],
        )
    if row.job_status == JobStatus.FAILED:
        reason = row.error or "unknown error"
        return UploadedText(
            message=f"Item processing failed: {reason}", upload_id=row.id, status="failed", error=reason
        )
    return UploadedText(message=NOT_PROCESSED)
