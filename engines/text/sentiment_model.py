"""Sentiment from a configured Hugging Face sequence-classification model (an AfriSenti-class classifier such as
``Davlan/afrisenti-twitter-sentiment-afroxlmr-large``), for the languages it is routed (``engines/text/configured.py``).
Its labels are read from the model's ``id2label`` (positive / neutral / negative, any case)."""

from __future__ import annotations

import threading

from engines.text.sentiment import LABELS, SentimentScore


class TransformersSentiment:
    def __init__(self, model: str, device: str | None = None, batch_size: int = 16) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model = AutoModelForSequenceClassification.from_pretrained(model).eval()
        labels = {int(i): str(name).lower() for i, name in self.model.config.id2label.items()}
        missing = set(LABELS) - set(labels.values())
        if missing:
            raise ValueError(
                f"sentiment model {model!r} has labels {sorted(labels.values())}; it needs {', '.join(LABELS)}"
            )
        self.labels = labels
        self.device = device or "cpu"
        self.batch_size = batch_size
        self.name = model
        self._lock = threading.Lock()

    def classify(self, texts: list[str]) -> list[SentimentScore]:
        out: list[SentimentScore] = []
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            inputs = self.tokenizer(chunk, return_tensors="pt", padding=True, truncation=True)
            with self._lock, self._torch.inference_mode():
                probabilities = self.model(**inputs).logits.softmax(-1).tolist()
            for row in probabilities:
                distribution = {self.labels[i]: float(p) for i, p in enumerate(row) if self.labels[i] in LABELS}
                label = max(distribution, key=lambda name: distribution[name])
                out.append(SentimentScore(label, distribution[label], distribution))
        return out
