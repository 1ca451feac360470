"""Every limit that admission learns from measurements recovers once the load that taught it is gone, and admits
one request or session when nothing is in flight (``serve_app/admission/capacity.py``: the limit of each kind of
model-bound work; ``serve_app/admission/live.py``: the load of live sessions, shared by ``/ws/stream-transcribe``,
``/v1/realtime`` and the OpenAI SSE stream's steps)."""

from __future__ import annotations

import asyncio
import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from contracts.errors import Overloaded, RateLimited
from contracts.settings import AdmissionSettings
from serve_app.admission.capacity import Limiter
from serve_app.admission.live import LOAD_MAX_AGE_S, REALTIME_HEADROOM, UNMEASURED_SESSIONS, LiveSessions
from serve_app.tokens import Principal


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Phase:
    """``seconds`` of Poisson arrivals at ``rate`` per second on ``workers`` that take ``service_s`` each."""

    seconds: float
    rate: float
    service_s: float
    workers: int = 2


@dataclass
class Tally:
    admitted: int = 0
    refused: int = 0
    latencies: list[float] = field(default_factory=list)

    def p99(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[math.ceil(0.99 * len(ordered)) - 1]


def run_phases(limiter: Limiter, clock: Clock, phases: list[Phase], cost: float = 300.0) -> list[Tally]:
    """A FIFO server behind ``limiter`` whose speed and load change from phase to phase (a co-tenant taking the
    cores, then leaving); what each phase's arrivals got."""
    limiter.clock = clock
    rnd = random.Random(11)
    events: list[tuple[float, int, str, Any]] = []
    order = iter(range(10**9))
    t = 0.0
    for index, phase in enumerate(phases):
        end = t + phase.seconds
        while t < end:
            heapq.heappush(events, (t, next(order), "arrive", index))
            t += rnd.expovariate(phase.rate)
        t = end
    tallies = [Tally() for _ in phases]
    queue: list[tuple[Any, float, int]] = []
    busy = 0
    while events:
        clock.now, _, what, data = heapq.heappop(events)
        if what == "arrive":
            try:
                ticket = limiter.enter(0, cost)
            except (Overloaded, RateLimited):
                tallies[data].refused += 1
                continue
            tallies[data].admitted += 1
            queue.append((ticket, clock.now, data))
        else:
            ticket, arrived, index = data
            busy -= 1
            limiter.leave(ticket, measured=True)
            tallies[index].latencies.append(clock.now - arrived)
        now_phase = phases[min(len(phases) - 1, _phase_at(phases, clock.now))]
        while busy < now_phase.workers and queue:
            ticket, arrived, index = queue.pop(0)
            busy += 1
            heapq.heappush(events, (clock.now + now_phase.service_s, next(order), "done", (ticket, arrived, index)))
    return tallies


def _phase_at(phases: list[Phase], now: float) -> int:
    elapsed = 0.0
    for index, phase in enumerate(phases):
        elapsed += phase.seconds
        if now < elapsed:
            return index
    return len(phases)


# ------------------------------------------------------------------------------------------------ capacity


def test_the_limit_learned_on_a_slow_server_recovers_when_the_server_is_fast_again() -> None:
    """30 s of a server five times slower than usual (a co-tenant on its cores) at four times what it then drains:
    the limit shrinks. Then the co-tenant leaves and the load falls to half of the server's usual capacity: within a
    few seconds every request is admitted again, at its unloaded latency."""
    clock = Clock()
    limiter = Limiter("text", 1.0, clock=clock)
    fast = 0.05
    slow = Phase(30, 4 * 2 / (5 * fast), 5 * fast)
    tallies = run_phases(limiter, clock, [slow, Phase(5, 0.5 * 2 / fast, fast), Phase(30, 0.5 * 2 / fast, fast)])
    overloaded, _, recovered = tallies
    assert overloaded.refused > overloaded.admitted  # the slow phase taught a small limit
    assert recovered.refused <= 0.01 * (recovered.admitted + recovered.refused), recovered
    assert recovered.p99() <= fast + limiter.max_wait_s


def test_the_limit_recovers_after_a_flood_and_admits_a_request_alone_whatever_it_knows() -> None:
    clock = Clock()
    limiter = Limiter("text", 1.0, clock=clock)
    run_phases(limiter, clock, [Phase(30, 10 * 2 / 0.05, 0.05)])  # ten times capacity
    clock.now += 60  # the flood is gone; nothing in flight
    assert limiter.count == 0
    alone = limiter.enter(1, 10_000_000.0)  # nothing in flight: admitted whatever it costs
    limiter.leave(alone, measured=False)
    quiet = run_phases(limiter, clock_from(clock), [Phase(20, 0.5 * 2 / 0.05, 0.05)])[0]
    assert quiet.refused == 0, quiet


def clock_from(clock: Clock) -> Clock:
    """A clock that goes on from another's time."""
    later = Clock()
    later.now = clock.now
    return later


# ------------------------------------------------------------------------------------------------ live sessions


PRINCIPAL = Principal(1, 1, 1, "")


def _slow(seat: Any, factor: float, seconds: float = 10.0) -> None:
    """Steps over ``seconds`` of the seat's audio that took ``factor`` times as long as that audio."""
    for second in range(1, int(seconds) + 1):
        seat.note_step(float(second), factor)


def test_sessions_that_fell_behind_and_closed_lock_nobody_out() -> None:
    """The lock-out that was reported: sessions whose steps cost more than real time (a language without a model,
    judged on 2 cores) end; with none open, the next session is admitted at once, and so is one beside it."""
    clock = Clock()
    live = LiveSessions(None, AdmissionSettings(), clock=clock)  # type: ignore[arg-type]

    async def scenario() -> None:
        first = await live.take(PRINCIPAL, 0)
        _slow(first, 1.6)
        second = await live.take(PRINCIPAL, 0)  # the load says no: admitted as the probe
        assert second.probe
        _slow(second, 1.6)
        assert not live.room()
        clock.now += 15
        await live.release(first)
        await live.release(second)
        clock.now += 1
        assert not live.open
        again = await live.take(PRINCIPAL, 0)  # nothing open: admitted, whatever was measured before
        assert not again.probe
        beside = await live.take(PRINCIPAL, 0)  # the closed sessions' load forecasts nothing for it
        assert beside is not None

    asyncio.run(scenario())


def test_a_load_measured_on_closed_sessions_stops_deciding_with_age() -> None:
    clock = Clock()
    live = LiveSessions(None, AdmissionSettings(), clock=clock)  # type: ignore[arg-type]

    async def scenario() -> None:
        measured = await live.take(PRINCIPAL, 0)
        _slow(measured, 1.2)
        assert live.load() == pytest.approx(1.2, rel=0.01)
        await live.release(measured)
        unmeasured = await live.take(PRINCIPAL, 0)  # alone: admitted
        assert live.load() == pytest.approx(1.2, rel=0.01)  # recent: it still decides while nothing else is measured
        probe = await live.take(PRINCIPAL, 0)
        assert probe.probe
        with pytest.raises(Overloaded):  # one probe at a time
            await live.take(PRINCIPAL, 0)
        clock.now += LOAD_MAX_AGE_S + 1
        assert live.load() is None  # old: no longer decides
        others = [await live.take(PRINCIPAL, 0) for _ in range(UNMEASURED_SESSIONS - 2)]
        assert len(live.open) == UNMEASURED_SESSIONS and not any(seat.probe for seat in others)
        with pytest.raises(Overloaded) as refused:  # nothing measured: a few at once, no more
            await live.take(PRINCIPAL, 0)
        assert "measuring" in refused.value.detail
        del unmeasured

    asyncio.run(scenario())


def test_the_load_comes_from_the_sessions_open_now() -> None:
    """Sessions that kept real time easily, then one that fell behind and closed: only what is open decides."""
    clock = Clock()
    live = LiveSessions(None, AdmissionSettings(), clock=clock)  # type: ignore[arg-type]

    async def scenario() -> None:
        light = [await live.take(PRINCIPAL, 0) for _ in range(3)]
        for seat in light:
            _slow(seat, 0.15 * 3)  # three sharing: each step waits on the others
        assert live.load() == pytest.approx(0.15, rel=0.01)
        assert live.room()  # 0.15 per session: a fourth fits
        heavy = await live.take(PRINCIPAL, 0)
        _slow(heavy, 3.0)
        assert not live.room()
        await live.release(heavy)
        assert live.room() and live.load() == pytest.approx(0.15, rel=0.01)

    asyncio.run(scenario())


def test_retry_after_is_when_an_open_session_is_expected_to_end() -> None:
    clock = Clock()
    live = LiveSessions(None, AdmissionSettings(live_sessions_per_replica=2), clock=clock)  # type: ignore[arg-type]

    async def scenario() -> tuple[float, float]:
        for length in (40.0, 40.0):  # two sessions of 40 s ended here
            seat = await live.take(PRINCIPAL, 0)
            clock.now += length
            await live.release(seat)
        assert live.typical_length_s == pytest.approx(40.0)
        await live.take(PRINCIPAL, 0)
        clock.now += 10
        await live.take(PRINCIPAL, 0)
        clock.now += 5
        with pytest.raises(Overloaded) as full:  # the per-replica ceiling
            await live.take(PRINCIPAL, 0)
        first_retry = full.value.retry_after
        clock.now += 20
        with pytest.raises(Overloaded) as later:
            await live.take(PRINCIPAL, 0)
        return first_retry, later.value.retry_after

    first_retry, later_retry = asyncio.run(scenario())
    assert first_retry == pytest.approx(40 - 15)  # the older session, 15 s into a typical 40 s
    assert later_retry == pytest.approx(5.0)


def test_a_session_is_refused_only_while_the_open_ones_would_fall_behind() -> None:
    clock = Clock()
    live = LiveSessions(None, AdmissionSettings(), clock=clock)  # type: ignore[arg-type]

    async def scenario() -> None:
        seats = [await live.take(PRINCIPAL, 0)]
        _slow(seats[0], 0.25)
        while live.room():
            seats.append(await live.take(PRINCIPAL, 0))
            for seat in seats:
                _slow(seat, 0.25 * len(seats))
        assert live.load() * (len(live.open) + 1) > REALTIME_HEADROOM
        probe = await live.take(PRINCIPAL, 0)  # one probe beyond the load
        assert probe.probe
        with pytest.raises(Overloaded):
            await live.take(PRINCIPAL, 0)
        await live.release(probe)
        assert (await live.take(PRINCIPAL, 0)).probe  # the probe's place is free again

    asyncio.run(scenario())


def test_two_at_a_time_a_measured_probe_leaves_room_for_the_next_while_it_keeps_real_time() -> None:
    """A call centre's pattern: each new session arrives while another is open. The probe that came in beside a
    slow session becomes an ordinary one once measured, so the next arrival is admitted as a probe in turn, while
    the open ones keep real time; beside a measured probe that has fallen behind, nothing more comes in."""
    clock = Clock()
    live = LiveSessions(None, AdmissionSettings(), clock=clock)  # type: ignore[arg-type]

    async def scenario() -> None:
        first = await live.take(PRINCIPAL, 0)
        _slow(first, 0.9)  # keeps real time, but alone it already says a second would not
        second = await live.take(PRINCIPAL, 0)
        assert second.probe
        await live.release(first)
        _slow(second, 0.9)  # measured: keeps real time
        third = await live.take(PRINCIPAL, 0)  # arrives while the (measured) probe is open
        assert third.probe
        await live.release(second)
        _slow(third, 1.5)  # this one falls behind
        with pytest.raises(Overloaded):
            await live.take(PRINCIPAL, 0)

    asyncio.run(scenario())
