"""Batch transcription fan-out: one Ray task per file, results written to the database exactly once.

State lives in the database, never in memory:

- ``Batch.status``: ``CREATED`` -> ``PROCESSING`` -> ``COMPLETE`` (every file transcribed) | ``PARTIAL`` (some
  files failed, the others have results) | ``FAILED`` (every file failed).
- ``BatchItem`` (unique per ``(batch_id, blob_name)``): ``PENDING`` -> ``COMPLETED`` (``record`` holds the
  transcription record) | ``FAILED`` (``error`` says why). The only transition out of ``PENDING`` is a
  conditional ``UPDATE ... WHERE status = 'PENDING'``, in the same transaction as the file's usage row, so a file
  gets exactly one result even when a task is retried after its worker died or two runs overlap.

:func:`transcribe_batch_file` is the Ray task (``max_retries``: a killed worker's file is retried elsewhere;
``retry_exceptions``: storage hiccups). It reads the audio straight from object storage into a temporary file and
transcribes it with ``engines.pipeline.TranscriptionPipeline`` (one per worker process, cached).
:class:`BatchCoordinator` launches the tasks of a batch (``SPREAD`` over the cluster, bounded in flight), marks
files whose tasks ran out of retries as failed, and closes the batch. It keeps nothing it cannot rebuild: on start
it resumes every batch still ``PROCESSING``.
"""

from __future__ import annotations

import logging
import mimetypes
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import ray
from sqlalchemy import func, select, update

from persistence.models import Batch, BatchItem, UsageRecord, utcnow
from persistence.session import Database
from contracts.errors import DomainError
from contracts.settings import Settings

log = logging.getLogger(__name__)

USAGE_ROUTE = "transcribe.batch"
PENDING, COMPLETED, FAILED = "PENDING", "COMPLETED", "FAILED"
CREATED, PROCESSING, COMPLETE, PARTIAL = "CREATED", "PROCESSING", "COMPLETE", "PARTIAL"


class StorageError(RuntimeError):
    """Object storage could not be read (network, 5xx): the task is retried."""


# --------------------------------------------------------------------------------------------------------------
# Per-process caches (a Ray worker process handles many files)
# --------------------------------------------------------------------------------------------------------------

_cache_lock = threading.Lock()
_databases: dict[str, Database] = {}


def task_database(url: str) -> Database:
    with _cache_lock:
        if url not in _databases:
            _databases[url] = Database(url)
        return _databases[url]


def get_pipeline(settings: Settings) -> Any:
    """The worker process's ``TranscriptionPipeline`` for these settings (the speech engine caches one per
    process and model configuration, so models load once per worker)."""
    from engines.pipeline import get_pipeline as speech_pipeline

    return speech_pipeline(settings)


# --------------------------------------------------------------------------------------------------------------
# One file
# --------------------------------------------------------------------------------------------------------------


def build_record(result: dict[str, Any], *, item_id: str, storage_url: str, bucket: str, blob_name: str,
                 customer_id: int, project_id: int | None, keychain_id: int | None, size: int) -> dict[str, Any]:
    """The spec's transcription record of one batch file: the pipeline's record plus where the file lives and
    whose it is."""
    from serve_app.schemas.transcribe import TranscriptionRecord

    fields = set(TranscriptionRecord.model_fields)
    record = {k: v for k, v in dict(result).items() if k in fields and v is not None}
    record.update(
        id=item_id, storage_url=storage_url, container_name=bucket, blob_name=blob_name,
        customer_id=customer_id, project_id=project_id, keychain_id=keychain_id, upload_file_size=size,
        transcription_status="COMPLETED", error_message=None,
    )
    record.setdefault("mime_type", mimetypes.guess_type(blob_name)[0])
    return TranscriptionRecord(**record).model_dump(mode="json")


def batch_storage(settings: Settings, batch: Batch) -> Settings:
    """``settings`` pointing at the bucket the batch's files were uploaded to (it may differ from the configured
    bucket after a configuration change, or for a batch resumed by another service instance)."""
    if batch.bucket and batch.bucket != settings.s3.bucket:
        return settings.model_copy(update={"s3_bucket": batch.bucket})
    return settings


