"""Which v1 uploads have outlived the retention period, and removing their rows.

An upload is expired when it was created before the cutoff and nothing is still owed on it: no job queued or
running, no webhook still being delivered. The row is deleted with a conditional DELETE that re-checks those
conditions, so a job placed on the upload meanwhile keeps it. Files are not this module's business: the caller
(``cluster/retention.py``) deletes the row first and the audio after, so a crash in between leaves a stray file
(swept later as an orphan), never a row that claims audio that is gone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, and_, delete, or_, select

from persistence.models import Upload
from persistence.session import Database

SETTLED_JOBS = ("none", "completed", "failed")  # job_status values with nothing left to run


@dataclass(frozen=True)
class ExpiredUpload:
    id: str
    path: str
    size_bytes: int
    created_at: datetime


def _expired(cutoff: datetime) -> ColumnElement[bool]:
    return and_(
        Upload.created_at < cutoff,
        Upload.job_status.in_(SETTLED_JOBS),
        or_(Upload.webhook_status.is_(None), Upload.webhook_status != "pending"),
    )


def expired_uploads(db: Database, cutoff: datetime, limit: int = 1000) -> list[ExpiredUpload]:
    with db.session() as s:
        rows = s.execute(
            select(Upload.id, Upload.path, Upload.size_bytes, Upload.created_at)
            .where(_expired(cutoff))
            .order_by(Upload.created_at)
            .limit(limit)
        ).all()
    return [ExpiredUpload(*row) for row in rows]


def delete_expired(db: Database, upload_id: str, cutoff: datetime) -> bool:
    """Delete the row if it is (still) expired; True when this call deleted it."""
    with db.session() as s:
        result = s.execute(delete(Upload).where(Upload.id == upload_id, _expired(cutoff)))
        return bool(result.rowcount)  # type: ignore[attr-defined]


def live_upload_ids(db: Database, ids: list[str]) -> set[str]:
    """Which of ``ids`` still have a row (their folders are not orphans)."""
    found: set[str] = set()
    with db.session() as s:
        for start in range(0, len(ids), 500):
            found.update(s.scalars(select(Upload.id).where(Upload.id.in_(ids[start : start + 500]))))
    return found
