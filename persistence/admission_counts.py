"""The counts admission shares, in the database every ingress replica on every node already uses.

Each operation is one atomic statement (an UPSERT or UPDATE with RETURNING), the same on SQLite and PostgreSQL, so
replicas never read-then-write in one transaction (on SQLite that can fail when another process wrote in between;
on PostgreSQL two replicas could both pass a count):

- :func:`claim_requests`: take up to N requests of a customer's minute, never past the limit. The ingress claims a
  slice at a time and admits from it locally (``serve_app/admission/customers.py``), so the hot path rarely reaches
  here.
- :func:`take_live_slot` / :func:`release_live_slot` / :func:`renew_live_slots`: a customer's live-session seats,
  each held under a lease, so a replica that dies frees its seats when the lease runs out.
- :func:`audio_seconds_since`: the customer's metered audio of the day (``usage_records``).
- :func:`add_refusals`: refused requests per customer, minute and reason (written in batches by the usage meter).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, delete, func, select, update
from sqlalchemy.orm import Session

from persistence.models import Customer, LiveSessionSlot, RateWindow, UsageRecord, UsageRefusal, utcnow
from persistence.session import Database


def upsert(session: Session, table: Any) -> Any:
    """``INSERT`` with ``ON CONFLICT`` for the session's database (SQLite and PostgreSQL spell it the same)."""
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table)


# --------------------------------------------------------------------------------------------- limits of customers


LIMIT_COLUMNS = (
    Customer.requests_per_minute,
    Customer.audio_seconds_per_day,
    Customer.live_sessions,
    Customer.concurrent_share,
)


def customer_limits(db: Database, customer_id: int) -> tuple[int | None, ...]:
    """The customer's own (requests per minute, audio seconds per day, live sessions, concurrent share); None:
    the default."""
    with db.session() as s:
        row = s.execute(select(*LIMIT_COLUMNS).where(Customer.id == customer_id)).first()
    return tuple(row) if row else (None,) * len(LIMIT_COLUMNS)


# --------------------------------------------------------------------------------------------- requests per minute


def claim_requests(db: Database, customer_id: int, window_start: int, want: int, limit: int) -> tuple[int, int]:
    """Take up to ``want`` of the customer's ``limit`` requests of the minute starting at ``window_start`` (Unix
    seconds). Returns (granted, used): how many this call got (0 when the minute is used up) and how many all
    replicas have taken now. One statement: concurrent claims never take more than ``limit`` together."""
    table = RateWindow.__table__
    used = table.c.used
    # SET expressions see the row as it was before this statement (SQL semantics, SQLite and PostgreSQL alike)
    after = case((used >= limit, used), (used + want > limit, limit), else_=used + want)
    first = min(want, limit)
    with db.session() as s:
        stmt = (
            upsert(s, table)
            .values(customer_id=customer_id, window_start=window_start, used=first, last_grant=first)
            .on_conflict_do_update(
                index_elements=["customer_id", "window_start"], set_={"used": after, "last_grant": after - used}
            )
            .returning(table.c.last_grant, table.c.used)
        )
        granted, now_used = s.execute(stmt).one()
    return max(0, int(granted)), int(now_used)


def forget_windows(db: Database, before: int) -> int:
    """Delete the minutes that started before ``before`` (Unix seconds): they admit nobody any more."""
    with db.session() as s:
        result = s.execute(delete(RateWindow).where(RateWindow.window_start < before))
        return int(getattr(result, "rowcount", 0) or 0)


# --------------------------------------------------------------------------------------------- audio per day


def audio_seconds_since(db: Database, customer_id: int, since: datetime) -> float:
    """Seconds of audio metered for the customer since ``since`` (naive UTC), whatever each record's outcome."""
    with db.session() as s:
        total = s.scalar(
            select(func.coalesce(func.sum(UsageRecord.seconds_transcribed), 0.0)).where(
                UsageRecord.customer_id == customer_id, UsageRecord.created_at >= since
            )
        )
    return float(total or 0.0)