def placeholder_record(item: BatchItem, batch: Batch, settings: Settings, reason: str | None) -> dict[str, Any]:
    """What the results route shows for a file that failed (``error_message`` says why) or is still pending."""
    from cluster.storage import object_url

    settings = batch_storage(settings, batch)
    return {
        "id": item.id, "storage_url": object_url(settings, item.blob_name), "container_name": settings.s3.bucket,
        "blob_name": item.blob_name, "customer_id": batch.customer_id, "project_id": batch.project_id,
        "keychain_id": batch.keychain_id, "language_code": batch.language_code or "",
        "transcription_status": item.status, "error_message": reason,
    }


def _finish(db: Database, item_id: str, status: str, *, record: dict[str, Any] | None = None,
            error: str | None = None) -> str:
    """Write a file's outcome once: only a PENDING item changes, together with its usage row."""
    seconds = float((record or {}).get("audio_length_seconds") or 0.0)
    with db.session() as s:
        changed = s.execute(
            update(BatchItem).where(BatchItem.id == item_id, BatchItem.status == PENDING)
            .values(status=status, record=record, error=error, updated_at=utcnow())
        ).rowcount
        if changed:
            usage_status = "successful" if status == COMPLETED else "failed"
            touched = s.execute(
                update(UsageRecord).where(UsageRecord.reference_id == item_id, UsageRecord.status == "pending")
                .values(status=usage_status, seconds_transcribed=seconds)
            ).rowcount
            if not touched:
                item = s.get(BatchItem, item_id)
                batch = s.get(Batch, item.batch_id) if item else None
                if batch is not None:
                    s.add(UsageRecord(customer_id=batch.customer_id, project_id=batch.project_id,
                                      route=USAGE_ROUTE, status=usage_status, seconds_transcribed=seconds,
                                      reference_id=item_id))
            return status
        current = s.scalar(select(BatchItem.status).where(BatchItem.id == item_id))
        return current or "MISSING"


def mark_failed(db: Database, item_id: str, reason: str) -> str:
    return _finish(db, item_id, FAILED, error=reason)


def _local_name(blob_name: str) -> str:
    name = PurePosixPath(blob_name).name or "audio"
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[-120:]


