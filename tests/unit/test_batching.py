"""The in-process micro-batcher behind @batched (Serve's @serve.batch is used inside replicas)."""

from __future__ import annotations

import asyncio
import functools
import operator

import pytest

from deployments.batching import batched


class Doubler:
    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.running = 0
        self.max_running = 0

    @batched(max_batch_size=8, batch_wait_timeout_s=0.01)
    async def double(self, items: list[int]) -> list[int]:
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        self.batches.append(list(items))
        await asyncio.sleep(0.02)
        self.running -= 1
        if any(i < 0 for i in items):
            raise ValueError("negative")
        return [i * 2 for i in items]


def test_concurrent_calls_are_grouped_in_order_one_batch_at_a_time():
    d = Doubler()

    async def run():
        return await asyncio.gather(*(d.double(i) for i in range(20)))

    assert asyncio.run(run()) == [i * 2 for i in range(20)]
    assert [len(b) for b in d.batches] == [8, 8, 4]
    assert functools.reduce(operator.iadd, d.batches, []) == list(range(20))
    assert d.max_running == 1


def test_an_error_reaches_only_the_caller_whose_item_raised():
    d = Doubler()

    async def run():
        first = await asyncio.gather(d.double(1), d.double(-1), d.double(2), return_exceptions=True)
        second = await d.double(3)
        return first, second

    first, second = asyncio.run(run())
    assert first[0] == 2 and first[2] == 4  # batched with the bad item, answered all the same
    assert isinstance(first[1], ValueError)
    assert second == 6
    with pytest.raises(ValueError):
        asyncio.run(d.double(-5))
