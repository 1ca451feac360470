"""Contract of the Transcription deployment: its request and result models, and the typed handle callers use."""

from __future__ import annotations

from contracts.handles import DeploymentClient


class TranscriptionClient(DeploymentClient):
    """Typed handle of ``deployments.*:Transcription``."""

    deployment = "Transcription"
