"""Jobs deployment: the service's background work. It runs async v1 transcription jobs and delivers their
webhooks, and it coordinates batch transcriptions (contracts: ``contracts/jobs.py``, ``contracts/batch.py``).

A background asyncio task on the replica's event loop (the same in a Serve replica and under Serve's local testing
mode, which runs the constructor on the replica's user-code loop too) repeatedly:

0. every ``jobs.sweep_interval_seconds``, removes v1 uploads older than ``jobs.retention_days``
   (``cluster/retention.py``);
1. fails jobs that were started ``jobs.max_attempts`` times without finishing (poison jobs);
2. claims pending jobs, and jobs whose lease expired (their worker died), up to ``jobs.concurrency`` at once;
3. transcribes each with the Speech deployment, renewing its lease meanwhile, then stores the result or
   the failure, settles the usage row and makes the webhook delivery due;
4. claims due webhook deliveries and POSTs them, signed, retrying with exponential backoff.

Batches run beside that loop, in threads of their own (``cluster.batch.BatchCoordinator``): the ingress marks a
batch PROCESSING in the database, then calls :meth:`Jobs.run_batch`; the coordinator fans the batch's files out as
Ray tasks. Every ``cluster.batch.SWEEP_SECONDS`` it renews the leases of the batches it runs and resumes any
PROCESSING batch that no replica holds (a restart, a lost call, a replica that died).

All state lives in the database (``persistence/jobs.py``, ``persistence/batches.py``), so several replicas can share
the work and a restarted replica resumes where the old one stopped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import httpx
from ray.exceptions import (
    NodeDiedError,
    ObjectLostError,
    OutOfMemoryError,
    RayActorError,
    RaySystemError,
    WorkerCrashedError,
)
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError, ReplicaUnavailableError

from cluster import retention
from cluster.batch import SWEEP_SECONDS, BatchCoordinator, sweep_forever
from cluster.transfer import upload_blob
from cluster.webhooks import deliver, retry_delay
from contracts.capabilities import CapabilityInfo
from contracts.errors import DomainError, Overloaded, TimedOut, Unavailable, UnsupportedLanguage, http_status
from contracts.jobs import JobResult, JobsStatus
from contracts.speech import SpeechClient, TranscribeRequest
from deployments.common import configure_replica_logging, load_settings
from persistence import jobs as job_queue
from persistence.jobs import ClaimedJob, DueWebhook
from persistence.models import utcnow
from persistence.session import Database
from runtime.metrics import record_audio, record_webhook, set_queue_depth

log = logging.getLogger(__name__)

WEBHOOK_CONCURRENCY = 8
# Failures worth another attempt (the job goes back to the queue, within its attempt budget): the transcription
# capability is down, overloaded or slow, or the cluster lost the replica or node doing the work. Anything else
# (bad audio, a language without a model, a bug) would fail the same way again.
TRANSIENT_ERRORS: tuple[type[DomainError], ...] = (Unavailable, TimedOut)
INFRASTRUCTURE_ERRORS: tuple[type[Exception], ...] = (
    RayActorError,
    WorkerCrashedError,
    NodeDiedError,
    ObjectLostError,
    OutOfMemoryError,
    RaySystemError,
    BackPressureError,
    DeploymentUnavailableError,
    ReplicaUnavailableError,
)
INTERNAL_ERROR = "Transcription failed because of an internal error."
# What ThreadPoolExecutor.submit raises once the pool (Serve's, at replica shutdown) or the interpreter is shutting
# down: the loop has nothing left to do.
_POOL_SHUT = "cannot schedule new futures"


@dataclass
class _Lease:
    job: ClaimedJob
    lost: bool = False
    stop: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True)
class Outcome:
    """How a job ended: a result, or an error with the status code its webhook reports; ``transient``: another
    attempt may succeed."""

    result: JobResult | None = None
    error: str | None = None
    status_code: int = 200
    transient: bool = False
    shed_for: float = 0.0  # > 0: refused at once by a full queue (no work done): retry after this, attempt refunded


def outcome_of(exc: Exception) -> Outcome:
    """The outcome of a transcription that raised ``exc``. Decided by the error's class, never by a status."""
    if isinstance(exc, UnsupportedLanguage):  # its model was removed since the job was placed
        exc = exc.for_field("language_code")
    if isinstance(exc, Overloaded):
        return Outcome(error=exc.detail, status_code=http_status(exc), transient=True, shed_for=exc.retry_after)
    if isinstance(exc, DomainError):
        return Outcome(error=exc.detail, status_code=http_status(exc), transient=isinstance(exc, TRANSIENT_ERRORS))
    if isinstance(exc, INFRASTRUCTURE_ERRORS):
        return Outcome(error=INTERNAL_ERROR, status_code=500, transient=True)
    return Outcome(error=INTERNAL_ERROR, status_code=500)  # a bug: reported to the client, not retried


