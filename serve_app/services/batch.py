"""Batch transcription services: create a batch (upload place + credential), process it, list, results.

Lifecycle (``docs/batch.md``): ``CREATED`` (files are being uploaded) -> ``PROCESSING`` -> ``COMPLETE`` |
``PARTIAL`` (some files failed) | ``FAILED`` (every file failed). ``process`` moves CREATED -> PROCESSING with one
conditional UPDATE, in the transaction that also records the batch's files, so a batch runs once whatever the
number of concurrent or repeated calls (later calls answer 204).
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from sqlalchemy import select, update

from serve_app.context import AppContext
from persistence.models import Batch, BatchItem, UsageRecord, new_uuid, utcnow
from persistence.session import Database
from contracts.errors import DomainError, InvalidInput, NotFound, Unavailable
from serve_app.tokens import Principal

log = logging.getLogger(__name__)

# The spec's codes for batch/fast transcription, plus code-switched isiZulu (alpha).
LANGUAGE_CODES = ("afr", "zul", "sot", "eng", "fra", "cs-zul")


def _check_language(ctx: AppContext, lang_code: str | None) -> str | None:
    if lang_code is None or not lang_code.strip():
        return None
    code = lang_code.strip()
    accepted = list(LANGUAGE_CODES) + [c for c in ctx.settings.whisper.language_models if c not in LANGUAGE_CODES]
    if code not in accepted:
        raise InvalidInput(f"Invalid request: field 'lang_code': '{code}' is not supported; use one of "
                         f"{', '.join(accepted)}, or leave it out to detect the language of each file.")
    return code


def _storage_call(fn: Any, *args: Any) -> Any:
    """Run a blocking storage call; storage outages become 503 with the endpoint named."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return fn(*args)
    except DomainError:
        raise
    except (BotoCoreError, ClientError) as exc:
        raise Unavailable(f"Object storage is unavailable: {exc}") from None


async def create(ctx: AppContext, caller: Principal, lang_code: str | None) -> dict[str, Any]:
    from cluster.storage import blob_endpoint, encode_token, issue_upload_credential

    language = _check_language(ctx, lang_code)
    batch_id = new_uuid()
    token = await anyio.to_thread.run_sync(_storage_call, issue_upload_credential, ctx.settings, batch_id)

    def insert() -> None:
        with ctx.db.session() as s:
            s.add(Batch(id=batch_id, customer_id=caller.customer_id, project_id=caller.project_id,
                        keychain_id=caller.token_id, status="CREATED", language_code=language,
                        bucket=ctx.settings.s3.bucket))

    await anyio.to_thread.run_sync(insert)
    return {"batch_id": batch_id, "blob_endpoint": blob_endpoint(ctx.settings, batch_id),
            "sas_token": encode_token(token)}


def _owned(db: Database, caller: Principal, batch_id: str) -> Batch:
    with db.session() as s:
        batch = s.get(Batch, batch_id)
        if batch is None or batch.customer_id != caller.customer_id:
            raise NotFound(f"Batch '{batch_id}' not found.")
        s.expunge(batch)
        return batch


def _start_processing(db: Database, batch: Batch, keys: list[str], diarise: bool) -> bool:
    """CREATED -> PROCESSING plus one PENDING item and one pending usage row per file, atomically.
    False when another call got there first."""
    with db.session() as s:
        changed = s.execute(
            update(Batch).where(Batch.id == batch.id, Batch.status == "CREATED")
            .values(status="PROCESSING", diarise=diarise, updated_at=utcnow())
        ).rowcount
        if not changed:
            return False
        from cluster.batch import USAGE_ROUTE

        for key in keys:
            item_id = new_uuid()
            s.add(BatchItem(id=item_id, batch_id=batch.id, blob_name=key, status="PENDING"))
            s.add(UsageRecord(customer_id=batch.customer_id, project_id=batch.project_id, route=USAGE_ROUTE,
                              status="pending", reference_id=item_id))
        return True


async def process(ctx: AppContext, caller: Principal, batch_id: str, diarise: bool) -> int:
    """Returns 202 when processing starts, 204 when it already ran or runs."""
    from cluster.batch import batch_storage
    from cluster.storage import batch_prefix, list_objects

    runner = ctx.backends.require("batch")
    batch = await anyio.to_thread.run_sync(_owned, ctx.db, caller, batch_id)
    if batch.status != "CREATED":
        return 204
    storage = batch_storage(ctx.settings, batch)
    objects = await anyio.to_thread.run_sync(_storage_call, list_objects, storage, batch_prefix(batch_id))
    if not objects:
        raise InvalidInput("No files have been uploaded to this batch yet: upload them to its blob_endpoint with "
                         "its sas_token (see docs/batch.md), then call process.")
    started = await anyio.to_thread.run_sync(_start_processing, ctx.db, batch, [o.key for o in objects], diarise)
    if not started:
        return 204
    try:
        await runner.run(batch_id)
    except Exception as exc:  # noqa: BLE001 - the batch is PROCESSING in the database: the runner's sweep resumes it
        log.warning("batch %s: runner call failed (%s); it will be picked up by the next sweep", batch_id, exc)
    return 202


def _batch_info(batch: Batch) -> dict[str, Any]:
    return {"id": batch.id, "customer_id": batch.customer_id, "project_id": batch.project_id,
            "keychain_id": batch.keychain_id, "status": batch.status, "language_code": batch.language_code,
            "created_at": batch.created_at, "updated_at": batch.updated_at}


async def list_batches(ctx: AppContext, caller: Principal) -> list[dict[str, Any]]:
    def query() -> list[dict[str, Any]]:
        with ctx.db.session() as s:
            rows = s.scalars(select(Batch).where(Batch.customer_id == caller.customer_id)
                             .order_by(Batch.created_at.desc(), Batch.id))
            return [_batch_info(b) for b in rows]

    return await anyio.to_thread.run_sync(query)


async def transcriptions(ctx: AppContext, caller: Principal, batch_id: str) -> list[dict[str, Any]]:
    """One record per file: the transcription when done; FAILED (with ``error_message``) or PENDING otherwise."""
    from cluster.batch import placeholder_record

    def query() -> list[dict[str, Any]]:
        batch = _owned(ctx.db, caller, batch_id)
        with ctx.db.session() as s:
            items = s.scalars(select(BatchItem).where(BatchItem.batch_id == batch_id).order_by(BatchItem.blob_name))
            return [item.record if item.status == "COMPLETED" and item.record
                    else placeholder_record(item, batch, ctx.settings, item.error) for item in items]

    return await anyio.to_thread.run_sync(query)
