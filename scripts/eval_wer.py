"""Word error rate of the speech pipeline on a small synthetic set (English, Afrikaans, French).

The audio is made on the spot with espeak-ng (formant synthesis: robotic, accented speech, much harder for
Whisper than real speakers, so these numbers are a floor to regress against, not a claim about real calls).
Reference texts are below. Text is normalised before scoring: lower case, punctuation removed, digits kept.

    .venv/bin/python scripts/eval_wer.py                 # all languages, given language code
    .venv/bin/python scripts/eval_wer.py --auto          # also with language auto-detection
    .venv/bin/python scripts/eval_wer.py --lang eng --limit 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from contracts.wer import word_errors  # noqa: E402  (scored in contracts.wer; tests and scripts import it from here)

# language -> (espeak-ng voice, reference sentences)
SENTENCES: dict[str, tuple[str, list[str]]] = {
    "eng": (
        "en",
        [
            "The meeting will start at nine o'clock tomorrow morning.",
            "Please call me back when you have finished reading the report.",
            "The weather in Johannesburg is sunny and warm today.",
            "We need to buy bread, milk and eggs from the shop.",
            "My account number was sent to you by email last week.",
            "The children are playing football in the park after school.",
        ],
    ),
    "afr": (
        "af",
        [
            "Die vergadering begin môreoggend om nege uur.",
            "Bel my asseblief terug wanneer jy klaar is met die verslag.",
            "Die weer in Kaapstad is vandag sonnig en warm.",
            "Ons moet brood, melk en eiers by die winkel koop.",
            "Ek het my rekeningnommer verlede week per e-pos gestuur.",
            "Die kinders speel sokker in die park na skool.",
        ],
    ),
    "fra": (
        "fr",
        [
            "La réunion commencera demain matin à neuf heures.",
            "Rappelez-moi quand vous aurez fini de lire le rapport.",
            "Il fait beau et chaud à Dakar aujourd'hui.",
            "Nous devons acheter du pain, du lait et des oeufs au magasin.",
            "Je vous ai envoyé mon numéro de compte par courriel la semaine dernière.",
            "Les enfants jouent au football dans le parc après l'école.",
        ],
    ),
}
SPEED = 140  # espeak-ng words per minute (its default 175 is hard to follow even for people)


def synthesise(text: str, voice: str, out: Path) -> Path:
    subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(SPEED), "-w", str(out), text], check=True, capture_output=True, timeout=60
    )
    return out


def evaluate(
    languages: list[str], limit: int | None = None, auto: bool = False, settings=None, verbose: bool = False
) -> dict[str, dict]:
    """WER per language (and the detected languages when ``auto``)."""
    from contracts.settings import Settings
    from engines.speech.pipeline import get_pipeline

    settings = settings or Settings()
    pipeline = get_pipeline(settings.speech, settings.data_dir)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="khuluma-wer-") as tmp:
        for lang in languages:
            voice, sentences = SENTENCES[lang]
            errors = words = 0
            detected: list[str] = []
            seconds = audio = 0.0
            for i, sentence in enumerate(sentences[:limit]):
                wav = synthesise(sentence, voice, Path(tmp) / f"{lang}-{i}.wav")
                started = time.perf_counter()
                result = pipeline.transcribe(wav, None if auto else lang)
                seconds += time.perf_counter() - started
                audio += result.audio_length_seconds
                e, n = word_errors(sentence, result.text)
                errors, words = errors + e, words + n
                detected.append(result.language_code)
                if verbose:
                    print(
                        f"  [{lang}] ref: {sentence}\n  [{lang}] hyp: {result.text} ({result.language_code}, {e}/{n})",
                        flush=True,
                    )
            results[lang] = {
                "wer": round(errors / max(words, 1), 4),
                "errors": errors,
                "words": words,
                "files": len(detected),
                "detected": detected,
                "accuracy_of_detection": round(detected.count(lang) / max(len(detected), 1), 3),
                "rtf": round(seconds / max(audio, 1e-9), 3),
            }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lang", action="append", choices=sorted(SENTENCES), help="language(s) (default: all)")
    parser.add_argument("--limit", type=int, default=None, help="sentences per language")
    parser.add_argument("--auto", action="store_true", help="also evaluate with language auto-detection")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every hypothesis")
    args = parser.parse_args()
    languages = args.lang or list(SENTENCES)
    report = {"given_language": evaluate(languages, args.limit, False, verbose=args.verbose)}
    if args.auto:
        report["auto_detected"] = evaluate(languages, args.limit, True, verbose=args.verbose)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for mode, rows in report.items():
        print(f"\n{mode}:")
        print(f"  {'lang':6} {'WER':>7} {'words':>6} {'files':>6} {'detected ok':>12} {'RTF':>6}")
        for lang, row in rows.items():
            print(
                f"  {lang:6} {row['wer']:7.3f} {row['words']:6d} {row['files']:6d} "
                f"{row['accuracy_of_detection']:12.2f} {row['rtf']:6.2f}"
            )


if __name__ == "__main__":
    main()
