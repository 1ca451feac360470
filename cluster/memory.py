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
from collections.abc import Callable, Iterator
from typing import Any

_libc: Any = None


def release_freed_memory() -> None:
    """Hand freed heap memory back to the OS. A no-op where glibc is not there."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _libc = False
    if _libc:
        gc.collect()
        _libc.malloc_trim(0)


class IdleTrim:
    """Releases freed memory once the work marked with :meth:`busy` has stopped for ``after_s`` seconds.

    Only when idle, so a trim (tens of milliseconds on a large heap) never runs between back-to-back requests,
    and in a worker thread, so the event loop keeps serving. Use it from one event loop."""

    def __init__(self, after_s: float = 2.0, release: Callable[[], None] = release_freed_memory) -> None:
        self.after_s = after_s
        self._release = release
        self._busy = 0
        self._pending: asyncio.TimerHandle | None = None
        self.trims = 0

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        self._busy += 1
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        try:
            yield
        finally:
            self._busy -= 1
            if self._busy == 0:
                self._pending = asyncio.get_running_loop().call_later(self.after_s, self._start)

    def _start(self) -> None:
        self._pending = None
        if self._busy == 0:
            self.trims += 1
            asyncio.get_running_loop().run_in_executor(None, self._release)
