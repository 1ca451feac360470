"""Usage report over the caller's usage records (``GET /v1/transcribe/usage``).

Every metered route writes one ``UsageRecord`` per invocation (``serve_app/services/usage.py``; batch files write
a ``pending`` row when the batch starts and settle it when the file is done). The report counts the records of
the caller's customer whose ``created_at`` lies in ``[start_date_time, end_date_time]`` (both inclusive, to the
second, UTC) in total and per calendar-aligned bucket of ``interval``: minute, hour, day, week (ISO weeks,
Monday 00:00 UTC) or month. Every bucket in the range is listed, empty ones too; the first and last are clipped to
the range.

Refused requests (a customer limit's 429, a full queue's 503) are no usage records: they are counted per minute in
``usage_refusals`` and reported as ``total_refused_invocations``, apart from every other counter (a minute's count
goes to the bucket of the minute, or of the range's start for the minute it starts in).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import anyio
from sqlalchemy import select

from contracts.errors import InvalidInput
from contracts.usage import UsageBucket, UsageCounters, UsageReport
from persistence.admission_counts import refusals_between
from persistence.models import UsageRecord
from serve_app.context import AppContext
from serve_app.tokens import Principal

INTERVALS = ("minute", "hour", "day", "week", "month")
MAX_BUCKETS = 10_000
_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# ASCII digits only: ``\d`` and strptime also take Arabic-Indic or full-width digits
_PATTERN = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")
_STEP = {
    "minute": timedelta(minutes=1),
    "hour": timedelta(hours=1),
    "day": timedelta(days=1),
    "week": timedelta(weeks=1),
}


def parse_time(field: str, value: str) -> datetime:
    """``YYYY-MM-DDTHH:MM:SSZ`` -> naive UTC datetime (how the database stores time); 400 naming the field."""
    text = (value or "").strip()
    try:
        if not _PATTERN.match(text):
            raise ValueError
        return datetime.strptime(text, _FORMAT)
    except ValueError:
        raise InvalidInput(
            f"Invalid request: field '{field}': '{value}' is not a valid date-time in ISO format "
            f"YYYY-MM-DDTHH:MM:SSZ (for example 2024-05-01T00:00:00Z)."
        ) from None


def bucket_start(ts: datetime, interval: str) -> datetime:
    """The start of the calendar bucket holding ``ts``."""
    if interval == "minute":
        return ts.replace(second=0, microsecond=0)
    if interval == "hour":
        return ts.replace(minute=0, second=0, microsecond=0)
    day = ts.replace(hour=0, minute=0, second=0, microsecond=0)
    if interval == "day":
        return day
    if interval == "week":
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)  # month


def next_bucket(start: datetime, interval: str) -> datetime:
    if interval == "month":
        if start.month == 12:
            return start.replace(year=start.year + 1, month=1)
        return start.replace(month=start.month + 1)
    return start + _STEP[interval]


def count_buckets(start: datetime, end: datetime, interval: str) -> int:
    first = bucket_start(start, interval)
    if interval == "month":
        return (end.year - first.year) * 12 + end.month - first.month + 1
    return int((bucket_start(end, interval) - first) / _STEP[interval]) + 1


class Counters(UsageCounters):
    """The report's counters (fields from the response schema), accumulated one usage record at a time."""

    def add(self, status: str, seconds: float, tokens: int) -> None:
        self.total_invocations += 1
        if status == "successful":
            self.total_successful_invocations += 1
        elif status == "failed":
            self.total_failed_invocations += 1
        elif status == "pending":
            self.total_pending_invocations += 1
        self.total_seconds_transcribed += float(seconds or 0.0)
        self.total_tokens += int(tokens or 0)

    def refused(self, count: int) -> None:
        self.total_refused_invocations += count

    def shown(self) -> dict[str, Any]:
        """The counters as the report shows them (seconds to the millisecond)."""
        out = self.model_dump()
        out["total_seconds_transcribed"] = round(out["total_seconds_transcribed"], 3)
        return out


