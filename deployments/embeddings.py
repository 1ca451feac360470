"""Embeddings deployment (placeholder until its capability lands)."""

from __future__ import annotations

from deployments.common import PlaceholderDeployment


class Embeddings(PlaceholderDeployment):
    capabilities = ("embeddings",)
