"""Voice activity detection: where the speech is in 16 kHz audio, for every speech-model family.

Silero VAD v6, the ONNX model faster-whisper bundles (its public ``faster_whisper.vad`` API): the one VAD of the
service. :func:`speech_chunks` is the pipeline's (a file's windows, a live step's commit and its end of speech);
:func:`speech_timestamps` takes every option (diarisation's speech). Chunks are ``{"start": sample, "end":
sample}`` in 16 kHz samples: a family decodes only the speech they mark (``Recognizer.transcribe``).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

SAMPLE_RATE = 16_000
Chunk = dict[str, int]  # {"start": sample, "end": sample}


class Vad(Protocol):
    """What finds speech for the pipeline (:func:`speech_chunks`, or a test's stand-in)."""

    def __call__(self, audio: np.ndarray, *, min_silence_ms: int = ..., pad_ms: int = ...) -> list[Chunk]: ...


def speech_timestamps(
    audio: np.ndarray,
    *,
    threshold: float = 0.5,
    min_silence_ms: int = 500,
    min_speech_ms: int = 250,
    pad_ms: int = 200,
) -> list[Chunk]:
    """Silero VAD v6 (faster-whisper's bundled ONNX model) speech chunks of 16 kHz ``audio``, in samples.

    No lock: faster-whisper's model keeps its recurrent state per call and an ONNX Runtime session runs calls
    from several threads at once."""
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    samples = np.ascontiguousarray(audio, dtype=np.float32)
    if samples.size < 512:  # less than the model's one frame
        return []
    options = VadOptions(
        threshold=threshold,
        min_silence_duration_ms=min_silence_ms,
        min_speech_duration_ms=min_speech_ms,
        speech_pad_ms=pad_ms,
    )
    return [
        {"start": int(c["start"]), "end": int(c["end"])}
        for c in get_speech_timestamps(samples, options, sampling_rate=SAMPLE_RATE)
    ]


def speech_chunks(
    audio: np.ndarray, *, min_silence_ms: int = 500, pad_ms: int = 200, threshold: float = 0.5
) -> list[Chunk]:
    """The pipeline's speech chunks of 16 kHz ``audio``: speech of at least 120 ms, each chunk padded by
    ``pad_ms`` and ended by a pause of ``min_silence_ms``."""
    return speech_timestamps(
        audio, threshold=threshold, min_silence_ms=min_silence_ms, min_speech_ms=120, pad_ms=pad_ms
    )
