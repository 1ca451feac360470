"""Batch transcription state (rows of ``batches`` and ``batch_items``) and the batch state machine: its states
(:class:`BatchStatus`, :class:`ItemStatus`) and its moves (:data:`BATCH_MOVES`, :data:`ITEM_MOVES`), here and
nowhere else.

::

    batch:  CREATED ─start─> PROCESSING ─close─> COMPLETE (every file transcribed)
                                              | PARTIAL  (some files failed, the others have results)
                                              | FAILED   (every file failed)
    item:   (start) ─> PENDING ─complete─> COMPLETED (``record`` holds the transcription record)
                              └─fail─────> FAILED    (``error`` says why)

Every move is one conditional ``UPDATE ... WHERE status = <source>``, so concurrent or repeated callers cannot
both win it: ``start`` runs a batch once whatever the number of ``process`` calls, and an item gets exactly one
outcome even when its Ray task is retried after its worker died, or two runners overlap. An item's outcome and
its usage row are written in one transaction. Every function is synchronous (call it in a thread) and works on
SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from sqlalchemy import func, or_, select, update

from contracts.speech import TranscriptionRecord
from persistence.models import Batch, BatchItem, UsageRecord, new_uuid, utcnow
from persistence.moves import Move, changed
from persistence.session import Database

USAGE_ROUTE = "transcribe.batch"  # usage_records.route of batch files (one row per file)


class BatchStatus(StrEnum):
    """``batches.status``."""

    CREATED = "CREATED"  # waiting for uploads and ``process``
    PROCESSING = "PROCESSING"
    COMPLETE = "COMPLETE"
    PARTIAL = "PARTIAL"
    FAILED = "FAILED"


class ItemStatus(StrEnum):
    """``batch_items.status`` (the records' ``transcription_status``)."""

    PENDING = "PENDING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


# Every change of a status is one of these moves, made by the function of the same name below.
BATCH_MOVES: dict[str, Move[BatchStatus]] = {
    "start": Move(frozenset({BatchStatus.CREATED}), frozenset({BatchStatus.PROCESSING})),
    "close": Move(
        frozenset({BatchStatus.PROCESSING}), frozenset({BatchStatus.COMPLETE, BatchStatus.PARTIAL, BatchStatus.FAILED})
    ),
}
ITEM_MOVES: dict[str, Move[ItemStatus]] = {
    "complete": Move(frozenset({ItemStatus.PENDING}), frozenset({ItemStatus.COMPLETED})),
    "fail": Move(frozenset({ItemStatus.PENDING}), frozenset({ItemStatus.FAILED})),
}
FINISHED = frozenset(BATCH_MOVES["close"].targets)


def closing_status(completed: int, failed: int) -> BatchStatus:
    """The status a batch closes with, from its items' outcomes."""
    if failed == 0:
        return BatchStatus.COMPLETE
    return BatchStatus.FAILED if completed == 0 else BatchStatus.PARTIAL


# --------------------------------------------------------------------------- the ingress's side


def create_batch(
    db: Database,
    *,
    batch_id: str,
    customer_id: int,
    project_id: int | None,
    keychain_id: int | None,
    language_code: str | None,
    bucket: str,
) -> None:
    """A new CREATED batch; it records the bucket its files are uploaded to and always reads from it."""
    with db.session() as s:
        s.add(
            Batch(
                id=batch_id,
                customer_id=customer_id,
                project_id=project_id,
                keychain_id=keychain_id,
                status=BatchStatus.CREATED,
                language_code=language_code,
                bucket=bucket,
            )
        )


def owned_batch(db: Database, batch_id: str, customer_id: int) -> Batch | None:
    """The batch, detached from its session; None when it does not exist or belongs to another customer."""
    with db.session() as s:
        batch = s.get(Batch, batch_id)
        if batch is None or batch.customer_id != customer_id:
            return None
        s.expunge(batch)
        return batch


def customer_batches(db: Database, customer_id: int) -> list[Batch]:
    """The customer's batches, newest first."""
    with db.session() as s:
        return list(
            s.scalars(select(Batch).where(Batch.customer_id == customer_id).order_by(Batch.created_at.desc(), Batch.id))
        )


def batch_items(db: Database, batch_id: str) -> list[BatchItem]:
    """The batch's files, by name."""
    with db.session() as s:
        return list(s.scalars(select(BatchItem).where(BatchItem.batch_id == batch_id).order_by(BatchItem.blob_name)))


def start(db: Database, batch: Batch, keys: Sequence[str], diarise: bool) -> bool:
    """CREATED -> PROCESSING plus one PENDING item and one ``pending`` usage row per file, atomically. False when
    another call got there first (then nothing changes)."""
    move = BATCH_MOVES["start"]
    with db.session() as s:
        if not changed(
            s,
            update(Batch)
            .where(Batch.id == batch.id, Batch.status.in_(move.sources))
            .values(status=BatchStatus.PROCESSING, diarise=diarise, updated_at=utcnow()),
        ):
            return False
        for key in keys:
            item_id = new_uuid()
            s.add(BatchItem(id=item_id, batch_id=batch.id, blob_name=key, status=ItemStatus.PENDING))
            s.add(
                UsageRecord(
                    customer_id=batch.customer_id,
                    project_id=batch.project_id,
                    route=USAGE_ROUTE,
                    status="pending",
                    reference_id=item_id,
                )
            )
        return True


# --------------------------------------------------------------------------- the runner's and tasks' side


@dataclass(frozen=True)
class FileTask:
    """What a task needs to transcribe one pending file of a batch."""

    item_id: str
    blob_name: str
    bucket: str | None  # the batch's bucket (None: the configured one)
    language_code: str | None
    diarise: bool
    customer_id: int
    project_id: int | None
    keychain_id: int | None


def begin_attempt(db: Database, item_id: str) -> FileTask | ItemStatus | None:
    """Count an attempt at a PENDING item and return what transcribing it needs; an item that already has its
    outcome (a retry, an overlapping run) returns its status, an unknown one None."""
    with db.session() as s:
        item = s.get(BatchItem, item_id)
        if item is None:
            return None
        if item.status != ItemStatus.PENDING:
            return ItemStatus(item.status)
        item.attempts += 1
        batch = s.get(Batch, item.batch_id)
        assert batch is not None  # batch_items.batch_id is a foreign key
        return FileTask(
            item.id,
            item.blob_name,
            batch.bucket,
            batch.language_code,
            bool(batch.diarise),
            batch.customer_id,
            batch.project_id,
            batch.keychain_id,
        )


def complete(db: Database, item_id: str, record: TranscriptionRecord) -> ItemStatus | None:
    """PENDING -> COMPLETED with the file's record. Returns the item's status afterwards (None: unknown item)."""
    return _settle(db, item_id, "complete", record=record)


def fail(db: Database, item_id: str, reason: str) -> ItemStatus | None:
    """PENDING -> FAILED with the reason. Returns the item's status afterwards (None: unknown item)."""
    return _settle(db, item_id, "fail", error=reason)


def _settle(
    db: Database, item_id: str, name: str, *, record: TranscriptionRecord | None = None, error: str | None = None
) -> ItemStatus | None:
    """Write a file's outcome once: only a PENDING item changes, together with its usage row."""
    move = ITEM_MOVES[name]
    (target,) = move.targets
    seconds = record.audio_length_seconds if record is not None else 0.0
    with db.session() as s:
        stored = record.model_dump(mode="json") if record is not None else None
        if not changed(
            s,
            update(BatchItem)
            .where(BatchItem.id == item_id, BatchItem.status.in_(move.sources))
            .values(status=target, record=stored, error=error, updated_at=utcnow()),
        ):
            current = s.scalar(select(BatchItem.status).where(BatchItem.id == item_id))
            return ItemStatus(current) if current else None
        usage_status = "successful" if target == ItemStatus.COMPLETED else "failed"
        settled = changed(
            s,
            update(UsageRecord)
            .where(UsageRecord.reference_id == item_id, UsageRecord.status == "pending")
            .values(status=usage_status, seconds_transcribed=seconds),
        )
        if not settled:  # a batch started before usage rows were placed at start: meter it now
            item = s.get(BatchItem, item_id)
            batch = s.get(Batch, item.batch_id) if item else None
            if batch is not None:
                s.add(
                    UsageRecord(
                        customer_id=batch.customer_id,
                        project_id=batch.project_id,
                        route=USAGE_ROUTE,
                        status=usage_status,
                        seconds_transcribed=seconds,
                        reference_id=item_id,
                    )
                )
        return target


def close(db: Database, batch_id: str) -> BatchStatus | None:
    """PROCESSING -> COMPLETE | PARTIAL | FAILED once every file has an outcome; None while files are pending
    (or when the batch is not PROCESSING)."""
    move = BATCH_MOVES["close"]
    with db.session() as s:
        counts = dict(
            s.execute(
                select(BatchItem.status, func.count()).where(BatchItem.batch_id == batch_id).group_by(BatchItem.status)
            )
            .tuples()
            .all()
        )
        if counts.get(ItemStatus.PENDING):
            return None
        status = closing_status(counts.get(ItemStatus.COMPLETED, 0), counts.get(ItemStatus.FAILED, 0))
        moved = changed(
            s,
            update(Batch)
            .where(Batch.id == batch_id, Batch.status.in_(move.sources))
            .values(status=status, updated_at=utcnow()),
        )
        return status if moved else None


def pending_items(db: Database, batch_id: str) -> list[str]:
    """Ids of the batch's PENDING items, by file name."""
    with db.session() as s:
        return list(
            s.scalars(
                select(BatchItem.id)
                .where(BatchItem.batch_id == batch_id, BatchItem.status == ItemStatus.PENDING)
                .order_by(BatchItem.blob_name)
            )
        )


def processing_batches(db: Database) -> list[str]:
    """Ids of every PROCESSING batch, oldest change first (what a runner resumes)."""
    with db.session() as s:
        return list(
            s.scalars(select(Batch.id).where(Batch.status == BatchStatus.PROCESSING).order_by(Batch.updated_at))
        )


def hold(db: Database, batch_id: str, runner: str, seconds: float) -> bool:
    """Take or renew ``runner``'s lease of a PROCESSING batch for ``seconds``: True when it holds the batch now
    (it held it already, nobody did, or the last holder's lease lapsed), False when another runner holds it. The
    batch's ``updated_at`` is left as it was: a lease is not a change a client sees. Times are the caller's clock
    (naive UTC), as the job leases': hosts whose clocks differ by a good part of a lease must not share a database."""
    now = utcnow()
    with db.session() as s:
        return (
            changed(
                s,
                update(Batch)
                .where(
                    Batch.id == batch_id,
                    Batch.status == BatchStatus.PROCESSING,
                    or_(
                        Batch.runner.is_(None),
                        Batch.runner == runner,
                        Batch.runner_until.is_(None),
                        Batch.runner_until < now,
                    ),
                )
                .values(runner=runner, runner_until=now + timedelta(seconds=seconds), updated_at=Batch.updated_at),
            )
            == 1
        )


def let_go(db: Database, batch_id: str, runner: str) -> None:
    """End ``runner``'s lease of the batch (it stopped running it): the next sweep of any runner may resume it."""
    with db.session() as s:
        changed(
            s,
            update(Batch)
            .where(Batch.id == batch_id, Batch.runner == runner)
            .values(runner=None, runner_until=None, updated_at=Batch.updated_at),
        )
