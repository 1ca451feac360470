"""First words of a live session without a language: how soon the Live API (``/v1/realtime``) sends its first
transcript delta, sent as Vulavula's post-install qualification sends it (as fast as the socket allows, an empty
session) and at real time, against the same session given its language.

    .venv/bin/python scripts/bench/bench_first_words.py [--clips DIR ...] [--json out.json]

The real service (a local Ray Serve application with the Speech deployment, ``configs/serve.yaml``'s options) and
the espeak sentence ``khuluma qualify`` speaks, plus real recordings in ``--clips`` folders (``<stem>.wav`` +
``<stem>.txt``; they stay local for their licences). Per clip and mode:

- *unpaced, no language* (the qualification's live check): the first delta counted from the moment the client
  opens the WebSocket, as the qualification counts it (its limit: 5 s);
- *real time, no language*: the first delta after the speech starts (the first speech the VAD finds in the file);
- *real time, language given*: the same, with ``eng``, for comparison;
- the word error of each session's deltas against the reference.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from _load import json_option, table, write_json  # noqa: E402
from _plain import ray_server  # noqa: E402

FRAME_BYTES = 3200  # 100 ms of 16 kHz PCM16, the vendor's chunk


@dataclass
class Session:
    first_delta_s: float  # from the moment the client opens the socket (unpaced) or from the speech's start
    text: str
    error: str = ""


async def session(url: str, token: str, pcm: bytes, language: str | None, paced: bool, speech_start: float) -> Session:
    import httpx
    from websockets.asyncio.client import connect
    from websockets.typing import Subprotocol

    body: dict[str, Any] = {"session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}}
    if language:
        body["session"]["audio"]["input"]["transcription"] = {"language": language}
    async with httpx.AsyncClient(timeout=60) as http:
        minted = await http.post(f"{url}/v1/realtime/client_secrets", headers={"X-CLIENT-TOKEN": token}, json=body)
    minted.raise_for_status()
    protocols = [Subprotocol("realtime"), Subprotocol(f"vulavula-insecure-api-key.{minted.json()['value']}")]
    opened = time.monotonic()
    first_frame = 0.0
    first: float | None = None
    text, error = "", ""

    async def send(ws: Any) -> None:
        nonlocal first_frame
        first_frame = time.monotonic()
        for n, i in enumerate(range(0, len(pcm), FRAME_BYTES)):
            event = {"type": "session.input_audio_buffer.append", "audio": base64.b64encode(pcm[i : i + FRAME_BYTES])}
            event["audio"] = event["audio"].decode()
            await ws.send(json.dumps(event))
            if paced:
                await asyncio.sleep(max(0.0, first_frame + (n + 1) * 0.1 - time.monotonic()))
        await asyncio.sleep(1.0)  # as the qualification does, wait for the answers before closing
        await ws.send(json.dumps({"type": "session.close"}))

    async with connect(url.replace("http", "ws", 1) + "/v1/realtime", subprotocols=protocols, max_size=2**24) as ws:
        sender = None
        async for raw in ws:
            event = json.loads(raw)
            kind = event.get("type")
            if kind == "session.created" and sender is None:
                sender = asyncio.create_task(send(ws))
            elif kind == "session.input_transcript.delta":
                first = first if first is not None else time.monotonic()
                text += event["delta"]
            elif kind == "error":
                error = str(event["error"]["message"])[:80]
                break
            elif kind == "session.closed":
                break
        if sender is not None:
            sender.cancel()
    if first is None:
        return Session(float("nan"), text, error or "no delta")
    since = opened if not paced else first_frame + speech_start
    return Session(first - since, text, error)


def clips(folders: list[Path], sample: Path) -> list[tuple[str, Path, str]]:
    from khuluma.cli.qualify import SAMPLE_TEXT

    out = [("espeak (khuluma qualify's sample)", sample, SAMPLE_TEXT)]
    for folder in folders:
        for wav in sorted(folder.glob("*.wav")):
            reference = wav.with_suffix(".txt")
            if reference.exists():
                out.append((f"{folder.name}/{wav.stem}", wav, reference.read_text(encoding="utf-8").strip()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clips", type=Path, nargs="*", default=[], help="folders of real English recordings")
    json_option(parser)
    args = parser.parse_args()

    import numpy as np

    from contracts.settings import Settings
    from engines.speech.audio import SAMPLE_RATE, load_audio
    from engines.speech.vad import speech_timestamps
    from khuluma.cli.qualify import SAMPLE_TEXT
    from persistence.session import Database
    from scripts.bench._speech import espeak
    from scripts.eval_real import clean_reference
    from scripts.eval_wer import word_errors
    from serve_app.tokens import create_token

    data = tempfile.mkdtemp(prefix="khuluma-bench-first-words-")
    token = create_token(Database.migrated(Settings(data_dir=data).db_url), "bench")[0]
    sample = espeak(SAMPLE_TEXT, Path(data) / "sample.wav")
    rows: list[tuple[str, dict[str, Any]]] = []
    modes = {
        "unpaced, no language": (None, False),
        "real time, no language": (None, True),
        "real time, eng": ("eng", True),
    }
    results: dict[str, dict[str, list[float]]] = {mode: {"first": [], "errors": [], "words": []} for mode in modes}
    with ray_server({"data_dir": data}, ["speech"]) as url:
        asyncio.run(session(url, token, b"\0" * 32000, "eng", False, 0.0))  # warm-up
        for name, path, reference in clips(args.clips, sample):
            audio = load_audio(path)
            pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
            chunks = speech_timestamps(audio, pad_ms=0)
            speech_start = chunks[0]["start"] / SAMPLE_RATE if chunks else 0.0
            row: dict[str, Any] = {"speech starts s": round(speech_start, 2)}
            for mode, (language, paced) in modes.items():
                out = asyncio.run(session(url, token, pcm, language, paced, speech_start))
                errors, words = word_errors(clean_reference(reference), out.text)
                results[mode]["first"].append(out.first_delta_s)
                results[mode]["errors"].append(errors)
                results[mode]["words"].append(words)
                row[f"{mode}: first delta s"] = round(out.first_delta_s, 2)
                row[f"{mode}: WER"] = round(errors / max(1, words), 3)
                if out.error:
                    print(f"{name}, {mode}: {out.error}", flush=True)
            rows.append((name, row))
            print(name, row, flush=True)
    summary = {}
    for mode, r in results.items():
        firsts = [f for f in r["first"] if f == f]
        summary[mode] = {
            "first delta p50 s": round(statistics.median(firsts), 2) if firsts else None,
            "first delta max s": round(max(firsts), 2) if firsts else None,
            "sessions without a delta": len(r["first"]) - len(firsts),
            "WER": round(sum(r["errors"]) / max(1, sum(r["words"])), 3),
        }
    print(table(rows))
    print(table(list(summary.items())))
    write_json(args.json, {"clips": dict(rows), "summary": summary})


if __name__ == "__main__":
    main()
