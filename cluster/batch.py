"""Batch transcription fan-out: one Ray task per file, results written to the database exactly once.

This is the part of batches that runs the speech pipeline (it imports ``engines`` and ``ray``), so only the
Jobs deployment and the benchmark import it; the ingress uses ``cluster.s3`` and ``cluster.credentials``.
State lives in the database, never in memory (the state machine: ``persistence/batches.py``).

:func:`transcribe_batch_file` is the Ray task (``max_retries``: a killed worker's file is retried elsewhere;
``retry_exceptions``: storage hiccups; both set where it is submitted). It reads the audio straight from object
storage into a temporary file, transcribes it with ``engines.speech.pipeline.TranscriptionPipeline`` (one per worker
process, cached) and builds the file's record with ``contracts.speech.build_record``. :class:`BatchCoordinator`
launches the tasks of a batch (``SPREAD`` over the cluster, bounded in flight), marks files whose tasks ran out of
retries as failed, and closes the batch. It keeps nothing it cannot rebuild: on start it resumes every batch
still ``PROCESSING`` that no other runner holds. A runner holds each batch it runs by a lease in the database
(``persistence.batches.hold``), renewed at every sweep, so with several Jobs replicas one coordinates a batch at a
time; a lease that lapses (its replica died) lets the next sweep of any replica resume the batch.

Tasks are handed ``Settings.for_replica(TASK_SECTIONS)``, never a secret: each worker rebuilds its settings with
``Settings.from_bound`` and reads the database URL and the S3 secret key from its own environment.
"""

from __future__ import annotations

import logging
import mimetypes
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import ray

from cluster.s3 import download_object, for_bucket, is_missing, object_url
from contracts.errors import DomainError, UnsupportedLanguage
from contracts.logs import configure_logging
from contracts.settings import Settings
from contracts.speech import TranscriptionResult, build_record
from persistence import batches
from persistence.batches import FileTask
from persistence.session import Database

log = logging.getLogger(__name__)

# What a file's task reads: the database and data directory (top level), storage, and the speech pipeline.
TASK_SECTIONS = ("s3", "speech")
MISSING = "MISSING"  # a task's answer for an item that no longer exists
SWEEP_SECONDS = 30.0  # how often a runner renews its leases and resumes batches nobody holds
LEASE_SECONDS = 3 * SWEEP_SECONDS  # two sweeps may be late before another runner takes a batch over


class StorageError(RuntimeError):
    """Object storage could not be read (network, 5xx): the task is retried."""


# --------------------------------------------------------------------------------------------------------------
# Per-process caches (a Ray worker process handles many files)
# --------------------------------------------------------------------------------------------------------------

_cache_lock = threading.Lock()
_task_logging = False
_databases: dict[str, Database] = {}


def task_database(url: str) -> Database:
    with _cache_lock:
        if url not in _databases:
            _databases[url] = Database(url)
        return _databases[url]


def transcribe_file(settings: Settings, path: Path, language: str | None, diarise: bool) -> TranscriptionResult:
    """Transcribe with the worker process's pipeline (``engines.speech.pipeline`` keeps one per process and model
    configuration, so models load once per worker)."""
    from engines.speech.pipeline import get_pipeline

    pipeline = get_pipeline(settings.speech, settings.data_dir)
    return pipeline.transcribe(path, language, diarise, detect_music=False)


# --------------------------------------------------------------------------------------------------------------
# One file
# --------------------------------------------------------------------------------------------------------------


def _local_name(blob_name: str) -> str:
    name = PurePosixPath(blob_name).name or "audio"
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[-120:]


