"""Diarisation engine on speech synthesised with espeak-ng: two distinct voices, and one voice."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from engines.speech.diarise import assign_speakers, diarise, speech_segments
from tests.tools import require_tool

SR = 16000
LINES = {
    ("en+m3", 0): "The weather today is sunny with a light breeze from the north. Farmers expect a good harvest.",
    ("en+f4", 0): "I think we should visit the market early tomorrow morning, they sell fresh bread before nine.",
    ("en+m3", 1): "After that we can meet at the library and read the newspaper together for an hour or so.",
    ("en+f4", 1): "That sounds lovely, but remember to bring your umbrella in case the weather changes.",
}


def say(tmp: Path, voice: str, text: str) -> np.ndarray:
    require_tool("espeak-ng")
    require_tool("sox")
    out = tmp / f"{abs(hash((voice, text)))}.wav"
    espeak = subprocess.run(
        ["espeak-ng", "-v", voice, "-s", "150", "--stdout", text], check=True, capture_output=True
    ).stdout
    subprocess.run(
        ["sox", "-t", "wav", "-", "-r", str(SR), "-c", "1", "-b", "16", str(out)],
        input=espeak,
        check=True,
        capture_output=True,
    )
    audio, sr = sf.read(out, dtype="float32")
    assert sr == SR
    return audio


def concat(parts: list[tuple[str, np.ndarray]], gap: float) -> tuple[np.ndarray, list[tuple[float, float, str]]]:
    """Audio of the parts separated by ``gap`` seconds of silence, and the true (start, end, voice) turns."""
    chunks, truth, t = [], [], 0.0
    for voice, audio in parts:
        truth.append((t, t + len(audio) / SR, voice))
        chunks += [audio, np.zeros(int(gap * SR), dtype=np.float32)]
        t += len(audio) / SR + gap
    return np.concatenate(chunks), truth


@pytest.fixture(scope="module")
def voices(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], np.ndarray]:
    tmp = tmp_path_factory.mktemp("voices")
    return {key: say(tmp, key[0], text) for key, text in LINES.items()}


def speaker_at(turns: list[tuple[float, float, str]], start: float, end: float) -> str | None:
    """The speaker covering most of [start, end]."""
    overlap: dict[str, float] = {}
    for t0, t1, spk in turns:
        overlap[spk] = overlap.get(spk, 0.0) + max(0.0, min(end, t1) - max(start, t0))
    return max(overlap, key=overlap.get) if overlap and max(overlap.values()) > 0 else None


def check_two_speakers(turns, truth, tolerance: float) -> None:
    assert {spk for _, _, spk in turns} == {"SPEAKER_0", "SPEAKER_1"}, turns
    labels = {voice: {speaker_at(turns, s, e) for s, e, v in truth if v == voice} for voice in ("en+m3", "en+f4")}
    assert all(len(found) == 1 for found in labels.values()), (labels, turns)  # each voice has one id
    assert labels["en+m3"] != labels["en+f4"], turns
    assert speaker_at(turns, *truth[0][:2]) == "SPEAKER_0"  # ids in order of first appearance
    # every true change of speaker has a predicted change nearby
    predicted_changes = [turns[i][0] for i in range(1, len(turns)) if turns[i][2] != turns[i - 1][2]]
    assert len(predicted_changes) == len(truth) - 1, turns
    for (_, end, _), (start, _, _) in zip(truth, truth[1:]):
        true_change = (end + start) / 2
        assert min(abs(c - true_change) for c in predicted_changes) <= tolerance, (true_change, turns)


def test_speech_segments_follow_the_speech(voices) -> None:
    audio, truth = concat([("en+m3", voices[("en+m3", 0)]), ("en+f4", voices[("en+f4", 0)])], gap=2.0)
    segments = speech_segments(audio)
    assert segments
    for t0, t1, _ in truth:  # each utterance is (mostly) covered
        covered = sum(max(0.0, min(t1, e) - max(t0, s)) for s, e in segments)
        assert covered >= 0.8 * (t1 - t0)
    gap_start, gap_end = truth[0][1] + 0.3, truth[1][0] - 0.3  # the 2 s silence is not speech
    assert all(e <= gap_start or s >= gap_end for s, e in segments), segments
    assert speech_segments(np.zeros(SR * 3, dtype=np.float32)) == []


def test_two_voices_with_pauses(voices) -> None:
    parts = [(v, voices[(v, i)]) for i, v in ((0, "en+m3"), (0, "en+f4"), (1, "en+m3"), (1, "en+f4"))]
    audio, truth = concat(parts, gap=0.5)
    turns = diarise(audio, speech_segments(audio))
    check_two_speakers(turns, truth, tolerance=0.6)
    assert all(t0 < t1 for t0, t1, _ in turns)
    assert all(a[1] <= b[0] + 1e-6 for a, b in zip(turns, turns[1:]))  # ordered, no overlap


def test_two_voices_back_to_back(voices) -> None:
    """No pause at the change: the boundary comes from the embeddings alone."""
    parts = [("en+m3", voices[("en+m3", 0)]), ("en+f4", voices[("en+f4", 0)]), ("en+m3", voices[("en+m3", 1)])]
    audio, truth = concat(parts, gap=0.0)
    turns = diarise(audio, speech_segments(audio, min_silence_ms=2000))
    check_two_speakers(turns, truth, tolerance=1.0)


def test_one_voice_is_one_speaker(voices) -> None:
    audio, _ = concat([("en+f4", voices[("en+f4", 0)]), ("en+f4", voices[("en+f4", 1)])], gap=0.6)
    turns = diarise(audio, speech_segments(audio))
    assert turns and {spk for _, _, spk in turns} == {"SPEAKER_0"}, turns


def test_fixed_speaker_count_and_edge_cases(voices) -> None:
    audio, _ = concat([("en+m3", voices[("en+m3", 1)]), ("en+f4", voices[("en+f4", 1)])], gap=0.5)
    turns = diarise(audio, speech_segments(audio), num_speakers=2)
    assert {spk for _, _, spk in turns} == {"SPEAKER_0", "SPEAKER_1"}
    assert diarise(audio, []) == []
    # speech too short to embed is still attributed (one speaker)
    assert diarise(audio, [(0.5, 0.7)]) == [(0.5, 0.7, "SPEAKER_0")]


def test_assign_speakers_to_words() -> None:
    turns = [(0.0, 2.0, "SPEAKER_0"), (2.5, 4.0, "SPEAKER_1")]
    words = [(0.1, 0.4), (1.8, 2.6), (2.2, 2.4), (5.0, 5.5)]
    assert assign_speakers(words, turns) == ["SPEAKER_0", "SPEAKER_0", "SPEAKER_1", "SPEAKER_1"]
    assert assign_speakers([(0.0, 1.0)], []) == [None]
