"""Ranking the candidates of a query: weighted reciprocal rank fusion of the vector and BM25 rankings, and a
multiplicative boost for passages in the query's language. Scores are scaled to 0..1 (1 = first in every list and
in the requested language)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Hit:
    """A candidate passage: a chunk of the store with its ranks on each side."""

    id: str
    text: str
    metadata: dict[str, Any]
    score: float = 0.0
    vector_rank: int | None = None
    lexical_rank: int | None = None
    similarity: float | None = None  # cosine similarity to the query, when the vector side found it


@dataclass
class FusionConfig:
    rrf_k: float = 60.0
    vector_weight: float = 1.0
    lexical_weight: float = 1.0
    language_boost: float = 0.02  # multiplicative bonus for chunks in the requested language

    def boost(self, hit: Hit, language: str | None) -> float:
        """The factor a hit's score gets: ``1 + language_boost`` when it is in the requested language."""
        if language is not None and hit.metadata.get("language") == language:
            return 1.0 + self.language_boost
        return 1.0


def fuse(
    vector_hits: list[Hit], lexical_hits: list[Hit], config: FusionConfig, language: str | None = None
) -> list[Hit]:
    """Weighted reciprocal rank fusion of two rankings, language boost, scores scaled to 0..1."""
    merged: dict[str, Hit] = {}
    for rank, hit in enumerate(vector_hits, 1):
        hit.vector_rank = rank
        hit.score = config.vector_weight / (config.rrf_k + rank)
        merged[hit.id] = hit
    for rank, hit in enumerate(lexical_hits, 1):
        bonus = config.lexical_weight / (config.rrf_k + rank)
        if hit.id in merged:
            merged[hit.id].lexical_rank = rank
            merged[hit.id].score += bonus
        else:
            hit.lexical_rank, hit.score = rank, bonus
            merged[hit.id] = hit
    best = (config.vector_weight + (config.lexical_weight if lexical_hits else 0.0)) / (config.rrf_k + 1)
    if language is not None:
        best *= 1.0 + config.language_boost
        for hit in merged.values():
            hit.score *= config.boost(hit, language)
    for hit in merged.values():
        hit.score = round(hit.score / best, 6) if best > 0 else 0.0
    return sorted(merged.values(), key=lambda h: (-h.score, h.vector_rank or 10**9))


def rank_by_similarity(vector_hits: list[Hit], config: FusionConfig, language: str | None = None) -> list[Hit]:
    """Vector-only ranking: the cosine similarity is the score, with the same language boost as :func:`fuse`."""
    for hit in vector_hits:
        hit.score = round(float(hit.similarity or 0.0) * config.boost(hit, language), 6)
    return sorted(vector_hits, key=lambda h: -h.score)
