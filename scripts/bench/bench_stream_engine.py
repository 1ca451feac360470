"""A live stream's steps in-process (no Ray, no WebSocket): what each step costs the engine, and the parts of it.
Runs after ``./scripts/setup.sh --bench``:

    .venv/bin/python scripts/bench/bench_stream_engine.py [--streams 1 4 8] [--threads 2] [--json out.json]
    .venv/bin/python scripts/bench/bench_stream_engine.py --clips espeak /data/eng_fleurs /data/afr_lwazi
    .venv/bin/python scripts/bench/bench_stream_engine.py --ctc /tmp/khuluma-bench-ctc/omni-300m  # CTC live steps
    # on a GPU machine (scripts/bench/gpu_check.sh): no espeak there, the audio and the model carried
    python3 scripts/bench/bench_stream_engine.py --wav utterance.wav --model-dir whisper-base --device cuda

Feeds the espeak utterance of ``bench_stream.py`` through :func:`serve_app.services.live.steps.live_step` as fast as
the engine goes (a client that calls ``TranscriptionPipeline.live_step`` in this thread), and reports: the
unpaced RTF, the last step's time (what the end of an utterance waits for, without transport), the mean partial
step, and Whisper's encoder on 1 s of audio vs 30 s (faster-whisper pads every window's features to 30 s; the
standard CTranslate2 Whisper encoder takes 3000 frames, so a short tail costs a full window's encoder pass).
Also the file transcription of the same audio, and the word error of the streamed text against it. With
``--streams``: that many streams at once, each sent at real time in 100 ms frames (steps decode in worker
threads, as the deployment does): the end of the utterance -> final (p50/p99) and the first audio frame -> first
partial with text, over the streams. With ``--threads``: the same stream with that many threads per decode
(``speech.whisper_cpu_threads``), side by side with the default layout (docs/speech.md#decodes-side-by-side). With
``--clips``: the word error of streamed against file transcription on folders of recordings (the real ones stay
local: docs/speech.md#streaming-latency).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from _load import json_option, write_json  # noqa: E402
from bench_stream import UTTERANCE  # noqa: E402


class Direct:
    """A SpeechClient that decodes in this process."""

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline
        self.times: list[float] = []

    async def live_step(self, request: Any) -> Any:
        started = time.perf_counter()
        step = await asyncio.to_thread(self.pipeline.live_step, request)
        self.times.append(time.perf_counter() - started)
        return step


async def stream(client: Direct, pcm: bytes, lang: str = "eng") -> tuple[str, float]:
    from serve_app.services.live.state import StreamState
    from serve_app.services.live.steps import live_step

    state = StreamState(lang)
    started = time.perf_counter()
    for i in range(0, len(pcm), 3200):  # 100 ms frames
        if state.add_audio(pcm[i : i + 3200], 1 << 30):
            await live_step(client, state, final=False)
    await live_step(client, state, final=True)
    return state.committed_text(), time.perf_counter() - started


async def paced(client: Direct, pcm: bytes, lang: str = "eng") -> tuple[float, float]:
    """One stream at real time: (last frame -> final, first frame -> first partial with text), seconds."""
    from serve_app.services.live.state import StreamState
    from serve_app.services.live.steps import live_step

    state = StreamState(lang)
    started, first = time.perf_counter(), float("nan")
    for i in range(0, len(pcm), 3200):
        await asyncio.sleep(max(0.0, i / 32_000 - (time.perf_counter() - started)))
        if state.add_audio(pcm[i : i + 3200], 1 << 30):
            step = await live_step(client, state, final=False)
            if first != first and (state.committed_text() or step.pending_text):
                first = time.perf_counter() - started
    sent = time.perf_counter()
    await live_step(client, state, final=True)
    return time.perf_counter() - sent, first


async def many(client: Direct, pcm: bytes, n: int) -> list[tuple[float, float]]:
    return list(await asyncio.gather(*(paced(client, pcm) for _ in range(n))))


ESPEAK_VOICES = ("en", "en-us", "en-gb-x-rp", "en-029", "en-gb-scotland")


def clips_of(folder: str, scratch: Path) -> list[tuple[str, Path, str]]:
    """(language, audio, reference) of each clip of ``folder`` ('espeak': the bench utterance in five voices)."""
    from scripts.bench._speech import espeak

    if folder == "espeak":
        return [("eng", espeak(UTTERANCE, scratch / f"{v}.wav", voice=v), UTTERANCE) for v in ESPEAK_VOICES]
    lang = Path(folder).name.split("_")[0]
    return [(lang, wav, wav.with_suffix(".txt").read_text().strip()) for wav in sorted(Path(folder).glob("*.wav"))]


def rates(counts: dict[str, int]) -> dict[str, float]:
    """The word error rates, in percent, of a folder's (or all) error counts."""
    words = max(1, counts["words"])
    return {f"{kind} WER %": round(100 * counts[f"{kind} errors"] / words, 1) for kind in ("file", "streamed")}


