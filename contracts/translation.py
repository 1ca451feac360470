"""Contract of the Translation deployment: its request and result models, and the typed handle callers use."""

from __future__ import annotations

from contracts.handles import DeploymentClient


class TranslationClient(DeploymentClient):
    """Typed handle of ``deployments.*:Translation``."""

    deployment = "Translation"
