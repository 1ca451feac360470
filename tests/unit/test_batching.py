"""The in-process micro-batcher behind @batched (Serve's @serve.batch is used inside replicas)."""

from __future__ import annotations

import asyncio
import functools
import operator

import pytest

from deployments.serve_batch import batched


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


# --- the shared MicroBatcher (contracts/batching.py): what the ingress's typed handles group requests with --------


class Recorder:
    """A batch function that records each list it is given and how many lists run at once."""

    def __init__(self, delay: float = 0.02) -> None:
        self.lists: list[list[int]] = []
        self.running = 0
        self.max_running = 0
        self.delay = delay

    async def __call__(self, items: list[int]) -> list[object]:
        from contracts.batching import ItemFailed

        self.lists.append(list(items))
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        await asyncio.sleep(self.delay)
        self.running -= 1
        return [ItemFailed(ValueError(f"bad {i}")) if i < 0 else i * 10 for i in items]


def test_micro_batcher_sends_a_lone_item_at_once_and_groups_what_arrives_while_lists_run():
    from contracts.batching import MicroBatcher

    rec = Recorder()
    batcher = MicroBatcher(rec, max_size=8, max_in_flight=2)
    # even with a long catch-up allowed, a lone sequential caller never waits for company
    lone = MicroBatcher(Recorder(), max_size=8, catch_up_s=1.0)

    async def run():
        loop = asyncio.get_running_loop()
        start = loop.time()
        alone = [await lone.submit(i) for i in (7, 8, 9)]
        lone_s = loop.time() - start
        together = await asyncio.gather(*(batcher.submit(i) for i in range(20)))
        return alone, lone_s, together

    alone, lone_s, together = asyncio.run(run())
    assert alone == [70, 80, 90] and lone_s < 0.5  # 3 x 20 ms of work, no second of waiting
    assert together == [i * 10 for i in range(20)]  # every caller its own result, in order
    # submitted together: lists of at most 8, two open at once, the third formed while they ran
    assert [len(x) for x in rec.lists] == [8, 8, 4]
    assert rec.max_running == 2


def test_micro_batcher_fails_only_the_item_that_failed_and_a_broken_list_fails_its_callers():
    from contracts.batching import MicroBatcher

    rec = Recorder()
    batcher = MicroBatcher(rec, max_size=8)

    async def broken(items: list[int]) -> list[int]:
        raise ConnectionError("replica gone")

    async def cancelled_remotely(items: list[int]) -> list[int]:
        raise asyncio.CancelledError  # as a call whose far side was cancelled ends

    async def run():
        mixed = await asyncio.gather(*(batcher.submit(i) for i in (1, -2, 3)), return_exceptions=True)
        lost = MicroBatcher(broken, max_size=8)
        gone = await asyncio.gather(*(lost.submit(i) for i in range(3)), return_exceptions=True)
        far = MicroBatcher(cancelled_remotely, max_size=8)
        stopped = await asyncio.gather(*(far.submit(i) for i in range(2)), return_exceptions=True)
        return mixed, gone, stopped

    mixed, gone, stopped = asyncio.run(run())
    assert mixed[0] == 10 and mixed[2] == 30
    assert isinstance(mixed[1], ValueError) and "bad -2" in str(mixed[1])
    assert all(isinstance(g, ConnectionError) for g in gone)
    # callers that did not cancel get an error the edge renders, not a cancellation
    assert all(isinstance(x, RuntimeError) and "cancelled" in str(x) for x in stopped), stopped


def test_a_list_whose_callers_all_gave_up_is_cancelled_and_frees_its_slot():
    """A call that hangs (a wedged replica) holds a slot only as long as its callers wait for it."""
    from contracts.batching import MicroBatcher

    ended = []

    async def run(items: list[str]) -> list[str]:
        try:
            if "hang" in items:
                await asyncio.Event().wait()
            return [f"{i}!" for i in items]
        finally:
            ended.append(list(items))

    batcher = MicroBatcher(run, max_size=8, max_in_flight=1)

    async def scenario():
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(batcher.submit("hang"), 0.05)
        return await asyncio.wait_for(batcher.submit("ok"), 2.0)  # forever without the cancellation

    assert asyncio.run(scenario()) == "ok!"
    assert ended == [["hang"], ["ok"]]  # the hanging call was cancelled, not left running


class ErrorWithItsOwnConstructor(Exception):
    def __init__(self, code: int, where: str) -> None:
        super().__init__(f"{code} at {where}")


