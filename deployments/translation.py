"""Translation deployment (placeholder until its capability lands)."""

from __future__ import annotations

from deployments.common import PlaceholderDeployment


class Translation(PlaceholderDeployment):
    capabilities = ("translation",)
