"""Contract of the Embeddings deployment: its request and result models, and the typed handle callers use."""

from __future__ import annotations

from contracts.handles import DeploymentClient


class EmbeddingsClient(DeploymentClient):
    """Typed handle of ``deployments.*:Embeddings``."""

    deployment = "Embeddings"
