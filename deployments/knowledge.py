"""KnowledgeStore deployment (placeholder until its capability lands)."""

from __future__ import annotations

from deployments.common import PlaceholderDeployment


class KnowledgeStore(PlaceholderDeployment):
    capabilities = ("knowledge_base_search",)
