"""Music-on-hold detection on espeak-ng speech with synthetic music between the utterances."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import engines.speech.music as music_engine
from engines.speech.music import detect_music
from tests.speechdata import espeak_16k, sox_16k
from tests.tools import require_tool

SR = 16000


def speech(text: str, voice: str = "en+m3") -> np.ndarray:
    return espeak_16k(text, voice)


def chords(seconds: float) -> np.ndarray:
    """Piano-like chord progression with a melody, made with numpy."""
    t = np.arange(int(seconds * SR)) / SR
    out = np.zeros_like(t)
    progression = [(261.63, 329.63, 392.0), (220.0, 261.63, 329.63), (174.61, 220.0, 261.63), (196.0, 246.94, 293.66)]
    beat = 0.5
    for k in range(int(seconds / beat)):
        m = (t >= k * beat) & (t < (k + 1) * beat)
        tt = t[m] - k * beat
        chord = progression[(k // 4) % 4]
        envelope = np.exp(-3 * tt)
        for f in chord:
            for harmonic, amp in ((1, 1.0), (2, 0.5), (3, 0.25)):
                out[m] += amp * envelope * np.sin(2 * np.pi * f * harmonic * tt)
        out[m] += 0.6 * envelope * np.sin(2 * np.pi * 2 * chord[k % 3] * tt)
    return (0.2 * out / np.abs(out).max()).astype(np.float32)


def sox_melody() -> np.ndarray:
    """Plucked-string melody synthesised by sox (3 s)."""
    require_tool("sox")
    notes = ["C4", "E4", "G4", "C5", "G4", "E4"]
    cmd = ["sox", "-n", "-r", str(SR), "-c", "1", "-b", "16", "-t", "wav", "-"]
    for i, note in enumerate(notes):
        cmd += ([":"] if i else []) + ["synth", "0.5", "pluck", note]
    return sox_16k(subprocess.run(cmd, check=True, capture_output=True).stdout)


@pytest.fixture(scope="module")
def utterances() -> tuple[np.ndarray, np.ndarray]:
    return (
        speech("Thank you for calling. Please hold while we connect you to the next available agent."),
        speech("Hello, this is Thandi speaking, how can I help you today?", "en+f4"),
    )


def overlap(spans: list[tuple[float, float]], start: float, end: float) -> float:
    return sum(max(0.0, min(end, e) - max(start, s)) for s, e in spans)


def test_music_between_speech_is_found(utterances) -> None:
    first, second = utterances
    hold = chords(10.0)
    audio = np.concatenate([first, hold, second])
    music_start, music_end = len(first) / SR, (len(first) + len(hold)) / SR
    spans = detect_music(audio)
    assert len(spans) == 1, spans
    start, end = spans[0]
    assert abs(start - music_start) <= 0.5 and abs(end - music_end) <= 0.7, (spans, music_start, music_end)
    assert overlap(spans, 0.0, music_start - 0.3) == 0.0  # the speech before is not music
    assert overlap(spans, music_end + 0.7, len(audio) / SR) == 0.0  # nor the speech after


def test_speech_alone_is_not_music(utterances) -> None:
    first, second = utterances
    assert detect_music(np.concatenate([first, np.zeros(SR // 2, dtype=np.float32), second])) == []


def test_sox_melody_and_several_spans(utterances) -> None:
    first, second = utterances
    melody = sox_melody()
    audio = np.concatenate([melody, first, melody, second])
    spans = detect_music(audio)
    a = len(melody) / SR
    b = a + len(first) / SR
    c = b + len(melody) / SR
    assert len(spans) == 2, spans
    assert overlap(spans, 0.0, a) >= 0.7 * a
    assert overlap(spans, b, c) >= 0.7 * (c - b)
    assert overlap(spans, a + 0.5, b - 0.5) == 0.0
    assert overlap(spans, c + 0.5, len(audio) / SR) == 0.0


def test_silence_and_tiny_input() -> None:
    assert detect_music(np.zeros(SR * 2, dtype=np.float32)) == []
    assert detect_music(np.zeros(100, dtype=np.float32)) == []


def test_long_audio_in_blocks_matches(utterances, monkeypatch: pytest.MonkeyPatch) -> None:
    """Audio longer than a block is scored block by block with context; the spans stay the same."""
    first, second = utterances
    audio = np.concatenate([first, chords(8.0), second])
    whole = detect_music(audio)
    monkeypatch.setattr(music_engine, "_BLOCK_SECONDS", 4.0)
    probs = music_engine.event_probabilities(audio)
    assert abs(len(probs) - len(audio) // 160) <= 2
    blocked = detect_music(audio)
    assert len(blocked) == len(whole) == 1
    assert abs(blocked[0][0] - whole[0][0]) <= 0.3 and abs(blocked[0][1] - whole[0][1]) <= 0.3
