"""Freed heap memory handed back once a replica is idle (cluster/memory.py): when a trim runs, and that it does
give memory back."""

from __future__ import annotations

import asyncio
import threading

from cluster.memory import IdleTrim, release_freed_memory


def test_a_trim_runs_once_work_has_stopped_for_the_delay_and_never_during_work() -> None:
    released: list[str] = []

    async def scenario() -> None:
        trim = IdleTrim(after_s=0.05, release=lambda: released.append(threading.current_thread().name))
        with trim.busy():
            with trim.busy():  # overlapping requests: nothing while either runs
                await asyncio.sleep(0.08)
            await asyncio.sleep(0.08)
            assert released == []
        with trim.busy():  # back-to-back work within the delay: the pending trim is dropped
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.02)
        assert released == []
        await asyncio.sleep(0.1)
        assert len(released) == 1 and trim.trims == 1
        await asyncio.sleep(0.1)  # idle on: no second trim without new work
        assert trim.trims == 1

    asyncio.run(scenario())
    assert released[0] != threading.main_thread().name  # off the event loop's thread


def _heap_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssAnon:"))


def test_release_gives_freed_heap_memory_back() -> None:
    blocks = [bytearray(64 * 1024) for _ in range(1500)]  # ~94 MiB in blocks below mmap's threshold: heap memory
    keep = blocks[-1]  # the heap's top stays in use, so only a trim (not free itself) returns what is below it
    del blocks
    before = _heap_kib()
    release_freed_memory()
    assert before - _heap_kib() > 50 * 1024, (before, _heap_kib())
    assert len(keep) == 64 * 1024
