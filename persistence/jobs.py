"""The durable queue of async v1 transcription jobs and their webhook deliveries (rows of ``uploads``).

Job states: ``none`` -> ``pending`` -> ``processing`` -> ``completed`` | ``failed``.

A worker *claims* a job by moving it to ``processing`` with ``lease_until`` in the future, and renews the lease
while it works. ``lease_until`` doubles as the fencing token: every later write of that worker (renew, finish)
is conditional on the value it last wrote, so a worker that lost its lease (it stalled, another worker reclaimed
the job after expiry) cannot overwrite the newer run's result. A job whose worker died is claimed again once its
lease has expired, so jobs survive crashes and restarts. The same compare-and-set claims webhook deliveries on
``webhook_next_at``. Every function is synchronous (call it in a thread) and works on SQLite and PostgreSQL.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, select, update

from persistence.models import ApiToken, Upload, UsageRecord, utcnow
from persistence.session import Database

USAGE_ROUTE = "transcribe_process"
PENDING, PROCESSING, COMPLETED, FAILED = "pending", "processing", "completed", "failed"
WEBHOOK_PENDING, WEBHOOK_DELIVERED, WEBHOOK_GAVE_UP = "pending", "delivered", "gave_up"


@dataclass(frozen=True)
class ClaimedJob:
    upload_id: str
    path: str
    language_code: str | None
    attempts: int
    lease: datetime  # fencing token: the lease_until this worker wrote


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


# --------------------------------------------------------------------------- placing jobs


def enqueue(db: Database, upload_id: str, webhook: str | None, language_code: str | None) -> bool:
    """Queue a job for an upload. False if it is already pending or running (then nothing changes)."""
    with db.session() as s:
        row = s.get(Upload, upload_id)
        if row is None:
            raise KeyError(upload_id)
        if row.job_status in (PENDING, PROCESSING):
            return False
        row.job_status = PENDING
        row.language_code = language_code
        row.webhook = webhook
        row.attempts = 0
        row.lease_until = None
        row.result = None
        row.error = None
        row.webhook_status = None
        row.webhook_attempts = 0
        row.webhook_next_at = None
        s.add(UsageRecord(customer_id=row.customer_id, project_id=row.project_id, route=USAGE_ROUTE,
                          status="pending", reference_id=row.id))
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
            .where(or_(Upload.job_status == PENDING,
                       (Upload.job_status == PROCESSING) & (Upload.lease_until < now)))
            .where(or_(Upload.lease_until.is_(None), Upload.lease_until < now))
            .where(Upload.attempts < max_attempts)
            .order_by(Upload.updated_at)
            .limit(limit * 4)
        ).all()
    for upload_id, status, old_lease in candidates:
        if len(claimed) >= limit:
            break
        lease = _lease_time(lease_seconds)
        with db.session() as s:
            cond = (Upload.lease_until.is_(None) if old_lease is None else Upload.lease_until == old_lease)
            done = s.execute(
                update(Upload)
                .where(Upload.id == upload_id, Upload.job_status == status, cond)
                .values(job_status=PROCESSING, lease_until=lease, attempts=Upload.attempts + 1)
                .execution_options(synchronize_session=False)
            ).rowcount
            if done != 1:
                continue  # another worker got it first
            row = s.get(Upload, upload_id)
            claimed.append(ClaimedJob(row.id, row.path, row.language_code, row.attempts, lease))
    return claimed


def renew_lease(db: Database, job: ClaimedJob, lease_seconds: float) -> ClaimedJob | None:
    """Extend the lease; None if this worker no longer holds the job."""
    lease = _lease_time(lease_seconds)
    with db.session() as s:
        done = s.execute(
            update(Upload)
            .where(Upload.id == job.upload_id, Upload.job_status == PROCESSING, Upload.lease_until == job.lease)
            .values(lease_until=lease)
            .execution_options(synchronize_session=False)
        ).rowcount
    return ClaimedJob(job.upload_id, job.path, job.language_code, job.attempts, lease) if done == 1 else None


def requeue(db: Database, job: ClaimedJob, delay_seconds: float) -> bool:
    """Give a job back (transient failure): pending again, not before ``delay_seconds``."""
    with db.session() as s:
        return s.execute(
            update(Upload)
            .where(Upload.id == job.upload_id, Upload.job_status == PROCESSING, Upload.lease_until == job.lease)
            .values(job_status=PENDING, lease_until=utcnow() + timedelta(seconds=delay_seconds))
            .execution_options(synchronize_session=False)
        ).rowcount == 1


def finish(db: Database, job: ClaimedJob, *, result: dict[str, Any] | None, error: str | None,
           status_code: int, seconds: float = 0.0) -> bool:
    """Store the outcome, settle the usage row and, if the job has a webhook, make its delivery due now."""
    with db.session() as s:
        row = s.get(Upload, job.upload_id)
        if row is None or row.job_status != PROCESSING or row.lease_until != job.lease:
            return False  # lost the lease: a newer run owns the job
        row.job_status = COMPLETED if error is None else FAILED
        row.result = {**(result or {}), "status_code": status_code}
        row.error = error
        row.lease_until = None
        if row.webhook:
            row.webhook_status = WEBHOOK_PENDING
            row.webhook_attempts = 0
            row.webhook_next_at = utcnow()
        usage = s.scalar(select(UsageRecord).where(UsageRecord.reference_id == row.id,
                                                   UsageRecord.route == USAGE_ROUTE,
                                                   UsageRecord.status == "pending"))
        if usage is not None:
            usage.status = "successful" if error is None else "failed"
            usage.seconds_transcribed = float(seconds)
        return True


def fail_exhausted(db: Database, max_attempts: int) -> list[str]:
    """Pending or lease-expired jobs already started ``max_attempts`` times: failed (a poison job that kills
    its worker must not loop forever). Returns their ids so the caller can notify."""
    now = utcnow()
    with db.session() as s:
        rows = s.scalars(
            select(Upload).where(Upload.attempts >= max_attempts)
            .where(or_(Upload.job_status == PENDING,
                       (Upload.job_status == PROCESSING) & (Upload.lease_until < now)))
            .where(or_(Upload.lease_until.is_(None), Upload.lease_until < now))
        ).all()
        ids = []
        for row in rows:
            ids.append(row.id)
            row.job_status = FAILED
            row.error = f"Transcription did not finish after {row.attempts} attempts (the worker stopped or the " \
                        "transcription service was unavailable)."
            row.result = {"status_code": 500}
            row.lease_until = None
            if row.webhook:
                row.webhook_status = WEBHOOK_PENDING
                row.webhook_attempts = 0
                row.webhook_next_at = now
            usage = s.scalar(select(UsageRecord).where(UsageRecord.reference_id == row.id,
                                                       UsageRecord.route == USAGE_ROUTE,
                                                       UsageRecord.status == "pending"))
            if usage is not None:
                usage.status = "failed"
        return ids


# --------------------------------------------------------------------------- webhooks


def webhook_payload(row: Upload) -> dict[str, Any]:
    """The spec's webhook object; failures add ``detail`` (the reason)."""
    result = row.result or {}
    payload: dict[str, Any] = {
        "upload_id": row.id,
        "postprocessed_text": result.get("postprocessed_text") or [],
        "status_code": int(result.get("status_code") or (200 if row.job_status == COMPLETED else 500)),
    }
    if result.get("language_id"):
        payload["language_id"] = result["language_id"]
    if row.job_status == FAILED:
        payload["detail"] = row.error or "Transcription failed."
    return payload


