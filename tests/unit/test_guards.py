"""Hallucination guards (engines.speech.whisper.guards, with engines.speech.screening): pure checks on Whisper-like
segments, no model."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from engines.speech import screening
from engines.speech.whisper import guards


@dataclass
class Seg:
    start: float
    end: float
    text: str
    avg_logprob: float = -0.3
    no_speech_prob: float = 0.05


# what Whisper base wrote for real isiZulu telephone speech forced into a served language (docs/speech.md)
LOOPS = [
    "The app has a bank, a phone, a picture, a phone, a phone, a phone, a phone, a phone, a phone",
    "J'ai l'avance d'une femme et d'une femme et d'une femme et d'une femme",
    "Liga lais paraia, kusasememememememememememememememememe",
    "Mina gwfwwwwwwwwwwwwwwwwwwwwwwwwwwwww",
    " nd  nd  nd  nd  nd  nd  nd  nd  nd",
    "les fournits, les fournits, les fournits, les fournits, les fournits",
]
FLUENT = [
    "The weather in Durban is warm today, and the traffic on the highway is terrible.",
    "He paid 1000000 rand for the house in 2019.",
    "No, no, no, I said tomorrow.",
    "Thank you, thank you very much for calling.",
    "Die kinders speel sokker in die park na skool en ons koop brood en melk.",
    "Nous allons à la plage avec les enfants demain matin.",
]


@pytest.mark.parametrize("text", LOOPS)
def test_repetition_loops_are_caught(text: str) -> None:
    assert screening.repeats(text)
    verdict = guards.judge(Seg(0, 5, text, avg_logprob=-0.1))  # loops are decoded with high confidence
    assert verdict is not None and verdict.problem == guards.REPETITION and verdict.drop


@pytest.mark.parametrize("text", FLUENT)
def test_fluent_text_passes(text: str) -> None:
    assert not screening.repeats(text)
    assert guards.judge(Seg(0, 5, text)) is None


def test_compression_ratio_is_whispers_measure() -> None:
    assert screening.compression_ratio("") == 0.0
    assert screening.compression_ratio("ab " * 200) > screening.COMPRESSION_RATIO_LIMIT
    assert screening.compression_ratio(FLUENT[0]) < 1.5


def test_no_speech_is_dropped_and_low_confidence_is_kept_but_flagged() -> None:
    segments = [
        Seg(0.0, 2.0, FLUENT[0]),
        Seg(2.0, 4.0, "Thank you for watching.", avg_logprob=-1.4, no_speech_prob=0.9),
        Seg(4.0, 6.0, "mumbled words here", avg_logprob=-1.3, no_speech_prob=0.1),
        Seg(61.0, 70.0, LOOPS[0], avg_logprob=-0.2),
    ]
    kept, warnings = guards.screen(segments)
    assert [s.start for s in kept] == [0.0, 4.0]
    assert len(warnings) == 3
    repetition, no_speech, low = warnings
    assert repetition.startswith("1 segment(s) (1:01-1:10)") and "repeated itself" in repetition
    assert no_speech.startswith("1 segment(s) (0:02-0:04)") and "no speech" in no_speech
    assert low.startswith("1 segment(s) (0:04-0:06)") and "unreliable" in low


def test_clean_segments_give_no_warning_and_confidence_is_the_token_geometric_mean() -> None:
    kept, warnings = guards.screen([Seg(0, 1, FLUENT[1]), Seg(1, 2, "")])
    assert len(kept) == 2 and warnings == []
    assert screening.confidence(0.0) == 1.0
    assert screening.confidence(-0.6931) == pytest.approx(0.5, abs=1e-3)
    assert screening.confidence(-50) == 0.0


def test_a_passage_said_twice_in_a_row_is_cut_to_one() -> None:
    from engines.speech.recognition import SpeechSegment, WordTiming
    from engines.speech.whisper.guards import undoubled

    text = "Longdale approaches as carefully unlocking him. Longdale approaches as carefully unlocking him."
    words = [WordTiming(" " + w, i * 0.5, i * 0.5 + 0.4, 0.9) for i, w in enumerate(text.split())]
    cut = undoubled(SpeechSegment(0.0, 6.0, text, words, -0.3, 0.01))
    assert cut.text == "Longdale approaches as carefully unlocking him." and len(cut.words) == 6
    assert cut.end == words[5].end
    assert guards.doubled("No, no. No, no.") is None  # too short to be a decoder's doubling
    assert guards.doubled("The train leaves at four. The bus leaves at five.") is None
    kept = SpeechSegment(0.0, 2.0, "I said go home I said go home", [], -0.3, 0.0)  # no words: cut by the text
    assert undoubled(kept).text == "I said go home"
