"""``@batched``: Ray Serve's ``@serve.batch`` inside a replica, the same micro-batching elsewhere.

The deployments batch the single calls they take with it: language ID (TextAnalysis), the embedder's short lists
(``deployments/embeddings.py``). Under Serve's local testing mode (the fast tests, the plain-uvicorn benchmarks:
``khuluma.app.build_local``) ``@serve.batch`` raises in Ray 2.60 (it calls ``serve.get_replica_context()``), and a
bare instance of a deployment class has no replica either; there ``contracts.batching.MicroBatcher``, the one
adapter, groups concurrent calls the same way. NER, sentiment and classify requests are not batched here: the
ingress's typed handle batches them, once (``contracts/text.TextClient``).

One item never fails the others. Inputs are validated before they are batched (the edge refuses invalid Unicode,
the services check sizes), but if the batch function still raises, each item of that batch is run again alone and
every caller gets its own result or its own exception (``contracts.batching.run_isolated``, under both batchers).
Only a batch that fails pays for the retries.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ray import serve

from contracts.batching import ItemFailed, MicroBatcher, run_isolated, unwrap

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


def isolating(fn: BatchFn[S, T, R]) -> Callable[[S, list[T]], Awaitable[list[R | ItemFailed]]]:
    """``fn`` as a method whose batch fails item by item (``contracts.batching.run_isolated``)."""

    async def run(owner: S, items: list[T]) -> list[R | ItemFailed]:
        return await run_isolated(functools.partial(fn, owner), items)

    run.__name__ = run.__qualname__ = fn.__name__
    return run


_UNSET: Any = object()


def batched(
    max_batch_size: int = 32, batch_wait_timeout_s: float = 0.005
) -> Callable[[BatchFn[S, T, R]], Callable[[S, T], Awaitable[R]]]:
    """Decorate ``async def f(self, items: list[T]) -> list[R]``; callers call ``await self.f(item)`` and get
    their own item's result (or their own item's exception: one item never fails the others)."""

    def deco(fn: BatchFn[S, T, R]) -> Callable[[S, T], Awaitable[R]]:
        isolated = isolating(fn)
        # serve.batch's annotations describe plain functions only; on a method it works the same at run time
        serve_batch: Any = serve.batch(max_batch_size=max_batch_size, batch_wait_timeout_s=batch_wait_timeout_s)
        served = serve_batch(isolated)
        attr = f"_local_batcher_{fn.__name__}"

        @functools.wraps(fn)
        async def wrapper(self: S, item: T) -> R:
            # decided once per instance: inside a replica Serve batches, elsewhere the local batcher does
            batcher: MicroBatcher[T, R] | None = self.__dict__.get(attr, _UNSET)
            if batcher is _UNSET:
                batcher = self.__dict__[attr] = (
                    None
                    if _in_replica()
                    # one batch at a time, gathering for the same wait, like serve.batch
                    else MicroBatcher(functools.partial(isolated, self), max_batch_size, batch_wait_timeout_s)
                )
            if batcher is None:
                result: R | ItemFailed = await served(self, item)
                return unwrap(result)
            return await batcher.submit(item)

        # serve.batch finds ``self`` by checking that the instance's attribute wraps the function it batches
        wrapper.__wrapped__ = isolated  # type: ignore[assignment]
        return wrapper

    return deco
