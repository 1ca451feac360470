"""Audio whose header lies about its length (reliability issue: "Unable to allocate 32 GiB" -> 500).

The files are made on the spot, a few KB each: a WAV whose ``fact`` chunk and RIFF/data sizes claim six days
(``scripts/bench/_hostile.py``, shared with the soak bench), a FLAC whose STREAMINFO ``total_samples`` claims 99
days, and a FLAC of silence that really does decode to ten minutes (an audio "bomb": FLAC codes silence in a few
bytes per block). Memory is measured with tracemalloc, which sees numpy's allocations, so a buffer sized from the
header shows up even where the kernel would overcommit it.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from contracts.errors import TooLarge
from contracts.settings import Settings, SpeechSettings
from engines.speech.audio import SAMPLE_RATE, load_audio, probe
from engines.speech.pipeline import TranscriptionPipeline
from scripts.bench._hostile import RATE, lying_wav, tone

MB = 1 << 20


def _flac(path: Path, audio: np.ndarray) -> Path:
    with av.open(str(path), "w", format="flac") as container:
        stream = container.add_stream("flac", rate=RATE, layout="mono")
        pcm = (audio * 32767).astype(np.int16)
        for lo in range(0, pcm.size, 4096 * 16):
            frame = av.AudioFrame.from_ndarray(pcm[lo : lo + 4096 * 16].reshape(1, -1), format="s16", layout="mono")
            frame.sample_rate = RATE
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return path


def lying_flac(path: Path, seconds: float = 1.0) -> Path:
    """A FLAC of ``seconds`` whose STREAMINFO total_samples (36 bits) is 2^36 - 1 (99 days at 8 kHz)."""
    _flac(path, tone(seconds))
    data = bytearray(path.read_bytes())
    assert data[:4] == b"fLaC" and data[4] & 0x7F == 0  # STREAMINFO is the first block
    # STREAMINFO: 16+16+24+24 bits of block/frame sizes (10 bytes), then 20 rate, 3 channels, 5 bits, 36 samples
    packed = int.from_bytes(data[18:26], "big") | ((1 << 36) - 1)
    data[18:26] = packed.to_bytes(8, "big")
    path.write_bytes(bytes(data))
    return path


def peak_bytes(work: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        return work(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _no_speech(audio: np.ndarray, **options: int) -> list[dict[str, int]]:
    """A VAD that hears no speech: the pipeline's decoding, music and diarisation steps run, no model."""
    return []


def _pipeline(settings: Settings, **transcription: Any) -> TranscriptionPipeline:
    section = settings.speech.model_copy(update=transcription)
    return TranscriptionPipeline(section, settings.data_dir, vad=_no_speech)


@pytest.mark.parametrize("make", [lying_wav, lying_flac], ids=["wav-fact-and-sizes", "flac-streaminfo"])
def test_header_duration_is_never_allocated(tmp_path: Path, make: Callable[[Path], Path]) -> None:
    path = make(tmp_path / "lie")
    assert path.stat().st_size < 16_000
    assert probe(path).duration > 5 * 24 * 3600  # the header does claim days
    audio, peak = peak_bytes(lambda: load_audio(path))
    assert audio.size == pytest.approx(SAMPLE_RATE, abs=400)  # the one second that is really there
    assert peak < 8 * MB, f"{peak / MB:.0f} MB for one second of audio"


@pytest.mark.parametrize("make", [lying_wav, lying_flac], ids=["wav-fact-and-sizes", "flac-streaminfo"])
def test_lying_header_with_diarise_and_music_is_transcribed(
    settings: Settings, tmp_path: Path, make: Callable[[Path], Path]
) -> None:
    path = make(tmp_path / "lie")
    pipeline = _pipeline(settings)
    result, peak = peak_bytes(lambda: pipeline.transcribe(path, diarise=True, detect_music=True))
    assert result.audio_length_seconds == pytest.approx(1.0, abs=0.05)
    assert result.sample_rate == RATE and result.diarised
    assert peak < 64 * MB, f"{peak / MB:.0f} MB for one second of audio"


def test_audio_bomb_is_refused_at_the_cap_with_bounded_memory(settings: Settings, tmp_path: Path) -> None:
    path = _flac(tmp_path / "silence.flac", np.zeros(10 * 60 * RATE, dtype=np.float32))
    assert path.stat().st_size < 200_000  # ten minutes of silence in a small file
    pipeline = _pipeline(settings, max_whole_audio_seconds=60.0)

    def run() -> None:
        with pytest.raises(TooLarge, match=r"longer than 1 min once decoded.*diarisation and music detection"):
            pipeline.transcribe(path, diarise=True)

    _, peak = peak_bytes(run)
    assert peak < 16 * MB  # about one minute at 16 kHz (3.8 MB) and a block, not ten minutes (38 MB)
    # without diarisation or music detection the same audio streams: no cap, memory flat
    result = pipeline.transcribe(path)
    assert result.audio_length_seconds == pytest.approx(600.0, abs=0.1)


def test_whole_audio_cap_is_a_documented_setting() -> None:
    field = SpeechSettings.model_fields["max_whole_audio_seconds"]
    assert field.description and "header" in field.description
    assert SpeechSettings().max_whole_audio_seconds == 4 * 3600.0
