"""Contract of the TextAnalysis deployment: its request and result models, and the typed handle callers use."""

from __future__ import annotations

from contracts.handles import DeploymentClient


class TextClient(DeploymentClient):
    """Typed handle of ``deployments.*:TextAnalysis``."""

    deployment = "TextAnalysis"
