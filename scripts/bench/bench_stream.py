"""Live streaming latency: from the end of an utterance to its final result, with 1, 4 and 8 concurrent streams,
over both live endpoints.

Runs after ``./scripts/setup.sh --bench`` (the service plus the ``bench`` extra, espeak-ng and sox):

    .venv/bin/python scripts/bench/bench_stream.py [--concurrency 1 4 8] [--rounds 3] [--realtime] [--detect]
        [--json out.json]

``--detect``: the sessions give no language (English is then settled on 6 s of speech and each segment judged:
docs/speech.md#live-sessions-without-a-language); by default they say English.

The real service (a local Ray Serve application with the Speech deployment, ``configs/serve.yaml``'s
options; a Ray of its own on free ports, shut down after) and two clients:

- ``/ws/stream-transcribe`` through the project's terminal client (``khuluma.cli.stream.run_stream``);
- with ``--realtime`` also the Live API ``/v1/realtime`` (a secret minted by ``POST /v1/realtime/client_secrets``,
  the subprotocols ``realtime`` and ``vulavula-insecure-api-key.<secret>``, ``session.input_audio_buffer.append``
  events of base64 PCM16, ``session.close``), as Vulavula's clients use it.

- **real time:** each stream sends a spoken file (espeak, about 11 s) in 100 ms frames at real time, then the end
  of audio. *Latency* is from the last frame to the ``final`` event (Live API: ``session.closed``); *first
  partial* is from the first audio frame to the first ``partial`` event (Live API: the first transcript delta).
- **as fast as possible:** the same streams with no pacing. *RTF* (real-time factor) is the stream's wall time
  over its audio's length: below 1 keeps up with a live speaker.
- *PSS per session*: the peak proportional set size of the Ray processes this bench started (psutil), less
  their idle size, over the streams at once (real-time rounds).

``--json`` keys: ``"<n> stream(s)"`` (``/ws/stream-transcribe``) and ``"realtime <n> stream(s)"``, each with
``"latency p50 s"``, ``"latency p99 s"``, ``"first partial p50 s"``, ``"RTF p50"``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
import tempfile
import threading
import time
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


LANGUAGE: str | None = "eng"  # None with --detect: the sessions say no language (settled on speech, then judged)


async def streams(url: str, token: str, frames: list[bytes], n: int, speed: float) -> list[Any]:
    from khuluma.cli.stream import run_stream

    return list(await asyncio.gather(*(run_stream(url, token, frames, LANGUAGE, speed) for _ in range(n))))


class Live:
    """One Live API session's timings (seconds from the first audio frame)."""

    first_delta: float = float("nan")
    audio_sent_at: float = float("nan")
    closed_at: float = float("nan")
    text: str = ""


async def realtime_stream(url: str, token: str, frames: list[bytes], speed: float) -> Live:
    import httpx
    from websockets.asyncio.client import connect
    from websockets.typing import Subprotocol

    async with httpx.AsyncClient(timeout=60) as http:
        minted = await http.post(
            f"{url}/v1/realtime/client_secrets",
            headers={"X-CLIENT-TOKEN": token},
            json={"session": {"audio": {"input": {"transcription": {"language": LANGUAGE}}}}},
        )
    minted.raise_for_status()
    secret = minted.json()["value"]
    out = Live()
    started = 0.0
    protocols = [Subprotocol("realtime"), Subprotocol(f"vulavula-insecure-api-key.{secret}")]

    async def send(ws: Any) -> None:
        nonlocal started
        started, sent = time.monotonic(), 0.0
        for frame in frames:
            event = {"type": "session.input_audio_buffer.append", "audio": base64.b64encode(frame).decode()}
            await ws.send(json.dumps(event))
            sent += len(frame) / 32_000
            if speed > 0:
                await asyncio.sleep(max(0.0, sent / speed - (time.monotonic() - started)))
        out.audio_sent_at = time.monotonic() - started
        await ws.send(json.dumps({"type": "session.close"}))

    ws_url = url.replace("http", "ws", 1) + "/v1/realtime"
    async with connect(ws_url, subprotocols=protocols, open_timeout=60, max_size=2**24) as ws:
        sender = None
        async for raw in ws:
            event = json.loads(raw)
            kind = event.get("type")
            if kind == "session.created" and sender is None:
                sender = asyncio.create_task(send(ws))
            elif kind == "session.input_transcript.delta":
                if out.first_delta != out.first_delta:  # nan: the first
                    out.first_delta = time.monotonic() - started
                out.text += event["delta"]
            elif kind == "error":
                raise RuntimeError(event)
            elif kind == "session.closed":
                out.closed_at = time.monotonic() - started
                break
        if sender is not None:
            await sender
    return out


