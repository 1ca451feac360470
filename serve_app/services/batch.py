"""Batch transcription services: create a batch (upload place + credential), process it, list, results.

Lifecycle and moves: ``persistence/batches.py``. ``process`` moves CREATED -> PROCESSING with one conditional
UPDATE, in the transaction that also records the batch's files, so a batch runs once whatever the number of
concurrent or repeated calls (later calls start nothing). The Jobs deployment then transcribes the files;
this module runs no model and imports no Ray task (``cluster.s3`` and ``cluster.credentials`` only).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import ParamSpec, TypeVar

import anyio

from cluster.credentials import encode_token, issue_upload_credential
from cluster.s3 import batch_prefix, blob_endpoint, call_storage, for_bucket, list_objects, object_url
from contracts.batch import BatchCreated, BatchInfo
from contracts.errors import InvalidInput, NotFound, UnsupportedLanguage
from contracts.speech import TranscriptionRecord, build_record
from persistence import batches
from persistence.batches import BatchStatus, ItemStatus
from persistence.models import Batch, BatchItem, new_uuid
from serve_app.context import AppContext, required, speech_client
from serve_app.tokens import Principal

log = logging.getLogger(__name__)

LANGUAGE_FIELD = "lang_code"  # the query parameter that carries the batch's language

P = ParamSpec("P")
T = TypeVar("T")


async def _storage(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """A blocking storage call off the event loop; outages answer 503 naming the cause."""
    return await anyio.to_thread.run_sync(partial(call_storage, fn, *args, **kwargs))


async def _check_language(ctx: AppContext, lang_code: str | None) -> str | None:
    """The batch's language, normalised exactly as sync transcription normalises it (None: detect per file).

    One rule for every route: the Speech deployment's ``check_language`` accepts a code when the language
    registry knows it AND a speech model for it is installed, and refuses it otherwise with the same error sync
    transcription gives, naming the field."""
    if lang_code is None or not lang_code.strip():
        return None
    code = lang_code.strip()
    try:
        return await speech_client(ctx).check_language(code)
    except UnsupportedLanguage as exc:
        raise exc.for_field(LANGUAGE_FIELD) from None


async def create(ctx: AppContext, caller: Principal, lang_code: str | None) -> BatchCreated:
    language = await _check_language(ctx, lang_code)
    batch_id = new_uuid()
    token = await _storage(issue_upload_credential, ctx.settings, batch_id)
    await anyio.to_thread.run_sync(
        partial(
            batches.create_batch,
            ctx.db,
            batch_id=batch_id,
            customer_id=caller.customer_id,
            project_id=caller.project_id,
            keychain_id=caller.token_id,
            language_code=language,
            bucket=ctx.settings.s3.bucket,
        )
    )
    return BatchCreated(
        batch_id=batch_id, blob_endpoint=blob_endpoint(ctx.settings.s3, batch_id), sas_token=encode_token(token)
    )


def _owned(ctx: AppContext, caller: Principal, batch_id: str) -> Batch:
    batch = batches.owned_batch(ctx.db, batch_id, caller.customer_id)
    if batch is None:
        raise NotFound(f"Batch '{batch_id}' not found.")
    return batch


async def process(ctx: AppContext, caller: Principal, batch_id: str, diarise: bool) -> bool:
    """Start processing the batch's uploaded files. True when this call started it; False when it already ran or
    runs (then nothing starts)."""
    runner = required(ctx.clients.batch, "batch")
    batch = await anyio.to_thread.run_sync(_owned, ctx, caller, batch_id)
    if batch.status != BatchStatus.CREATED:
        return False
    await ctx.admission.customers.check_audio(caller)  # the customer's audio of the day: 429 before the batch starts
    objects = await _storage(list_objects, for_bucket(ctx.settings.s3, batch.bucket), batch_prefix(batch_id))
    if not objects:
        raise InvalidInput(
            "No files have been uploaded to this batch yet: upload them to its blob_endpoint with "
            "its sas_token (see docs/batch.md), then call process."
        )
    keys = [o.key for o in objects]
    if not await anyio.to_thread.run_sync(batches.start, ctx.db, batch, keys, diarise):
        return False
    try:
        await runner.run(batch_id)
    except Exception as exc:  # noqa: BLE001 - the batch is PROCESSING in the database: the runner's sweep resumes it
        log.warning("batch %s: runner call failed (%s); it will be picked up by the next sweep", batch_id, exc)
    return True


async def list_batches(ctx: AppContext, caller: Principal) -> list[BatchInfo]:
    rows = await anyio.to_thread.run_sync(batches.customer_batches, ctx.db, caller.customer_id)
    return [BatchInfo.model_validate(b, from_attributes=True) for b in rows]


def _record(ctx: AppContext, batch: Batch, item: BatchItem) -> TranscriptionRecord:
    """The file's transcription when done; otherwise its FAILED (``error_message`` says why) or PENDING record."""
    if item.status == ItemStatus.COMPLETED and item.record:
        return TranscriptionRecord.model_validate(item.record)
    s3 = for_bucket(ctx.settings.s3, batch.bucket)
    return build_record(
        None,
        id=item.id,
        customer_id=batch.customer_id,
        project_id=batch.project_id,
        keychain_id=batch.keychain_id,
        blob_name=item.blob_name,
        storage_url=object_url(s3, item.blob_name),
        container_name=s3.bucket,
        status=item.status,
        error_message=item.error,
        language_code=batch.language_code or "",
    )


async def transcriptions(ctx: AppContext, caller: Principal, batch_id: str) -> list[TranscriptionRecord]:
    """One record per file, by file name."""

    def query() -> list[TranscriptionRecord]:
        batch = _owned(ctx, caller, batch_id)
        return [_record(ctx, batch, item) for item in batches.batch_items(ctx.db, batch_id)]

    return await anyio.to_thread.run_sync(query)
