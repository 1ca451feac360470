"""TextAnalysis deployment (placeholder until its capability lands)."""

from __future__ import annotations

from deployments.common import PlaceholderDeployment


class TextAnalysis(PlaceholderDeployment):
    capabilities = ("entity_recognition", "sentiment_analysis", "intent_classification", "language_identification",)
