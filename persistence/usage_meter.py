"""Usage rows written in batches, off the request path.

A metered request appends its row and answers, without waiting for an INSERT and commit (a thread hop and an
fsync on SQLite, a round trip on PostgreSQL); one writer per process inserts everything pending every
``flush_seconds`` in a single transaction.

Rows are plain mappings written with one multi-row INSERT, which costs a fraction of the CPU of an ORM object per
request on the ingress's busiest path (docs/performance.md, usage metering).

Refusals (requests refused at a customer limit or at capacity, never billed) are counted in the same buffer
per customer, minute and reason and written in the same transaction, as one UPSERT per flush: a flood of refused
requests costs the database one row per customer and minute, not one per request.

Nothing is lost:
- :meth:`UsageMeter.flush` writes what is pending now (a usage report calls it first, so a caller sees its own
  requests);
- :meth:`UsageMeter.close` writes the rest synchronously when the replica shuts down;
- a failed write puts its rows back for the next try, and past ``max_pending`` rows a request waits for a write
  (back-pressure) instead of the buffer growing without bound while the database is down.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import TypedDict

from sqlalchemy import insert

from persistence.admission_counts import RefusalKey, add_refusals
from persistence.models import UsageRecord, utcnow
from persistence.session import Database

log = logging.getLogger(__name__)


class UsageRow(TypedDict, total=False):
    """One ``usage_records`` row; columns left out take their defaults (``persistence.models.UsageRecord``)."""

    customer_id: int
    project_id: int | None
    route: str
    status: str
    seconds_transcribed: float
    tokens: int
    reference_id: str | None
    created_at: datetime


class UsageMeter:
    def __init__(self, db: Database, flush_seconds: float = 0.2, max_pending: int = 10_000) -> None:
        self.db = db
        self.flush_seconds = flush_seconds
        self.max_pending = max_pending
        self._pending: list[UsageRow] = []
        self._refusals: dict[RefusalKey, int] = {}
        self._lock = threading.Lock()  # the swap of the buffer; close() may run on another thread
        self._writer: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def pending(self) -> int:
        return len(self._pending) + len(self._refusals)

    def refused(self, customer_id: int, reason: str) -> None:
        """Count one refused request; written with the next flush (never as a usage record: it is not billed)."""
        key = (customer_id, utcnow().replace(second=0, microsecond=0), reason)
        with self._lock:
            self._refusals[key] = self._refusals.get(key, 0) + 1
        if self._closed or self.flush_seconds <= 0:
            return  # a synchronous caller: the next flush or close writes it
        try:
            self._ensure_writer()
        except RuntimeError:  # no running loop (a synchronous caller): the next flush writes it
            pass

    async def add(self, row: UsageRow) -> None:
        """Queue one row; it reaches the database within ``flush_seconds`` (at once after :meth:`close`)."""
        if self._closed or self.flush_seconds <= 0:
            await asyncio.to_thread(self._write, [row])
            return
        with self._lock:
            self._pending.append(row)
            full = len(self._pending) >= self.max_pending
        if full:
            await self.flush()
        self._ensure_writer()

    async def flush(self) -> None:
        """Write everything pending now; raises if the database refuses (the rows stay queued)."""
        rows, refusals = self._take()
        if rows or refusals:
            try:
                # the thread writes or puts back, whatever happens to this coroutine: a flush cancelled while
                # its write still runs (a test client's loop closing) must neither lose the rows nor write them twice
                await asyncio.to_thread(self._write_or_put_back, rows, refusals)
            except Exception:
                self._ensure_writer()  # the periodic writer retries them
                raise

    def flush_now(self) -> None:
        """:meth:`flush` from synchronous code (no event loop needed)."""
        rows, refusals = self._take()
        if rows or refusals:
            self._write_or_put_back(rows, refusals)

    def close(self) -> None:
        """Write what is pending, synchronously, and write any later row at once (replica shutdown)."""
        self._closed = True
        writer = self._writer
        if writer is not None and not writer.done():
            writer.get_loop().call_soon_threadsafe(writer.cancel)
        self.flush_now()

    def _ensure_writer(self) -> None:
        loop = asyncio.get_running_loop()
        # a new writer when the last one ended, or lived on a loop that has gone (each TestClient call has its own)
        if self._writer is None or self._writer.done() or self._writer.get_loop() is not loop:
            self._writer = loop.create_task(self._write_periodically(), name="usage-meter")

    async def _write_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.flush_seconds)
            try:
                await self.flush()
            except Exception:  # the database is down: keep the rows, try again next period
                log.exception("usage rows not written yet (%d pending); retrying", self.pending)
            if not self.pending:
                return  # the next add starts a writer again

    def _take(self) -> tuple[list[UsageRow], dict[RefusalKey, int]]:
        with self._lock:
            rows, self._pending = self._pending, []
            refusals, self._refusals = self._refusals, {}
        return rows, refusals

    def _put_back(self, rows: Sequence[UsageRow], refusals: dict[RefusalKey, int]) -> None:
        with self._lock:
            self._pending[:0] = rows
            for key, count in refusals.items():
                self._refusals[key] = self._refusals.get(key, 0) + count

    def _write_or_put_back(self, rows: Sequence[UsageRow], refusals: dict[RefusalKey, int]) -> None:
        try:
            self._write(rows, refusals)
        except BaseException:
            self._put_back(rows, refusals)
            raise

    def _write(self, rows: Sequence[UsageRow], refusals: dict[RefusalKey, int] | None = None) -> None:
        with self.db.session() as session:
            if rows:
                session.execute(insert(UsageRecord), list(rows))
            add_refusals(session, refusals or {})
