"""Evaluation of the text engines on the labelled sets in ``tests/data/text`` (used by scripts/eval_text.py and
the quality-floor tests). Runs the engines directly, the way the TextAnalysis deployment calls them."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "text"
NER_TYPES = ("person", "location", "organisation", "date")


@dataclass
class Scores:
    n: int
    accuracy: float
    macro_f1: float


def _read_tsv(name: str) -> list[dict[str, str]]:
    with (DATA / name).open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))


def macro_f1(gold: list[str], pred: list[str]) -> float:
    f1s = []
    for label in sorted(set(gold)):
        tp = sum(g == p == label for g, p in zip(gold, pred))
        fp = sum(p == label and g != label for g, p in zip(gold, pred))
        fn = sum(g == label and p != label for g, p in zip(gold, pred))
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return float(np.mean(f1s)) if f1s else 0.0


def evaluate_langid(identifier: Any) -> dict[str, Scores]:
    """Per language: accuracy on that language's sentences, F1 of that language as a class."""
    rows = _read_tsv("langid_udhr.tsv")
    gold = [r["language"] for r in rows]
    pred = [g.language for g in identifier.detect_many([r["text"] for r in rows])]
    out = {}
    for lang in sorted(set(gold)):
        idx = [i for i, g in enumerate(gold) if g == lang]
        tp = sum(pred[i] == lang for i in idx)
        fp = sum(p == lang and g != lang for g, p in zip(gold, pred))
        f1 = 2 * tp / (2 * tp + fp + (len(idx) - tp)) if tp else 0.0
        out[lang] = Scores(len(idx), tp / len(idx), f1)
    out["all"] = Scores(len(gold), float(np.mean([g == p for g, p in zip(gold, pred)])), macro_f1(gold, pred))
    return out


def evaluate_sentiment(classifier: Any, identifier: Any, embed: Any) -> dict[str, Scores]:
    """``embed(texts) -> (n, dim)`` query embeddings. Each labelled sentence is one request."""
    rows = _read_tsv("sentiment.tsv")
    texts = [r["text"] for r in rows]
    languages = [g.language for g in identifier.detect_many(texts)]
    results = classifier.classify(texts, embed(texts), languages)
    by_lang: dict[str, tuple[list[str], list[str]]] = defaultdict(lambda: ([], []))
    for row, res in zip(rows, results):
        by_lang[row["language"]][0].append(row["label"])
        by_lang[row["language"]][1].append(res.label)
    return {
        lang: Scores(len(g), float(np.mean([a == b for a, b in zip(g, p)])), macro_f1(g, p))
        for lang, (g, p) in sorted(by_lang.items())
    }


@dataclass
class NerScores:
    sentences: int
    precision: float
    recall: float
    f1: float
    offsets_ok: bool


def evaluate_ner(recogniser: Any, identifier: Any) -> dict[str, NerScores]:
    """Exact (type, start, end) matches over person/location/organisation/date; other types are ignored."""
    rows = [json.loads(line) for line in (DATA / "ner.jsonl").read_text(encoding="utf-8").splitlines() if line]
    texts = [r["text"] for r in rows]
    languages = [g.language for g in identifier.detect_many(texts)]
    predicted = recogniser.recognise(texts, languages)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 1])  # tp, fp, fn, sentences, offsets ok
    for row, ents in zip(rows, predicted):
        text = row["text"]
        gold = {(kind, text.index(word), text.index(word) + len(word)) for kind, word in row["entities"]}
        pred = {(e.entity, e.start, e.end) for e in ents if e.entity in NER_TYPES}
        c = counts[row["language"]]
        c[0] += len(gold & pred)
        c[1] += len(pred - gold)
        c[2] += len(gold - pred)
        c[3] += 1
        c[4] &= all(text[e.start : e.end] == e.word for e in ents)
    out = {}
    for lang, (tp, fp, fn, n, ok) in sorted(counts.items()):
        p = tp / (tp + fp) if tp + fp else 0.0
        r = tp / (tp + fn) if tp + fn else 0.0
        out[lang] = NerScores(n, p, r, 2 * p * r / (p + r) if p + r else 0.0, bool(ok))
    return out


@dataclass
class IntentScores:
    n: int
    accuracy: float
    mean_confidence: float  # mean top probability on the labelled inputs
    unrelated_top: float  # mean top probability on inputs that match no intent


def evaluate_intent(embed: Any, temperature: float, top_k: int) -> dict[str, IntentScores]:
    from engines.text.intent import intent_probabilities

    data = json.loads((DATA / "intent.json").read_text(encoding="utf-8"))
    out = {}
    for lang, spec in data.items():
        intents = list(spec["examples"])
        example_intents = [i for i in intents for _ in spec["examples"][i]]
        examples = embed([x for i in intents for x in spec["examples"][i]])
        probs = intent_probabilities(
            intents, example_intents, examples, embed([t for t, _ in spec["tests"]]), temperature, top_k
        )
        unrelated = intent_probabilities(
            intents, example_intents, examples, embed(spec["unrelated"]), temperature, top_k
        )
        correct = [intents[int(p.argmax())] == gold for p, (_, gold) in zip(probs, spec["tests"])]
        out[lang] = IntentScores(
            len(correct), float(np.mean(correct)), float(probs.max(axis=1).mean()), float(unrelated.max(axis=1).mean())
        )
    return out
