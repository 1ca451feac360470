"""Freed heap memory handed back once a replica is idle (runtime/memory.py): when a trim runs, and that it does
give memory back."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from runtime.memory import IdleTrim, release_freed_memory, trim_heap


def test_a_trim_runs_once_work_has_stopped_for_the_delay_and_never_during_work() -> None:
    released: list[str] = []

    async def scenario() -> None:
        trim = IdleTrim(after_s=1.0, release=lambda: released.append(threading.current_thread().name))
        pool = ThreadPoolExecutor(4)
        gate = threading.Event()

        first = trim.run(pool, time.sleep, 0.01)  # overlapping requests: nothing while either runs
        second = trim.run(pool, gate.wait)
        await first
        second.cancel()  # its caller gives up: the thread still runs, and still counts
        await asyncio.sleep(1.5)
        assert released == []
        gate.set()  # the thread ends now: the delay counts from here
        await asyncio.sleep(0.5)
        await trim.run(pool, time.sleep, 0.01)  # more work within the delay: the trim waits for this one's end
        await asyncio.sleep(0.5)
        assert released == []
        await asyncio.sleep(1.0)
        assert len(released) == 1 and trim.trims == 1
        await asyncio.sleep(1.2)  # idle on: no second trim without new work
        assert trim.trims == 1

    asyncio.run(scenario())
    assert released[0] != threading.main_thread().name  # off the event loop's thread


def _heap_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssAnon:"))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc (and glibc)")
@pytest.mark.parametrize("release", [trim_heap, release_freed_memory])
def test_release_gives_freed_heap_memory_back(release) -> None:
    blocks = [bytearray(64 * 1024) for _ in range(1500)]  # ~94 MiB in blocks below mmap's threshold: heap memory
    keep = blocks[-1]  # the heap's top stays in use, so only a trim (not free itself) returns what is below it
    del blocks
    before = _heap_kib()
    release()
    assert before - _heap_kib() > 50 * 1024, (before, _heap_kib())
    assert len(keep) == 64 * 1024
