"""Handing freed heap memory back to the operating system (glibc ``malloc_trim``).

glibc keeps what a process frees in its heap for later allocations. After a burst that no steady request repeats
(a large upload buffered in small chunks, a transcription's decoder buffers) that memory would stay resident
until the process ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

T = TypeVar("T")

_libc: Any = None


def trim_heap() -> None:
    """Hand the heap's free memory back to the OS (the GIL is released meanwhile). A no-op without glibc."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _libc = False
    if _libc:
        _libc.malloc_trim(0)


def release_freed_memory() -> None:
    """Collect unreachable Python objects, then :func:`trim_heap`. The collection holds the GIL: for the end of a
    large request, not for a busy process's idle moments."""
    gc.collect()
    trim_heap()


class IdleTrim:
    """Releases freed memory once the work it runs has stopped for ``after_s`` seconds.

    Work counts as busy until its thread is done, even when its caller gives up (cancelling an awaited executor
    future does not stop the thread). A trim runs only when idle, never between back-to-back requests, off the
    event loop's thread, and without a garbage collection: what it returns (a decode's C++ buffers) was freed
    when the work ended, and a full collection holds the GIL for as long as it takes in a large process (one
    during a live stream's test, all in one process, is the likely cause of a stream once closed as idle). Use
    it from one event loop."""

    def __init__(self, after_s: float, release: Callable[[], None] = trim_heap) -> None:
        self.after_s = after_s
        self._release = release
        self._busy = 0
        self._pending: asyncio.TimerHandle | None = None
        self.trims = 0

    def run(self, executor: Executor, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` on ``executor``, as ``loop.run_in_executor`` runs it."""
        loop = asyncio.get_running_loop()
        self._busy += 1
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        submitted = executor.submit(fn, *args)
        submitted.add_done_callback(lambda _: self._finished(loop))
        return asyncio.wrap_future(submitted, loop=loop)

    def _finished(self, loop: asyncio.AbstractEventLoop) -> None:  # on the worker thread
        with contextlib.suppress(RuntimeError):  # the loop has closed: the replica is going away
            loop.call_soon_threadsafe(self._idle_after_work, loop)

    def _idle_after_work(self, loop: asyncio.AbstractEventLoop) -> None:
        self._busy -= 1
        if self._busy == 0:
            self._pending = loop.call_later(self.after_s, self._start, loop)

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._pending = None
        if self._busy:
            return
        try:
            trim = loop.run_in_executor(None, self._release)
        except RuntimeError:  # the loop's executor is shutting down with the replica: nothing left to trim for
            return
        self.trims += 1
        trim.add_done_callback(lambda done: done.cancelled() or done.exception())  # a failed trim changes nothing
