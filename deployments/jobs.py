"""Jobs deployment: the worker that runs async v1 transcription jobs and delivers their webhooks.

A background asyncio loop in the replica (on the replica's own event loop inside Ray Serve; on a private thread
when the class is used in-process) repeatedly:

1. fails jobs that were started ``job_max_attempts`` times without finishing (poison jobs);
2. claims pending jobs, and jobs whose lease expired (their worker died), up to ``job_concurrency`` at once;
3. transcribes each with the Transcription backend, renewing its lease meanwhile, then stores the result or the
   failure, settles the usage row and makes the webhook delivery due;
4. claims due webhook deliveries and POSTs them, signed, retrying with exponential backoff.

All state lives in the database (``serve_app/services/job_queue.py``), so several replicas can share the work and
a restarted replica resumes where the old one stopped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

import httpx

from deployments.common import configure_logging, load_settings
from serve_app.backends import as_backend
from persistence.models import utcnow
from persistence.session import Database
from contracts.errors import DomainError, Unavailable, find_domain_error
from persistence import jobs as job_queue
from persistence.jobs import ClaimedJob, DueWebhook
from serve_app.services.webhooks import deliver, retry_delay

log = logging.getLogger("khuluma.jobs")

WEBHOOK_CONCURRENCY = 8
TRANSIENT_STATUS = {503}  # transcription unavailable: put the job back instead of failing it


@dataclass
class _Lease:
    job: ClaimedJob
    lost: bool = False
    stop: asyncio.Event = field(default_factory=asyncio.Event)


class Jobs:
    def __init__(self, settings: dict[str, Any], transcription: Any = None) -> None:
        configure_logging()
        self.settings = load_settings(settings)
        self.settings.ensure_dirs()
        self.db = Database(self.settings.db_url)
        self.transcription = as_backend(transcription, "transcription")
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self._jobs: set[asyncio.Task] = set()
        self._hooks: set[asyncio.Task] = set()
        self._stopping = False
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._main: asyncio.Task | None = None
        self.processed = 0
        try:
            loop = asyncio.get_running_loop()  # inside a Serve replica: run on its event loop
        except RuntimeError:
            loop = None
        if loop is not None:
            self._loop = loop
            self._main = loop.create_task(self._run())
        else:  # plain object (tests, local app): a private loop on a daemon thread
            ready = threading.Event()
            self._thread = threading.Thread(target=self._thread_main, args=(ready,), name="khuluma-jobs",
                                            daemon=True)
            self._thread.start()
            ready.wait(10)

    # ------------------------------------------------------------------ deployment interface

    def ping(self) -> bool:
        if self._main is not None and self._main.done():
            raise RuntimeError("The jobs worker loop has stopped.")
        return True

    def describe(self) -> list[dict[str, Any]]:
        return []  # no model of its own; transcription describes the speech models

    def reconfigure(self, config: dict[str, Any]) -> None:
        self.user_config = dict(config or {})

    def wake(self) -> bool:
        """Look for work now (called when a job is placed)."""
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)
        return True

    def status(self) -> dict[str, Any]:
        return {"worker": self.worker, "running_jobs": len(self._jobs), "deliveries": len(self._hooks),
                "processed": self.processed}

    def close(self, timeout: float = 10.0) -> None:
        """Stop the loop (in-process use). Running jobs are abandoned; their leases expire and another worker
        takes them up, exactly as after a crash."""
        self._stopping = True
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout)

    # ------------------------------------------------------------------ loop

    def _thread_main(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._main = loop.create_task(self._run(ready))
        try:
            loop.run_until_complete(self._main)
        finally:
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    async def _run(self, ready: threading.Event | None = None) -> None:
        self._wake = asyncio.Event()
        if ready is not None:
            ready.set()
        timeout = httpx.Timeout(self.settings.webhooks.timeout_seconds)
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False, trust_env=False) as client:
            self._client = client
            log.info("jobs worker %s started (concurrency %d)", self.worker, self.settings.jobs.concurrency)
            while not self._stopping:
                try:
                    await self._tick()
                except Exception:  # noqa: BLE001 - the loop must survive a database hiccup
                    log.exception("jobs worker iteration failed")
                try:
                    await asyncio.wait_for(self._wake.wait(), await self._sleep_seconds())
                except (asyncio.TimeoutError, TimeoutError):
                    pass
                self._wake.clear()
            for task in list(self._jobs) + list(self._hooks):
                task.cancel()

    async def _sleep_seconds(self) -> float:
        poll = self.settings.jobs.poll_seconds
        try:
            due = await asyncio.to_thread(job_queue.next_due, self.db)
        except Exception:  # noqa: BLE001
            return poll
        if due is None:
            return poll
        return max(0.01, min(poll, (due - utcnow()).total_seconds() + 0.01))

    async def _tick(self) -> None:
        s = self.settings
        for upload_id in await asyncio.to_thread(job_queue.fail_exhausted, self.db, s.jobs.max_attempts):
            log.warning("job %s failed: too many attempts", upload_id)
        free = max(0, s.jobs.concurrency - len(self._jobs))
        if free:
            for job in await asyncio.to_thread(job_queue.claim_jobs, self.db, free, s.jobs.lease_seconds,
                                               s.jobs.max_attempts):
                self._spawn(self._jobs, self._process(job))
        free = WEBHOOK_CONCURRENCY - len(self._hooks)
        if free > 0:
            hold = s.webhooks.timeout_seconds + 30.0
            for hook in await asyncio.to_thread(job_queue.claim_webhooks, self.db, free, hold):
                self._spawn(self._hooks, self._deliver(hook))

    def _spawn(self, tasks: set[asyncio.Task], coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        tasks.add(task)

        def done(t: asyncio.Task) -> None:
            tasks.discard(t)
            if self._wake is not None:
                self._wake.set()  # a slot is free, maybe a webhook is due

        task.add_done_callback(done)

    # ------------------------------------------------------------------ one job

    async def _keep_lease(self, lease: _Lease) -> None:
        interval = max(0.05, self.settings.jobs.lease_seconds / 3)
        while True:
            try:
                await asyncio.wait_for(lease.stop.wait(), interval)
                return
            except (asyncio.TimeoutError, TimeoutError):
                pass
            renewed = await asyncio.to_thread(job_queue.renew_lease, self.db, lease.job,
                                              self.settings.jobs.lease_seconds)
            if renewed is None:
                lease.lost = True
                log.warning("job %s: lease lost (another worker took it over)", lease.job.upload_id)
                return
            lease.job = renewed

    async def _process(self, job: ClaimedJob) -> None:
        lease = _Lease(job)
        keeper = asyncio.get_running_loop().create_task(self._keep_lease(lease))
        result: dict[str, Any] | None = None
        error: str | None = None
        status_code = 200
        seconds = 0.0
        try:
            if self.transcription is None:
                raise Unavailable("The transcription capability is not deployed.")
            record = await self.transcription.transcribe(job.path, job.language_code, False, False, False)
            result = job_queue.summarize_record(record)
            seconds = result["audio_length_seconds"]
            if record.get("transcription_status", "COMPLETED") == "FAILED":
                error = record.get("error_message") or "Transcription failed."
                status_code = 500
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is reported to the client
            api_error = exc if isinstance(exc, DomainError) else find_domain_error(exc)
            if api_error is not None:
                error, status_code = api_error.detail, api_error.status_code
            else:
                log.exception("job %s: transcription crashed", job.upload_id)
                error, status_code = "Transcription failed because of an internal error.", 500
        finally:
            lease.stop.set()
            await keeper
        if lease.lost:
            return
        if status_code in TRANSIENT_STATUS and job.attempts < self.settings.jobs.max_attempts:
            delay = min(self.settings.jobs.lease_seconds, 5.0 * job.attempts)
            if await asyncio.to_thread(job_queue.requeue, self.db, lease.job, delay):
                log.warning("job %s: %s; retrying in %.0f s", job.upload_id, error, delay)
            return
        stored = await asyncio.to_thread(job_queue.finish, self.db, lease.job, result=result, error=error,
                                         status_code=status_code, seconds=seconds)
        if stored:
            self.processed += 1
            log.info("job %s %s", job.upload_id, "completed" if error is None else f"failed: {error}")

    # ------------------------------------------------------------------ one webhook delivery

    async def _deliver(self, hook: DueWebhook) -> None:
        s = self.settings
        attempt = hook.attempts + 1
        outcome = await deliver(self._client, hook.url, hook.payload, hook.secret, attempt,
                                s.webhooks.allow_private)
        retry_in = None
        if not outcome.delivered and not outcome.permanent:
            retry_in = retry_delay(attempt, s.webhooks.backoff_seconds, s.webhooks.backoff_max_seconds,
                                   s.webhooks.retry_seconds)
        await asyncio.to_thread(job_queue.webhook_outcome, self.db, hook, delivered=outcome.delivered,
                                retry_in=retry_in)
        if outcome.delivered:
            log.info("webhook for %s delivered (attempt %d)", hook.upload_id, attempt)
        elif retry_in is None:
            log.warning("webhook for %s abandoned after attempt %d: %s", hook.upload_id, attempt, outcome.detail)
        else:
            log.info("webhook for %s failed (%s); retry in %.1f s", hook.upload_id, outcome.detail, retry_in)
