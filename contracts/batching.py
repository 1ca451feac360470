"""Micro-batching, the one adapter beside Ray Serve's ``@serve.batch`` (pure asyncio).

Every request is batched at one point, and Serve's ``@serve.batch`` is used wherever it can be; this module is the
one adapter where it cannot (docs/architecture.md, "Batching: one point per request"):

- :class:`MicroBatcher` groups concurrent calls into one call over a list. The ingress's typed handle of TextAnalysis
  (``contracts/text.TextClient``) batches NER, sentiment and classify requests with it, the only point where they
  are batched: it sends TextAnalysis one call per group, because Serve's per-request work in the replica cost as
  much CPU as spaCy on NER, and it needs what ``@serve.batch`` lacks (it waits for a group to catch up, sheds load
  at a bound, and runs outside a replica too). ``deployments/serve_batch.py``'s ``@batched`` uses it where
  ``@serve.batch`` cannot run (Serve's local testing mode, a bare instance).
- :func:`run_isolated` keeps one bad item from failing the others: if a batch raises, each item is run alone and
  every caller gets its own result or its own error (:class:`ItemFailed`, which also travels back through Ray
  inside a batch's result list).
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from contracts.errors import Overloaded

T = TypeVar("T")  # one caller's item
R = TypeVar("R")  # one caller's result
BatchRun = Callable[[list[T]], Awaitable[list[R]]]


class ItemFailed:
    """One item's exception, carried in a batch's result list."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __reduce__(self) -> tuple[type[ItemFailed], tuple[Exception]]:
        # picklable despite __slots__; an error that would not survive the trip (an exception class with a
        # constructor of its own) travels as its text, so it cannot fail the serialisation of a whole batch
        try:
            pickle.loads(pickle.dumps(self.error))
            return ItemFailed, (self.error,)
        except Exception:  # noqa: BLE001 - any error pickle raises for this object
            return ItemFailed, (RuntimeError(f"{type(self.error).__name__}: {self.error}"),)


def unwrap(result: R | ItemFailed) -> R:
    """The item's result, or its own exception raised."""
    if isinstance(result, ItemFailed):
        raise result.error
    return result


async def run_isolated(run: BatchRun[T, R], items: list[T]) -> list[R | ItemFailed]:
    """``run`` over the batch; if it raises (or answers the wrong number of results), ``run`` over each item
    alone, so one bad item fails only its own caller. Only a batch that fails pays for the retries."""
    name = getattr(run, "__name__", "batch")
    try:
        results = await run(items)
        if len(results) != len(items):
            raise RuntimeError(f"{name} answered {len(results)} results for {len(items)} items")
        return list(results)
    except Exception as exc:  # noqa: BLE001 - isolated below, per item
        if len(items) == 1:
            return [ItemFailed(exc)]
    out: list[R | ItemFailed] = []
    for item in items:
        try:
            single = await run([item])
            out.append(single[0] if len(single) == 1 else ItemFailed(RuntimeError(f"{name} failed")))
        except Exception as exc:  # noqa: BLE001 - this caller's own error
            out.append(ItemFailed(exc))
    return out


