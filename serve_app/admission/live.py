"""Admission of live sessions (``/ws/stream-transcribe``, ``/v1/realtime``), before the WebSocket is accepted.

A new session is admitted only while speech keeps every open session at real time. Each session's streaming steps
are timed against the audio they cover (:class:`TimedSpeechClient`, the ingress's speech handle: a step's time
goes to the session whose task made the call, :data:`CURRENT_SEAT`), which gives the session's real-time factor:
seconds of steps per second of audio, over about the last :data:`RTF_WINDOW_S` seconds of its audio. Sessions that
share the speech capacity wait on each other's steps, so their factors grow together: the load one session adds
is the mean factor of the open measured sessions over their number. A new one is admitted while that load times
the sessions open plus one stays within :data:`REALTIME_HEADROOM`, else it is refused with 503 and a
``Retry-After`` of when an open session is expected to end (the sessions that ended here: their typical length).

Only what is open decides, so no session's past can lock the others out:

- with no session open, one is always admitted;
- the load is measured on the sessions open now; a closed session (one ended for its language, say) forecasts
  nothing. While the open ones are not measured yet, the last load measured decides for
  :data:`LOAD_MAX_AGE_S` after it was measured, then none does: up to :data:`UNMEASURED_SESSIONS` are open at once;
- when the measured load says no, one session at a time is still admitted as a probe (:attr:`LiveSeat.probe`): its
  own steps measure the load again. Once they have (:data:`PROBE_AUDIO_S` of its audio), another probe may come
  while every open session keeps real time.

The customer's seats are counted across replicas in the database (``persistence/admission_counts.py``; 429 past
the customer's ``live_sessions``), each under a lease this replica renews, so a replica that dies frees its seats.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from contracts.errors import Overloaded, RateLimited
from contracts.settings import AdmissionSettings
from contracts.speech import SpeechClient, StreamRequest, StreamStep
from persistence import admission_counts as store
from persistence.session import Database
from serve_app.tokens import Principal

log = logging.getLogger(__name__)

REALTIME_HEADROOM = 0.8  # a session's steps may take this share of its audio's duration: a margin for variance
RTF_WINDOW_S = 10.0  # a session's real-time factor weighs its last seconds of audio most
MEASURED_AUDIO_S = 1.0  # a session counts as measured after its steps covered this much audio
UNMEASURED_SESSIONS = 8  # open at once while none of them is measured and no recent load decides
LOAD_MAX_AGE_S = 30.0  # a load measured on sessions that have all closed decides this long, then no more
UNMEASURED_RETRY_S = 5.0  # a customer's sessions all on other replicas, none ended here: when to try again
PROBE_AUDIO_S = 2.0  # a probe has measured the load once its steps covered this much of its audio
LENGTH_WEIGHT = 0.2  # the typical session length: an average of the lengths of ended sessions, this much the newest

# The live session the running task serves (set when it is admitted; its streaming steps are timed against it).
CURRENT_SEAT: ContextVar[LiveSeat | None] = ContextVar("khuluma_live_seat", default=None)


@dataclass
class LiveSeat:
    """One open live session of this replica. :meth:`close` asks the session to end (from any thread): the
    stream service waits on :attr:`stop` beside the client's next message."""

    customer_id: int
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    held: bool = False  # holds a seat in the customer's count (the customer has a live-session limit)
    probe: bool = False  # admitted although the measured load said no, to measure it again
    opened: float = field(default_factory=time.monotonic)
    reason: str = ""
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    loop: asyncio.AbstractEventLoop | None = None
    # its streaming steps: seconds of work and of audio, each decaying with the audio that came after
    busy_s: float = 0.0
    audio_s: float = 0.0
    heard_until: float = 0.0  # seconds into the stream the steps have covered

    @property
    def probing(self) -> bool:
        """Admitted as a probe and not measured yet."""
        return self.probe and self.heard_until < PROBE_AUDIO_S

    def close(self, reason: str) -> None:
        self.reason = reason
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.stop.set)

    def note_step(self, audio_end: float, seconds: float) -> None:
        """A streaming step that took ``seconds`` and covered the stream up to ``audio_end`` seconds."""
        new = max(0.0, audio_end - self.heard_until)
        self.heard_until = max(self.heard_until, audio_end)
        keep = math.exp(-new / RTF_WINDOW_S)
        self.busy_s = self.busy_s * keep + seconds
        self.audio_s = self.audio_s * keep + new

    def realtime_factor(self) -> float | None:
        """Seconds of step work per second of audio lately; None until enough audio was measured."""
        if self.heard_until < MEASURED_AUDIO_S or self.audio_s <= 0:
            return None
        return self.busy_s / self.audio_s