def clip_errors(pipeline: Any, client: Direct, folders: list[str], scratch: Path) -> dict[str, Any]:
    """Word errors of each folder's clips, transcribed as files and streamed (unpaced, through ``live_step``, the
    language given), and the mean time of a stream's last step (the end of an utterance -> its final)."""
    from contracts.wer import word_errors
    from khuluma.cli.stream import file_frames

    out: dict[str, Any] = {}
    total = {"words": 0, "file errors": 0, "streamed errors": 0}
    last_steps: list[float] = []
    for folder in folders:
        row = {"clips": 0, "words": 0, "file errors": 0, "streamed errors": 0}
        for lang, wav, reference in clips_of(folder, scratch):
            file_text = pipeline.transcribe(wav, lang, False, False).text
            pcm = b"".join(file_frames(wav))
            client.times.clear()
            state_text, _ = asyncio.run(stream(client, pcm, lang))
            last_steps.append(client.times[-1])
            file_err, words = word_errors(reference, file_text)
            streamed_err, _ = word_errors(reference, state_text)
            row["clips"] += 1
            row["words"] += words
            row["file errors"] += file_err
            row["streamed errors"] += streamed_err
            print(f"{wav.name}: file {file_err}/{words}, streamed {streamed_err}/{words}: {state_text!r}", flush=True)
        for key in total:
            total[key] += row[key]
        out[folder] = {**row, **rates(row)}
        print(f"{folder}: {out[folder]}", flush=True)
    out["all"] = {
        **total,
        **rates(total),
        "last step mean s": round(sum(last_steps) / max(1, len(last_steps)), 3),
    }
    print(f"all: {out['all']}")
    return out


def layout_row(client: Direct, pcm: bytes, rounds: int = 3, lang: str = "eng") -> dict[str, float]:
    """One layout's stream in ``lang``, unpaced (best of ``rounds``) and at real time: RTF, last step, mean partial
    step, and the end of the utterance -> final."""
    asyncio.run(stream(client, pcm, lang))  # warm-up
    walls, lasts, partials = [], [], []
    for _ in range(rounds):
        client.times.clear()
        walls.append(asyncio.run(stream(client, pcm, lang))[1])
        lasts.append(client.times[-1])
        partials.append(sum(client.times[:-1]) / max(1, len(client.times) - 1))
    final = min(asyncio.run(paced(client, pcm, lang))[0] for _ in range(2))
    return {
        "unpaced RTF": round(min(walls) / (len(pcm) / 32_000), 3),
        "last step s": round(min(lasts), 3),
        "partial step s": round(min(partials), 3),
        "final at real time s": round(final, 3),
    }