def process_item(bound: dict[str, Any], item_id: str) -> str:
    """Transcribe one batch file and record its result (idempotent). Returns the item's final status.

    ``bound`` is what :meth:`Settings.for_replica` gives (no secrets). Raises :class:`StorageError` for storage
    failures worth a retry; every other problem with the file (not audio, undecodable, unsupported language ...)
    becomes a FAILED item with the reason.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    settings = Settings.from_bound(bound)
    db = task_database(settings.db_url)
    task = batches.begin_attempt(db, item_id)
    if not isinstance(task, FileTask):  # unknown, or its result was written already (a retry, an overlapping run)
        return task or MISSING
    s3 = for_bucket(settings.s3, task.bucket)

    with tempfile.TemporaryDirectory(prefix="khuluma-batch-") as tmp:
        path = Path(tmp) / _local_name(task.blob_name)
        try:
            size = download_object(s3, task.blob_name, path)
        except ClientError as exc:
            if is_missing(exc):
                return _failed(db, item_id, "The file is no longer in object storage.")
            raise StorageError(f"reading {task.blob_name}: {exc}") from None
        except BotoCoreError as exc:
            raise StorageError(f"reading {task.blob_name}: {exc}") from None
        if size == 0:
            return _failed(db, item_id, "The file is empty (0 bytes): not audio.")
        try:
            result = transcribe_file(settings, path, task.language_code, task.diarise)
        except UnsupportedLanguage as exc:  # the batch's lang_code, named as the client sent it
            return _failed(db, item_id, exc.for_field("lang_code").detail)
        except DomainError as exc:
            return _failed(db, item_id, exc.detail)
        except Exception as exc:
            log.exception("batch file %s failed", task.blob_name)
            return _failed(db, item_id, f"Transcription failed: {type(exc).__name__}: {exc}")

    if result.mime_type is None:  # the decoder could not name it: the file name's type is the best guess
        result = result.model_copy(update={"mime_type": mimetypes.guess_type(task.blob_name)[0]})
    record = build_record(
        result,
        id=item_id,
        customer_id=task.customer_id,
        project_id=task.project_id,
        keychain_id=task.keychain_id,
        blob_name=task.blob_name,
        upload_file_size=size,
        storage_url=object_url(s3, task.blob_name),
        container_name=s3.bucket,
    )
    return batches.complete(db, item_id, record) or MISSING


def _failed(db: Database, item_id: str, reason: str) -> str:
    return batches.fail(db, item_id, reason) or MISSING


@ray.remote  # resources and retries: BatchCoordinator._submit
def transcribe_batch_file(bound: dict[str, Any], item_id: str) -> str:
    """Ray task: one batch file (see :func:`process_item`)."""
    global _task_logging
    if not _task_logging:  # once per worker process: JSON lines in Ray's worker logs, like the replicas'
        configure_logging("batch-task", None, str(bound.get("log_level") or "INFO"))
        _task_logging = True
    return process_item(bound, item_id)


# --------------------------------------------------------------------------------------------------------------
# A batch
# --------------------------------------------------------------------------------------------------------------


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

    def __init__(
        self,
        settings: Settings,
        db: Database,
        *,
        use_ray: bool | None = None,
        lease_seconds: float = LEASE_SECONDS,
        runner: str | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.use_ray = ray.is_initialized() if use_ray is None else use_ray
        self.task_settings = self._task_settings()
        # its name in the batches' leases: its replica's (the Jobs worker's), else host:pid:id of its own
        self.runner = runner or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.lease_seconds = lease_seconds
        self._lock = threading.Lock()
        self._running: dict[str, threading.Thread] = {}
        self._lost: set[str] = set()  # batches this runner no longer holds: they submit no more files here
        self._closed = False  # let go of everything (the replica is stopping): it takes no lease again

    def _task_settings(self) -> dict[str, Any]:
        """What the tasks are handed (no secrets). A task decodes one file at a time: one decode
        (``speech.whisper_parallel_decodes`` is the Speech replicas'), on ``batch.task_cpus`` threads when that is
        >= 1 (the CPUs Ray reserves for it), else on ``speech.whisper_cpu_threads``, else on its share of this machine's
        cores among the files transcribed at once (every core for every file would make them fight)."""
        settings = self.settings
        if settings.batch.task_cpus >= 1:
            threads = int(settings.batch.task_cpus)
        elif settings.speech.whisper.cpu_threads:
            threads = settings.speech.whisper.cpu_threads
        else:
            threads = (os.cpu_count() or 1) // self.max_parallel()
        settings = settings.updated({"speech": {"whisper_cpu_threads": max(1, threads), "whisper_parallel_decodes": 1}})
        return settings.for_replica(TASK_SECTIONS)

    # -- public ------------------------------------------------------------------------------------------------
    def start(self, batch_id: str) -> bool:
        """Run a PROCESSING batch in the background unless it is running here already or another runner holds
        it. True if started."""
        with self._lock:
            thread = self._running.get(batch_id)
            if self._closed or (thread is not None and thread.is_alive()):
                return False
            if not batches.hold(self.db, batch_id, self.runner, self.lease_seconds):
                return False
            self._lost.discard(batch_id)
            thread = threading.Thread(
                target=self._run_safely, args=(batch_id,), name=f"batch-{batch_id[:8]}", daemon=True
            )
            self._running[batch_id] = thread
            thread.start()
            return True

    def resume_all(self) -> list[str]:
        """Start every PROCESSING batch not already running (start-up and periodic sweep)."""
        return [b for b in batches.processing_batches(self.db) if self.start(b)]

    def running(self) -> list[str]:
        with self._lock:
            return [b for b, t in self._running.items() if t.is_alive()]

    def renew(self) -> list[str]:
        """Renew the lease of every batch running here; returns those no longer held here (another runner took
        the lease after it lapsed, or the batch closed): they submit no more files here. Under the lock, so a
        :meth:`let_go` never finds a lease renewed behind it."""
        with self._lock:
            if self._closed:
                return []
            held = [b for b, t in self._running.items() if t.is_alive() and b not in self._lost]
            lost = [b for b in held if not batches.hold(self.db, b, self.runner, self.lease_seconds)]
            self._lost.update(lost)
        for batch_id in lost:
            log.info("batch %s: no longer held here (closed, or taken over by another runner)", batch_id)
        return lost

    def let_go(self) -> None:
        """Give up every lease held here and take none again (the replica is stopping): another runner resumes
        those batches at its next sweep instead of after the leases lapse."""
        with self._lock:
            self._closed = True
            running = [b for b, t in self._running.items() if t.is_alive()]
            self._lost.update(running)
            for batch_id in running:
                batches.let_go(self.db, batch_id, self.runner)

    def wait(self, batch_id: str, timeout: float | None = None) -> None:
        with self._lock:
            thread = self._running.get(batch_id)
        if thread is not None:
            thread.join(timeout)

    def max_parallel(self) -> int:
        if self.settings.batch.max_parallel > 0:
            return self.settings.batch.max_parallel
        if self.use_ray:
            return max(1, int(ray.cluster_resources().get("CPU", 1)))
        return 1

    def run(self, batch_id: str) -> str | None:
        """Transcribe every pending file of the batch, then close it. Blocking. Returns the closing status (None
        while files are still pending)."""
        items = batches.pending_items(self.db, batch_id)
        log.info("batch %s: %d file(s) to transcribe", batch_id, len(items))
        if self.use_ray:
            self._run_ray(batch_id, items)
        else:
            for item_id in items:
                if self._stopped(batch_id):
                    break
                self._run_local(item_id)
        if self._stopped(batch_id):
            log.info("batch %s: left to another runner", batch_id)
            return None
        status = batches.close(self.db, batch_id)
        log.info("batch %s: %s", batch_id, status or "still has pending files")
        return status

    # -- internals ---------------------------------------------------------------------------------------------
    def _stopped(self, batch_id: str) -> bool:
        with self._lock:
            return batch_id in self._lost

    def _run_safely(self, batch_id: str) -> None:
        try:
            self.run(batch_id)
        except Exception:
            log.exception("batch %s: coordinator failed; it will be resumed", batch_id)
        finally:
            with self._lock:  # no renewal between the release and the end of this thread
                try:  # unfinished: any runner's next sweep resumes it
                    batches.let_go(self.db, batch_id, self.runner)
                except Exception:  # then the lease lapses instead
                    log.warning("batch %s: lease not released", batch_id, exc_info=True)
                self._lost.discard(batch_id)
                self._running.pop(batch_id, None)

    def _run_local(self, item_id: str) -> None:
        retries = self.settings.batch.task_retries
        for attempt in range(retries + 1):
            try:
                process_item(self.task_settings, item_id)
                return
            except StorageError as exc:
                if attempt == retries:
                    batches.fail(self.db, item_id, f"Object storage could not be read: {exc}")
                    return
                time.sleep(min(2**attempt, 10))

    def _submit(self, item_id: str) -> Any:
        return transcribe_batch_file.options(
            num_cpus=self.settings.batch.task_cpus,
            resources=dict(self.settings.batch.task_resources),
            scheduling_strategy="SPREAD",
            max_retries=self.settings.batch.task_retries,
            retry_exceptions=[StorageError],
            name=f"batch-file-{item_id[:8]}",
        ).remote(self.task_settings, item_id)

    def _run_ray(self, batch_id: str, items: list[str]) -> None:
        queue = list(items)
        in_flight: dict[Any, str] = {}
        limit = self.max_parallel()
        while queue or in_flight:
            if self._stopped(batch_id):
                queue.clear()  # the files in flight still get their outcomes (exactly once, whoever runs them)
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
                    batches.fail(self.db, item_id, _failure_reason(exc))


def sweep_forever(
    coordinator: BatchCoordinator,
    interval: float,
    stop: threading.Event,
    on_error: Callable[[Exception], None] | None = None,
) -> None:
    """Renew this runner's leases, then resume the PROCESSING batches nobody holds (start-up, a lost call, a
    crashed coordinator or replica)."""
    while not stop.is_set():
        try:
            coordinator.renew()
            coordinator.resume_all()
        except Exception as exc:  # noqa: BLE001 - keep sweeping
            (on_error or (lambda e: log.warning("batch sweep: %s", e)))(exc)
        stop.wait(interval)
