"""Admission by the customer: each customer's limits, held across every ingress replica and node.

Four limits belong to a customer (``customers`` columns, set with ``khuluma token create|limits``; unset ones take
the operator's defaults, ``KHULUMA_ADMISSION_*``; 0 is unlimited):

- **requests per minute**, checked for every authenticated request (``serve_app/auth.py``). The count of a UTC
  minute lives in the database (``rate_windows``). A replica does not go there per request: it claims a *slice*
  of the minute's limit with one atomic UPSERT (``persistence.admission_counts.claim_requests``) and admits from the
  slice locally until it is spent, then claims again. The replicas together never admit more than the limit; a
  slice left unspent when the minute ends is lost (at most ``limit / 20`` per replica, and slices shrink to one
  request as the limit nears). When the database says the minute is used up, the replica refuses locally until
  the minute ends, without asking again.
- **audio seconds per day**, checked before a transcription, job, batch or live session starts: the customer's
  metered seconds since UTC midnight (``usage_records``), read at most every ``limits.cache_seconds`` and counted
  on locally in between.
- **live sessions** open at once: a seat per session in ``live_session_slots``, held under a lease that this
  replica renews, so a replica that dies frees its seats (``serve_app/admission/live.py``);
- **concurrent share**: the percentage of a server's capacity for one kind of work the customer may hold in flight,
  checked at the edge before the body is read (``serve_app/admission/capacity.py``, with the limits cached here).

A refusal is a :class:`~contracts.errors.RateLimited` (429 with ``Retry-After`` and ``RateLimit`` headers, rendered
at the edge: ``serve_app/errors.py``) and is counted per customer in ``usage_refusals``, never as a usage record.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from contracts.errors import RateLimited
from contracts.settings import AdmissionSettings
from persistence import admission_counts as store
from persistence.session import Database
from persistence.usage_meter import UsageMeter
from serve_app.tokens import LIMIT_FIELDS, Principal

log = logging.getLogger(__name__)

WINDOW_S = 60
DAY_S = 24 * 3600
SLICE_FRACTION = 20  # a claim takes at most 1/20 of the limit ...
MAX_SLICE = 100  # ... and at most this many requests
STATE_KEY = "khuluma_admitted"  # the request's Admitted, in the ASGI scope's state (read by the edge)


@dataclass(frozen=True)
class Limits:
    """The limits that apply to one customer (0: unlimited)."""

    requests_per_minute: int = 0
    audio_seconds_per_day: int = 0
    live_sessions: int = 0
    concurrent_share: int = 0


@dataclass(frozen=True)
class RateState:
    """What the ``RateLimit`` headers of an answer say (draft-ietf-httpapi-ratelimit-headers)."""

    limit: int
    remaining: int
    reset: int  # whole seconds until the window ends
    window_s: int = WINDOW_S

    def headers(self) -> list[tuple[bytes, bytes]]:
        return rate_headers(self.limit, self.remaining, self.reset, self.window_s)


def rate_headers(limit: int, remaining: int, reset: int, window_s: int) -> list[tuple[bytes, bytes]]:
    return [
        (b"ratelimit-policy", f"{limit};w={window_s}".encode()),
        (b"ratelimit", f"limit={limit}, remaining={max(0, remaining)}, reset={max(0, reset)}".encode()),
    ]


@dataclass
class Admitted:
    """An authenticated request's admission, kept in the ASGI scope's state: the edge adds its ``RateLimit``
    headers to the answer and counts a refusal (429, or 503 from a full queue) for its customer."""

    customer_id: int
    usage: UsageMeter
    rate: RateState | None = None

    def refused(self, reason: str) -> None:
        self.usage.refused(self.customer_id, reason)


@dataclass
class _Window:
    start: int  # Unix time of the minute's first second
    left: int = 0  # requests this replica claimed and has not admitted yet
    used: int = 0  # the minute's requests taken by all replicas, as of this replica's last claim
    exhausted: bool = False  # the database had none left: refuse locally until the minute ends


@dataclass
class _AudioDay:
    day: date
    seconds: float
    read_at: float  # monotonic


class _LoopLocks:
    """One asyncio.Lock per key, made again when the running loop changes (the test client runs a loop per
    request; a replica has one loop)."""

    def __init__(self) -> None:
        self._locks: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = {}

    def __call__(self, key: int) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        held = self._locks.get(key)
        if held is None or held[0] is not loop:
            if len(self._locks) > 10_000:
                self._locks.clear()
            held = self._locks[key] = (loop, asyncio.Lock())
        return held[1]


class Customers:
    """The customers' limits on one ingress replica: requests per minute and audio seconds per day (the shared counts
    live in the database), and each customer's limits, cached."""

    def __init__(
        self,
        db: Database,
        usage: UsageMeter,
        settings: AdmissionSettings,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db, self.usage, self.settings = db, usage, settings
        self._clock = clock  # wall time (Unix seconds): windows and days are UTC calendar units
        self._limits: dict[int, tuple[float, Limits]] = {}
        self._windows: dict[int, _Window] = {}
        self._audio: dict[int, _AudioDay] = {}
        self._locks = _LoopLocks()
        self._forgotten_before = 0

    def now(self) -> float:
        return self._clock()

    # -------------------------------------------------------------------------------------------------- limits

    async def limits_for(self, customer_id: int) -> Limits:
        """The customer's limits: its own where set, else the defaults; cached for ``admission.cache_seconds``."""
        cached = self.cached_limits(customer_id)
        if cached is not None:
            return cached
        try:
            own = await asyncio.to_thread(store.customer_limits, self.db, customer_id)
        except Exception:  # the database is briefly unreachable: the defaults, and ask again soon
            log.warning("limits of customer %s not readable; using the defaults", customer_id, exc_info=True)
            own = (None,) * len(LIMIT_FIELDS)
        defaults = self.settings
        limits = Limits(
            *(
                value if value is not None else getattr(defaults, name)
                for name, value in zip(LIMIT_FIELDS, own, strict=True)
            )
        )
        if len(self._limits) > 100_000:
            self._limits.clear()
        self._limits[customer_id] = (time.monotonic() + self.settings.cache_seconds, limits)
        return limits

    def cached_limits(self, customer_id: int) -> Limits | None:
        """The customer's limits if read lately (the edge's check before the body, which never waits for the
        database), else None."""
        cached = self._limits.get(customer_id)
        return cached[1] if cached and cached[0] > time.monotonic() else None

    # -------------------------------------------------------------------------------------------------- requests

    async def admit_request(self, principal: Principal) -> RateState | None:
        """Count one request against the customer's requests per minute: its ``RateLimit`` state, None when the
        customer has no such limit, or :class:`RateLimited` when the minute is used up."""
        limit = (await self.limits_for(principal.customer_id)).requests_per_minute
        if not limit:
            return None
        customer = principal.customer_id
        now = self.now()
        start = int(now // WINDOW_S) * WINDOW_S
        window = self._window(customer, start)
        if window.left == 0 and not window.exhausted:
            async with self._locks(customer):
                window = self._window(customer, start)  # another request may have claimed meanwhile
                if window.left == 0 and not window.exhausted:
                    await self._claim(customer, window, limit)
        reset = max(1, int(start + WINDOW_S - now + 0.999))
        if window.left > 0:
            window.left -= 1
            return RateState(limit, limit - window.used + window.left, reset)
        raise RateLimited(
            f"Too many requests: this customer's limit is {limit} requests per minute. Retry in {reset} s.",
            reset,
            limit=limit,
            window_s=WINDOW_S,
            reason="requests_per_minute",
        )

    def _window(self, customer: int, start: int) -> _Window:
        window = self._windows.get(customer)
        if window is None or window.start != start:
            if window is None and len(self._windows) > 100_000:
                self._windows.clear()
            window = self._windows[customer] = _Window(start)
        return window

    async def _claim(self, customer: int, window: _Window, limit: int) -> None:
        want = max(1, min(limit // SLICE_FRACTION, MAX_SLICE, limit - window.used))
        forget = window.start - 2 * WINDOW_S if self._forgotten_before < window.start - 2 * WINDOW_S else None
        try:
            granted, used = await asyncio.to_thread(self._claim_sync, customer, window.start, want, limit, forget)
        except Exception:  # the database is unreachable: admit (limits must not stop the service)
            log.warning("request count of customer %s not claimable; admitting", customer, exc_info=True)
            window.left += 1
            return
        if forget is not None:
            self._forgotten_before = forget
        window.left += granted
        window.used = used
        window.exhausted = granted == 0

    def _claim_sync(self, customer: int, start: int, want: int, limit: int, forget: int | None) -> tuple[int, int]:
        if forget is not None:
            store.forget_windows(self.db, forget)  # once a minute per replica: the minutes nobody counts any more
        return store.claim_requests(self.db, customer, start, want, limit)

    # -------------------------------------------------------------------------------------------------- audio

    async def check_audio(self, principal: Principal) -> None:
        """Before a transcription starts: :class:`RateLimited` when the customer's audio of the UTC day has reached
        its limit (a transcription that starts below it runs to its end)."""
        limit = (await self.limits_for(principal.customer_id)).audio_seconds_per_day
        if not limit:
            return
        now = datetime.fromtimestamp(self.now(), UTC).replace(tzinfo=None)
        today = now.date()
        entry = self._audio.get(principal.customer_id)
        if entry is None or entry.day != today or time.monotonic() - entry.read_at > self.settings.cache_seconds:
            entry = await self._read_audio(principal.customer_id, today)
        if entry.seconds >= limit:
            midnight = datetime.combine(today, datetime.min.time()) + timedelta(days=1)
            retry = max(1, int((midnight - now).total_seconds() + 0.999))
            raise RateLimited(
                f"This customer's audio limit of {limit} seconds per day (UTC) is used up ({entry.seconds:.0f} s "
                f"today). Retry after midnight UTC, in {retry} s.",
                retry,
                limit=limit,
                window_s=DAY_S,
                reason="audio_seconds_per_day",
            )

    async def _read_audio(self, customer: int, today: date) -> _AudioDay:
        try:
            await self.usage.flush()  # this replica's own recent rows count
        except Exception:  # they stay queued; what the database has is still the best figure
            log.warning("usage rows not written before the audio check", exc_info=True)
        midnight = datetime.combine(today, datetime.min.time())
        try:
            seconds = await asyncio.to_thread(store.audio_seconds_since, self.db, customer, midnight)
        except Exception:  # unreadable: keep the last figure (or none) and ask again next time
            log.warning("audio of customer %s not readable", customer, exc_info=True)
            last = self._audio.get(customer)
            return last if last is not None and last.day == today else _AudioDay(today, 0.0, 0.0)
        entry = self._audio[customer] = _AudioDay(today, seconds, time.monotonic())
        return entry

    def note_audio(self, customer_id: int, seconds: float) -> None:
        """Audio this replica just metered: counted until the next read from the database includes it."""
        entry = self._audio.get(customer_id)
        if entry is not None and seconds > 0:
            entry.seconds += seconds
