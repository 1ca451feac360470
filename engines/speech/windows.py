"""Windows of long audio, cut in silence found by the VAD.

A file of any length is decoded in blocks (``engines.speech.audio.iter_audio``) and grouped into windows of about
``window_seconds``, each cut in the longest pause of its last minute, so memory stays flat and no word is cut in
two. Streaming uses the same idea on its buffer: :func:`last_pause` says where already-final audio may be dropped.

Sample positions are 16 kHz sample indices; VAD chunks are ``{"start": sample, "end": sample}`` (faster-whisper's
Silero VAD format).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from engines.speech.audio import SAMPLE_RATE
from engines.speech.vad import Chunk, Vad

CUT_SEARCH_SECONDS = 60.0  # a window is cut in the longest-lasting silence of its last minute
MIN_CUT_PAUSE = SAMPLE_RATE // 5  # pauses shorter than 0.2 s are not worth a cut


@dataclass
class Window:
    offset: int  # samples from the start of the file
    audio: np.ndarray
    chunks: list[Chunk]  # VAD speech chunks, samples relative to ``audio``

    @property
    def start_seconds(self) -> float:
        return self.offset / SAMPLE_RATE


def windows(blocks: Iterator[np.ndarray], window_seconds: float, vad: Vad) -> Iterator[Window]:
    """Group blocks of 16 kHz audio into windows of about ``window_seconds``, each cut in silence."""
    size = int(window_seconds * SAMPLE_RATE)
    pending: list[np.ndarray] = []
    pending_samples = 0
    offset = 0
    for block in blocks:
        pending.append(block)
        pending_samples += block.size
        if pending_samples < size:
            continue
        buffer = np.concatenate(pending)
        chunks = vad(buffer)
        cut = silence_cut(chunks, buffer.size)
        yield Window(offset, buffer[:cut], _clip(chunks, cut))
        offset += cut
        rest = buffer[cut:].copy()
        pending, pending_samples = ([rest], rest.size) if rest.size else ([], 0)
        del buffer
    if pending_samples:
        buffer = np.concatenate(pending)
        yield Window(offset, buffer, vad(buffer))


def array_blocks(audio: np.ndarray, block_seconds: float = 30.0) -> Iterator[np.ndarray]:
    """An in-memory signal as the blocks :func:`windows` expects."""
    step = int(block_seconds * SAMPLE_RATE)
    for start in range(0, audio.size, step):
        yield audio[start : start + step]


def silence_cut(chunks: list[Chunk], size: int) -> int:
    """Where to end a full window: the middle of the longest silence in its last minute (the window end when
    it has none, e.g. a minute of unbroken speech)."""
    floor = max(size // 2, size - int(CUT_SEARCH_SECONDS * SAMPLE_RATE))
    gaps = [(chunks[i]["end"], chunks[i + 1]["start"]) for i in range(len(chunks) - 1)]
    gaps.append((chunks[-1]["end"], size) if chunks else (0, size))
    candidates = [(b - a, (a + b) // 2) for a, b in gaps if (a + b) // 2 >= floor and b - a >= MIN_CUT_PAUSE]
    if not candidates:
        return size
    return max(candidates)[1]


def last_pause(chunks: list[Chunk], limit: int, min_gap: int = 0) -> int:
    """The middle of the last pause that starts before sample ``limit`` (0 when there is none): where a
    streaming buffer may be cut, everything before it being final. ``min_gap`` (samples): shorter pauses do not
    count (the VAD's chunks are padded, so a gap between them is silence on both sides)."""
    if not chunks:
        return 0
    gaps = [
        (chunks[i]["end"], chunks[i + 1]["start"])
        for i in range(len(chunks) - 1)
        if chunks[i + 1]["start"] <= limit and chunks[i + 1]["start"] - chunks[i]["end"] >= min_gap
    ]
    if chunks[-1]["end"] < limit and limit - chunks[-1]["end"] >= min_gap:
        gaps.append((chunks[-1]["end"], limit))
    if not gaps:
        return 0
    a, b = gaps[-1]
    return (a + b) // 2


def speech_only(audio: np.ndarray, chunks: list[Chunk], limit_s: float = 30.0) -> np.ndarray:
    """The speech of ``audio`` end to end, up to about ``limit_s`` seconds (what language detection hears)."""
    parts, total = [], 0
    for c in chunks:
        parts.append(audio[c["start"] : c["end"]])
        total += c["end"] - c["start"]
        if total >= limit_s * SAMPLE_RATE:
            break
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def _clip(chunks: list[Chunk], cut: int) -> list[Chunk]:
    out = []
    for c in chunks:
        if c["start"] >= cut:
            break
        out.append({"start": c["start"], "end": min(c["end"], cut)})
    return out
