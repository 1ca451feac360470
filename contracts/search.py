"""Contract of the KnowledgeStore deployment: its request and result models, and the typed handle callers use."""

from __future__ import annotations

from contracts.handles import DeploymentClient


class KnowledgeClient(DeploymentClient):
    """Typed handle of ``deployments.*:KnowledgeStore``."""

    deployment = "KnowledgeStore"