# --------------------------------------------------------------------------------------------- live sessions

MAX_SLOT_TRIES = 4  # seats another replica took between our read and our claim: try the next free ones


def take_live_slot(db: Database, customer_id: int, limit: int, session_id: str, lease_seconds: float) -> bool:
    """Give the session one of the customer's ``limit`` seats; False when all are held (unexpired leases).

    The free seats are read first, then each is claimed with a conditional UPSERT that only takes a seat that is
    absent or expired; two replicas racing for one seat get it once, and the loser tries the next."""
    now = utcnow()
    table = LiveSessionSlot.__table__
    with db.session() as s:
        held = set(
            s.scalars(
                select(LiveSessionSlot.slot).where(
                    LiveSessionSlot.customer_id == customer_id, LiveSessionSlot.expires_at > now
                )
            )
        )
    if len(held) >= limit:
        return False
    free = [slot for slot in range(limit) if slot not in held]
    expires = now + timedelta(seconds=lease_seconds)
    for slot in free[:MAX_SLOT_TRIES]:
        with db.session() as s:
            stmt = upsert(s, table).values(
                customer_id=customer_id, slot=slot, session_id=session_id, expires_at=expires
            )
            stmt = stmt.on_conflict_do_update(
                index_elements=["customer_id", "slot"],
                set_={"session_id": stmt.excluded.session_id, "expires_at": stmt.excluded.expires_at},
                where=table.c.expires_at <= now,
            ).returning(table.c.session_id)
            if s.execute(stmt).scalar() == session_id:
                return True
    return False


def release_live_slot(db: Database, session_id: str) -> None:
    with db.session() as s:
        s.execute(delete(LiveSessionSlot).where(LiveSessionSlot.session_id == session_id))


def renew_live_slots(db: Database, session_ids: Iterable[str], lease_seconds: float) -> None:
    ids = list(session_ids)
    if not ids:
        return
    with db.session() as s:
        s.execute(
            update(LiveSessionSlot)
            .where(LiveSessionSlot.session_id.in_(ids))
            .values(expires_at=utcnow() + timedelta(seconds=lease_seconds))
        )


def live_sessions_held(db: Database, customer_id: int) -> int:
    with db.session() as s:
        return int(
            s.scalar(
                select(func.count())
                .select_from(LiveSessionSlot)
                .where(LiveSessionSlot.customer_id == customer_id, LiveSessionSlot.expires_at > utcnow())
            )
            or 0
        )


# --------------------------------------------------------------------------------------------- refusals

RefusalKey = tuple[int, datetime, str]  # (customer_id, UTC minute, reason)


def add_refusals(session: Session, counts: Mapping[RefusalKey, int]) -> None:
    """Add refusal counts in the session's transaction (one multi-row UPSERT)."""
    if not counts:
        return
    table = UsageRefusal.__table__
    stmt = upsert(session, table).values(
        [{"customer_id": c, "minute": m, "reason": r, "count": n} for (c, m, r), n in counts.items()]
    )
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=["customer_id", "minute", "reason"], set_={"count": table.c.count + stmt.excluded.count}
        )
    )


def refusals_between(db: Database, customer_id: int, start: datetime, until: datetime) -> list[tuple[datetime, int]]:
    """(minute, refused requests) of the customer for every minute that overlaps ``[start, until)``: refusals are
    counted per minute, so a range that starts inside a minute counts all of that minute's."""
    start = start.replace(second=0, microsecond=0)
    with db.session() as s:
        rows = s.execute(
            select(UsageRefusal.minute, func.sum(UsageRefusal.count))
            .where(UsageRefusal.customer_id == customer_id, UsageRefusal.minute >= start, UsageRefusal.minute < until)
            .group_by(UsageRefusal.minute)
        )
        return [(minute, int(count)) for minute, count in rows]