class MicroBatcher(Generic[T, R]):
    """Concurrent :meth:`submit` calls become calls of ``run`` over lists of at most ``max_size`` items.

    At most ``max_in_flight`` lists run at once; items submitted while they all run wait and form the next list,
    so the list size follows the load: one item at a time when idle, full lists under load. ``max_pending`` > 0
    bounds the items that wait: one more is refused at once with :class:`~contracts.errors.Overloaded` (load
    shedding, a 503 with ``Retry-After``), so a queue in front of a busy model never grows without bound.

    - ``wait_s`` > 0: a list that is not full always waits that long to gather first (as ``@serve.batch`` does).
    - ``catch_up_s`` > 0: a list waits, at most that long, only until it has as many items as the previous list.
      Callers whose answers just came back (closed-loop clients, a burst) send their next requests a moment
      apart; without it the first of them would go alone and the lists would fragment into costly small ones. A
      lone sequential caller waits at most once, right after a list of several items.
    ``run`` answers one result per item, in order; an :class:`ItemFailed` result raises for its caller alone, and
    an exception of ``run`` raises for every caller of that list. A caller that stops waiting (cancelled) is
    dropped from a list not yet sent, and a running list whose callers have all gone is cancelled, so a call
    that hangs holds its slot no longer than its callers wait (the HTTP timeout, a service's own timeout).
    """

    def __init__(
        self,
        run: BatchRun[T, R | ItemFailed],
        max_size: int,
        wait_s: float = 0.0,
        max_in_flight: int = 1,
        catch_up_s: float = 0.0,
        max_pending: int = 0,
        name: str = "",
    ) -> None:
        if max_size < 1 or max_in_flight < 1:
            raise ValueError("max_size and max_in_flight must be at least 1")
        self.run, self.max_size, self.wait_s, self.catch_up_s = run, max_size, wait_s, catch_up_s
        self.max_in_flight = max_in_flight
        self.max_pending, self.name = max_pending, name or getattr(run, "__name__", "batch")
        self.last_size = 1
        self.arrived: asyncio.Future[None] | None = None  # made when the drainer waits for items to catch up
        self.pending: list[tuple[T, asyncio.Future[R | ItemFailed]]] = []
        self.in_flight: set[asyncio.Task[None]] = set()
        self.drainer: asyncio.Task[None] | None = None
        self.slot_freed: asyncio.Future[None] | None = None  # made on the running loop when the drainer waits

    async def submit(self, item: T) -> R:
        (fut,) = self._enqueue([item])
        return unwrap(await fut)

    def _enqueue(self, items: list[T]) -> list[asyncio.Future[R | ItemFailed]]:
        if self.max_pending and len(self.pending) + len(items) > self.max_pending:
            # load shedding: the lists in flight are busy and this many items already wait for the next ones
            raise Overloaded(
                f"The service is at capacity: {len(self.pending)} {self.name} requests are already waiting. Retry "
                "after the Retry-After seconds.",
                retry_after=1,
            )
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[R | ItemFailed]] = [loop.create_future() for _ in items]
        self.pending.extend(zip(items, futures))
        if self.arrived is not None and not self.arrived.done():
            self.arrived.set_result(None)
        if self.drainer is None or self.drainer.done():
            self.drainer = asyncio.ensure_future(self._drain())
        return futures

    async def _drain(self) -> None:
        while self.pending:
            while len(self.in_flight) >= self.max_in_flight:
                self.slot_freed = asyncio.get_running_loop().create_future()
                await self.slot_freed
            if self.wait_s and len(self.pending) < self.max_size:
                await asyncio.sleep(self.wait_s)  # let a list gather
            elif self.catch_up_s:
                await self._catch_up(min(self.last_size, self.max_size))
            live = [(item, fut) for item, fut in self.pending if not fut.done()]
            batch, self.pending = live[: self.max_size], live[self.max_size :]
            if batch:
                self.last_size = len(batch)
                task = asyncio.ensure_future(self._run(batch))
                self.in_flight.add(task)
                task.add_done_callback(self._finished)

    async def _catch_up(self, target: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.catch_up_s
        while len(self.pending) < target and (left := deadline - loop.time()) > 0:
            self.arrived = loop.create_future()
            await asyncio.wait({self.arrived}, timeout=left)
        self.arrived = None  # none left behind for a later submit (or another loop) to resolve

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.in_flight.discard(task)
        if self.slot_freed is not None and not self.slot_freed.done():
            self.slot_freed.set_result(None)

    async def _run(self, batch: list[tuple[T, asyncio.Future[R | ItemFailed]]]) -> None:
        futures = [fut for _, fut in batch]
        this = asyncio.current_task()

        def abandon_if_nobody_waits(_: asyncio.Future[R | ItemFailed]) -> None:
            if this is not None and not this.done() and all(f.cancelled() for f in futures):
                this.cancel()

        for fut in futures:
            fut.add_done_callback(abandon_if_nobody_waits)
        try:
            results = await self.run([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"a batch of {len(batch)} items answered {len(results)} results")
        except BaseException as exc:  # every waiter of this list gets the error
            error: BaseException = exc
            if isinstance(exc, asyncio.CancelledError) and not (this is not None and this.cancelling()):
                # cancelled from elsewhere (the replica's side), not by its callers: they get an error that the
                # edge renders, not a cancellation that would bypass its error handling
                error = _cancelled()
            for fut in futures:
                if not fut.done():
                    if isinstance(error, asyncio.CancelledError):
                        fut.cancel()
                    else:
                        fut.set_exception(error)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, fut), res in zip(batch, results):
            if not fut.done():
                fut.set_result(res)


def _cancelled() -> RuntimeError:
    """What a caller gets for a list cancelled by anything but its callers: an error the edge renders."""
    return RuntimeError("the batch call was cancelled")
