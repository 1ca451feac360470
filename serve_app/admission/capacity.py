"""Admission by capacity: how much of each kind of model-bound work (``kinds.py``) one ingress replica lets in at
once, for requests sized by ``cost.py``: one :class:`Limiter` per kind (:class:`Capacity`), on the cost in flight,
with a fair share between customers. A request past its kind's limit answers 503 with ``Retry-After`` before its
body is read (``serve_app/middleware.py:AdmissionMiddleware``).

**The limit** is not configured but learned from the **queueing delay** the admitted requests measure, in the
spirit of CoDel and of adaptive concurrency limiters (Netflix's concurrency-limits, Envoy's adaptive concurrency
filter), so the same code fits 2 cores, 16 cores or a GPU node:

- a request's *delay* is its latency (from its admission to the start of its answer: the ingress's own queue
  included) less what it takes alone: its cost times the fewest seconds per unit measured on a request of its size
  (a power of two of the cost) that ran with nothing ahead of it;
- it may wait ``admission.max_wait_seconds``, or half as long as its own work takes if that is longer: a light
  request keeps near the target, a heavy one within about one and a half times its unloaded latency;
- once per interval (about one typical latency) the limit moves: down by a fifth to a half when more than a tenth
  of the interval's requests waited longer than allowed; up when none did and the limit turned work away (doubling
  until a queue first forms, within what the measured rate drains in the allowed wait, then one average request at
  a time); while nothing presses on it, it keeps room for a burst (:meth:`Limiter._idle_limit`);
- a request with nothing in flight ahead of it always runs, whatever it costs (and before the first answer, up to
  :data:`UNMEASURED_REQUESTS` do); it is also what measures the unloaded speed of its size.

A refusal is :class:`~contracts.errors.Overloaded` (503) with ``Retry-After`` = the measured drain time of the work
in flight (its cost over the cost completed per busy second).

**Fair share.** When the limit is reached, a customer with nothing in flight of the kind, or below an equal share of
the limit among the customers seen in the last :data:`RECENT_S`, is still admitted (up to twice the limit in all,
counting no customer past its share); and while another customer that asks for less than an equal share of what
the kind drains (a light customer) has work in flight or sent some in the last :data:`PRESENT_S`, the customers
asking for more may keep the kind busy (its measured capacity times a typical request's unloaded latency) but not
queue work for that one to wait behind; a light customer itself is held only to the limit. So one customer
flooding cannot lock the others out, and customers gone quiet hold nobody back. A customer's own cap
(``concurrent_share``: a percentage of the limit it may hold at once, whatever the load) answers 429.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from contracts.errors import Overloaded, RateLimited
from contracts.settings import AdmissionSettings
from serve_app.admission.kinds import KINDS

log = logging.getLogger(__name__)

OWN_WAIT = 0.5  # a request whose own work is long may wait this share of it (beyond the target)
UNMEASURED_REQUESTS = 8  # in flight at once before the first request of the kind has been measured
RECENT_S = 10.0  # a customer that sent work of the kind this recently counts for the fair share
PRESENT_S = 1.0  # a light customer with nothing in flight that sent work this recently is still waiting on its answers
DEMAND_S = 5.0  # a customer's demand is the cost it asked for over about this long
RECOUNT_S = 0.01  # the customers seen recently are counted again at most this often
MAX_CUSTOMERS = 1024  # customers remembered per kind before those not seen recently are forgotten
OVERBOOK = 2.0  # customers below their fair share may fill the kind up to this multiple of its limit
ALONE_SAMPLES = 32  # the unloaded speed of a size of request: the fastest of this many of that size that ran alone
RATE_WINDOW_S = 1.0  # the drain rate is measured over at least this much busy time (or two typical latencies)
OVER_FRACTION = 0.1  # more than this share of an interval's requests waited too long: the limit shrinks
DECREASE = 0.8  # ... by at least this factor (at most by half)
MIN_INTERVAL_S = 0.05
CAPACITY_MAX_AGE_S = 60.0  # a capacity measured longer ago than this no longer decides


@dataclass(eq=False)
class Ticket:
    """One admitted request: what it holds until :meth:`Limiter.leave`."""

    limiter: Limiter
    key: Hashable
    cost: float
    started: float  # when it was admitted
    alone: bool  # nothing else of the kind was in flight when it was admitted
    answered: float | None = None  # when its answer started


@dataclass
class Limiter:
    """The admission of one kind of work on one ingress replica (one event loop: no lock)."""

    kind: str
    max_wait_s: float
    ceiling: int = 0  # at most this many requests in flight whatever the limit (0: none)
    setting: str = ""  # the settings variable of the ceiling, for messages
    clock: Callable[[], float] = time.monotonic

    limit: float | None = None  # cost in flight admitted before the fair share decides; None until measured
    cost_in_flight: float = 0.0
    count: int = 0
    held: dict[Hashable, float] = field(default_factory=dict)  # cost in flight per customer
    # each customer's last arrival, and the cost it asked for lately (decaying over DEMAND_S: its demand times that)
    seen: dict[Hashable, tuple[float, float]] = field(default_factory=dict)
    alone: dict[int, deque[float]] = field(default_factory=dict)  # seconds per unit alone, by size (log2 of cost)
    drain_rate: float | None = None  # cost completed per busy second (EWMA)
    capacity_rate: float | None = None  # the same, over the windows in which the kind was saturated
    capacity_at: float = 0.0  # when the kind was last saturated (the capacity measured then)
    latency: float = 0.0  # typical latency (EWMA), seconds
    mean_cost: float = 0.0  # typical cost (EWMA)
    slow_start: bool = True
    # the current interval
    _interval_start: float = 0.0
    _samples: int = 0
    _over: int = 0
    _ratios: list[float] = field(default_factory=list)  # each sample's delay over the delay it was allowed
    _queued: list[float] = field(default_factory=list)  # each sample's delay over its own unloaded work
    _limited: bool = False  # the limit itself turned a request away
    # the current window of the drain rate
    _done_cost: float = 0.0
    _done: int = 0
    _done_queued: int = 0
    _busy_s: float = 0.0
    _busy_since: float | None = None
    _counted: tuple[int, frozenset[Hashable], float] = (1, frozenset(), 0.0)
    _counted_at: float = -1.0

    # ------------------------------------------------------------------------------------------------ admission

    def enter(self, key: Hashable, cost: float, share_percent: int = 0) -> Ticket:
        """Admit a request of ``cost`` for customer ``key``, or raise :class:`Overloaded` (503: the kind is at its
        limit and the customer has its share) or :class:`RateLimited` (429: past the customer's own
        ``share_percent`` of the limit)."""
        now = self.clock()
        cost = max(cost, 1e-9)
        held = self.held.get(key, 0.0)
        self._note(key, cost, now)
        if self.count == 0:
            return self._start(key, cost, now, alone=True)
        if self.ceiling and self.count >= self.ceiling:
            raise self._overloaded(f"{self.count} requests are in flight, its ceiling ({self.setting})")
        if self.limit is None:  # nothing measured yet: a few requests, whatever they cost, until one answers
            if self.count < UNMEASURED_REQUESTS:
                return self._start(key, cost, now, alone=False)
            raise self._overloaded("it is measuring its first requests")
        limit = self.limit
        if share_percent and held > 0 and held + cost > limit * share_percent / 100:
            retry = held / self.drain_rate if self.drain_rate else self.latency
            raise RateLimited(
                f"This customer already has {share_percent} % of this server's {self.kind} capacity in flight "
                f"(its concurrent share). Retry after {math.ceil(retry or 1)} s.",
                retry or 1,
                limit=share_percent,
                reason="concurrent_share",
            )
        recent, light, fair_in_flight = self._customers(now, limit)
        if key in light or not light - {key}:
            shared = limit
            fits = self.cost_in_flight + cost <= limit
        else:  # another customer asks for less than its share: keep the kind busy, with no queue for it to wait behind
            shared = min(limit, self._in_service())
            fits = self.cost_in_flight < shared
        if fits:
            return self._start(key, cost, now, alone=False)
        # below its fair share: past the limit if need be, up to twice it counting no customer past its share (one
        # customer's flood does not use up the room of the others)
        if (held == 0 or held + cost <= shared / recent) and fair_in_flight + cost <= OVERBOOK * max(limit, cost):
            return self._start(key, cost, now, alone=False)
        # the limit turned it away (or, shared, the part of it that keeps the kind busy, until that is measured)
        self._limited = self._limited or self.cost_in_flight + cost > limit or self._capacity() is None
        raise self._overloaded("a new request would wait longer than its target")

    def resize(self, ticket: Ticket, cost: float) -> None:
        """The admitted request's cost, now known better (a transcription's audio seconds from its file's header)."""
        cost = max(cost, 1e-9)
        change = cost - ticket.cost
        self.cost_in_flight = max(0.0, self.cost_in_flight + change)
        self.held[ticket.key] = max(0.0, self.held.get(ticket.key, 0.0) + change)
        self.mean_cost = max(0.0, self.mean_cost + 0.1 * change)
        ticket.cost = cost

    def answered(self, ticket: Ticket) -> None:
        """The answer starts: its work is done (a streamed body's transfer time is not work either)."""
        if ticket.answered is None:
            ticket.answered = self.clock()

    def leave(self, ticket: Ticket, measured: bool) -> None:
        """The request is over. ``measured``: it did its work (a 2xx answer), so its latency teaches the limit;
        a refusal, an invalid request or a failure only gives its cost back."""
        now = self.clock()
        self.count -= 1
        self._account_busy(now)  # busy until now; idle from now if nothing is left
        self.cost_in_flight = max(0.0, self.cost_in_flight - ticket.cost) if self.count else 0.0
        left = self.held.get(ticket.key, 0.0) - ticket.cost
        if left > 1e-9:
            self.held[ticket.key] = left
        else:
            self.held.pop(ticket.key, None)
        if measured:
            self._learn(ticket, (ticket.answered or now) - ticket.started, now)

    # ------------------------------------------------------------------------------------------------ figures

    def unloaded_unit_s(self, cost: float | None = None) -> float | None:
        """Seconds per unit of cost with nothing ahead, for a request of about ``cost`` (default: a typical one):
        the fastest of the recent requests of that size (or of the nearest size measured) that ran alone. By size,
        because a request's fixed work weighs less in a large one."""
        if not self.alone:
            return None
        size = _size(cost if cost is not None else self.mean_cost)
        nearest = min(self.alone, key=lambda s: (abs(s - size), s))
        return min(self.alone[nearest])

    def drain_s(self) -> float:
        """How long the work in flight takes to drain at the measured rate."""
        if self.drain_rate:
            return self.cost_in_flight / self.drain_rate
        return self.latency

    def snapshot(self) -> dict[str, float | int | None]:
        return {
            "limit": self.limit,
            "cost_in_flight": self.cost_in_flight,
            "in_flight": self.count,
            "drain_rate": self.drain_rate,
            "capacity_rate": self.capacity_rate,
            "unloaded_unit_s": self.unloaded_unit_s(),
            "latency_s": self.latency,
        }

    # ------------------------------------------------------------------------------------------------ inside

    def _start(self, key: Hashable, cost: float, now: float, alone: bool) -> Ticket:
        self.cost_in_flight += cost
        self.count += 1
        self._account_busy(now)  # busy from now (a gap with nothing in flight is not busy time)
        self.held[key] = self.held.get(key, 0.0) + cost
        self.mean_cost = cost if not self.mean_cost else 0.9 * self.mean_cost + 0.1 * cost
        return Ticket(self, key, cost, now, alone)

    def _note(self, key: Hashable, cost: float, now: float) -> None:
        if key not in self.seen and len(self.seen) >= MAX_CUSTOMERS:
            for old in [k for k, (t, _) in self.seen.items() if now - t > RECENT_S]:
                del self.seen[old]
            if len(self.seen) >= MAX_CUSTOMERS:
                return  # too many at once to tell apart: this one is not counted
        last, asked = self.seen.get(key, (now, 0.0))
        self.seen[key] = (now, asked * math.exp(-(now - last) / DEMAND_S) + cost)

    def _customers(self, now: float, limit: float) -> tuple[int, frozenset[Hashable], float]:
        """How many customers sent work of the kind in the last :data:`RECENT_S`; which of them ask for less than
        an equal share of what the kind drains (light customers, whom a flood must not keep waiting); and the cost
        in flight counting no customer past an equal share of ``limit``. Recounted at most every
        :data:`RECOUNT_S`."""
        if now - self._counted_at > RECOUNT_S or now < self._counted_at:
            recent = {key: asked for key, (seen, asked) in self.seen.items() if now - seen <= RECENT_S}
            count = max(1, len(recent))
            unit = self.unloaded_unit_s()  # before a rate is measured: what one request alone drains
            rate = self._capacity() or self.drain_rate or (1 / unit if unit else None)
            light = frozenset(
                key
                for key, asked in recent.items()
                if rate and asked / DEMAND_S < rate / count and (key in self.held or self._present(key, now))
            )
            fair = sum(min(held, limit / count) for held in self.held.values())
            self._counted = (count, light if count > 1 else frozenset(), fair)
            self._counted_at = now
        return self._counted

    def _present(self, key: Hashable, now: float) -> bool:
        return now - self.seen[key][0] <= PRESENT_S

    def _in_service(self) -> float:
        """The cost in flight that keeps the kind busy without a queue: the rate it drains at when saturated
        times one typical request's unloaded latency (Little's law); before those are measured, the share of the
        limit that such a request's own work is of its work plus its allowed wait."""
        unit = self.unloaded_unit_s()
        limit = self.limit or 0.0
        if not unit:
            return limit
        own = self.mean_cost * unit
        capacity = self._capacity()
        if capacity:
            return capacity * own
        return limit * own / (self._allowed_wait(own) + own)

    def _idle_limit(self) -> float:
        """What the limit is worth while nothing presses on it: what the kind drains within the allowed wait plus a
        typical request's work, at its measured capacity, else at the rate measured so far, else at the rate of one
        request alone (a floor: any server does at least that)."""
        unit = self.unloaded_unit_s()
        if not unit:
            return UNMEASURED_REQUESTS * self.mean_cost
        rate = self._capacity() or self.drain_rate or 1 / unit
        own = self.mean_cost * unit
        return rate * (self._allowed_wait(own) + own)

    def _allowed_wait(self, own: float) -> float:
        """How long a request whose own work takes ``own`` seconds may wait: the target, or half its own work."""
        return max(self.max_wait_s, OWN_WAIT * own)

    def _capacity(self) -> float | None:
        """The capacity measured when the kind was last saturated, while that is recent (:data:`CAPACITY_MAX_AGE_S`):
        an old one (the cores shared with a job that has ended since) no longer decides."""
        if self.capacity_rate is None or self.clock() - self.capacity_at > CAPACITY_MAX_AGE_S:
            return None
        return self.capacity_rate

    def _account_busy(self, now: float) -> None:
        if self._busy_since is not None:
            self._busy_s += now - self._busy_since
        self._busy_since = now if self.count else None

    def _learn(self, ticket: Ticket, latency: float, now: float) -> None:
        latency = max(latency, 0.0)
        if ticket.alone:
            size = _size(ticket.cost)
            if size not in self.alone:
                self.alone[size] = deque(maxlen=ALONE_SAMPLES)
            self.alone[size].append(latency / ticket.cost)
        unit = self.unloaded_unit_s(ticket.cost) or latency / ticket.cost
        own = ticket.cost * unit
        ratio = (latency - own) / self._allowed_wait(own)
        queued = (latency - own) / max(own, 1e-9)
        self._samples += 1
        self._over += ratio > 1
        self._ratios.append(ratio)
        self._queued.append(queued)
        self._done_cost += ticket.cost
        self._done += 1
        self._done_queued += queued >= 1
        self.latency = latency if not self.latency else 0.8 * self.latency + 0.2 * latency
        if self.limit is None:  # the first measurement: room for what is in flight, or two such requests
            self.limit = max(2 * ticket.cost, self.cost_in_flight)
            self._interval_start = now
        if now - self._interval_start >= max(MIN_INTERVAL_S, self.latency):
            self._adjust(now)

    def _adjust(self, now: float) -> None:
        assert self.limit is not None
        self._account_busy(now)
        typical = sorted(self._ratios)[len(self._ratios) // 2] if self._ratios else 0.0
        # the typical request waited as long as its own work takes: a queue formed, the kind is saturated
        saturated = bool(self._queued) and sorted(self._queued)[len(self._queued) // 2] >= 1
        self._measure_rate()
        self.slow_start = self.slow_start and not saturated  # from the first queue on, grow one request at a time
        floor = self.mean_cost
        if self._over > OVER_FRACTION * self._samples:
            # down in proportion to how far over the typical request was: by a fifth to a half
            self.limit = max(floor, self.limit * min(DECREASE, max(0.5, 1 / max(typical, 1e-9))))
            self.slow_start = False
        elif self._over == 0 and self._limited:
            self.limit = self.limit * 2 if self.slow_start else self.limit + self.mean_cost
        elif self._over == 0:  # no demand past the limit: keep room for a burst, as much as the kind can take
            self.limit = max(self.limit, self._idle_limit())
        unit = self.unloaded_unit_s()
        if self.slow_start and self.drain_rate and unit:
            # the latency signal comes one interval late: while doubling, stay within what the measured rate
            # drains in the allowed wait plus one typical request's work
            own = self.mean_cost * unit
            ceiling = self.drain_rate * (self._allowed_wait(own) + own)
            if self.limit > ceiling:
                self.limit = max(floor, ceiling)
                self.slow_start = False
        log.debug(
            "admission %s: %d samples, %d over (typical %.2f), limit %.0f, in flight %.0f (%d), %s",
            self.kind,
            self._samples,
            self._over,
            typical,
            self.limit,
            self.cost_in_flight,
            self.count,
            self.snapshot(),
        )
        self._interval_start = now
        self._samples = self._over = 0
        self._ratios = []
        self._queued = []
        self._limited = False

    def _measure_rate(self) -> None:
        """The drain rate over the window that just ended (once it holds enough busy time), and the capacity if
        most of its requests queued."""
        if self._busy_s < max(RATE_WINDOW_S, 2 * self.latency) or not self._done:
            return
        rate = self._done_cost / self._busy_s
        self.drain_rate = rate if self.drain_rate is None else (self.drain_rate + rate) / 2
        if 2 * self._done_queued > self._done:  # what drained is what the kind can do
            known = self._capacity()
            self.capacity_rate = rate if known is None else (known + rate) / 2
            self.capacity_at = self.clock()
        self._done_cost = self._busy_s = 0.0
        self._done = self._done_queued = 0

    def _overloaded(self, why: str) -> Overloaded:
        retry = self.drain_s() or 1.0
        return Overloaded(
            f"The service is at capacity for {self.kind} on this server: {why} ({self.count} requests in flight). "
            f"Retry after {math.ceil(retry)} s.",
            retry,
        )


def _size(cost: float) -> int:
    return int(math.log2(max(cost, 1.0)))


class Capacity:
    """The limiters of one ingress replica, one per kind of model-bound work (:data:`KINDS`)."""

    def __init__(self, settings: AdmissionSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.limiters = {
            kind.name: Limiter(
                kind.name,
                settings.max_wait_seconds,
                int(getattr(settings, kind.setting)),
                f"KHULUMA_ADMISSION_{kind.setting.upper()}",
                clock,
            )
            for kind in KINDS
        }

    def __getitem__(self, kind: str) -> Limiter:
        return self.limiters[kind]