def validate(start_date_time: str, end_date_time: str, interval: str) -> tuple[datetime, datetime, str]:
    start = parse_time("start_date_time", start_date_time)
    end = parse_time("end_date_time", end_date_time)
    unit = (interval or "").strip().lower()
    if unit not in INTERVALS:
        raise InvalidInput(
            f"Invalid request: field 'interval': '{interval}' is not a valid interval; use one of "
            f"{', '.join(INTERVALS)}."
        )
    if start > end:
        raise InvalidInput(
            f"Invalid request: start_date_time ({start_date_time}) is after end_date_time ({end_date_time})."
        )
    try:  # the bucket after the last one and the second after the end must exist (datetime stops at year 9999)
        next_bucket(bucket_start(end, unit), unit)
        end + timedelta(seconds=1)
    except (OverflowError, ValueError):
        raise InvalidInput(
            f"Invalid request: field 'end_date_time': '{end_date_time}' is out of range: its {unit} bucket would "
            "end after the year 9999, the last one supported. Use an earlier end_date_time."
        ) from None
    buckets = count_buckets(start, end, unit)
    if buckets > MAX_BUCKETS:
        raise InvalidInput(
            f"Invalid request: {unit} buckets from {start_date_time} to {end_date_time} would be "
            f"{buckets:,} buckets; at most {MAX_BUCKETS:,} are returned. Use a coarser interval or a "
            f"shorter range."
        )
    return start, end, unit


def build_report(
    rows: list[tuple[datetime, str, float, int]],
    start: datetime,
    end: datetime,
    interval: str,
    refusals: list[tuple[datetime, int]] | None = None,
) -> tuple[Counters, list[UsageBucket]]:
    """Totals and dense buckets from ``(created_at, status, seconds, tokens)`` rows inside the range, and from
    ``(minute, refused)`` counts of the minutes that overlap it."""
    totals = Counters()
    per_bucket: dict[datetime, Counters] = {}
    for created_at, status, seconds, tokens in rows:
        totals.add(status, seconds, tokens)
        per_bucket.setdefault(bucket_start(created_at, interval), Counters()).add(status, seconds, tokens)
    for minute, count in refusals or []:
        totals.refused(count)
        per_bucket.setdefault(bucket_start(max(minute, start), interval), Counters()).refused(count)
    buckets = []
    cursor = bucket_start(start, interval)
    while cursor <= end:
        following = next_bucket(cursor, interval)
        shown_end = min(following - timedelta(seconds=1), end)
        buckets.append(
            UsageBucket(
                **(per_bucket.get(cursor) or Counters()).shown(),
                start_date_time=max(cursor, start).strftime(_FORMAT),
                end_date_time=shown_end.strftime(_FORMAT),
            )
        )
        cursor = following
    return totals, buckets


async def report(ctx: AppContext, caller: Principal, start: str, end: str, interval: str) -> UsageReport:
    start_ts, end_ts, unit = validate(start, end, interval)
    until = end_ts + timedelta(seconds=1)  # the end second is included
    await ctx.usage.flush()  # this replica's own recent requests count (others' show within the flush period)

    def fetch() -> list[tuple[datetime, str, float, int]]:
        with ctx.db.session() as s:
            query = (
                select(UsageRecord.created_at, UsageRecord.status, UsageRecord.seconds_transcribed, UsageRecord.tokens)
                .where(
                    UsageRecord.customer_id == caller.customer_id,
                    UsageRecord.created_at >= start_ts,
                    UsageRecord.created_at < until,
                )
                .execution_options(yield_per=5000)
            )
            return list(s.execute(query).tuples())

    rows = await anyio.to_thread.run_sync(fetch)
    refusals = await anyio.to_thread.run_sync(refusals_between, ctx.db, caller.customer_id, start_ts, until)
    totals, buckets = build_report(rows, start_ts, end_ts, unit, refusals)
    return UsageReport(
        **totals.shown(),
        start_date_time=start_ts.strftime(_FORMAT),
        end_date_time=end_ts.strftime(_FORMAT),
        interval=unit,
        usage=buckets,
    )
