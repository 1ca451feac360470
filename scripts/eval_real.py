"""Real-data evaluation: speech and text in South African languages, never espeak.

Nothing here ships with the project: the data sets have their own licences (several are non-commercial or state
none), so each is read from where you put it. The figures in docs/speech.md, docs/text.md and contracts/quality.py
come from these commands.

Speech (``--speech-models '{"zul": "<dir>"}'``: with languages routed to models, as
``KHULUMA_SPEECH_LANGUAGE_MODELS``): a folder per language, named by its ISO 639-3 code (``zul``, ``xho``,
``tsn``, ``nso``, ``sot``, ``eng``, ``afr``, ``fra``; a suffix after a dash or underscore names the source:
``zul-vulavula``, ``eng_afrispeech``), each holding audio
files with a reference transcript beside each (same stem, ``.txt``)::

    python scripts/eval_real.py speech DIR [--limit N] [--json OUT]

For every file: the language auto-detection decides (refused as "not served", or a served language), with the
served languages' probability mass; served languages are also transcribed with their lang_code and scored (WER);
the hallucination guards' warnings are counted on served-language audio (their false-positive rate). Per language:
audio language-ID accuracy (a served language detected as itself, an unserved one refused), WER, and guard
warnings.

Text: MasakhaNER 2.0 (CC BY-NC 4.0; the GitHub repository masakhane-io/masakhane-ner, folder MasakhaNER2.0/data:
zul, xho, tsn, sna, swa), real news sentences with gold entities::

    python scripts/eval_real.py text DIR [--json OUT]      # DIR/<lang>/{dev,test}.txt

The heuristic recogniser's precision per entity type is measured on ``dev`` and ``test``: a language returns only
the types at precision >= 0.8 on both (contracts/quality.py), reported on ``test`` with their recall; text language
ID is scored on the test sentences of 40 characters or more. A predicted entity counts as correct when it lies
inside a gold entity of the same type (the heuristic answers the stem of a prefixed name: "Theku" inside gold
"yeTheku").
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from contracts.errors import LanguageNotServed  # noqa: E402
from scripts.eval_wer import word_errors  # noqa: E402

AUDIO = {".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a"}
MASAKHANER_TYPES = {"PER": "person", "LOC": "location", "ORG": "organisation", "DATE": "date"}
MASAKHANER_LANGUAGES = {"zul": "zul", "xho": "xho", "tsn": "tsn", "sna": "sna", "swa": "swh"}
_MARKUP = re.compile(r"\[[^\]]*\]")  # [um], [?], [noise]: transcribers' marks, not words


def clean_reference(text: str) -> str:
    return " ".join(_MARKUP.sub(" ", text).replace("_", "").replace("|", " ").split())


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    print(f"\n{title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


# ---------------------------------------------------------------------------------------------- speech


@dataclass
class SpeechOutcome:
    language: str
    source: str
    path: Path
    seconds: float
    served_language: bool
    refused: bool
    detected: str | None
    served_mass: float | None
    guard_warnings: int
    errors: int = 0
    words: int = 0
    auto_errors: int = 0


def speech(folder: Path, limit: int | None, models: dict[str, str] | None = None) -> list[SpeechOutcome]:
    from contracts.settings import Settings
    from engines.speech.audio import SAMPLE_RATE, load_audio
    from engines.speech.pipeline import get_pipeline
    from engines.speech.vad import speech_chunks
    from engines.speech.windows import speech_only

    settings = Settings(_env_file=None, speech={"language_models": models or {}})
    pipeline = get_pipeline(settings.speech, settings.data_dir)
    served = set(pipeline.models.routes())
    outcomes: list[SpeechOutcome] = []
    for lang_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        language, source = ([*re.split(r"[-_]", lang_dir.name, maxsplit=1), "-"])[:2]
        files = sorted(p for p in lang_dir.iterdir() if p.suffix.lower() in AUDIO and p.with_suffix(".txt").exists())
        for path in files[:limit]:
            reference = clean_reference(path.with_suffix(".txt").read_text(encoding="utf-8"))
            audio = load_audio(path)
            chunks = speech_chunks(audio)
            detection = pipeline.models.detector.detect(speech_only(audio, chunks)) if chunks else None
            outcome = SpeechOutcome(
                language,
                source or "-",
                path,
                audio.size / SAMPLE_RATE,
                language in served,
                refused=False,
                detected=None,
                served_mass=detection.served if detection else None,
                guard_warnings=0,
            )
            try:
                result = pipeline.transcribe(path, None)
                outcome.detected = result.language_code
                outcome.auto_errors = word_errors(reference, result.text)[0]
            except LanguageNotServed:
                outcome.refused = True
            if outcome.served_language:
                forced = pipeline.transcribe(path, language)
                outcome.errors, outcome.words = word_errors(reference, forced.text)
                outcome.guard_warnings = sum("hallucination guard" in w or "left out" in w for w in forced.warnings)
            else:
                outcome.words = len(reference.split())
            outcomes.append(outcome)
            print(
                f"{lang_dir.name}/{path.name}: {outcome.seconds:.0f} s, served mass "
                f"{outcome.served_mass if outcome.served_mass is not None else float('nan'):.3f}, "
                f"{'refused' if outcome.refused else 'detected ' + str(outcome.detected)}"
                + (f", WER {outcome.errors / max(1, outcome.words):.2f}" if outcome.served_language else ""),
                file=sys.stderr,
            )
    return outcomes


def report_speech(outcomes: list[SpeechOutcome]) -> dict[str, Any]:
    groups: dict[tuple[str, str], list[SpeechOutcome]] = defaultdict(list)
    for o in outcomes:
        groups[(o.language, o.source)].append(o)
    rows, summary = [], {}
    for (language, source), items in sorted(groups.items()):
        served = items[0].served_language
        correct = sum((o.detected == language) if served else o.refused for o in items)
        masses = [o.served_mass for o in items if o.served_mass is not None]
        words = sum(o.words for o in items)
        wer = sum(o.errors for o in items) / words if served and words else None
        auto_wer = sum(o.auto_errors for o in items) / words if served and words else None
        guarded = sum(o.guard_warnings > 0 for o in items) if served else None
        rows.append(
            [
                language,
                source,
                str(len(items)),
                f"{sum(o.seconds for o in items):.0f}",
                "yes" if served else "no",
                f"{correct}/{len(items)}",
                f"{min(masses):.3f}-{max(masses):.3f}" if masses else "-",
                f"{wer:.2f}" if wer is not None else "-",
                f"{auto_wer:.2f}" if auto_wer is not None else "-",
                f"{guarded}/{len(items)}" if guarded is not None else "-",
            ]
        )
        summary[f"{language}/{source}"] = {
            "files": len(items),
            "served": served,
            "language_id_correct": correct,
            "served_mass": [round(m, 4) for m in masses],
            "wer": wer,
            "auto_wer": auto_wer,
            "files_with_guard_warnings": guarded,
        }
    table(
        "Speech on real recordings (auto-detection; served languages also with their lang_code)",
        [
            "language",
            "source",
            "files",
            "seconds",
            "served",
            "language ID correct (detected, or refused if unserved)",
            "served-language mass",
            "WER with lang_code",
            "WER auto",
            "files with a guard warning",
        ],
        rows,
    )
    return summary


# ---------------------------------------------------------------------------------------------- text


def read_conll(path: Path) -> list[list[tuple[str, str]]]:
    sentences: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            if current:
                sentences.append(current)
                current = []
            continue
        token, _, tag = line.rpartition(" ")
        current.append((token or tag, tag if token else "O"))
    if current:
        sentences.append(current)
    return sentences


def gold_spans(sentence: list[tuple[str, str]]) -> tuple[str, list[tuple[int, int, str]]]:
    """The sentence as text (tokens joined by spaces) and its gold entities as character spans."""
    text, offsets = "", []
    for token, _ in sentence:
        text += " " if text else ""
        offsets.append((len(text), len(text) + len(token)))
        text += token
    spans, i = [], 0
    while i < len(sentence):
        tag = sentence[i][1]
        if tag[:2] in ("B-", "I-"):
            kind, j = tag[2:], i
            while j + 1 < len(sentence) and sentence[j + 1][1] == f"I-{kind}":
                j += 1
            spans.append((offsets[i][0], offsets[j][1], MASAKHANER_TYPES.get(kind, kind.lower())))
            i = j + 1
        else:
            i += 1
    return text, spans


def ner_counts(sentences: list[list[tuple[str, str]]]) -> tuple[dict[str, list[int]], int, int]:
    """Per type [correct, predicted], gold entities found (any type allowed), gold entities."""
    from engines.text.ner import HeuristicNER

    recogniser = HeuristicNER()
    per_type: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    found = total = 0
    for sentence in sentences:
        text, gold = gold_spans(sentence)
        entities = recogniser.recognise([text])[0]
        for e in entities:
            ok = any(e.entity == kind and s <= e.start and e.end <= end for s, end, kind in gold)
            per_type[e.entity][0] += ok
            per_type[e.entity][1] += 1
        total += len(gold)
        found += sum(any(e.entity == k and s <= e.start and e.end <= end for e in entities) for s, end, k in gold)
    return dict(per_type), found, total


def text(folder: Path) -> dict[str, Any]:
    from contracts.quality import NER_MIN_PRECISION
    from engines.text.langid import LanguageIdentifier

    identifier = LanguageIdentifier()
    ner_rows, lid_rows, summary = [], [], {}
    for name, code in MASAKHANER_LANGUAGES.items():
        if not (folder / name / "test.txt").exists():
            continue
        dev, _, _ = ner_counts(read_conll(folder / name / "dev.txt"))
        test_sentences = read_conll(folder / name / "test.txt")
        test, _, gold_total = ner_counts(test_sentences)
        # a type is returned only where it is precise enough on both splits: one split alone overstated person
        enabled = sorted(
            k
            for k in dev
            if min(dev[k][0] / dev[k][1], test.get(k, [0, 1])[0] / max(1, test.get(k, [0, 1])[1])) >= NER_MIN_PRECISION
        )
        allowed_ok = sum(test[k][0] for k in enabled if k in test)
        allowed_n = sum(test[k][1] for k in enabled if k in test)
        all_ok, all_n = sum(v[0] for v in test.values()), sum(v[1] for v in test.values())
        per_type = {k: (round(v[0] / v[1], 3), v[1]) for k, v in sorted(test.items()) if v[1]}
        ner_rows.append(
            [
                code,
                str(len(test_sentences)),
                f"{all_ok / max(1, all_n):.3f} ({all_n})",
                ", ".join(f"{k} {p:.2f} ({n})" for k, (p, n) in per_type.items()),
                ", ".join(enabled) or "none",
                f"{allowed_ok / allowed_n:.3f} ({allowed_n})" if allowed_n else "-",
                f"{allowed_ok / max(1, gold_total):.3f}",
            ]
        )
        texts = [gold_spans(s)[0] for s in test_sentences]
        texts = [t for t in texts if len(t) >= 40]
        guesses = identifier.detect_many(texts)
        right = sum(g.language == code for g in guesses)
        confusions = Counter(g.language for g in guesses if g.language != code).most_common(3)
        lid_rows.append([code, str(len(texts)), f"{right / max(1, len(texts)):.3f}", str(confusions or "-")])
        summary[code] = {
            "ner_test_precision_all_types": round(all_ok / max(1, all_n), 4),
            "ner_test_precision_by_type": per_type,
            "ner_dev_precision_by_type": {k: (round(v[0] / v[1], 3), v[1]) for k, v in sorted(dev.items()) if v[1]},
            "ner_enabled_types": enabled,
            "ner_test_precision_enabled": round(allowed_ok / allowed_n, 4) if allowed_n else None,
            "ner_test_predictions_enabled": allowed_n,
            "ner_test_recall_enabled": round(allowed_ok / max(1, gold_total), 4),
            "langid_accuracy": round(right / max(1, len(texts)), 4),
            "langid_sentences": len(texts),
        }
    table(
        "NER, heuristic recogniser, MasakhaNER 2.0 test (types returned: precision >= "
        f"{NER_MIN_PRECISION} on dev and test)",
        [
            "language",
            "sentences",
            "precision, every type (predictions)",
            "precision by type (predictions)",
            "types returned",
            "precision of what is returned",
            "recall of what is returned",
        ],
        ner_rows,
    )
    table(
        "Text language ID on real news sentences (MasakhaNER 2.0 test, 40+ characters)",
        ["language", "sentences", "accuracy", "most common confusions"],
        lid_rows,
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=("speech", "text"))
    parser.add_argument("data", type=Path, help="the data folder (see above)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many files per language folder")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument(
        "--speech-models",
        type=json.loads,
        default=None,
        help='speech: languages routed to models, as KHULUMA_SPEECH_LANGUAGE_MODELS: \'{"zul": "<dir>"}\'',
    )
    args = parser.parse_args()
    started = time.perf_counter()
    if args.part == "speech":
        summary = report_speech(speech(args.data, args.limit, args.speech_models))
    else:
        summary = text(args.data)
    print(f"\n({time.perf_counter() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
