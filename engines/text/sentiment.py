"""Sentence sentiment: positive / negative / neutral with a confidence.

- Every language: a multinomial logistic regression over multilingual-e5-small sentence embeddings
  (``engines/text/artifacts/sentiment_e5.npz``, trained by ``scripts/train_sentiment.py`` on English sentences built
  from the VADER lexicon plus hand-written neutral sentences; other languages by cross-lingual transfer).
- English: the average of that classifier and VADER (``vaderSentiment``, MIT).

The engine takes embeddings as input, so the caller can batch them through the shared embeddings deployment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ARTIFACT = Path(__file__).resolve().parent / "artifacts" / "sentiment_e5.npz"
LABELS = ("positive", "negative", "neutral")
VADER_NEUTRAL_BAND = 0.05  # |compound| below this is neutral (VADER's own convention)


@dataclass(frozen=True)
class SentimentScore:
    label: str
    score: float
    distribution: dict[str, float]


class SentimentClassifier:
    def __init__(self, artifact: Path = ARTIFACT) -> None:
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

        with np.load(artifact, allow_pickle=False) as data:
            self.coef = data["coef"].astype(np.float32)
            self.intercept = data["intercept"].astype(np.float32)
            self.meta = json.loads(str(data["meta"]))
        self.labels: list[str] = self.meta["labels"]
        self._vader = SentimentIntensityAnalyzer()

    def embedding_probabilities(self, embeddings: np.ndarray) -> np.ndarray:
        """(n, 3) probabilities in ``self.labels`` order from (n, dim) unit embeddings."""
        logits = np.atleast_2d(embeddings) @ self.coef.T + self.intercept
        logits -= logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        return exp / exp.sum(axis=1, keepdims=True)

    def vader_distribution(self, text: str) -> dict[str, float]:
        """VADER's compound score as a distribution: |compound| goes to its polarity, the rest to neutral."""
        compound = float(self._vader.polarity_scores(text)["compound"])
        polar = abs(compound) if abs(compound) >= VADER_NEUTRAL_BAND else 0.0
        return {
            "positive": polar if compound > 0 else 0.0,
            "negative": polar if compound < 0 else 0.0,
            "neutral": 1.0 - polar,
        }

    def classify(self, texts: list[str], embeddings: np.ndarray, languages: list[str]) -> list[SentimentScore]:
        probs = self.embedding_probabilities(embeddings)
        out = []
        for text, row, language in zip(texts, probs, languages):
            dist = {label: float(p) for label, p in zip(self.labels, row)}
            if language == "eng":
                vader = self.vader_distribution(text)
                dist = {label: (dist[label] + vader[label]) / 2 for label in LABELS}
            label = max(dist, key=lambda name: dist[name])
            out.append(SentimentScore(label, dist[label], dist))
        return out
