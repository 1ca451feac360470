"""Test audio made on the spot: speech from espeak-ng, re-encoded into every supported format with PyAV.

No audio is shipped: every test makes what it needs (a few seconds each) in a temporary folder.
"""

from __future__ import annotations

import difflib
import re
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

# extension -> (container format, codec, sample rate, codec options)
FORMATS: dict[str, tuple[str, str, int, dict[str, str]]] = {
    "wav": ("wav", "pcm_s16le", 22050, {}),
    "mp3": ("mp3", "libmp3lame", 22050, {}),
    "flac": ("flac", "flac", 22050, {}),
    "aac": ("adts", "aac", 22050, {}),
    "ogg": ("ogg", "vorbis", 22050, {"strict": "experimental"}),
    "mp4": ("mp4", "aac", 44100, {}),
    "aiff": ("aiff", "pcm_s16be", 22050, {}),
    "opus": ("ogg", "libopus", 48000, {}),
}


def have_espeak() -> bool:
    return shutil.which("espeak-ng") is not None


def espeak(text: str, out: Path, voice: str = "en", speed: int = 150) -> Path:
    """Synthesise ``text`` with espeak-ng into a 22.05 kHz mono WAV file."""
    subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(out), text], check=True, capture_output=True, timeout=60
    )
    return out


def read_pcm(path: Path) -> tuple[np.ndarray, int]:
    """Decode a file to float32 mono at its own rate (test helper, independent of engines.audio)."""
    with av.open(str(path)) as c:
        s = c.streams.audio[0]
        rate = s.rate
        res = av.AudioResampler(format="flt", layout="mono", rate=rate)
        parts = [f.to_ndarray().reshape(-1) for fr in c.decode(s) for f in res.resample(fr)]
        parts += [f.to_ndarray().reshape(-1) for f in res.resample(None)]
    return np.concatenate(parts), rate


def write_audio(samples: np.ndarray, rate: int, out: Path, fmt: str | None = None, channels: int = 1) -> Path:
    """Encode float32 mono ``samples`` at ``rate`` into ``out`` (format from the extension or ``fmt``)."""
    ext = fmt or out.suffix.lstrip(".")
    container_fmt, codec, target_rate, options = FORMATS[ext]
    if codec == "vorbis":  # FFmpeg's native Vorbis encoder writes stereo only
        channels = 2
    layout = "stereo" if channels == 2 else "mono"
    with av.open(str(out), "w", format=container_fmt) as c:
        stream = c.add_stream(codec, rate=target_rate, layout=layout)
        stream.codec_context.options = dict(options)
        resampler = av.AudioResampler(format=stream.codec_context.format.name, layout=layout, rate=target_rate)
        block = 4096
        pcm = np.asarray(samples, dtype=np.float32)
        for start in range(0, len(pcm), block):
            chunk = pcm[start : start + block].reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(chunk, format="flt", layout="mono")
            frame.sample_rate = rate
            frame.pts = start
            frame.time_base = Fraction(1, rate)
            for f in resampler.resample(frame):
                for packet in stream.encode(f):
                    c.mux(packet)
        for f in resampler.resample(None):
            for packet in stream.encode(f):
                c.mux(packet)
        for packet in stream.encode(None):
            c.mux(packet)
    return out


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
    from engines.audio import load_audio

    return load_audio(espeak(text, folder / f"{name}.wav", voice, speed))


def silence(seconds: float, rate: int = 16000) -> np.ndarray:
    return np.zeros(int(seconds * rate), dtype=np.float32)


# Short call-centre sentences for batch/job tests and benchmarks (espeak-ng English is clear to Whisper base).
CALL_PHRASES = [
    "good morning, the weather today is sunny and warm",
    "please call me back tomorrow about the invoice",
    "the train to the city leaves at seven o'clock",
    "thank you for calling, how can I help you",
    "my account number is one two three four five",
    "we will deliver the parcel on friday afternoon",
]


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
