"""Contract of the Jobs deployment: its request and result models, and the typed handle callers use."""

from __future__ import annotations

from contracts.handles import DeploymentClient


class JobsClient(DeploymentClient):
    """Typed handle of ``deployments.*:Jobs``."""

    deployment = "Jobs"