class LiveSessions:
    """The live sessions of one ingress replica: admitted while speech keeps them all at real time (and within
    ``admission.live_sessions_per_replica`` when set; 503 beyond), and the customers' seats in the database (429
    beyond a customer's limit)."""

    def __init__(self, db: Database, settings: AdmissionSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.db, self.settings, self.clock = db, settings, clock
        self.open: dict[str, LiveSeat] = {}
        # the real-time factor one open session adds, and when it was measured (on sessions open then)
        self.session_load: float | None = None
        self.measured_at = 0.0
        self.typical_length_s: float | None = None  # of the sessions that ended on this replica
        self._renewer: asyncio.Task[None] | None = None

    def load(self) -> float | None:
        """The real-time factor one more session would add, by the open sessions' measurements; while none of
        them is measured, the last load measured if it is recent (:data:`LOAD_MAX_AGE_S`); else None."""
        now = self.clock()
        factors = [f for seat in self.open.values() if (f := seat.realtime_factor()) is not None]
        if factors:  # sessions sharing speech slow down together: each one's share of the load
            self.session_load, self.measured_at = sum(factors) / len(factors) ** 2, now
            return self.session_load
        if self.open and self.session_load is not None and now - self.measured_at <= LOAD_MAX_AGE_S:
            return self.session_load
        return None

    def room(self) -> bool | None:
        """Whether one more session keeps every open one at real time by the measurements that still decide; None
        when no measurement decides and :data:`UNMEASURED_SESSIONS` are open already."""
        if not self.open:
            return True  # nothing open: nothing to keep at real time, and nothing past decides
        load = self.load()
        if load is None:  # nothing measured lately: a few, until one is
            return True if len(self.open) < UNMEASURED_SESSIONS else None
        return load * (len(self.open) + 1) <= REALTIME_HEADROOM

    def _may_probe(self) -> bool:
        """Whether a probe may come in: none is probing; and beside a probe that has measured already, only while
        every open session keeps real time (its steps take less time than the audio they cover), so that probes
        one after another cannot pile sessions on a server that is behind."""
        seats = list(self.open.values())
        if any(seat.probing for seat in seats):
            return False
        return not any(seat.probe for seat in seats) or all((seat.realtime_factor() or 0.0) < 1.0 for seat in seats)

    def retry_after(self, seats: list[LiveSeat] | None = None) -> float:
        """Seconds until one of ``seats`` (default: every open one) is expected to end: the typical length of the
        sessions that ended here less its age; before any ended, as long again as the oldest has run."""
        now = self.clock()
        ages = [now - seat.opened for seat in (self.open.values() if seats is None else seats)]
        if not ages:
            return 1.0
        if self.typical_length_s is None:
            return min(60.0, max(1.0, max(ages)))
        return max(1.0, min(self.typical_length_s - age for age in ages))

    async def take(self, principal: Principal, limit: int) -> LiveSeat:
        ceiling = self.settings.live_sessions_per_replica
        if ceiling and len(self.open) >= ceiling:
            retry = self.retry_after()
            raise Overloaded(
                f"This server already holds its {ceiling} live sessions (KHULUMA_ADMISSION_LIVE_SESSIONS_PER_REPLICA); "
                f"retry in {math.ceil(retry)} s or on another server.",
                retry,
            )
        room = self.room()
        probe = room is False and self._may_probe()
        if not room and not probe:  # a probe measures the load again: one at a time, none while one falls behind
            retry = self.retry_after()
            why = (
                f"it is measuring the {len(self.open)} open"
                if room is None
                else f"one more would put the {len(self.open)} open behind real time"
            )
            raise Overloaded(
                f"Speech on this server is at capacity for live sessions: {why}. Retry in {math.ceil(retry)} s or "
                "on another server.",
                retry,
            )
        seat = LiveSeat(principal.customer_id, loop=asyncio.get_running_loop(), probe=probe, opened=self.clock())
        self.open[seat.session_id] = seat  # counted before the database is asked: concurrent opens see it
        CURRENT_SEAT.set(seat)  # the session runs in this task: its steps are timed against this seat
        if not limit:
            return seat
        try:
            got = await asyncio.to_thread(
                store.take_live_slot,
                self.db,
                principal.customer_id,
                limit,
                seat.session_id,
                self.settings.live_lease_seconds,
            )
        except Exception:  # the database is unreachable: admit without a seat (the limit waits)
            log.warning("live seat of customer %s not claimable; admitting", principal.customer_id, exc_info=True)
            return seat
        if not got:
            del self.open[seat.session_id]
            CURRENT_SEAT.set(None)
            own = [s for s in self.open.values() if s.customer_id == principal.customer_id]
            retry = self.retry_after(own) if own else self.typical_length_s or UNMEASURED_RETRY_S
            raise RateLimited(
                f"This customer already has {limit} live sessions open, its limit. Close one, or retry in "
                f"{math.ceil(retry)} s.",
                retry,
                limit=limit,
                reason="live_sessions",
            )
        seat.held = True
        self._ensure_renewer()
        return seat

    async def release(self, seat: LiveSeat) -> None:
        if self.open.pop(seat.session_id, None) is not None:
            length = self.clock() - seat.opened
            typical = self.typical_length_s
            self.typical_length_s = length if typical is None else typical + LENGTH_WEIGHT * (length - typical)
        if seat.held:
            try:
                await asyncio.to_thread(store.release_live_slot, self.db, seat.session_id)
            except Exception:  # the seat's lease runs out instead
                log.warning("live seat %s not released; its lease will expire", seat.session_id, exc_info=True)

    def close_all(self, reason: str) -> int:
        """Ask every open session of this replica to end (a graceful stop); how many were asked."""
        seats = list(self.open.values())
        for seat in seats:
            seat.close(reason)
        return len(seats)

    def _ensure_renewer(self) -> None:
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(self._renew(), name="live-seats")

    async def _renew(self) -> None:
        lease = self.settings.live_lease_seconds
        while True:
            await asyncio.sleep(lease / 3)
            held = [seat.session_id for seat in self.open.values() if seat.held]
            if not held:
                return  # the next seat taken starts a renewer again
            try:
                await asyncio.to_thread(store.renew_live_slots, self.db, held, lease)
            except Exception:  # retried at the next period, within the lease
                log.warning("live seats not renewed", exc_info=True)


class TimedSpeechClient(SpeechClient):
    """The ingress's speech handle: each live step is timed against the live session that made it."""

    async def live_step(self, request: StreamRequest) -> StreamStep:
        seat = CURRENT_SEAT.get()
        started = time.monotonic()
        try:
            return await super().live_step(request)
        finally:
            if seat is not None:
                audio_end = request.offset + len(request.pcm) / (2 * request.sample_rate)
                seat.note_step(audio_end, time.monotonic() - started)
