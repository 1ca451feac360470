"""How soon a live stream's first language can be decided, measured on real recordings: the evidence a live step
without a language has after each second of audio, and the ROC of the rule that commits it early.

For every recording and every buffer a live step sees before its language is settled (every 0.5 s of audio from
1 s to 6.5 s, as a stream steps; steps with 6 s of speech or more are decided by the file's rule instead), the
step's own evidence is computed the way the service computes it (``engines.speech.first_language``): the speech
the VAD finds, Whisper's language detection on its unpadded encoding, a greedy decode in the likeliest
served language from the same encoding, and the text language identifier's reading of that decode.
Folders as ``scripts/eval_real.py`` reads them (``<iso639-3>-<source>/<stem>.wav``); a folder whose language is
not served here (isiZulu, German, ...) holds negatives: any early decision on it would write invented words::

    python scripts/eval_first_language.py collect DIR... [--limit N] [--every K] [--offset J] --json OUT
    python scripts/eval_first_language.py roc OUT.json [OUT2.json ...]

``--every K --offset J``: every K-th recording from the J-th (a tuning set and a held-out set of the same
folders). Long recordings (calls) are cut into 12 s pieces first. ``roc`` prints, for a grid of thresholds, the
share of served-language streams decided early (and by which buffer length, on average) against the unserved
streams that would have been decided (each one a stream of invented words), and the rule in force.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PREFIXES = tuple(0.5 * n for n in range(2, 14))  # the buffers of the steps before 6 s of speech: 1.0 to 6.5 s
PIECE_S = 12.0  # long recordings are cut into pieces this long (each a stream)
SERVED = {"eng", "afr", "fra"}


def collect(args: argparse.Namespace) -> None:
    import numpy as np

    from contracts.settings import Settings
    from engines.speech.audio import SAMPLE_RATE, load_audio
    from engines.speech.live_step import STREAM_PAD_MS
    from engines.speech.pipeline import get_pipeline
    from engines.speech.vad import speech_chunks
    from engines.speech.windows import speech_only

    settings = Settings(_env_file=None)
    pipeline = get_pipeline(settings.speech, settings.data_dir)
    pipeline.warm_up()
    first = pipeline.live.first_language
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for folder in args.folders:
        language = folder.name.split("-")[0].split("_")[0]
        files = sorted(p for p in folder.iterdir() if p.suffix == ".wav")[args.offset :: args.every]
        for path in files[: args.limit]:
            audio = load_audio(path)
            pieces = max(1, int(audio.size / SAMPLE_RATE // PIECE_S)) if audio.size > 2 * PIECE_S * SAMPLE_RATE else 1
            for piece in range(pieces):
                clip = audio[int(piece * PIECE_S * SAMPLE_RATE) :] if pieces > 1 else audio
                steps = []
                for seconds in PREFIXES:
                    if seconds * SAMPLE_RATE > clip.size + SAMPLE_RATE // 2:
                        break
                    buffer = np.ascontiguousarray(clip[: int(seconds * SAMPLE_RATE)])
                    chunks = speech_chunks(buffer, min_silence_ms=pipeline.live.commit_silence_ms, pad_ms=STREAM_PAD_MS)
                    evidence = first.evidence(speech_only(buffer, chunks) if chunks else np.zeros(0, np.float32))
                    steps.append({"buffer_s": seconds, **evidence.as_dict()})
                name = f"{path.stem}#{piece}"
                rows.append({"folder": folder.name, "language": language, "name": name, "steps": steps})
                looks = [
                    f"{s['code']} {s['probability']:.2f} {s['text_language']} {s['text_confidence']:.2f}" for s in steps
                ]
                print(f"{folder.name}/{name}: " + " | ".join(looks), file=sys.stderr)
    args.json.write_text(json.dumps({"rows": rows, "seconds": time.perf_counter() - started}, indent=1))
    print(f"{len(rows)} streams in {time.perf_counter() - started:.0f} s", file=sys.stderr)


def roc(args: argparse.Namespace) -> None:
    from dataclasses import replace

    from engines.speech.first_language import EarlyRule
    from engines.speech.live_step import STREAM_DETECT_SECONDS

    rows = [row for path in args.json for row in json.loads(path.read_text())["rows"]]
    for row in rows:  # from 6 s of speech on, the file's rule decides (engines/speech/pipeline.py)
        row["steps"] = [s for s in row["steps"] if s["speech_s"] < STREAM_DETECT_SECONDS]
    positives = [r for r in rows if r["language"] in SERVED]
    negatives = [r for r in rows if r["language"] not in SERVED]
    print(f"{len(positives)} served-language streams, {len(negatives)} unserved ones\n")
    print(
        "| Whisper >= | text ID >= | log-prob >= | served: decided early | by 3 s of audio | wrong language "
        "| mean audio s | unserved decided (invented) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    current = EarlyRule()
    grid = [
        replace(current, detection=p, text=t, logprob=lp)
        for p in (0.6, 0.7, 0.8, 0.9)
        for t in (0.3, 0.4, 0.6)
        for lp in (-1.0, -0.8, -0.6)
    ]
    for rule in [*grid, replace(current, own_token=False), current]:
        early, wrong, buffers = 0, 0, []
        for row in positives:
            hit = next((s for s in row["steps"] if rule.decides(s)), None)
            if hit is not None:
                early += 1
                wrong += hit["code"] != row["language"]
                buffers.append(hit["buffer_s"])
        invented = sum(any(rule.decides(s) for s in row["steps"]) for row in negatives)
        mark = " **(in force)**" if rule == current else " (Whisper's top token may be a kin's)" * (not rule.own_token)
        print(
            f"| {rule.detection} | {rule.text} | {rule.logprob} | {early}/{len(positives)} "
            f"({early / max(1, len(positives)):.0%}) | {sum(b <= 3 for b in buffers)} | {wrong} | "
            f"{sum(buffers) / max(1, len(buffers)):.1f} | {invented}/{len(negatives)}{mark} |"
        )
    by_folder: dict[str, list[int]] = {}
    for row in rows:
        counts = by_folder.setdefault(row["folder"], [0, 0])
        counts[0] += any(current.decides(s) for s in row["steps"])
        counts[1] += 1
    print(
        "\nIn force, decided early per folder: " + ", ".join(f"{k} {a}/{b}" for k, (a, b) in sorted(by_folder.items()))
    )
    closest = sorted(
        (s for row in negatives for s in row["steps"] if s["code"]), key=lambda s: -s["probability"] * s["own_token"]
    )[:3]
    print(
        "Unserved steps nearest the rule: "
        + "; ".join(
            f"{s['code']} {s['probability']:.2f} text {s['text_language']} {s['text_confidence']:.2f} "
            f"{s['text'][:40]!r}"
            for s in closest
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("folders", nargs="+", type=Path)
    c.add_argument("--limit", type=int, default=None)
    c.add_argument("--every", type=int, default=1)
    c.add_argument("--offset", type=int, default=0)
    c.add_argument("--json", type=Path, required=True)
    r = sub.add_parser("roc")
    r.add_argument("json", nargs="+", type=Path)
    args = parser.parse_args()
    collect(args) if args.command == "collect" else roc(args)


if __name__ == "__main__":
    main()
