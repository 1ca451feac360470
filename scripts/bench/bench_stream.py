"""Live streaming latency: from the end of an utterance to its final result, with 1 and 8 concurrent streams.

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/bench_stream.py [--concurrency 1 8] [--rounds 3] [--json out.json]

The real service (a local Ray Serve application with the Transcription deployment, ``configs/serve.yaml``'s
options) and the project's own terminal client (``serve_app.cli.stream.run_stream``), over
``/ws/stream-transcribe``:

- **real time:** each stream sends a spoken file (espeak, about 10 s) in 100 ms frames at real time, then the end
  of audio. *Latency* is from the last frame to the ``final`` event; *first partial* is when the first partial
  arrived, from the start of the stream.
- **as fast as possible:** the same streams with no pacing. *RTF* (real-time factor) is the stream's wall time
  over its audio's length: below 1 keeps up with a live speaker.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from _load import json_option, table, write_json  # noqa: E402
from _plain import ray_server  # noqa: E402

UTTERANCE = (
    "Thank you for calling, your payment has been received. Good morning, the weather today is sunny and warm. "
    "Please hold the line while we transfer you to an agent."
)


def pct(xs: list[float], q: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(q / 100 * len(ys)))]


async def streams(url: str, token: str, frames: list[bytes], n: int, speed: float) -> list[Any]:
    from serve_app.cli.stream import run_stream

    return list(await asyncio.gather(*(run_stream(url, token, frames, "eng", speed) for _ in range(n))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per concurrency (each round: n streams)")
    json_option(parser)
    args = parser.parse_args()

    from contracts.settings import Settings
    from persistence.session import Database
    from scripts.bench._speech import espeak
    from serve_app.cli.stream import file_frames
    from serve_app.tokens import create_token

    data = tempfile.mkdtemp(prefix="khuluma-bench-stream-")
    token = create_token(Database.migrated(Settings(data_dir=data).db_url), "bench")[0]
    frames = file_frames(espeak(UTTERANCE, Path(data) / "utterance.wav"))
    audio_s = sum(len(f) for f in frames) / 32_000
    print(f"utterance: {audio_s:.1f} s of audio, {len(frames)} frames of 100 ms", flush=True)

    results: dict[str, dict[str, float]] = {}
    with ray_server({"data_dir": data}, ["transcription"]) as url:
        asyncio.run(streams(url, token, frames, 1, 0))  # warm-up: the model's first decode
        for n in args.concurrency:
            latency, first_partial, rtf = [], [], []
            for _ in range(args.rounds):
                for outcome in asyncio.run(streams(url, token, frames, n, 1.0)):
                    latency.append(outcome.final_at - outcome.audio_sent_at)
                    partials = [t for t, e in outcome.events if e["type"] == "partial"]
                    first_partial.append(partials[0] if partials else float("nan"))
                fast = asyncio.run(streams(url, token, frames, n, 0))
                rtf.extend((o.final_at or 0) / o.audio_seconds for o in fast)
                assert all(o.final and o.final["text"] for o in fast), "a stream came back empty"
            results[f"{n} stream(s)"] = {
                "streams": len(latency),
                "latency p50 s": pct(latency, 50),
                "latency p99 s": pct(latency, 99),
                "first partial p50 s": pct(first_partial, 50),
                "RTF p50": pct(rtf, 50),
                "RTF p99": pct(rtf, 99),
            }
            print(f"{n} stream(s): {results[f'{n} stream(s)']}", flush=True)

    rows = [
        (name, {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()}) for name, r in results.items()
    ]
    print(f"\nutterance {audio_s:.1f} s; latency = last audio frame -> final event; RTF = wall / audio (no pacing)")
    print(table(rows))
    write_json(args.json, {"audio seconds": audio_s, **results})


if __name__ == "__main__":
    main()