async def realtime_streams(url: str, token: str, frames: list[bytes], n: int, speed: float) -> list[Live]:
    return list(await asyncio.gather(*(realtime_stream(url, token, frames, speed) for _ in range(n))))


class PssPeak:
    """The peak PSS (bytes) of this process's descendants (the Ray it started) while running, sampled every 0.2 s."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now() -> int:
        import psutil

        total = 0
        for child in psutil.Process().children(recursive=True):
            try:
                total += child.memory_full_info().pss
            except (psutil.Error, AttributeError):
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            self._stop.wait(0.2)

    def __enter__(self) -> PssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per concurrency (each round: n streams)")
    parser.add_argument("--realtime", action="store_true", help="also the Live API /v1/realtime")
    parser.add_argument(
        "--detect",
        action="store_true",
        help="sessions without a language (docs/speech.md#live-sessions-without-a-language)",
    )
    json_option(parser)
    args = parser.parse_args()
    global LANGUAGE
    LANGUAGE = None if args.detect else "eng"

    from contracts.settings import Settings
    from khuluma.cli.stream import file_frames
    from persistence.session import Database
    from scripts.bench._speech import espeak
    from serve_app.tokens import create_token

    data = tempfile.mkdtemp(prefix="khuluma-bench-stream-")
    token = create_token(Database.migrated(Settings(data_dir=data).db_url), "bench")[0]
    frames = file_frames(espeak(UTTERANCE, Path(data) / "utterance.wav"))
    audio_s = sum(len(f) for f in frames) / 32_000
    print(f"utterance: {audio_s:.1f} s of audio, {len(frames)} frames of 100 ms", flush=True)

    results: dict[str, dict[str, Any]] = {}
    with ray_server({"data_dir": data}, ["speech"]) as url:
        asyncio.run(streams(url, token, frames, 1, 0))  # warm-up: the model's first decode
        if args.realtime:
            asyncio.run(realtime_streams(url, token, frames, 1, 0))
        idle = PssPeak.now()
        for n in args.concurrency:
            latency, first_partial, rtf, texts = [], [], [], []
            with PssPeak() as pss:
                for _ in range(args.rounds):
                    for outcome in asyncio.run(streams(url, token, frames, n, 1.0)):
                        latency.append(outcome.final_at - outcome.audio_sent_at)
                        ready = next(t for t, e in outcome.events if e["type"] == "ready")  # the first frame goes
                        partials = [t - ready for t, e in outcome.events if e["type"] == "partial"]
                        first_partial.append(partials[0] if partials else float("nan"))
                        texts.append(outcome.final["text"] if outcome.final else "")
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
                "WER %": round(100 * pct([wer(UTTERANCE, t) for t in texts], 50), 1),
                "PSS MB/session": round((pss.peak - idle) / n / 2**20, 1),
            }
            print(f"{n} stream(s): {results[f'{n} stream(s)']}", flush=True)
            if not args.realtime:
                continue
            latency, first_partial, texts = [], [], []
            with PssPeak() as pss:
                for _ in range(args.rounds):
                    for live in asyncio.run(realtime_streams(url, token, frames, n, 1.0)):
                        latency.append(live.closed_at - live.audio_sent_at)
                        first_partial.append(live.first_delta)
                        texts.append(live.text)
            fast_live = asyncio.run(realtime_streams(url, token, frames, n, 0))
            key = f"realtime {n} stream(s)"
            results[key] = {
                "streams": len(latency),
                "latency p50 s": pct(latency, 50),
                "latency p99 s": pct(latency, 99),
                "first partial p50 s": pct(first_partial, 50),
                "RTF p50": pct([o.closed_at / audio_s for o in fast_live], 50),
                "RTF p99": pct([o.closed_at / audio_s for o in fast_live], 99),
                "WER %": round(100 * pct([wer(UTTERANCE, t) for t in texts], 50), 1),
                "PSS MB/session": round((pss.peak - idle) / n / 2**20, 1),
            }
            print(f"{key}: {results[key]}", flush=True)

    rows = [
        (name, {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()}) for name, r in results.items()
    ]
    print(
        f"\nutterance {audio_s:.1f} s; latency = last audio frame -> final event (Live API: session.closed); "
        "first partial = first audio frame -> first partial (Live API: first delta); RTF = wall / audio (no pacing); "
        "WER of the streamed text against the utterance's words"
    )
    print(table(rows))
    write_json(args.json, {"audio seconds": audio_s, **results})


def wer(reference: str, hypothesis: str) -> float:
    from scripts.eval_wer import word_errors

    errors, words = word_errors(reference, hypothesis)
    return errors / max(1, words)


if __name__ == "__main__":
    main()
