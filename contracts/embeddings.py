"""Contract of the sentence embedder and the typed handle of the Embeddings deployment.

Callers: TextAnalysis (sentiment and intent, ``query`` side) and Search (documents ``passage`` side,
search queries ``query`` side). They hold an :class:`EmbeddingSource`: the Embeddings deployment's typed handle,
or the embedder in their own process (``embeddings.placement``; ``deployments/embeddings.LocalEmbeddings``). The
vectors are a float32 numpy array: it crosses Ray as one buffer, where a list of lists of floats would be pickled
element by element (a document ingest embeds thousands of chunks).
"""

from __future__ import annotations

from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from contracts.capabilities import CapabilityInfo
from contracts.handles import DeploymentClient

# e5 models are trained with a "query: " / "passage: " prefix: a search query and the passages it should find are
# embedded on different sides; short texts compared with each other (intents, sentiment) use the query side.
EmbeddingKind = Literal["query", "passage"]
# (n, dim) float32, every row L2-normalised (so a dot product is the cosine similarity); (0, dim) for no texts.
Vectors = npt.NDArray[np.float32]


class EmbeddingsClient(DeploymentClient):
    """Typed handle of ``deployments.embeddings:Embeddings``."""

    deployment = "Embeddings"

    async def embed(self, texts: list[str], kind: EmbeddingKind) -> Vectors:
        """``deployments.embeddings.Embeddings.embed``: one unit vector per text, in order. Concurrent small calls
        are batched into one model call in the replica; long lists (document ingest) run as one batch."""
        return await self._call(self._handle.embed.remote(texts, kind))


class EmbeddingSource(Protocol):
    """What a caller of the embedder needs: the deployment's typed handle and the in-process embedder both are."""

    async def embed(self, texts: list[str], kind: EmbeddingKind) -> Vectors: ...

    async def describe(self, timeout: float) -> list[CapabilityInfo]: ...
