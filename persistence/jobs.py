"""The durable queue of async v1 transcription jobs and their webhook deliveries (rows of ``uploads``), and the
job state machine: its states (:class:`JobStatus`, :class:`WebhookStatus`) and its moves (:data:`MOVES`), here
and nowhere else.

::

    none ─enqueue─> pending ─claim─> processing ─finish─> completed | failed
                       ^  └─exhaust─> failed    │ (lease expired: claim again; transient failure: requeue)
                       └─────────requeue────────┘
    completed | failed ─enqueue─> pending   (processing an upload again runs a new job)

A worker *claims* a job by moving it to ``processing`` with ``lease_until`` in the future, and renews the lease
while it works. ``lease_until`` doubles as the fencing token: every later write of that worker (renew, finish)
is conditional on the value it last wrote, so a worker that lost its lease (it stalled, another worker reclaimed
the job after expiry) cannot overwrite the newer run's result. A job whose worker died is claimed again once its
lease has expired, so jobs survive crashes and restarts. The same compare-and-set claims webhook deliveries on
``webhook_next_at``. Every function is synchronous (call it in a thread) and works on SQLite and PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from contracts.jobs import JobResult
from persistence.models import ApiToken, Upload, UsageRecord, utcnow
from persistence.moves import Move, changed
from persistence.session import Database

USAGE_ROUTE = "transcribe_process"


class JobStatus(StrEnum):
    """``uploads.job_status``."""

    NONE = "none"  # uploaded, never processed
    PENDING = "pending"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"


class WebhookStatus(StrEnum):
    """``uploads.webhook_status`` (NULL: no delivery due)."""

    PENDING = "pending"
    DELIVERED = "delivered"
    GAVE_UP = "gave_up"


# Every change of ``job_status`` is one of these moves, and only the functions below make them: enqueue, claim
# (claim_jobs), requeue, complete and fail (finish), exhaust (fail_exhausted).
MOVES: dict[str, Move[JobStatus]] = {
    "enqueue": Move.to({JobStatus.NONE, JobStatus.COMPLETED, JobStatus.FAILED}, JobStatus.PENDING),
    # processing -> processing: the job of a dead worker, once its lease expired
    "claim": Move.to({JobStatus.PENDING, JobStatus.PROCESSING}, JobStatus.PROCESSING),
    "requeue": Move.to({JobStatus.PROCESSING}, JobStatus.PENDING),  # a transient failure
    "complete": Move.to({JobStatus.PROCESSING}, JobStatus.COMPLETED),
    "fail": Move.to({JobStatus.PROCESSING}, JobStatus.FAILED),
    # started max_attempts times without finishing (a poison job that kills its worker)
    "exhaust": Move.to({JobStatus.PENDING, JobStatus.PROCESSING}, JobStatus.FAILED),
}
UNFINISHED = frozenset({JobStatus.PENDING, JobStatus.PROCESSING})


@dataclass(frozen=True)
class ClaimedJob:
    upload_id: str
    path: str  # where the audio is kept: ``s3://bucket/key`` (cluster/transfer.py), or a path without storage
    language_code: str | None
    attempts: int
    lease: datetime  # fencing token: the lease_until this worker wrote
    file_name: str = "audio"
    size_bytes: int = 0


@dataclass(frozen=True)
class DueWebhook:
    upload_id: str
    url: str
    attempts: int
    payload: dict[str, Any]
    secret: str
    claim: datetime  # fencing token: the webhook_next_at this worker wrote


def _lease_time(seconds: float) -> datetime:
    # A few random microseconds keep two workers' tokens apart even when they claim in the same microsecond.
    return utcnow() + timedelta(seconds=seconds, microseconds=secrets.randbelow(1000))


def _expired_or_unleased(now: datetime) -> Any:
    return or_(Upload.lease_until.is_(None), Upload.lease_until < now)


def _claimable(now: datetime) -> Any:
    """Pending, or processing with an expired lease (its worker died)."""
    return or_(
        Upload.job_status == JobStatus.PENDING, (Upload.job_status == JobStatus.PROCESSING) & (Upload.lease_until < now)
    )


def _settle_usage(s: Session, upload_id: str, status: str, seconds: float | None = None) -> None:
    """The usage row the process request placed as ``pending``: ``successful`` or ``failed``."""
    usage = s.scalar(
        select(UsageRecord).where(
            UsageRecord.reference_id == upload_id, UsageRecord.route == USAGE_ROUTE, UsageRecord.status == "pending"
        )
    )
    if usage is not None:
        usage.status = status
        if seconds is not None:
            usage.seconds_transcribed = float(seconds)


def _make_webhook_due(row: Upload, now: datetime) -> None:
    if row.webhook:
        row.webhook_status = WebhookStatus.PENDING
        row.webhook_attempts = 0
        row.webhook_next_at = now


# --------------------------------------------------------------------------- placing jobs


def enqueue(db: Database, upload_id: str, webhook: str | None, language_code: str | None) -> bool:
    """Queue a job for an upload. False if it is already pending or running (then nothing changes)."""
    move = MOVES["enqueue"]
    with db.session() as s:
        row = s.get(Upload, upload_id)
        if row is None:
            raise KeyError(upload_id)
        if row.job_status not in move.sources:
            return False
        row.job_status = move.target
        row.language_code = language_code
        row.webhook = webhook
        row.attempts = 0
        row.lease_until = None
        row.result = None
        row.error = None
        row.webhook_status = None
        row.webhook_attempts = 0
        row.webhook_next_at = None
        s.add(
            UsageRecord(
                customer_id=row.customer_id,
                project_id=row.project_id,
                route=USAGE_ROUTE,
                status="pending",
                reference_id=row.id,
            )
        )
        return True


# --------------------------------------------------------------------------- the worker's side


def claim_jobs(db: Database, limit: int, lease_seconds: float, max_attempts: int = 1_000_000) -> list[ClaimedJob]:
    """Claim up to ``limit`` pending jobs, or running jobs whose lease has expired (their worker died), that
    have been started fewer than ``max_attempts`` times."""
    if limit <= 0:
        return []
    now = utcnow()
    claimed: list[ClaimedJob] = []
    with db.session() as s:
        candidates = s.execute(
            select(Upload.id, Upload.job_status, Upload.lease_until)
            .where(_claimable(now), _expired_or_unleased(now), Upload.attempts < max_attempts)
            .order_by(Upload.updated_at)
            .limit(limit * 4)
        ).all()
    for upload_id, status, old_lease in candidates:
        if len(claimed) >= limit:
            break
        lease = _lease_time(lease_seconds)
        with db.session() as s:
            cond = Upload.lease_until.is_(None) if old_lease is None else Upload.lease_until == old_lease
            done = changed(
                s,
                update(Upload)
                .where(Upload.id == upload_id, Upload.job_status == status, cond)
                .values(job_status=MOVES["claim"].target, lease_until=lease, attempts=Upload.attempts + 1),
            )
            if done != 1:
                continue  # another worker got it first
            row = s.get(Upload, upload_id)
            assert row is not None
            claimed.append(
                ClaimedJob(row.id, row.path, row.language_code, row.attempts, lease, row.file_name, row.size_bytes)
            )
    return claimed


def renew_lease(db: Database, job: ClaimedJob, lease_seconds: float) -> ClaimedJob | None:
    """Extend the lease; None if this worker no longer holds the job."""
    lease = _lease_time(lease_seconds)
    with db.session() as s:
        done = changed(
            s,
            update(Upload)
            .where(
                Upload.id == job.upload_id, Upload.job_status == JobStatus.PROCESSING, Upload.lease_until == job.lease
            )
            .values(lease_until=lease),
        )
    return dataclasses.replace(job, lease=lease) if done == 1 else None


def requeue(db: Database, job: ClaimedJob, delay_seconds: float, *, refund_attempt: bool = False) -> bool:
    """Give a job back (transient failure): pending again, not before ``delay_seconds``. ``refund_attempt``: the
    attempt did no work (the transcription refused it at once, at capacity), so it does not count."""
    values: dict[str, Any] = {
        "job_status": MOVES["requeue"].target,
        "lease_until": utcnow() + timedelta(seconds=delay_seconds),
    }
    if refund_attempt:
        values["attempts"] = Upload.attempts - 1
    with db.session() as s:
        return (
            changed(
                s,
                update(Upload)
                .where(
                    Upload.id == job.upload_id,
                    Upload.job_status.in_(MOVES["requeue"].sources),
                    Upload.lease_until == job.lease,
                )
                .values(values),
            )
            == 1
        )


def finish(db: Database, job: ClaimedJob, *, result: JobResult | None, error: str | None, status_code: int) -> bool:
    """Store the outcome (``error`` None: completed, else failed), settle the usage row and, if the job has a
    webhook, make its delivery due now. False if this worker lost the lease (a newer run owns the job)."""
    move = MOVES["complete"] if error is None else MOVES["fail"]
    with db.session() as s:
        row = s.get(Upload, job.upload_id)
        if row is None or row.job_status not in move.sources or row.lease_until != job.lease:
            return False
        row.job_status = move.target
        stored = result.model_dump(mode="json", exclude_none=True) if result is not None else {}
        row.result = {**stored, "status_code": status_code}
        row.error = error
        row.lease_until = None
        _make_webhook_due(row, utcnow())
        _settle_usage(
            s,
            row.id,
            "successful" if error is None else "failed",
            result.audio_length_seconds if result is not None else 0.0,
        )
        return True


def fail_exhausted(db: Database, max_attempts: int) -> list[str]:
    """Pending or lease-expired jobs already started ``max_attempts`` times: failed (a poison job that kills
    its worker must not loop forever). Returns their ids so the caller can notify."""
    now = utcnow()
    move = MOVES["exhaust"]
    with db.session() as s:
        rows = s.scalars(
            select(Upload).where(Upload.attempts >= max_attempts, _claimable(now), _expired_or_unleased(now))
        ).all()
        ids = []
        for row in rows:
            ids.append(row.id)
            row.job_status = move.target
            row.error = (
                f"Transcription did not finish after {row.attempts} attempts (the worker stopped or the "
                "transcription service was unavailable)."
            )
            row.result = {"status_code": 500}
            row.lease_until = None
            _make_webhook_due(row, now)
            _settle_usage(s, row.id, "failed")
        return ids


# --------------------------------------------------------------------------- webhooks


def webhook_payload(row: Upload) -> dict[str, Any]:
    """The spec's webhook object; failures add ``detail`` (the reason)."""
    result = row.result or {}
    payload: dict[str, Any] = {
        "upload_id": row.id,
        "postprocessed_text": result.get("postprocessed_text") or [],
        "status_code": int(result.get("status_code") or (200 if row.job_status == JobStatus.COMPLETED else 500)),
    }
    if result.get("language_id"):
        payload["language_id"] = result["language_id"]
    if row.job_status == JobStatus.FAILED:
        payload["detail"] = row.error or "Transcription failed."
    return payload