def pct(xs: list[float], q: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(q / 100 * len(ys)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, nargs="*", default=[], help="concurrent real-time streams")
    parser.add_argument("--wav", help="the utterance (default: made with espeak-ng)")
    parser.add_argument("--model-dir", help="a CTranslate2 Whisper directory (default: the offline whisper-base)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument(
        "--ctc",
        metavar="DIR",
        help="also the same stream routed to this CTC model (as isiZulu), side by side with Whisper: its steps",
    )
    parser.add_argument("--compute-type", help="default: int8 on cpu, float16 on cuda")
    parser.add_argument(
        "--clips",
        nargs="*",
        metavar="DIR",
        help="word error streamed vs file on folders of <stem>.wav + <stem>.txt (the reference); each folder's name "
        "starts with its language code (eng_..., afr_...); 'espeak' is the bench utterance in five voices",
    )
    parser.add_argument(
        "--threads",
        type=int,
        nargs="*",
        default=[],
        help="also each of these threads per decode (speech.whisper_cpu_threads), side by side with the default layout",
    )
    json_option(parser)
    args = parser.parse_args()

    from contracts.settings import Settings
    from contracts.wer import word_error_rate
    from engines.speech.audio import load_pcm16
    from engines.speech.pipeline import get_pipeline
    from khuluma.cli.stream import file_frames
    from scripts.bench._speech import espeak

    data = tempfile.mkdtemp(prefix="khuluma-bench-engine-")
    wav = Path(args.wav) if args.wav else espeak(UTTERANCE, Path(data) / "utterance.wav")
    pcm = b"".join(file_frames(wav))
    audio_s = len(pcm) / 32_000
    compute = args.compute_type or ("float16" if args.device == "cuda" else "int8")
    whisper = {
        "whisper_device": args.device,
        "whisper_compute_type": compute,
        **({"whisper_model": args.model_dir} if args.model_dir else {}),
    }
    settings = Settings(data_dir=data, speech=whisper)
    pipeline = get_pipeline(settings.speech, settings.data_dir)
    pipeline.warm_up()
    client = Direct(pipeline)
    if args.clips is not None:
        write_json(args.json, clip_errors(pipeline, client, args.clips, Path(data)))
        return
    asyncio.run(stream(client, pcm))  # warm-up
    client.times.clear()
    text, wall = asyncio.run(stream(client, pcm))
    steps = client.times

    file_text = pipeline.transcribe(wav, "eng", False, False).text
    model = pipeline.models.route("eng").recognizer.model()  # Whisper's default model
    audio = load_pcm16(pcm, 16_000)
    from faster_whisper.audio import pad_or_trim

    enc = {}
    for seconds in (1, 30):
        features = pad_or_trim(model.feature_extractor(audio[: seconds * 16_000]))  # to 3000 frames, as it decodes
        reps = []
        for _ in range(3):
            t = time.perf_counter()
            model.encode(features)
            reps.append(time.perf_counter() - t)
        enc[seconds] = min(reps)
    try:
        model.encode(model.feature_extractor(audio[:16_000])[:, :100])
        short_ok = "accepted"
    except Exception as exc:  # noqa: BLE001 - what CTranslate2 says about fewer than 3000 frames
        short_ok = f"refused: {str(exc)[:160]}"
    out = {
        "audio seconds": round(audio_s, 2),
        "steps": len(steps),
        "unpaced RTF": round(wall / audio_s, 3),
        "last step s": round(steps[-1], 3),
        "partial step mean s": round(sum(steps[:-1]) / max(1, len(steps) - 1), 3),
        "encoder 1 s padded to 30 s, s": round(enc[1], 3),
        "encoder 30 s, s": round(enc[30], 3),
        "encoder without padding (100 frames)": short_ok,
        "streamed text": text,
        "file text": file_text,
        "WER streamed vs reference": round(word_error_rate(UTTERANCE, text), 4),
        "WER file vs reference": round(word_error_rate(UTTERANCE, file_text), 4),
    }
    for n in args.streams:
        runs = asyncio.run(many(client, pcm, n))
        latency, first = [r[0] for r in runs], [r[1] for r in runs]
        out[f"{n} stream(s) at real time"] = {
            "latency p50 s": round(pct(latency, 50), 3),
            "latency p99 s": round(pct(latency, 99), 3),
            "first partial p50 s": round(pct(first, 50), 3),
        }
    if args.ctc:
        routed = Settings(data_dir=data, speech={**whisper, "language_models": {"zul": args.ctc}})
        ctc = get_pipeline(routed.speech, routed.data_dir)
        ctc.warm_up()
        rows = {
            "whisper": layout_row(client, pcm),
            f"ctc {Path(args.ctc).name}": layout_row(Direct(ctc), pcm, lang="zul"),
        }
        base = rows["whisper"]
        for name, row in rows.items():
            ratios = ", ".join(f"{k} {v / base[k]:.2f}x" for k, v in row.items())
            out[f"live steps {name}"] = {**row, "vs whisper": ratios}
    if args.threads:
        rows = {"default": layout_row(client, pcm)}
        for threads in args.threads:
            other = Settings(data_dir=data, speech={**whisper, "whisper_cpu_threads": threads})
            layout = get_pipeline(other.speech, other.data_dir)
            layout.warm_up()
            rows[f"{threads} thread(s)"] = layout_row(Direct(layout), pcm)
        base = rows["default"]
        for name, row in rows.items():
            ratios = ", ".join(f"{k} {v / base[k]:.2f}x" for k, v in row.items())
            out[f"layout {name}"] = {**row, "vs default": ratios}
    out["device"] = f"{args.device} {compute}"
    for k, v in out.items():
        print(f"{k}: {v}")
    write_json(args.json, out)


if __name__ == "__main__":
    main()