class Jobs:
    def __init__(
        self, settings: dict[str, Any] | None = None, speech: Any = None, serves: tuple[str, ...] = ("jobs", "batch")
    ) -> None:
        """``serves``: the capabilities this service reaches it for (``khuluma.app``): the jobs' worker loop runs
        for ``jobs``, the batches' coordinator for ``batch``."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "The Jobs deployment runs in a Serve replica (or under Serve's local testing mode: "
                "khuluma.app.build_local); its worker loop needs the replica's event loop."
            ) from None
        self.settings = load_settings(settings)
        configure_replica_logging("Jobs", self.settings)
        self.settings.ensure_dirs()
        self.db = Database(self.settings.db_url)
        self.db.require_current_schema()
        self.speech = SpeechClient(speech) if speech is not None else None
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.user_config: dict[str, Any] = {}
        self.processed = 0
        self._jobs: set[asyncio.Task[None]] = set()
        self._hooks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._last_sweep = -float("inf")  # the first tick sweeps: uploads that expired while the service was down
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(self.settings.webhooks.timeout_seconds), follow_redirects=False, trust_env=False
        )
        self._main = loop.create_task(self._run(), name="khuluma-jobs") if "jobs" in serves else None
        self.batches = BatchCoordinator(self.settings, self.db, runner=self.worker) if "batch" in serves else None
        self._batch_stop = threading.Event()
        if self.batches is not None:  # its first sweep runs now: the batches nobody holds resume at once
            threading.Thread(
                target=sweep_forever,
                args=(self.batches, SWEEP_SECONDS, self._batch_stop),
                name="batch-sweep",
                daemon=True,
            ).start()

    def __del__(self) -> None:
        """Serve's graceful shutdown: stop the worker loop and the batches. Running jobs are abandoned; their
        leases expire and another replica takes them up, exactly as after a crash. The batches' leases are given
        up, so another replica resumes them at its next sweep."""
        self.stop_batches()
        main = getattr(self, "_main", None)
        if main is None or main.done() or main.get_loop().is_closed():
            return
        main.get_loop().call_soon_threadsafe(main.cancel)

    # ------------------------------------------------------------------ deployment interface

    def check_health(self) -> None:
        """Serve's health check: a replica whose worker loop has ended is replaced."""
        if self._main is not None and self._main.done():
            raise RuntimeError("The jobs worker loop has stopped.")

    async def ping(self) -> bool:
        self.check_health()
        return True

    async def describe(self) -> list[CapabilityInfo]:
        """Batch transcription (no model of its own: Transcription describes the speech models)."""
        if self.batches is None:
            return []
        mode = "Ray tasks (SPREAD)" if self.batches.use_ray else "in-process, one file at a time"
        return [
            CapabilityInfo(
                capability="batch_transcription",
                installed=True,
                backend=mode,
                note="Files uploaded to S3-compatible storage are transcribed by the transcription pipeline, one task "
                "per file; see docs/batch.md.",
            )
        ]

    def reconfigure(self, config: dict[str, Any] | None) -> None:
        self.user_config = dict(config or {})

    async def wake(self) -> bool:
        """Look for work now (called when a job is placed). On the loop itself, so setting the event is safe."""
        self._wake.set()
        return True

    async def status(self) -> JobsStatus:
        return JobsStatus(
            worker=self.worker, running_jobs=len(self._jobs), deliveries=len(self._hooks), processed=self.processed
        )

    def run_batch(self, batch_id: str) -> bool:
        """Start transcribing a PROCESSING batch in the background; False if it runs already (here or on another
        replica)."""
        return self.batches is not None and self.batches.start(batch_id)

    def running_batches(self) -> list[str]:
        """Ids of the batches this replica is transcribing now."""
        return [] if self.batches is None else self.batches.running()

    def stop_batches(self) -> None:
        """Stop the batch sweep and give up this replica's batches (their files in flight finish; the next
        replica's sweep resumes the rest). Safe on a replica whose constructor failed (``__del__`` calls it)."""
        stop, coordinator = getattr(self, "_batch_stop", None), getattr(self, "batches", None)
        if stop is None or coordinator is None or stop.is_set():
            return
        stop.set()
        try:
            coordinator.let_go()
        except Exception:  # then their leases lapse instead
            log.warning("batch leases not released", exc_info=True)

    # ------------------------------------------------------------------ loop

    async def _run(self) -> None:
        log.info("jobs worker %s started (concurrency %d)", self.worker, self.settings.jobs.concurrency)
        try:
            while True:
                try:
                    await self._tick()
                except RuntimeError as exc:
                    if _POOL_SHUT in str(exc):
                        return  # the replica (or the test process) is going away and has shut its thread pool
                    log.exception("jobs worker iteration failed")
                except Exception:  # the loop must survive a database hiccup
                    log.exception("jobs worker iteration failed")
                try:
                    await asyncio.wait_for(self._wake.wait(), await self._sleep_seconds())
                except TimeoutError:
                    pass
                self._wake.clear()
        finally:
            for task in self._jobs | self._hooks:
                task.cancel()
            await self._client.aclose()

    async def _sleep_seconds(self) -> float:
        poll = self.settings.jobs.poll_seconds
        try:
            due = await asyncio.to_thread(job_queue.next_due, self.db)
        except Exception:  # noqa: BLE001 - the database may be briefly unreachable: poll again later
            return poll
        if due is None:
            return poll
        return max(0.01, min(poll, (due - utcnow()).total_seconds() + 0.01))

    async def _tick(self) -> None:
        jobs, webhooks = self.settings.jobs, self.settings.webhooks
        if time.monotonic() - self._last_sweep >= jobs.sweep_interval_seconds:
            self._last_sweep = time.monotonic()
            await asyncio.to_thread(retention.sweep, self.settings, self.db)
        for queue, depth in (await asyncio.to_thread(job_queue.queue_depths, self.db)).items():
            set_queue_depth(queue, depth)
        for upload_id in await asyncio.to_thread(job_queue.fail_exhausted, self.db, jobs.max_attempts):
            log.warning("job %s failed: too many attempts", upload_id)
        free = max(0, jobs.concurrency - len(self._jobs))
        if free:
            for job in await asyncio.to_thread(
                job_queue.claim_jobs, self.db, free, jobs.lease_seconds, jobs.max_attempts
            ):
                self._spawn(self._jobs, self._process(job))
        free = WEBHOOK_CONCURRENCY - len(self._hooks)
        if free > 0:
            hold = webhooks.timeout_seconds + 30.0
            for hook in await asyncio.to_thread(job_queue.claim_webhooks, self.db, free, hold):
                self._spawn(self._hooks, self._deliver(hook))

    def _spawn(self, tasks: set[asyncio.Task[None]], coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                # e.g. the database was down: the lease or the claim expires and the work is redone
                log.error("jobs worker task failed", exc_info=t.exception())
            self._wake.set()  # a slot is free, maybe a webhook is due

        task.add_done_callback(done)

    # ------------------------------------------------------------------ one job

    async def _keep_lease(self, lease: _Lease) -> None:
        interval = max(0.05, self.settings.jobs.lease_seconds / 3)
        while True:
            try:
                await asyncio.wait_for(lease.stop.wait(), interval)
                return
            except TimeoutError:
                pass
            renewed = await asyncio.to_thread(
                job_queue.renew_lease, self.db, lease.job, self.settings.jobs.lease_seconds
            )
            if renewed is None:
                lease.lost = True
                log.warning("job %s: lease lost (another worker took it over)", lease.job.upload_id)
                return
            lease.job = renewed

    async def _transcribe(self, job: ClaimedJob) -> Outcome:
        """The job's outcome; every failure becomes one (the client hears about it), none escapes."""
        try:
            if self.speech is None:
                raise Unavailable("The transcription capability is not deployed.")
            audio = await asyncio.to_thread(upload_blob, self.settings, job.path, job.size_bytes)
            request = TranscribeRequest(audio=audio, file_name=job.file_name, language=job.language_code)
            return Outcome(result=JobResult.of(await self.speech.transcribe(request)))
        except Exception as exc:
            if isinstance(exc, INFRASTRUCTURE_ERRORS):
                log.warning("job %s: transcription unreachable: %r", job.upload_id, exc)
            elif not isinstance(exc, DomainError):
                log.exception("job %s: transcription crashed", job.upload_id)
            return outcome_of(exc)

    async def _process(self, job: ClaimedJob) -> None:
        lease = _Lease(job)
        keeper = asyncio.get_running_loop().create_task(self._keep_lease(lease))
        try:
            outcome = await self._transcribe(job)
        finally:
            lease.stop.set()
            await keeper
        if lease.lost:
            return
        if outcome.shed_for:  # load shedding is not a failed attempt: the job waits its turn, its budget intact
            if await asyncio.to_thread(job_queue.requeue, self.db, lease.job, outcome.shed_for, refund_attempt=True):
                log.info("job %s: transcription at capacity; retrying in %.0f s", job.upload_id, outcome.shed_for)
            return
        if outcome.transient and job.attempts < self.settings.jobs.max_attempts:
            delay = min(self.settings.jobs.lease_seconds, 5.0 * job.attempts)
            if await asyncio.to_thread(job_queue.requeue, self.db, lease.job, delay):
                log.warning("job %s: %s; retrying in %.0f s", job.upload_id, outcome.error, delay)
            return
        stored = await asyncio.to_thread(
            job_queue.finish,
            self.db,
            lease.job,
            result=outcome.result,
            error=outcome.error,
            status_code=outcome.status_code,
        )
        if stored:
            self.processed += 1
            if outcome.result is not None:
                record_audio("job", outcome.result.audio_length_seconds)
            log.info("job %s %s", job.upload_id, "completed" if outcome.error is None else f"failed: {outcome.error}")

    # ------------------------------------------------------------------ one webhook delivery

    async def _deliver(self, hook: DueWebhook) -> None:
        webhooks = self.settings.webhooks
        attempt = hook.attempts + 1
        outcome = await deliver(self._client, hook.url, hook.payload, hook.secret, attempt, webhooks.allow_private)
        retry_in = None
        if not outcome.delivered and not outcome.permanent:
            retry_in = retry_delay(
                attempt, webhooks.backoff_seconds, webhooks.backoff_max_seconds, webhooks.retry_seconds
            )
        await asyncio.to_thread(
            job_queue.webhook_outcome, self.db, hook, delivered=outcome.delivered, retry_in=retry_in
        )
        record_webhook("delivered" if outcome.delivered else "abandoned" if retry_in is None else "retry")
        if outcome.delivered:
            log.info("webhook for %s delivered (attempt %d)", hook.upload_id, attempt)
        elif retry_in is None:
            log.warning("webhook for %s abandoned after attempt %d: %s", hook.upload_id, attempt, outcome.detail)
        else:
            log.info("webhook for %s failed (%s); retry in %.1f s", hook.upload_id, outcome.detail, retry_in)
