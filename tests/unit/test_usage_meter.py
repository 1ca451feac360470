"""The usage meter (performance issue): rows are written in batches off the request path, and none is lost on a
flush, on shutdown, or while the database refuses writes. Real SQLite, no mocks."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from sqlalchemy import event, func, select

from persistence.models import UsageRecord, utcnow
from persistence.session import Database
from persistence.usage_meter import UsageMeter, UsageRow


@pytest.fixture()
def db(tmp_path: Path) -> Database:
    return Database.migrated(f"sqlite:///{tmp_path / 'usage.db'}")


def row(i: int) -> UsageRow:
    return {"customer_id": 1, "route": "ner", "tokens": i, "created_at": utcnow()}


def stored(db: Database) -> list[int]:
    with db.engine.connect() as conn:  # a plain read: no commit of its own
        return sorted(conn.scalars(select(UsageRecord.tokens)).all())


def count_commits(db: Database) -> list[int]:
    commits: list[int] = []
    event.listen(db.engine, "commit", lambda _conn: commits.append(1))
    return commits


def test_rows_are_written_in_one_transaction_after_the_period(db: Database) -> None:
    meter = UsageMeter(db, flush_seconds=0.2)
    commits = count_commits(db)

    async def requests() -> tuple[list[int], list[int]]:
        await asyncio.gather(*(meter.add(row(i)) for i in range(50)))
        before = stored(db)  # the requests answered before their rows were written
        await asyncio.sleep(0.6)
        return before, stored(db)

    before, after = asyncio.run(requests())
    assert before == []
    assert after == list(range(50))
    assert len(commits) == 1


def test_flush_writes_what_is_pending_at_once(db: Database) -> None:
    meter = UsageMeter(db, flush_seconds=60)

    async def go() -> list[int]:
        for i in range(3):
            await meter.add(row(i))
        await meter.flush()
        return stored(db)

    assert asyncio.run(go()) == [0, 1, 2]
    assert meter.pending == 0
    with db.engine.connect() as conn:  # the columns a row leaves out take the model's defaults
        rows = conn.execute(select(UsageRecord.status, UsageRecord.seconds_transcribed, UsageRecord.project_id))
        assert set(rows) == {("successful", 0.0, None)}


def test_close_writes_the_rest_and_later_rows_directly(db: Database) -> None:
    meter = UsageMeter(db, flush_seconds=60)

    async def go() -> None:
        for i in range(5):
            await meter.add(row(i))

    asyncio.run(go())
    assert stored(db) == []
    meter.close()  # what the ingress's __del__ does on a graceful replica shutdown
    assert stored(db) == [0, 1, 2, 3, 4]
    asyncio.run(meter.add(row(5)))
    assert stored(db) == [0, 1, 2, 3, 4, 5]


def test_rows_survive_a_failed_write_and_go_on_the_next(db: Database) -> None:
    meter = UsageMeter(db, flush_seconds=0.05)
    refuse = {"on": True}

    def maybe_refuse(conn, cursor, statement, *args) -> None:  # type: ignore[no-untyped-def]
        if refuse["on"] and statement.lstrip().upper().startswith("INSERT INTO USAGE_RECORDS"):
            raise RuntimeError("database unavailable")

    event.listen(db.engine, "before_cursor_execute", maybe_refuse)

    async def go() -> list[int]:
        for i in range(4):
            await meter.add(row(i))
        with pytest.raises(RuntimeError):
            await meter.flush()
        assert meter.pending == 4  # put back, not dropped
        await asyncio.sleep(0.2)  # the periodic writer fails too, and keeps them
        assert meter.pending == 4
        refuse["on"] = False
        await asyncio.sleep(0.3)
        return stored(db)

    assert asyncio.run(go()) == [0, 1, 2, 3]


def test_a_full_buffer_makes_the_request_wait_for_a_write(db: Database) -> None:
    meter = UsageMeter(db, flush_seconds=60, max_pending=10)

    async def go() -> int:
        for i in range(10):
            await meter.add(row(i))
        with db.session() as s:
            return int(s.scalar(select(func.count()).select_from(UsageRecord)) or 0)

    assert asyncio.run(go()) == 10  # the tenth add wrote all ten before it returned
    assert meter.pending == 0


def test_zero_period_writes_each_row_before_answering(db: Database) -> None:
    meter = UsageMeter(db, flush_seconds=0)
    asyncio.run(meter.add(row(7)))
    assert stored(db) == [7]


def test_a_flush_cancelled_while_its_write_runs_writes_each_row_once(db: Database) -> None:
    """A test client's loop that closes cancels its flush; the write already in its thread still lands, once: the
    rows are neither put back to be written again nor lost (a refusal was once counted twice this way)."""
    meter = UsageMeter(db, flush_seconds=60)
    writing, release = threading.Event(), threading.Event()
    write = meter._write

    def slow_write(rows, refusals=None):  # type: ignore[no-untyped-def]
        writing.set()
        release.wait(5)
        write(rows, refusals)

    meter._write = slow_write  # type: ignore[method-assign]

    async def cancelled_flush() -> None:
        await meter.add(row(7))
        meter.refused(1, "overloaded")
        task = asyncio.create_task(meter.flush())
        await asyncio.to_thread(writing.wait, 5)
        task.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled_flush())
    meter.flush_now()  # anything put back would be written again here
    assert stored(db) == [7]
    with db.engine.connect() as conn:
        from persistence.models import UsageRefusal

        assert conn.scalar(select(func.sum(UsageRefusal.count))) == 1
