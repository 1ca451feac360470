"""Cross-request batching of Whisper windows: concurrent transcriptions that share a model and a language are
decoded together, one encoder and one beam search over a batch instead of one call per window.

Each caller hands in the 30-second windows of its speech (log-mel features and their place in the packed speech)
and blocks until they are decoded. One decoder thread gathers what is waiting: it waits up to ``wait_s`` for a
batch to fill to ``batch_size`` windows of the first caller's key, decodes, and hands every caller its own
results, one batch at a time (with batching on, a model's decodes do not run side by side: see
``engines.speech.whisper.placement.decode_placement``); on a GPU, or where the decoder has spare cores, a batch of a few
windows costs less than as many calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# a batch decoder: (key, features [n, mels, frames], metadata per window) -> segments (dicts) per window
DecodeBatch = Callable[[Hashable, np.ndarray, list[dict[str, Any]]], list[list[dict[str, Any]]]]


@dataclass
class _Job:
    key: Hashable
    features: list[np.ndarray]
    metadata: list[dict[str, Any]]
    done: threading.Event = field(default_factory=threading.Event)
    results: list[list[dict[str, Any]]] = field(default_factory=list)
    error: BaseException | None = None


class WindowBatcher:
    """Groups windows of concurrent callers with the same key into batches of at most ``batch_size``."""

    def __init__(self, decode: DecodeBatch, batch_size: int, wait_s: float) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._decode = decode
        self.batch_size = batch_size
        self.wait_s = wait_s
        self._queue: list[_Job] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.batches: list[int] = []  # windows per decoded batch, newest last (kept short: for tests and logs)

    def decode(
        self, key: Hashable, features: Sequence[np.ndarray], metadata: Sequence[dict[str, Any]]
    ) -> list[list[dict[str, Any]]]:
        """Segments per window, in the order given; raises what the decoder raised for this caller's batch."""
        if len(features) != len(metadata):
            raise ValueError("one metadata entry per window")
        if not features:
            return []
        job = _Job(key, list(features), list(metadata))
        with self._cond:
            if self._closed:
                raise RuntimeError("the window batcher is closed")
            self._queue.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="whisper-batcher", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.results

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)

    # ------------------------------------------------------------------ the decoder thread

    def _waiting(self, key: Hashable) -> int:
        return sum(len(job.features) for job in self._queue if job.key == key)

    def _take(self) -> list[_Job] | None:
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if not self._queue:
                return None
            key = self._queue[0].key
            deadline = time.monotonic() + self.wait_s
            while self._waiting(key) < self.batch_size and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            taken: list[_Job] = []
            windows = 0
            for job in list(self._queue):
                # whole jobs in arrival order; the first always goes, even when it alone fills several batches
                if job.key != key or (taken and windows + len(job.features) > self.batch_size):
                    continue
                taken.append(job)
                windows += len(job.features)
                self._queue.remove(job)
            return taken

    def _run(self) -> None:
        while (jobs := self._take()) is not None:
            try:
                self._decode_jobs(jobs)
            except BaseException as exc:  # noqa: BLE001 - every caller of the batch hears it, the thread goes on
                for job in jobs:
                    job.error = exc
            finally:
                for job in jobs:
                    job.done.set()

    def _decode_jobs(self, jobs: list[_Job]) -> None:
        features = [f for job in jobs for f in job.features]
        metadata = [m for job in jobs for m in job.metadata]
        results: list[list[dict[str, Any]]] = []
        for start in range(0, len(features), self.batch_size):
            part = features[start : start + self.batch_size]
            self.batches = [*self.batches[-99:], len(part)]
            results += self._decode(jobs[0].key, np.stack(part), metadata[start : start + self.batch_size])
        if len(results) != len(features):
            raise RuntimeError(f"the decoder answered {len(results)} windows for {len(features)}")
        for job in jobs:
            job.results, results = results[: len(job.features)], results[len(job.features) :]
