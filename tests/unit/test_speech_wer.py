"""Word error rate floors on espeak-ng speech (scripts/eval_wer.py), for the languages Whisper base serves.

Each floor sits a margin above what the pipeline measures (docs/speech.md, regression floors: English 0.10 on three
sentences, French 0.75 on six) and below what a broken pipeline scores: an empty transcript is 1.0, French decoded
as English 1.21. espeak-ng's Afrikaans voice is not recognisable to Whisper base (WER about 1.0), so Afrikaans has
no floor here.
"""

from __future__ import annotations

from scripts.eval_wer import SENTENCES, evaluate, word_errors
from tests.tools import require_tool


def test_word_errors_counts_edits_after_normalisation() -> None:
    assert word_errors("Hello, World!", "hello world") == (0, 2)
    assert word_errors("the cat sat", "the bat sat down") == (2, 3)
    assert word_errors("l'école est fermée", "L'école est fermée.") == (0, 3)


def test_english_wer_floor(settings) -> None:
    require_tool("espeak-ng")
    result = evaluate(["eng"], limit=3, settings=settings)["eng"]
    assert result["files"] == 3 and result["words"] == sum(len(s.split()) for s in SENTENCES["eng"][1][:3])
    assert result["wer"] <= 0.2, result


def test_french_wer_floor(settings) -> None:
    require_tool("espeak-ng")
    result = evaluate(["fra"], limit=6, settings=settings)["fra"]
    assert result["files"] == 6 and result["detected"] == ["fra"] * 6
    assert result["wer"] <= 0.88, result
