"""Few-shot intent classification over sentence embeddings, fitted per request on the request's own examples.

Calibrated nearest-centroid: an input's score for an intent is the mean cosine similarity to that intent's
``top_k`` most similar examples; scores become probabilities with a softmax at a fixed temperature. e5 cosine
similarities live in a narrow band (unrelated sentences ~0.75-0.8, paraphrases ~0.9), so the temperature is
small: a clear match gets a high probability, an input unrelated to every intent stays spread out.
Example embeddings are cached (LRU keyed by text), so a repeated example set costs nothing.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

DEFAULT_TEMPERATURE = 0.02
DEFAULT_TOP_K = 2


class EmbeddingCache:
    """Thread-safe LRU of text -> unit embedding."""

    def __init__(self, max_items: int = 20000) -> None:
        self.max_items = max_items
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def lookup(self, texts: Sequence[str]) -> tuple[dict[str, np.ndarray], list[str]]:
        """(found vectors, missing texts in first-seen order)."""
        found: dict[str, np.ndarray] = {}
        missing: list[str] = []
        with self._lock:
            for text in texts:
                if text in found or text in missing:
                    continue
                vec = self._items.get(text)
                if vec is None:
                    missing.append(text)
                    self.misses += 1
                else:
                    self._items.move_to_end(text)
                    found[text] = vec
                    self.hits += 1
        return found, missing

    def store(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        with self._lock:
            for text, vec in zip(texts, vectors):
                self._items[text] = np.asarray(vec, dtype=np.float32)
                self._items.move_to_end(text)
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def intent_probabilities(
    intents: list[str],
    example_intents: list[str],
    example_vectors: np.ndarray,
    input_vectors: np.ndarray,
    temperature: float = DEFAULT_TEMPERATURE,
    top_k: int = DEFAULT_TOP_K,
) -> np.ndarray:
    """(n_inputs, n_intents) probabilities, rows sum to 1, columns in ``intents`` order."""
    sims = np.atleast_2d(input_vectors) @ np.atleast_2d(example_vectors).T  # (n_inputs, n_examples)
    labels = np.array(example_intents)
    scores = np.empty((sims.shape[0], len(intents)), dtype=np.float64)
    for j, intent in enumerate(intents):
        col = sims[:, labels == intent]
        k = min(top_k, col.shape[1])
        scores[:, j] = np.sort(col, axis=1)[:, -k:].mean(axis=1)
    logits = scores / temperature
    logits -= logits.max(axis=1, keepdims=True)
    exp = np.exp(logits)
    return exp / exp.sum(axis=1, keepdims=True)
