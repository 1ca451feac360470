"""Test audio made on the spot: speech from espeak-ng, re-encoded into every supported format with PyAV.

No audio is shipped: every test makes what it needs (a few seconds each) in a temporary folder. The speech itself,
the formats and the call phrases are the benchmarks' (``scripts/bench/_speech.py``), so tests and benches make the
same audio from one copy; :func:`espeak` here adds the tool check (a skip, or a failure under ``CI=true``:
``tests/tools.py``) to the tests that really make speech.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import av
import numpy as np

from scripts.bench import _speech
from scripts.bench._speech import CALL_PHRASES, FORMATS, write_audio
from tests.tools import require_tool

__all__ = [
    "CALL_PHRASES",
    "FORMATS",
    "SPEC_FIELDS",
    "closest_phrase",
    "convert",
    "espeak",
    "espeak_16k",
    "read_pcm",
    "silence",
    "similarity",
    "sox_16k",
    "speech_16k",
    "tone_music",
    "write_audio",
]


def espeak(text: str, out: Path, voice: str = "en", speed: int = 150) -> Path:
    """Synthesise ``text`` with espeak-ng into a 22.05 kHz mono WAV file; without espeak-ng the calling test is
    skipped (failed under CI=true)."""
    require_tool("espeak-ng")
    return _speech.espeak(text, out, voice, speed)


def espeak_16k(text: str, voice: str = "en", speed: int = 150) -> np.ndarray:
    """espeak-ng speech as 16 kHz mono float32, resampled by sox (``scripts/bench/_speech.espeak_16k``)."""
    require_tool("espeak-ng")
    require_tool("sox")
    return _speech.espeak_16k(text, voice, speed)


def sox_16k(wav: bytes) -> np.ndarray:
    """A WAV file's bytes as 16 kHz mono float32, resampled by sox (``scripts/bench/_speech.sox_16k``)."""
    require_tool("sox")
    return _speech.sox_16k(wav)


def read_pcm(path: Path) -> tuple[np.ndarray, int]:
    """Decode a file to float32 mono at its own rate (test helper, independent of engines.speech.audio)."""
    with av.open(str(path)) as c:
        s = c.streams.audio[0]
        rate = s.rate
        res = av.AudioResampler(format="flt", layout="mono", rate=rate)
        parts = [f.to_ndarray().reshape(-1) for fr in c.decode(s) for f in res.resample(fr)]
        parts += [f.to_ndarray().reshape(-1) for f in res.resample(None)]
    return np.concatenate(parts), rate


def convert(wav: Path, ext: str, out_dir: Path, channels: int = 1) -> Path:
    samples, rate = read_pcm(wav)
    return write_audio(samples, rate, out_dir / f"{wav.stem}.{ext}", ext, channels)


def tone_music(seconds: float, rate: int = 16000, seed: int = 0) -> np.ndarray:
    """A synthetic music bed: a chord melody (a new chord every 0.4 s) with a soft drum; float32."""
    t = np.arange(int(seconds * rate)) / rate
    notes = [261.6, 293.7, 329.6, 349.2, 392.0, 440.0, 493.9, 523.3]
    out = np.zeros_like(t)
    step = int(0.4 * rate)
    for i, start in enumerate(range(0, len(t), step)):
        tt = t[start : start + step] - t[start]
        f0 = notes[i % len(notes)]
        chord = sum(np.sin(2 * np.pi * f * tt) for f in (f0, f0 * 1.26, f0 * 1.5)) / 3
        out[start : start + step] = chord * np.exp(-2 * tt)
    out += 0.3 * np.random.default_rng(seed).standard_normal(len(t)) * (np.mod(t, 0.5) < 0.03)
    return (0.4 * out).astype(np.float32)


def speech_16k(text: str, folder: Path, name: str, voice: str = "en", speed: int = 150) -> np.ndarray:
    """espeak-ng speech as 16 kHz mono float32."""
    from engines.speech.audio import load_audio

    return load_audio(espeak(text, folder / f"{name}.wav", voice, speed))


def silence(seconds: float, rate: int = 16000) -> np.ndarray:
    return np.zeros(int(seconds * rate), dtype=np.float32)


def similarity(said: str, heard: str) -> float:
    """How alike a phrase and a transcript read, 0 to 1: the characters of their lower-cased words, punctuation
    dropped. One misheard word ("sunny" as "sun", "today" as "today's") costs a little, where a word-set overlap
    counts it wholly wrong, and how a given CPU's kernels round decides such words (the same model and audio
    gave "the weather today is sunny" on one machine and "but when are today's sun" on another)."""

    def words(text: str) -> str:
        return " ".join(re.sub(r"[^a-z0-9' ]", " ", text.lower()).split())

    return difflib.SequenceMatcher(None, words(said), words(heard)).ratio()


def closest_phrase(heard: str, phrases: list[str]) -> int:
    """The index of the phrase a transcript reads most like."""
    return max(range(len(phrases)), key=lambda i: similarity(phrases[i], heard))


# The fields of the spec's transcription record (every route that answers one carries them all).
SPEC_FIELDS = {
    "id",
    "storage_url",
    "container_name",
    "blob_name",
    "customer_id",
    "project_id",
    "keychain_id",
    "upload_file_size",
    "audio_length_seconds",
    "sample_rate",
    "channels",
    "frame_rate",
    "mime_type",
    "language_code",
    "diarisation_result",
    "transcription_text",
}
