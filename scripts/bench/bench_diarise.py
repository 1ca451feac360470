"""Diarisation and music detection speed, bare engines vs inside the transcription service pipeline.

A synthetic call is built with espeak-ng (two voices taking turns) and numpy chords (music on hold). Printed:

- real-time factor (processing seconds / audio seconds) of ``speech_segments``, ``diarise`` and ``detect_music``;
- the service side: ``Speech.transcribe`` (the deployment class, called directly in this process) with
  diarise+detect_music
  vs without, so the extra cost of the two options is seen next to the bare engines' cost, and the ratio.

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/bench_diarise.py [--turns 8] [--repeat 2]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.bench._speech import espeak_16k  # noqa: E402

SR = 16000
LINES = [
    "Good morning, thank you for calling the municipal help line, how can I help you today?",
    "Hello, I would like to report a burst water pipe on the corner of Main Road and Church Street.",
    "I am sorry to hear that. Can you tell me when you first noticed the water on the road?",
    "It started yesterday evening and now the whole pavement is flooded in front of the school.",
]


def chords(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * SR)) / SR
    out = np.zeros_like(t)
    for k in range(int(seconds / 0.5)):
        m = (t >= k * 0.5) & (t < (k + 1) * 0.5)
        for f in ((261.63, 329.63, 392.0), (220.0, 261.63, 329.63))[(k // 4) % 2]:
            out[m] += np.exp(-3 * (t[m] - k * 0.5)) * np.sin(2 * np.pi * f * (t[m] - k * 0.5))
    return (0.2 * out / np.abs(out).max()).astype(np.float32)


def build_call(turns: int) -> np.ndarray:
    parts = []
    for i in range(turns):
        parts += [espeak_16k(LINES[i % len(LINES)], "en+m3" if i % 2 == 0 else "en+f4"), np.zeros(SR // 2, np.float32)]
        if i == turns // 2:
            parts.append(chords(8.0))
    return np.concatenate(parts)


def timed(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    from engines.speech.diarise import default_embedder, diarise, speech_segments
    from engines.speech.music import detect_music

    audio = build_call(args.turns)
    seconds = len(audio) / SR
    default_embedder()
    diarise(audio[: SR * 5], speech_segments(audio[: SR * 5]))  # warm-up (librosa, onnxruntime)
    detect_music(audio[: SR * 5])

    t_vad, segments = timed(lambda: speech_segments(audio), args.repeat)
    t_dia, turns = timed(lambda: diarise(audio, segments), args.repeat)
    t_mus, music = timed(lambda: detect_music(audio), args.repeat)
    speakers = sorted({s for *_, s in turns})
    print(f"audio: {seconds:.1f} s, {args.turns} turns of two voices, 8 s of music")
    print(f"{'bare engine':<28}{'seconds':>10}{'RTF':>10}")
    for name, t in (("speech_segments (VAD)", t_vad), ("diarise", t_dia), ("detect_music", t_mus)):
        print(f"{name:<28}{t:>10.2f}{t / seconds:>10.3f}")
    print(f"found {len(speakers)} speakers in {len(turns)} turns, music spans {music}")

    from contracts.payloads import Blob
    from contracts.settings import Settings
    from contracts.speech import TranscribeRequest, TranscriptionResult
    from deployments.speech import Speech

    service = Speech(Settings(_env_file=None).for_replica(("whisper", "transcription")))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "call.wav"
        sf.write(path, audio, SR)

        def run(diarise_on: bool) -> TranscriptionResult:
            request = TranscribeRequest(
                audio=Blob(data=path.read_bytes(), size=path.stat().st_size),
                file_name=path.name,
                language="eng",
                diarise=diarise_on,
                detect_music=diarise_on,
            )
            return asyncio.run(service.transcribe(request))

        run(False)
        t_plain, _ = timed(lambda: run(False), args.repeat)
        t_full, result = timed(lambda: run(True), args.repeat)
    extra = t_full - t_plain
    bare = t_vad + t_dia + t_mus
    print(f"\n{'service (Transcription)':<34}{'seconds':>10}{'RTF':>10}")
    print(f"{'transcribe':<34}{t_plain:>10.2f}{t_plain / seconds:>10.3f}")
    print(f"{'transcribe + diarise + music':<34}{t_full:>10.2f}{t_full / seconds:>10.3f}")
    print(
        f"extra cost of the options in the service: {extra:.2f} s vs bare engines {bare:.2f} s "
        f"(ratio {extra / bare if bare else float('nan'):.2f})"
    )
    assert isinstance(result, TranscriptionResult)
    ids = sorted({w.speaker_id for w in result.words if w.speaker_id})
    print(f"service result: speakers on words {ids}, warnings {result.warnings}")


if __name__ == "__main__":
    main()
