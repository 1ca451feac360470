"""Speech for the benchmarks, made on the spot: espeak-ng English (or another voice) as WAV, re-encoded with PyAV.

The tests make their audio with the same functions (``tests/speechdata.py`` imports them): one copy. Needs the
espeak-ng program (``./scripts/setup.sh --bench`` installs it when run as root).
"""

from __future__ import annotations

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


def espeak(text: str, out: Path, voice: str = "en", speed: int = 150) -> Path:
    """Synthesise ``text`` with espeak-ng into a 22.05 kHz mono WAV file."""
    subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(out), text], check=True, capture_output=True, timeout=60
    )
    return out


def sox_16k(wav: bytes) -> np.ndarray:
    """A WAV file's bytes as 16 kHz mono float32, resampled by sox (the diarisation and music figures' audio)."""
    pcm = subprocess.run(
        ["sox", "-t", "wav", "-", "-t", "raw", "-r", "16000", "-c", "1", "-e", "signed", "-b", "16", "-"],
        input=wav,
        check=True,
        capture_output=True,
    ).stdout
    return np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0


def espeak_16k(text: str, voice: str = "en", speed: int = 150) -> np.ndarray:
    """``text`` spoken by espeak-ng as 16 kHz mono float32 (:func:`sox_16k`)."""
    wav = subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(speed), "--stdout", text], check=True, capture_output=True, timeout=60
    ).stdout
    return sox_16k(wav)


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


# Short call-centre sentences for batch/job tests and benchmarks (espeak-ng English is clear to Whisper base).
CALL_PHRASES = [
    "good morning, the weather today is sunny and warm",
    "please call me back tomorrow about the invoice",
    "the train to the city leaves at seven o'clock",
    "thank you for calling, how can I help you",
    "my account number is one two three four five",
    "we will deliver the parcel on friday afternoon",
]
