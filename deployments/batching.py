"""``@batched``: Ray Serve's ``@serve.batch`` inside a replica, the same micro-batching elsewhere.

Under Serve's local testing mode (the fast tests, the plain-uvicorn benchmarks: ``deployments.app.build_local``)
``@serve.batch`` raises in Ray 2.60 (it calls ``serve.get_replica_context()``), and a bare instance of a deployment
class has no replica either; there an equivalent asyncio batcher groups concurrent calls.

One item never fails the others. Inputs are validated before they are batched (the edge refuses invalid Unicode,
the services check sizes), but if the batch function still raises, each item of that batch is run again alone and
every caller gets its own result or its own exception (:func:`_isolating`, under both batchers). Only a batch that
fails pays for the retries.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from ray import serve

S = TypeVar("S")  # the deployment instance
T = TypeVar("T")  # one request's item
R = TypeVar("R")  # one request's result
BatchFn = Callable[[S, list[T]], Awaitable[list[R]]]


def _in_replica() -> bool:
    try:
        serve.get_replica_context()
        return True
    except Exception:  # noqa: BLE001 - RayServeException outside a replica
        return False


class _LocalBatcher(Generic[S, T, R]):
    """One batch at a time (like ``serve.batch``): requests arriving while a batch runs form the next one."""

    def __init__(self, fn: BatchFn[S, T, R], max_size: int, wait_s: float) -> None:
        self.fn, self.max_size, self.wait_s = fn, max_size, wait_s
        self.pending: list[tuple[T, asyncio.Future[R]]] = []
        self.drainer: asyncio.Task[None] | None = None

    async def submit(self, owner: S, item: T) -> R:
        fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self.pending.append((item, fut))
        if self.drainer is None or self.drainer.done():
            self.drainer = asyncio.ensure_future(self._drain(owner))
        return await fut

    async def _drain(self, owner: S) -> None:
        while self.pending:
            if len(self.pending) < self.max_size:
                await asyncio.sleep(self.wait_s)  # let a batch gather
            batch, self.pending = self.pending[: self.max_size], self.pending[self.max_size :]
            await self._run(owner, batch)

    async def _run(self, owner: S, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self.fn(owner, [item for item, _ in batch])
            for (_, fut), res in zip(batch, results):
                if not fut.done():
                    fut.set_result(res)
        except Exception as exc:  # noqa: BLE001 - every waiter gets the error
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)


_UNSET: Any = object()


class _Failed:
    """One item's exception, carried in the batch's result list (``serve.batch`` hands results out one per caller)."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


def _isolating(fn: BatchFn[S, T, R]) -> Callable[[S, list[T]], Awaitable[list[R | _Failed]]]:
    """``fn`` over the batch; if it raises (or answers the wrong number of results), ``fn`` over each item alone,
    so one bad item fails only its own caller."""

    async def run(owner: S, items: list[T]) -> list[R | _Failed]:
        try:
            results = await fn(owner, items)
            if len(results) != len(items):
                raise RuntimeError(f"{fn.__name__} answered {len(results)} results for {len(items)} items")
            return list(results)
        except Exception as exc:  # noqa: BLE001 - isolated below, per item
            if len(items) == 1:
                return [_Failed(exc)]
        out: list[R | _Failed] = []
        for item in items:
            try:
                single = await fn(owner, [item])
                out.append(single[0] if len(single) == 1 else _Failed(RuntimeError(f"{fn.__name__} failed")))
            except Exception as exc:  # noqa: BLE001 - this caller's own error
                out.append(_Failed(exc))
        return out

    run.__name__ = run.__qualname__ = fn.__name__
    return run


def _unwrap(result: R | _Failed) -> R:
    if isinstance(result, _Failed):
        raise result.error
    return result


def batched(
    max_batch_size: int = 32, batch_wait_timeout_s: float = 0.005
) -> Callable[[BatchFn[S, T, R]], Callable[[S, T], Awaitable[R]]]:
    """Decorate ``async def f(self, items: list[T]) -> list[R]``; callers call ``await self.f(item)`` and get
    their own item's result (or their own item's exception: one item never fails the others)."""

    def deco(fn: BatchFn[S, T, R]) -> Callable[[S, T], Awaitable[R]]:
        isolated = _isolating(fn)
        # serve.batch's annotations describe plain functions only; on a method it works the same at run time
        serve_batch: Any = serve.batch(max_batch_size=max_batch_size, batch_wait_timeout_s=batch_wait_timeout_s)
        served = serve_batch(isolated)
        attr = f"_local_batcher_{fn.__name__}"

        @functools.wraps(fn)
        async def wrapper(self: S, item: T) -> R:
            # decided once per instance: inside a replica Serve batches, elsewhere the local batcher does
            batcher: _LocalBatcher[S, T, R | _Failed] | None = self.__dict__.get(attr, _UNSET)
            if batcher is _UNSET:
                batcher = self.__dict__[attr] = (
                    None if _in_replica() else _LocalBatcher(isolated, max_batch_size, batch_wait_timeout_s)
                )
            if batcher is None:
                result: R | _Failed = await served(self, item)
                return _unwrap(result)
            return _unwrap(await batcher.submit(self, item))

        # serve.batch finds ``self`` by checking that the instance's attribute wraps the function it batches
        wrapper.__wrapped__ = isolated  # type: ignore[assignment]
        return wrapper

    return deco
