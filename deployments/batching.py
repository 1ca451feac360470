"""``@batched``: Ray Serve's ``@serve.batch`` inside a replica, the same micro-batching in-process elsewhere.

Deployment classes also run without Serve (unit tests, the plain-uvicorn benchmark); ``serve.batch`` refuses to
run outside a replica, so outside one an equivalent asyncio batcher groups concurrent calls.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from ray import serve


def _in_replica() -> bool:
    try:
        serve.get_replica_context()
        return True
    except Exception:  # noqa: BLE001 - RayServeException outside a replica
        return False


class _LocalBatcher:
    """One batch at a time (like ``serve.batch``): requests arriving while a batch runs form the next one."""

    def __init__(self, fn: Callable[[Any, list[Any]], Awaitable[list[Any]]], max_size: int, wait_s: float):
        self.fn, self.max_size, self.wait_s = fn, max_size, wait_s
        self.pending: list[tuple[Any, asyncio.Future]] = []
        self.drainer: asyncio.Task | None = None

    async def submit(self, owner: Any, item: Any) -> Any:
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self.pending.append((item, fut))
        if self.drainer is None or self.drainer.done():
            self.drainer = asyncio.ensure_future(self._drain(owner))
        return await fut

    async def _drain(self, owner: Any) -> None:
        while self.pending:
            if len(self.pending) < self.max_size:
                await asyncio.sleep(self.wait_s)  # let a batch gather
            batch, self.pending = self.pending[: self.max_size], self.pending[self.max_size:]
            await self._run(owner, batch)

    async def _run(self, owner: Any, batch: list[tuple[Any, asyncio.Future]]) -> None:
        try:
            results = await self.fn(owner, [item for item, _ in batch])
            for (_, fut), res in zip(batch, results):
                if not fut.done():
                    fut.set_result(res)
        except Exception as exc:  # noqa: BLE001 - every waiter gets the error
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)


def batched(max_batch_size: int = 32, batch_wait_timeout_s: float = 0.005):
    """Decorate ``async def f(self, items: list) -> list``; callers call ``await self.f(item)``."""

    def deco(fn: Callable[[Any, list[Any]], Awaitable[list[Any]]]):
        served = serve.batch(max_batch_size=max_batch_size, batch_wait_timeout_s=batch_wait_timeout_s)(fn)
        attr = f"_local_batcher_{fn.__name__}"

        @functools.wraps(fn)
        async def wrapper(self: Any, item: Any) -> Any:
            if _in_replica():
                return await served(self, item)
            batcher = self.__dict__.get(attr)
            if batcher is None:
                batcher = self.__dict__[attr] = _LocalBatcher(fn, max_batch_size, batch_wait_timeout_s)
            return await batcher.submit(self, item)

        return wrapper

    return deco