def claim_webhooks(db: Database, limit: int, hold_seconds: float) -> list[DueWebhook]:
    """Claim due deliveries; each is held for ``hold_seconds`` (a worker that dies mid-delivery is retried)."""
    now = utcnow()
    with db.session() as s:
        candidates = s.execute(
            select(Upload.id, Upload.webhook_next_at)
            .where(Upload.webhook_status == WebhookStatus.PENDING, Upload.webhook_next_at <= now)
            .order_by(Upload.webhook_next_at)
            .limit(limit)
        ).all()
    claimed: list[DueWebhook] = []
    for upload_id, next_at in candidates:
        claim = _lease_time(hold_seconds)
        with db.session() as s:
            done = changed(
                s,
                update(Upload)
                .where(
                    Upload.id == upload_id,
                    Upload.webhook_status == WebhookStatus.PENDING,
                    Upload.webhook_next_at == next_at,
                )
                .values(webhook_next_at=claim),
            )
            if done != 1:
                continue
            row = s.get(Upload, upload_id)
            assert row is not None
            token = s.get(ApiToken, row.token_id) if row.token_id is not None else None
            claimed.append(
                DueWebhook(
                    row.id,
                    row.webhook or "",
                    row.webhook_attempts,
                    webhook_payload(row),
                    token.webhook_secret if token else "",
                    claim,
                )
            )
    return claimed