def claim_webhooks(db: Database, limit: int, hold_seconds: float) -> list[DueWebhook]:
    """Claim due deliveries; each is held for ``hold_seconds`` (a worker that dies mid-delivery is retried)."""
    now = utcnow()
    with db.session() as s:
        candidates = s.execute(
            select(Upload.id, Upload.webhook_next_at)
            .where(Upload.webhook_status == WEBHOOK_PENDING, Upload.webhook_next_at <= now)
            .order_by(Upload.webhook_next_at)
            .limit(limit)
        ).all()
    claimed: list[DueWebhook] = []
    for upload_id, next_at in candidates:
        claim = _lease_time(hold_seconds)
        with db.session() as s:
            done = s.execute(
                update(Upload)
                .where(Upload.id == upload_id, Upload.webhook_status == WEBHOOK_PENDING,
                       Upload.webhook_next_at == next_at)
                .values(webhook_next_at=claim)
                .execution_options(synchronize_session=False)
            ).rowcount
            if done != 1:
                continue
            row = s.get(Upload, upload_id)
            token = s.get(ApiToken, row.token_id) if row.token_id is not None else None
            claimed.append(DueWebhook(row.id, row.webhook or "", row.webhook_attempts, webhook_payload(row),
                                      token.webhook_secret if token else "", claim))
    return claimed