def process_item(settings_dict: dict[str, Any], item_id: str) -> str:
    """Transcribe one batch file and record its result (idempotent). Returns the item's final status.

    Raises :class:`StorageError` for storage failures worth a retry; every other problem with the file (not
    audio, undecodable, unsupported language ...) becomes a FAILED item with the reason.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    from cluster.storage import download_object, is_missing, object_url

    settings = Settings(**settings_dict)
    db = task_database(settings.db_url)
    with db.session() as s:
        item = s.get(BatchItem, item_id)
        if item is None:
            return "MISSING"
        if item.status != PENDING:
            return item.status  # a retry or an overlapping run after the result was written
        item.attempts += 1
        batch = s.get(Batch, item.batch_id)
        assert batch is not None
        blob_name, lang, diarise = item.blob_name, batch.language_code, bool(batch.diarise)
        owner = (batch.customer_id, batch.project_id, batch.keychain_id)
        settings = batch_storage(settings, batch)

    with tempfile.TemporaryDirectory(prefix="khuluma-batch-") as tmp:
        path = Path(tmp) / _local_name(blob_name)
        try:
            size = download_object(settings, blob_name, path)
        except ClientError as exc:
            if is_missing(exc):
                return mark_failed(db, item_id, "The file is no longer in object storage.")
            raise StorageError(f"reading {blob_name}: {exc}") from None
        except BotoCoreError as exc:
            raise StorageError(f"reading {blob_name}: {exc}") from None
        if size == 0:
            return mark_failed(db, item_id, "The file is empty (0 bytes): not audio.")
        try:
            result = get_pipeline(settings).transcribe(path, lang, diarise, detect_music=False)
        except DomainError as exc:
            return mark_failed(db, item_id, exc.detail)
        except Exception as exc:  # noqa: BLE001 - a file the engine chokes on fails alone, with the reason
            log.exception("batch file %s failed", blob_name)
            return mark_failed(db, item_id, f"Transcription failed: {type(exc).__name__}: {exc}")

    record = build_record(result, item_id=item_id, storage_url=object_url(settings, blob_name),
                          bucket=settings.s3.bucket, blob_name=blob_name, customer_id=owner[0],
                          project_id=owner[1], keychain_id=owner[2], size=size)
    return _finish(db, item_id, COMPLETED, record=record)


@ray.remote(max_retries=3, retry_exceptions=[StorageError])
def transcribe_batch_file(settings_dict: dict[str, Any], item_id: str) -> str:
    """Ray task: one batch file (see :func:`process_item`)."""
    return process_item(settings_dict, item_id)


# --------------------------------------------------------------------------------------------------------------
# A batch
# --------------------------------------------------------------------------------------------------------------


def finalize(db: Database, batch_id: str) -> str | None:
    """Close a PROCESSING batch whose files all have an outcome: COMPLETE, PARTIAL or FAILED."""
    with db.session() as s:
        counts = dict(s.execute(select(BatchItem.status, func.count()).where(BatchItem.batch_id == batch_id)
                                .group_by(BatchItem.status)).all())
        if counts.get(PENDING):
            return None
        done, failed = counts.get(COMPLETED, 0), counts.get(FAILED, 0)
        status = COMPLETE if failed == 0 else (FAILED if done == 0 else PARTIAL)
        changed = s.execute(update(Batch).where(Batch.id == batch_id, Batch.status == PROCESSING)
                            .values(status=status, updated_at=utcnow())).rowcount
        return status if changed else None


def pending_items(db: Database, batch_id: str) -> list[str]:
    with db.session() as s:
        return list(s.scalars(select(BatchItem.id).where(BatchItem.batch_id == batch_id,
                                                         BatchItem.status == PENDING).order_by(BatchItem.blob_name)))


def processing_batches(db: Database) -> list[str]:
    with db.session() as s:
        return list(s.scalars(select(Batch.id).where(Batch.status == PROCESSING).order_by(Batch.updated_at)))


def _failure_reason(exc: BaseException) -> str:
    name = type(exc).__name__
    if "WorkerCrashed" in name or "NodeDied" in name or "ActorDied" in name:
        return "The worker transcribing this file died repeatedly (retries exhausted)."
    cause = getattr(exc, "cause", None)
    if isinstance(cause, StorageError):
        return f"Object storage could not be read: {cause}"
    return f"Transcription failed: {name}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"


class BatchCoordinator:
    """Runs batches: one thread per running batch submits its pending files as Ray tasks (or, without Ray,
    transcribes them one by one in that thread) and closes the batch when every file has an outcome."""

    def __init__(self, settings: Settings, db: Database, *, use_ray: bool | None = None) -> None:
        self.settings = settings
        self.db = db
        self.use_ray = ray.is_initialized() if use_ray is None else use_ray
        self.settings_dict = self.task_settings()
        self._lock = threading.Lock()
        self._running: dict[str, threading.Thread] = {}

    def task_settings(self) -> dict[str, Any]:
        """Settings handed to the tasks. ``whisper_cpu_threads`` 0 (all cores) would make every file of a batch
        fight for every core: a task then uses ``batch_task_cpus`` threads when that is >= 1, else its share of
        this machine's cores among the files transcribed at once."""
        out = self.settings.model_dump(mode="json")
        if self.settings.whisper.cpu_threads == 0:
            if self.settings.batch.task_cpus >= 1:
                threads = int(self.settings.batch.task_cpus)
            else:
                threads = (os.cpu_count() or 1) // self.max_parallel()
            out["whisper_cpu_threads"] = max(1, threads)
        return out

    # -- public ------------------------------------------------------------------------------------------------
    def start(self, batch_id: str) -> bool:
        """Run a PROCESSING batch in the background unless it is running already. True if started."""
        with self._lock:
            thread = self._running.get(batch_id)
            if thread is not None and thread.is_alive():
                return False
            thread = threading.Thread(target=self._run_safely, args=(batch_id,), name=f"batch-{batch_id[:8]}",
                                      daemon=True)
            self._running[batch_id] = thread
            thread.start()
            return True

    def resume_all(self) -> list[str]:
        """Start every PROCESSING batch not already running (start-up and periodic sweep)."""
        return [b for b in processing_batches(self.db) if self.start(b)]

    def running(self) -> list[str]:
        with self._lock:
            return [b for b, t in self._running.items() if t.is_alive()]

    def wait(self, batch_id: str, timeout: float | None = None) -> None:
        with self._lock:
            thread = self._running.get(batch_id)
        if thread is not None:
            thread.join(timeout)

    # -- internals ---------------------------------------------------------------------------------------------
    def _run_safely(self, batch_id: str) -> None:
        try:
            self.run(batch_id)
        except Exception:  # noqa: BLE001 - the sweep resumes the batch later
            log.exception("batch %s: coordinator failed; it will be resumed", batch_id)

    def max_parallel(self) -> int:
        if self.settings.batch.max_parallel > 0:
            return self.settings.batch.max_parallel
        if self.use_ray:
            return max(1, int(ray.cluster_resources().get("CPU", 1)))
        return 1

    def run(self, batch_id: str) -> str | None:
        """Transcribe every pending file of the batch, then close it. Blocking."""
        items = pending_items(self.db, batch_id)
        log.info("batch %s: %d file(s) to transcribe", batch_id, len(items))
        if self.use_ray:
            self._run_ray(items)
        else:
            for item_id in items:
                self._run_local(item_id)
        status = finalize(self.db, batch_id)
        log.info("batch %s: %s", batch_id, status or "still has pending files")
        return status

    def _run_local(self, item_id: str) -> None:
        for attempt in range(self.settings.batch.task_retries + 1):
            try:
                process_item(self.settings_dict, item_id)
                return
            except StorageError as exc:
                if attempt == self.settings.batch.task_retries:
                    mark_failed(self.db, item_id, f"Object storage could not be read: {exc}")
                    return
                time.sleep(min(2 ** attempt, 10))

    def _submit(self, item_id: str) -> Any:
        return transcribe_batch_file.options(
            num_cpus=self.settings.batch.task_cpus, scheduling_strategy="SPREAD",
            max_retries=self.settings.batch.task_retries, name=f"batch-file-{item_id[:8]}",
        ).remote(self.settings_dict, item_id)

    def _run_ray(self, items: list[str]) -> None:
        queue = list(items)
        in_flight: dict[Any, str] = {}
        limit = self.max_parallel()
        while queue or in_flight:
            while queue and len(in_flight) < limit:
                item_id = queue.pop(0)
                in_flight[self._submit(item_id)] = item_id
            done, _ = ray.wait(list(in_flight), num_returns=1, timeout=10)
            for ref in done:
                item_id = in_flight.pop(ref)
                try:
                    ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - retries exhausted: the file fails, not the batch
                    log.warning("batch file %s: %s", item_id, exc)
                    mark_failed(self.db, item_id, _failure_reason(exc))


def open_database(url: str, attempts: int = 20) -> Database:
    """The database with migrations applied; waits while another process (the ingress) migrates it."""
    for attempt in range(attempts):
        try:
            return Database.migrated(url)
        except Exception:  # noqa: BLE001 - concurrent first migration by another replica
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def sweep_forever(coordinator: BatchCoordinator, interval: float, stop: threading.Event,
                  on_error: Callable[[Exception], None] | None = None) -> None:
    """Resume PROCESSING batches that no thread runs (start-up, a lost call, a crashed coordinator)."""
    while not stop.is_set():
        try:
            coordinator.resume_all()
        except Exception as exc:  # noqa: BLE001 - keep sweeping
            (on_error or (lambda e: log.warning("batch sweep: %s", e)))(exc)
        stop.wait(interval)

