"""Contract of the BatchRunner deployment: its request and result models, and the typed handle callers use."""

from __future__ import annotations

from contracts.handles import DeploymentClient


class BatchClient(DeploymentClient):
    """Typed handle of ``deployments.*:BatchRunner``."""

    deployment = "BatchRunner"