def test_an_item_error_that_cannot_travel_becomes_its_text_and_domain_errors_travel_as_themselves():
    import pickle

    from contracts.batching import ItemFailed
    from contracts.errors import InvalidInput

    odd = pickle.loads(pickle.dumps([ItemFailed(ErrorWithItsOwnConstructor(7, "spaCy")), "fine"]))
    assert isinstance(odd[0].error, RuntimeError) and "ErrorWithItsOwnConstructor: 7 at spaCy" in str(odd[0].error)
    assert odd[1] == "fine"  # the rest of the batch's results are intact
    domain = pickle.loads(pickle.dumps(ItemFailed(InvalidInput("encoded_text is empty"))))
    assert isinstance(domain.error, InvalidInput) and "encoded_text" in str(domain.error)


def test_micro_batcher_leaves_out_a_caller_that_stopped_waiting():
    from contracts.batching import MicroBatcher

    rec = Recorder(delay=0.05)
    batcher = MicroBatcher(rec, max_size=8)

    async def run():
        first = asyncio.ensure_future(batcher.submit(1))  # occupies the only slot
        await asyncio.sleep(0)
        impatient = asyncio.ensure_future(batcher.submit(2))
        patient = asyncio.ensure_future(batcher.submit(3))
        await asyncio.sleep(0.01)
        impatient.cancel()
        return await first, await patient

    assert asyncio.run(run()) == (10, 30)
    assert rec.lists == [[1], [3]]


def test_micro_batcher_catch_up_regroups_callers_that_come_back_a_moment_apart():
    """Closed-loop clients send their next requests a few milliseconds apart. With ``catch_up_s`` the next list
    waits (boundedly) for as many items as the previous one had; without it the lists fragment."""
    from contracts.batching import MicroBatcher

    async def rounds(batcher: MicroBatcher, sizes: list[int], gap_s: float) -> list[float]:
        loop = asyncio.get_running_loop()
        waited = []
        for n in sizes:

            async def one(i: int) -> int:
                await asyncio.sleep(i * gap_s)
                return await batcher.submit(i)

            start = loop.time()
            assert await asyncio.gather(*(one(i) for i in range(n))) == [i * 10 for i in range(n)]
            waited.append(loop.time() - start)
        return waited

    patient, hasty = Recorder(delay=0.03), Recorder(delay=0.03)
    with_catch_up = MicroBatcher(patient, max_size=8, catch_up_s=0.5)
    asyncio.run(rounds(with_catch_up, [4], gap_s=0))  # a burst: one list of 4
    waited = asyncio.run(rounds(with_catch_up, [4, 2, 1, 1], gap_s=0.02))
    # 4 staggered over 60 ms: one list; 2 of the 4 expected: sent when the 0.5 s bound ran out; the next lone
    # caller waits once more (the previous list had 2), the one after it goes at once
    assert [len(x) for x in patient.lists] == [4, 4, 2, 1, 1]
    assert waited[0] < 0.4 and waited[1] >= 0.49 and waited[3] < 0.4

    asyncio.run(rounds(MicroBatcher(hasty, max_size=8), [4, 4], gap_s=0.02))
    assert len(hasty.lists) > 3  # the same staggered arrivals without catch-up: fragmented lists


def test_text_handle_groups_concurrent_requests_into_one_call_per_list():
    """The ingress's TextClient sends TextAnalysis one ``*_many`` call per group, and hands each caller its own
    answer or its own error (Ray's DeploymentHandle is replaced by an object answering like it)."""
    from contracts.batching import ItemFailed
    from contracts.errors import InvalidInput
    from contracts.text import TextClient, TextInput

    class Response:
        def __init__(self, value: object) -> None:
            self.value = value

        def __await__(self):
            yield from asyncio.sleep(0.01).__await__()
            return self.value

    class Method:
        def __init__(self) -> None:
            self.calls: list[list[str]] = []

        def remote(self, requests: list[TextInput]) -> Response:
            self.calls.append([r.text for r in requests])
            return Response([ItemFailed(InvalidInput("no")) if r.text == "bad" else [r.text] for r in requests])

    class Handle:
        entities_many = Method()

    handle = Handle()
    client = TextClient(handle, batch_max=4, batches_in_flight=1)

    async def run():
        texts = [f"t{i}" for i in range(9)] + ["bad"]
        return await asyncio.gather(*(client.entities(TextInput(text=t)) for t in texts), return_exceptions=True)

    out = asyncio.run(run())
    assert out[:9] == [[f"t{i}"] for i in range(9)]
    assert isinstance(out[9], InvalidInput)
    assert [len(c) for c in handle.entities_many.calls] == [4, 4, 2]
