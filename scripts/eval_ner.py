"""Entity recognition and language ID as served, on real text and on the frozen held-out set (docs/text.md).

Every figure runs what ``POST /api/v1/entity_recognition/process`` runs: ``EntityRecogniser.recognise_routed``
with the service's language identifier, sentence routing, type refusals and all.

English with South African names::

    python scripts/eval_ner.py english [--newswire DIR] [--json OUT]

- the held-out set ``tests/data/text/ner_sa_english_heldout.jsonl`` (written and committed before any tuning; its
  SHA-256 is checked here, so an edited set cannot be reported as the frozen one);
- with ``--newswire``: the English Worldwide Newswire articles (Shan et al., EMNLP 2023; the GitHub repository
  stanfordnlp/en-worldwide-newswire, folder ``processed_annotated``; news text under its publishers' copyright,
  not shipped): ``sa_*`` (IOL, The Star, Mail & Guardian: 38 South African articles) is the test split, never
  tuned on; ``nm*`` (27 Namibian articles) is the development split.

A prediction is correct when its span and type equal a gold entity's (exact match, CoNLL style). Gold types:
Person -> person, Location and Facility -> location, Organization -> organisation; the other gold types and the
other predicted types (dates, money, ...) are not scored.

African languages (MasakhaNER 2.0 test split, ``DIR/<lang>/test.txt`` as for ``scripts/eval_real.py text``)::

    python scripts/eval_ner.py african DIR [--json OUT]

A prediction counts as correct when it lies inside a gold entity of the same type (the heuristic answers the stem
of a prefixed name, "Theku" inside gold "yeTheku"), as in ``scripts/eval_real.py text``.

Language ID on short sentences (under 80 characters, names included) and long ones, per language::

    python scripts/eval_ner.py langid [--masakhaner DIR] [--newswire DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scripts.eval_real import MASAKHANER_LANGUAGES, gold_spans, read_conll, table  # noqa: E402

HELDOUT = ROOT / "tests" / "data" / "text" / "ner_sa_english_heldout.jsonl"
HELDOUT_SHA256 = "3a7164601c8478afb0fa5cfc44f46338a150684aa1ff2a7ae4b6ab56dfdcf5f8"
SCORED = ("person", "location", "organisation")
NEWSWIRE_TYPES = {"Person": "person", "Location": "location", "Facility": "location", "Organization": "organisation"}
SHORT = 80  # characters: a "short" sentence for language ID

Gold = list[tuple[int, int, str]]


# ---------------------------------------------------------------------------------------------- data


def heldout() -> list[tuple[str, Gold]]:
    data = HELDOUT.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != HELDOUT_SHA256:
        raise SystemExit(f"{HELDOUT} changed since it was frozen (sha256 {digest}); restore it from git.")
    out = []
    for line in data.decode("utf-8").splitlines():
        item = json.loads(line)
        text = item["text"]
        gold = []
        for kind, word in item["entities"]:
            start = text.index(word)
            gold.append((start, start + len(word), kind))
        out.append((text, gold))
    return out


_NO_SPACE_BEFORE = re.compile(r"^(?:[.,;:!?)\]}%]|’s?|'s?|”|n't)$")
_NO_SPACE_AFTER = {"(", "[", "{", "“", "‘", "$", "R"}


def read_bio(path: Path) -> list[list[tuple[str, str]]]:
    """Sentences of a token<TAB>tag file (blank lines between sentences), without the URL line."""
    sentences, current = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            if current:
                sentences.append(current)
            current = []
            continue
        token, _, tag = line.partition("\t")
        if token.startswith("http"):
            continue
        current.append((token, tag.strip() or "O"))
    if current:
        sentences.append(current)
    return sentences


def detokenised(sentence: list[tuple[str, str]], types: dict[str, str]) -> tuple[str, Gold]:
    """The sentence as a person writes it (no space before a full stop or after an opening bracket) and its gold
    entities of ``types`` as character spans."""
    text, offsets = "", []
    previous = ""
    for token, _ in sentence:
        glue = not text or _NO_SPACE_BEFORE.match(token) or (previous in _NO_SPACE_AFTER and token[:1].isdigit())
        text += "" if glue else " "
        offsets.append((len(text), len(text) + len(token)))
        text += token
        previous = token
    gold: Gold = []
    i = 0
    while i < len(sentence):
        tag = sentence[i][1]
        if tag[:2] in ("B-", "I-", "S-"):
            kind, j = tag[2:], i
            while j + 1 < len(sentence) and sentence[j + 1][1] in (f"I-{kind}", f"E-{kind}"):
                j += 1
            if kind in types:
                gold.append((offsets[i][0], offsets[j][1], types[kind]))
            i = j + 1
        else:
            i += 1
    return text, gold


def newswire(folder: Path, prefixes: tuple[str, ...]) -> list[list[tuple[str, Gold]]]:
    """The articles, each a list of its sentences."""
    files = sorted(p for p in (folder / "processed_annotated").glob("*.tsv") if p.name.startswith(prefixes))
    return [[detokenised(s, NEWSWIRE_TYPES) for s in read_bio(path)] for path in files]


def documents(items: list[tuple[str, Gold]]) -> list[list[tuple[str, Gold]]]:
    """Sentences that are documents of their own (the held-out set, MasakhaNER's sentences)."""
    return [[item] for item in items]


# ---------------------------------------------------------------------------------------------- scoring


def recognise(texts: list[str]) -> list[list[Any]]:
    from engines.text.langid import LanguageIdentifier
    from engines.text.ner import EntityRecogniser

    recogniser = _cached(EntityRecogniser)
    return recogniser.recognise_routed(texts, _cached(LanguageIdentifier))


_CACHE: dict[type, Any] = {}


def _cached(cls: type) -> Any:
    if cls not in _CACHE:
        _CACHE[cls] = cls()
    return _CACHE[cls]


def score(
    docs: list[list[tuple[str, Gold]]],
    exact: bool = True,
    types: tuple[str, ...] = SCORED,
    batch: int = 64,
    show_misses: bool = False,
) -> dict[str, Any]:
    """Per-type precision and recall, and the sentences that come back empty. Each document is sent as one text
    (its sentences joined by a space, as the service gets an article) and its entities are scored per sentence."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # correct, predicted, gold, gold found
    with_gold = empty = person_place = person_place_empty = 0
    joined = [" ".join(text for text, _ in doc) for doc in docs]
    found_per_doc: list[list[Any]] = []
    for i in range(0, len(joined), batch):
        found_per_doc += recognise(joined[i : i + batch])
    items: list[tuple[str, Gold]] = []
    predictions: list[list[Any]] = []
    for doc, found_in_doc in zip(docs, found_per_doc):
        offset = 0
        for text, gold in doc:
            end = offset + len(text)
            items.append((text, gold))
            predictions.append(
                [
                    replace(e, start=e.start - offset, end=e.end - offset)
                    for e in found_in_doc
                    if offset <= e.start and e.end <= end
                ]
            )
            offset = end + 1
    for (text, gold), found in zip(items, predictions):
        predicted = [(e.start, e.end, e.entity) for e in found if e.entity in types]

        def hit(p: tuple[int, int, str], g: tuple[int, int, str]) -> bool:
            return p == g if exact else (p[2] == g[2] and g[0] <= p[0] and p[1] <= g[1])

        for p in predicted:
            counts[p[2]][0] += any(hit(p, g) for g in gold)
            counts[p[2]][1] += 1
        for g in gold:
            if g[2] not in types:
                continue
            counts[g[2]][2] += 1
            counts[g[2]][3] += any(hit(p, g) for p in predicted)
        if gold:
            with_gold += 1
            empty += not found
        if any(k in ("person", "location") for _, _, k in gold):
            person_place += 1
            lost = not any(e.entity in ("person", "location") for e in found)
            person_place_empty += lost
            if lost and show_misses:
                print(f"  lost: {text!r} gold={[text[s:e] + '/' + k for s, e, k in gold]}", file=sys.stderr)
    by_type = {}
    for kind in types:
        correct, predicted_n, gold_n, found_n = counts[kind]
        by_type[kind] = {
            "precision": round(correct / predicted_n, 3) if predicted_n else None,
            "recall": round(found_n / gold_n, 3) if gold_n else None,
            "predicted": predicted_n,
            "gold": gold_n,
        }
    return {
        "sentences": len(items),
        "sentences_with_gold": with_gold,
        "empty": empty,
        "empty_share": round(empty / with_gold, 3) if with_gold else None,
        "with_person_or_place": person_place,
        "person_or_place_lost": person_place_empty,
        "by_type": by_type,
    }


def _rows(name: str, result: dict[str, Any]) -> list[str]:
    cells = [name, str(result["sentences_with_gold"])]
    for kind in result["by_type"]:
        t = result["by_type"][kind]
        p = "-" if t["precision"] is None else f"{t['precision']:.3f}"
        r = "-" if t["recall"] is None else f"{t['recall']:.3f}"
        cells.append(f"{p} / {r} ({t['gold']})")
    cells.append(f"{result['empty']} ({result['empty_share']:.3f})")
    cells.append(f"{result['person_or_place_lost']} of {result['with_person_or_place']}")
    return cells


def english(folder: Path | None, show_misses: bool) -> dict[str, Any]:
    sets = {"held-out (frozen), 40 sentences": documents(heldout())}
    if folder is not None:
        sets["newswire South Africa (test), whole articles"] = newswire(folder, ("sa_",))
        sets["newswire Namibia (dev), whole articles"] = newswire(folder, ("nm",))
    summary = {name: score(items, show_misses=show_misses) for name, items in sets.items()}
    table(
        "English with southern African names, as served (exact span and type)",
        [
            "set",
            "sentences with gold",
            "person P / R (gold)",
            "location P / R (gold)",
            "organisation P / R (gold)",
            "empty answers (share)",
            "sentences with a gold person or place that get none",
        ],
        [_rows(name, result) for name, result in summary.items()],
    )
    return summary


def african(folder: Path) -> dict[str, Any]:
    summary = {}
    for name, code in MASAKHANER_LANGUAGES.items():
        path = folder / name / "test.txt"
        if path.exists():
            sentences = [gold_spans(s) for s in read_conll(path)]
            summary[code] = score(documents(sentences), exact=False, types=(*SCORED, "date"))
    table(
        "MasakhaNER 2.0 test, as served (a prediction inside a gold entity of its type is correct)",
        [
            "language",
            "sentences with gold",
            "person P / R (gold)",
            "location P / R (gold)",
            "organisation P / R (gold)",
            "date P / R (gold)",
            "empty answers (share)",
            "sentences with a gold person or place that get none",
        ],
        [_rows(code, result) for code, result in summary.items()],
    )
    return summary


def langid(masakhaner: Path | None, newswire_dir: Path | None) -> dict[str, Any]:
    from engines.text.langid import LanguageIdentifier

    identifier = _cached(LanguageIdentifier)
    sets: dict[str, list[str]] = {}
    if masakhaner is not None:
        for name, code in MASAKHANER_LANGUAGES.items():
            if (masakhaner / name / "test.txt").exists():
                sets[code] = [gold_spans(s)[0] for s in read_conll(masakhaner / name / "test.txt")]
    if newswire_dir is not None:
        sets["eng"] = [text for article in newswire(newswire_dir, ("sa_",)) for text, _ in article]
    sets["eng"] = sets.get("eng", []) + [text for text, _ in heldout()]
    summary, rows = {}, []
    for code, texts in sets.items():
        texts = [t for t in texts if len(t) >= 10]
        short = [t for t in texts if len(t) < SHORT]
        long = [t for t in texts if len(t) >= SHORT]
        result = {}
        for label, group in (("short", short), ("long", long)):
            guesses = identifier.detect_many(group) if group else []
            right = sum(g.language == code for g in guesses)
            result[label] = {
                "sentences": len(group),
                "accuracy": round(right / len(group), 3) if group else None,
                "confusions": Counter(g.language for g in guesses if g.language != code).most_common(3),
            }
        summary[code] = result
        rows.append(
            [
                code,
                f"{result['short']['accuracy']} ({result['short']['sentences']})",
                str(result["short"]["confusions"] or "-"),
                f"{result['long']['accuracy']} ({result['long']['sentences']})",
            ]
        )
    table(
        f"Text language ID on real sentences, short (< {SHORT} characters, names included) and long",
        ["language", "short: accuracy (sentences)", "short: most common confusions", "long: accuracy (sentences)"],
        rows,
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=("english", "african", "langid"))
    parser.add_argument("data", type=Path, nargs="?", help="african: the MasakhaNER 2.0 data folder")
    parser.add_argument("--newswire", type=Path, help="the en-worldwide-newswire checkout (processed_annotated/)")
    parser.add_argument("--masakhaner", type=Path, help="langid: the MasakhaNER 2.0 data folder")
    parser.add_argument("--misses", action="store_true", help="english: print the sentences that lose every name")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.part == "english":
        summary = english(args.newswire, args.misses)
    elif args.part == "african":
        if args.data is None:
            parser.error("african needs the MasakhaNER 2.0 data folder")
        summary = african(args.data)
    else:
        summary = langid(args.masakhaner, args.newswire)
    print(f"\n({time.perf_counter() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