def webhook_outcome(db: Database, hook: DueWebhook, *, delivered: bool, retry_in: float | None) -> None:
    """Record one delivery attempt: delivered, retry after ``retry_in`` seconds, or (None) give up."""
    with db.session() as s:
        values: dict[str, Any] = {"webhook_attempts": Upload.webhook_attempts + 1}
        if delivered:
            values.update(webhook_status=WebhookStatus.DELIVERED, webhook_next_at=None)
        elif retry_in is None:
            values.update(webhook_status=WebhookStatus.GAVE_UP, webhook_next_at=None)
        else:
            values.update(webhook_next_at=utcnow() + timedelta(seconds=retry_in))
        changed(
            s,
            update(Upload)
            .where(
                Upload.id == hook.upload_id,
                Upload.webhook_status == WebhookStatus.PENDING,
                Upload.webhook_next_at == hook.claim,
            )
            .values(**values),
        )


def next_due(db: Database) -> datetime | None:
    """The earliest time something becomes due (a retry, a requeued job, an expiring lease)."""
    with db.session() as s:
        times = [
            s.scalar(
                select(Upload.webhook_next_at)
                .where(Upload.webhook_status == WebhookStatus.PENDING)
                .order_by(Upload.webhook_next_at)
                .limit(1)
            ),
            s.scalar(
                select(Upload.lease_until)
                .where(Upload.job_status.in_(UNFINISHED))
                .where(Upload.lease_until.is_not(None))
                .order_by(Upload.lease_until)
                .limit(1)
            ),
        ]
    due = [t for t in times if t is not None]
    return min(due) if due else None


def queue_depths(db: Database) -> dict[str, int]:
    """Work not finished, for the queue-depth metric: async jobs queued or running, batch files pending."""
    from persistence.models import BatchItem

    with db.session() as s:
        jobs = s.scalar(
            select(func.count()).select_from(Upload).where(Upload.job_status.in_(("pending", "processing")))
        )
        files = s.scalar(select(func.count()).select_from(BatchItem).where(BatchItem.status == "PENDING"))
    return {"jobs": int(jobs or 0), "batch_files": int(files or 0)}