def webhook_outcome(db: Database, hook: DueWebhook, *, delivered: bool, retry_in: float | None) -> None:
    """Record one delivery attempt: delivered, retry after ``retry_in`` seconds, or (None) give up."""
    with db.session() as s:
        values: dict[str, Any] = {"webhook_attempts": Upload.webhook_attempts + 1}
        if delivered:
            values.update(webhook_status=WEBHOOK_DELIVERED, webhook_next_at=None)
        elif retry_in is None:
            values.update(webhook_status=WEBHOOK_GAVE_UP, webhook_next_at=None)
        else:
            values.update(webhook_next_at=utcnow() + timedelta(seconds=retry_in))
        s.execute(
            update(Upload)
            .where(Upload.id == hook.upload_id, Upload.webhook_status == WEBHOOK_PENDING,
                   Upload.webhook_next_at == hook.claim)
            .values(**values)
            .execution_options(synchronize_session=False)
        )


def next_due(db: Database) -> datetime | None:
    """The earliest time something becomes due (a retry, a requeued job, an expiring lease)."""
    with db.session() as s:
        times = [
            s.scalar(select(Upload.webhook_next_at).where(Upload.webhook_status == WEBHOOK_PENDING)
                     .order_by(Upload.webhook_next_at).limit(1)),
            s.scalar(select(Upload.lease_until).where(Upload.job_status.in_((PENDING, PROCESSING)))
                     .where(Upload.lease_until.is_not(None)).order_by(Upload.lease_until).limit(1)),
        ]
    times = [t for t in times if t is not None]
    return min(times) if times else None


# --------------------------------------------------------------------------- results


def summarize_record(record: dict[str, Any]) -> dict[str, Any]:
    """What a finished job keeps of the transcription record: text, language and the timed segments
    (``postprocessed_text``: ``[{start_time, end_time, text, speaker_id?}]``)."""
    timeline = ((record.get("diarisation_result") or {}).get("timeline")) or []
    segments = []
    for item in timeline:
        text = (item.get("text") or "").strip()
        if item.get("type", "speech") != "speech" or not text:
            continue
        segment = {"start_time": item.get("start_time"), "end_time": item.get("end_time"), "text": text}
        if item.get("speaker_id"):
            segment["speaker_id"] = item["speaker_id"]
        segments.append(segment)
    text = (record.get("transcription_text") or "").strip()
    if not segments and text:
        segments = [{"start_time": 0.0, "end_time": float(record.get("audio_length_seconds") or 0.0), "text": text}]
    return {
        "text": text,
        "language_id": record.get("language_code") or "",
        "postprocessed_text": segments,
        "audio_length_seconds": float(record.get("audio_length_seconds") or 0.0),
        "warnings": list(record.get("warnings") or []),
    }
